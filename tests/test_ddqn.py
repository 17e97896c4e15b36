import os
import signal
from pathlib import Path

import pytest
import torch

from agents.ddqn import Args, QNetwork, double_dqn_target, epsilon_greedy, linear_schedule, main, network_for
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.config import parse_args
from cleanrl_plus.exploration import exploration_draws
from cleanrl_plus.members import Members
from envs.errors import UserError

TINY = dict(batch_size=16, hidden_sizes=(32, 32), eval_episodes=2, progress=False, buffer_size=1_000, eval_every=0)


def test_double_dqn_target_on_a_hand_computed_batch():
    rewards = torch.tensor([1.0, 0.5, -1.0, 2.0])
    terminated = torch.tensor([0.0, 0.0, 1.0, 0.0])  # row 3 was truncated by a time limit: stored non-terminal
    next_q_online = torch.tensor([[1.0, 3.0, 2.0], [5.0, 0.0, 4.0], [0.0, 9.0, 1.0], [2.0, 1.0, 0.0]])
    next_q_target = torch.tensor([[7.0, 2.0, 1.0], [1.0, 6.0, 3.0], [4.0, 4.0, 4.0], [0.5, 8.0, 9.0]])
    target = double_dqn_target(rewards, terminated, next_q_online, next_q_target, gamma=0.9)
    # online argmax: 1, 0, 1, 0 → target values 2, 1, (terminal), 0.5
    expected = torch.tensor([1.0 + 0.9 * 2.0, 0.5 + 0.9 * 1.0, -1.0, 2.0 + 0.9 * 0.5])
    torch.testing.assert_close(target, expected)
    vanilla = rewards + 0.9 * (1 - terminated) * next_q_target.max(dim=1).values  # r + γ max_a Q̄(s', a)
    assert not torch.allclose(target, vanilla)
    torch.testing.assert_close(vanilla, torch.tensor([1.0 + 0.9 * 7.0, 0.5 + 0.9 * 6.0, -1.0, 2.0 + 0.9 * 9.0]))


def test_epsilon_schedule_and_epsilon_greedy():
    # rl-zoo CartPole: 1 → 0.04 over 16% of 50k = 8000 steps, then flat
    values = [linear_schedule(1.0, 0.04, 8_000, t) for t in (0, 2_000, 4_000, 8_000, 30_000)]
    assert values == pytest.approx([1.0, 0.76, 0.52, 0.04, 0.04])
    assert linear_schedule(1.0, 0.1, 0, 5) == 0.1
    q_values = torch.tensor([[0.0, 2.0, 1.0]]).expand(1, 20_000, 3)  # one member
    members = Members((0,))
    greedy = epsilon_greedy(q_values, 0.0, exploration_draws(members, 20_000, 3))
    assert torch.equal(greedy, torch.ones(1, 20_000, dtype=torch.int64))
    actions = epsilon_greedy(q_values, 0.3, exploration_draws(members, 20_000, 3))
    counts = torch.bincount(actions[0], minlength=3).float() / 20_000
    torch.testing.assert_close(counts, torch.tensor([0.1, 0.8, 0.1]), atol=0.015, rtol=0)


def test_torso_follows_the_observation_space():
    assert (
        network_for((4,)) == "mlp" and network_for((4, 84, 84)) == "nature-cnn" and network_for((10, 10, 4)) == "minatar-cnn"
    )
    atari = QNetwork(1, "auto", (4, 84, 84), 6, (256,))  # one member: (members, B, ...) → (members, B, actions)
    assert atari(torch.zeros(1, 2, 4, 84, 84, dtype=torch.uint8)).shape == (1, 2, 6)
    assert [layer.weight.shape[-1] for layer in atari.linear_layers()] == [512, 6]
    grid = QNetwork(1, "auto", (10, 10, 4), 3, (256,))
    obs = torch.zeros(1, 10, 10, 4, dtype=torch.uint8)
    obs[0, 2, 7, 1] = 1  # channels last: only channel 1 lights up
    features = torch.relu(grid.torso.conv(obs.float().permute(0, 3, 1, 2)))
    assert grid(obs[None]).shape == (1, 1, 3) and features.shape == (1, 16, 8, 8)
    assert [layer.weight.shape[-1] for layer in QNetwork(1, "auto", (4,), 2, (64, 32)).linear_layers()] == [64, 32, 2]
    assert QNetwork(3, "auto", (10, 10, 4), 3, (256,))(torch.zeros(3, 5, 10, 10, 4)).shape == (3, 5, 3)  # a group of 3


def test_defaults_come_from_the_env_family_and_flags_override_them():
    atari = parse_args(Args, [])
    assert (atari.env_id, atari.learning_rate, atari.learning_starts, atari.buffer_size) == (
        "ALE/Breakout-v5",
        1e-4,
        80_000,
        1_000_000,
    )
    cartpole = parse_args(Args, ["--env-id", "CartPole-v1"])
    assert (cartpole.learning_rate, cartpole.train_frequency, cartpole.gradient_steps, cartpole.target_network_frequency) == (
        2.3e-3,
        256,
        128,
        10,
    )
    minatar = parse_args(Args, ["--env-id", "MinAtar/Breakout-v1", "--learning-rate", "1e-3"])
    assert minatar.learning_rate == 1e-3 and minatar.buffer_size == 100_000 and minatar.end_e == 0.1


def test_rejects_continuous_actions(runs_dir):
    with pytest.raises(UserError, match="Double DQN needs discrete actions.*agents/td3.py or agents/sac_simba.py"):
        main(Args.defaults_for("Pendulum-v1", total_timesteps=10, runs_dir=runs_dir, **TINY))


def _networks(run_dir: str) -> dict:
    state = load_checkpoint(Path(run_dir) / "checkpoint.pt")
    return {k: state[k] for k in ("critic", "critic_target", "obs", "replay")}


def test_resume_continues_bit_identically(runs_dir, monkeypatch):
    from cleanrl_plus.session import TrainingSession

    common = dict(
        total_timesteps=800,
        learning_starts=200,
        train_frequency=50,
        gradient_steps=8,
        target_network_frequency=100,
        runs_dir=runs_dir,
        **TINY,
    )
    straight = main(Args.defaults_for("CartPole-v1", exp_name="straight", **common))
    after_step = TrainingSession.after_step

    def killed_at_430(
        session, previous_step, global_step, *rest
    ):  # a real SIGTERM at a known step: the ε schedule keeps its total
        after_step(session, previous_step, global_step, *rest)
        if global_step == 430:
            os.kill(os.getpid(), signal.SIGTERM)  # the run's own handler must turn it into a checkpointed stop

    with monkeypatch.context() as patch:
        patch.setattr(TrainingSession, "after_step", killed_at_430)
        half = main(Args.defaults_for("CartPole-v1", exp_name="split", **common))
    assert half["global_step"] == 430 and not half["finished"]
    resumed = main(Args.defaults_for("CartPole-v1", exp_name="split", resume=half["run_dir"], **common))
    assert resumed["global_step"] == 800 and resumed["num_updates"] == straight["num_updates"] > 0
    a, b = _networks(straight["run_dir"]), _networks(resumed["run_dir"])
    assert torch.equal(a["obs"], b["obs"]) and torch.equal(a["replay"]["actions"], b["replay"]["actions"])
    for name in ("critic", "critic_target"):
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"


def test_stores_terminations_only_and_hard_target_copies(runs_dir):
    result = main(
        Args.defaults_for(
            "CartPole-v1",
            total_timesteps=300,
            learning_starts=100,
            train_frequency=10,
            gradient_steps=1,
            target_network_frequency=300,
            runs_dir=runs_dir,
            **TINY,
        )
    )
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    replay = {key: value[0] for key, value in state["replay"].items() if torch.is_tensor(value)}  # the one member's rows
    terminal = replay["terminated"].bool()
    # CartPole ends early only by falling: those transitions are terminal and keep the true final observation
    # (pole or cart out of bounds), every other one continues into the next stored observation
    assert terminal.sum() >= 5
    final = replay["next_obs"][terminal]
    assert bool(((final[:, 0].abs() > 2.4) | (final[:, 2].abs() > 0.2094)).all())
    continuing = (~terminal[:-1]).nonzero().squeeze(1)
    assert torch.equal(replay["next_obs"][continuing], replay["obs"][continuing + 1])
    for key in state["critic"]:  # the hard copy at step 300 makes the target equal to the online network
        assert torch.equal(state["critic"][key], state["critic_target"][key])


@pytest.mark.parametrize("env_id", ["MinAtar/Breakout-v1", "ALE/Breakout-v5"])
def test_runs_on_grids_and_atari_frames_with_remedies(env_id, runs_dir):
    from plasticity.diagnostics import DiagnosticsArgs
    from plasticity.resets import ResetArgs
    from plasticity.swd import SWDArgs

    flags = dict(TINY, buffer_size=200, eval_episodes=1, log_every=100, eval_epsilon=1.0)  # a random evaluation ends fast
    result = main(
        Args.defaults_for(
            env_id,
            total_timesteps=240,
            learning_starts=100,
            runs_dir=runs_dir,
            swd=SWDArgs(enabled=True, decay_steps=50),
            diagnostics=DiagnosticsArgs(every=10, probe_size=32),
            reset=ResetArgs(method="redo", every=10, redo_batch=32),
            **flags,
        )
    )
    assert result["num_updates"] == 35 and result["eval"]["step"] == 240
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set(EventAccumulator(result["run_dir"]).Reload().Tags()["scalars"])
    for tag in (
        "losses/td_loss",
        "losses/q_values",
        "charts/epsilon",
        "replay/sample_age",
        "plasticity/critic_dormant_0.1",
        "plasticity/critic_recycled_fraction",
        "eval/episodic_return",
    ):
        assert tag in tags, tag


def test_command_line_errors_are_one_line(tmp_path):
    from conftest import run_script

    for env_id, expected in [
        ("ALE/Breakot-v5", "error: unknown env id 'ALE/Breakot-v5' — did you mean 'ALE/Breakout-v5'?"),
        (
            "Pendulum-v1",
            "error: Double DQN needs discrete actions; Pendulum-v1 has Box(-2.0, 2.0, (1,), float32) — use agents/td3.py or "
            "agents/sac_simba.py",
        ),
    ]:
        result = run_script("agents/ddqn.py", "--env-id", env_id, "--runs-dir", str(tmp_path), "--no-progress")
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert [line for line in result.stderr.splitlines() if line.strip()] == [expected]


@pytest.mark.parametrize("backend", ["atari", "envpool"])
def test_bench_reports_env_frames_and_updates_on_atari(backend):
    from commands.bench import BenchArgs, bench

    if backend == "envpool":
        pytest.importorskip("envpool")
    # --eval-epsilon 1: the untimed final evaluation plays at random, so it ends fast
    report = bench(
        BenchArgs(
            agent="ddqn",
            env_id="ALE/Breakout-v5",
            steps=200,
            warmup=100,
            threads=1,
            env_backend=backend,
            buffer_size=1_000,
            agent_flags="--eval-epsilon 1",
        )
    )
    assert report["env_frames_per_second"] == pytest.approx(4 * report["env_steps_per_second"], abs=0.5)
    assert report["updates_per_second"] > 0 and report["env_backend"] == backend
