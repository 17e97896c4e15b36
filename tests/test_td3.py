import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.td3 import Actor, Args, TwinCritic, main, smoothed_target_action
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.normalization import RunningMeanStd
from cleanrl_plus.replay import Batch

TINY = dict(batch_size=32, hidden_sizes=(32, 32), eval_episodes=2, progress=False, buffer_size=10_000)
SAC_TINY = dict(
    actor_width=16, critic_width=16, critic_blocks=1, batch_size=32, eval_episodes=2, progress=False, buffer_size=10_000
)


def _linear_critic(k: tuple[float, float], c: tuple[float, float]) -> TwinCritic:
    """Q_i(s, a) = k_i·(a + 10) + c_i: hidden unit 0 carries a + 10 (> 0, so ReLU passes it)."""
    critic = TwinCritic(obs_dim=1, action_dim=1, hidden=(2, 2))
    with torch.no_grad():
        for layer in critic.layers:
            layer.weight.zero_()
            layer.bias.zero_()
        first, middle, last = critic.layers
        first.weight[:, 1, 0] = 1.0  # input 1 is the action
        first.bias[:, 0, 0] = 10.0
        middle.weight[:, 0, 0] = 1.0
        for i in range(2):
            last.weight[i, 0, 0] = k[i]
            last.bias[i, 0, 0] = c[i]
    return critic


def _constant_actor(value: float) -> Actor:
    actor = Actor(1, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(2,))
    with torch.no_grad():
        for parameter in actor.parameters():
            parameter.zero_()
        actor.net[-1].bias.fill_(float(np.arctanh(value / 2.0)))  # μ̄(s') = value for every s'
    return actor


def test_td3_target_on_a_hand_computed_batch():
    actor_target = _constant_actor(1.0)
    critic_target = _linear_critic(k=(1.0, 2.0), c=(0.0, -15.0))
    batch = Batch(  # one member's
        obs=torch.zeros(1, 3, 1),
        actions=torch.zeros(1, 3, 1),
        rewards=torch.tensor([[1.0, -1.0, 0.5]]),
        next_obs=torch.zeros(1, 3, 1),
        terminated=torch.tensor([[0.0, 1.0, 0.0]]),
        insertion_step=torch.arange(3)[None],
    )
    # noise (×scale 2, clipped to ±0.5·2): 0.1 → +0.2; 5 → clipped +1 then action clamped to 2; −0.3 → −0.6
    noise = torch.tensor([[[0.1], [5.0], [-0.3]]])
    from agents.td3 import td3_target

    next_actions = smoothed_target_action(batch.next_obs, actor_target, noise, noise_clip=0.5)
    target = td3_target(critic_target, batch, next_actions, gamma=0.9)
    # ã = 1.2, 2.0, 0.4; Q1 = ã + 10; Q2 = 2(ã + 10) − 15; min(Q1, Q2)
    q_min = [min(a + 10, 2 * (a + 10) - 15) for a in (1.2, 2.0, 0.4)]  # 11.2 → 7.4, 12 → 9, 10.4 → 5.8
    expected = torch.tensor([[1.0 + 0.9 * q_min[0], -1.0, 0.5 + 0.9 * q_min[2]]])
    torch.testing.assert_close(target, expected)


def test_truncation_bootstraps_and_termination_does_not(runs_dir):
    # Pendulum never terminates, only truncates at 200 steps: no stored transition may be terminal,
    # and the stored next_obs at the time limit is the final observation, not the reset one.
    result = main(
        Args(env_id="Pendulum-v1", total_timesteps=450, learning_starts=100, runs_dir=runs_dir, eval_every=0, **TINY)
    )
    replay = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")["replay"]  # one member's, (1, size, ...)
    assert replay["size"] == 450 and replay["terminated"].sum() == 0
    assert not torch.equal(replay["next_obs"][0, 199], replay["obs"][0, 200])  # obs[200] is the reset observation
    assert torch.equal(replay["next_obs"][0, 198], replay["obs"][0, 199])
    # Hopper terminates when it falls: those transitions are stored terminal (no bootstrap).
    result = main(Args(env_id="Hopper-v5", total_timesteps=300, learning_starts=100, runs_dir=runs_dir, eval_every=0, **TINY))
    replay = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")["replay"]
    assert replay["terminated"].sum() >= 1


def _parameters(run_dir: str) -> dict:
    state = load_checkpoint(Path(run_dir) / "checkpoint.pt")
    return {k: state[k] for k in ("actor", "critic", "actor_target", "critic_target")} | {"obs": state["obs"]}


def test_resume_continues_bit_identically(runs_dir):
    common = dict(env_id="Hopper-v5", learning_starts=200, eval_every=0, runs_dir=runs_dir, **TINY)
    straight = main(Args(total_timesteps=800, exp_name="straight", **common))
    half = main(Args(total_timesteps=450, exp_name="split", **common))
    resumed = main(Args(total_timesteps=800, exp_name="split", resume=half["run_dir"], **common))
    assert resumed["run_dir"] == half["run_dir"] and resumed["global_step"] == 800
    a, b = _parameters(straight["run_dir"]), _parameters(resumed["run_dir"])
    assert torch.equal(a["obs"], b["obs"])
    for name in ("actor", "critic", "actor_target", "critic_target"):
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"


def test_logs_cleanrl_tags_and_evaluation(runs_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from plasticity.diagnostics import DiagnosticsArgs

    diagnostics = DiagnosticsArgs(every=150, probe_size=64)
    result = main(
        Args(
            env_id="Pendulum-v1",
            total_timesteps=600,
            learning_starts=200,
            log_every=200,
            eval_every=300,
            runs_dir=runs_dir,
            diagnostics=diagnostics,
            **TINY,
        )
    )
    events = EventAccumulator(result["run_dir"]).Reload()
    tags = set(events.Tags()["scalars"])
    for tag in (
        "charts/episodic_return",
        "charts/episodic_length",
        "charts/SPS",
        "losses/qf1_loss",
        "losses/qf1_values",
        "losses/actor_loss",
        "eval/episodic_return",
        "replay/sample_age",
        "plasticity/critic_dormant_0.1",
        "plasticity/actor_srank",
        "plasticity/critic_distance_from_init",
    ):
        assert tag in tags, tag
    assert [e.step for e in events.Scalars("eval/episodic_return")] == [300, 600]
    assert "hyperparameters/text_summary" in events.Tags()["tensors"]
    assert result["eval"]["step"] == 600 and len(result["eval"]["returns"]) == 2


def test_rejects_discrete_action_envs(runs_dir):
    from envs.errors import UserError

    with pytest.raises(UserError, match="TD3 needs continuous"):
        main(Args(env_id="CartPole-v1", total_timesteps=10, runs_dir=runs_dir, **TINY))


def test_exploration_adds_gaussian_noise_of_the_documented_scale(runs_dir):
    """a = clip(μ(s) + ε, A), ε ~ N(0, (σ·scale)²): with the actor never updated (policy delay beyond the run), the
    stored actions minus μ(s) of the checkpoint's actor are that noise."""
    result = main(
        Args(
            env_id="Pendulum-v1",
            total_timesteps=700,
            learning_starts=100,
            policy_frequency=10**6,
            runs_dir=runs_dir,
            eval_every=0,
            exploration_noise=0.1,
            **TINY,
        )
    )
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    actor = Actor(3, gym.spaces.Box(-2.0, 2.0, (1,)), TINY["hidden_sizes"])
    actor.normalize = RunningMeanStd((3,), enabled=False)
    actor.load_state_dict(state["actor"])
    replay = state["replay"]
    obs, actions = replay["obs"][:, 100:], replay["actions"][:, 100:, 0]
    with torch.no_grad():
        noise = (actions - actor(obs)[..., 0]) / (2.0 * 0.1)  # Pendulum's action scale is 2
    inside = actions.abs() < 2.0  # clipped actions do not show the noise
    assert inside.sum() > 400
    assert noise[inside].std().item() == pytest.approx(1.0, abs=0.12) and abs(noise[inside].mean().item()) < 0.15


def test_random_steps_act_at_random_past_learning_starts_while_learning_goes_on(runs_dir):
    """--random-steps 300 with --learning-starts 100 (the camera-ready TD3's HalfCheetah schedule in small): updates
    from step 100, uniform actions until step 300, then μ(s) + ε; the actor is never updated (policy delay beyond
    the run), so the checkpoint's actor is the one that acted."""
    result = main(
        Args(
            env_id="Pendulum-v1",
            total_timesteps=400,
            learning_starts=100,
            random_steps=300,
            policy_frequency=10**6,
            runs_dir=runs_dir,
            eval_every=0,
            **TINY,
        )
    )
    assert result["num_updates"] == 300
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    actor = Actor(3, gym.spaces.Box(-2.0, 2.0, (1,)), TINY["hidden_sizes"])
    actor.normalize = RunningMeanStd((3,), enabled=False)
    actor.load_state_dict(state["actor"])
    replay = state["replay"]
    with torch.no_grad():
        off_policy = replay["actions"][0, :, 0] - actor(replay["obs"])[0, :, 0]
    # uniform on [−2, 2] has std 2/√3 ≈ 1.15; the exploration noise 0.1·2 = 0.2
    assert off_policy[100:300].std().item() > 0.8 and off_policy[300:].std().item() < 0.3


@pytest.mark.parametrize("update_every", [100, 0])
def test_update_every_makes_a_blocks_updates_after_its_last_step_and_resumes_owing_them(update_every, runs_dir):
    """--learning-starts 150 on Pendulum (200-step episodes): the steps from the 151st on owe one update each; with
    --update-every 100 they are paid on steps 200, 300, 400, … (50 + 100 + 100 by step 400), with 0 at each episode's
    end, steps 200, 400, 600 (50 + 200). A run stopped at 450 owes 50, and its resume to 600 pays them, as the straight
    run does, to the same networks."""
    common = dict(env_id="Pendulum-v1", update_every=update_every, learning_starts=150, eval_every=0, **TINY)
    common |= dict(runs_dir=runs_dir)
    assert main(Args(total_timesteps=400, exp_name="blocks", **common))["num_updates"] == 250
    straight = main(Args(total_timesteps=600, exp_name="straight", **common))
    half = main(Args(total_timesteps=450, exp_name="split", **common))
    assert half["num_updates"] == 250
    resumed = main(Args(total_timesteps=600, exp_name="split", resume=half["run_dir"], **common))
    assert straight["num_updates"] == resumed["num_updates"] == 450
    a, b = _parameters(straight["run_dir"]), _parameters(resumed["run_dir"])
    for name in ("actor", "critic", "actor_target", "critic_target"):
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"


# ---- many-env flags (FastTD3; docs/agents/td3.md) -----------------------------------------------------------------
def _scale_flags(**overrides):
    from cleanrl_plus.distributional import CriticArgs

    flags = dict(
        num_envs=4,
        n_step=3,
        critic=CriticArgs(distributional=True, num_atoms=21, v_min=-200.0, v_max=10.0),
        normalize_obs=True,
        exploration_noise_min=0.05,
        exploration_noise_max=0.4,
        weight_decay=0.1,
    )
    return flags | overrides


def test_scale_flags_resume_bit_identically(runs_dir):
    """The n-step replay's episode ends, the observation statistics and the per-env noise scales are checkpointed."""
    common = dict(env_id="Hopper-v5", learning_starts=200, eval_every=0, runs_dir=runs_dir, **TINY) | _scale_flags()
    straight = main(Args(total_timesteps=800, exp_name="straight", **common))
    half = main(Args(total_timesteps=440, exp_name="split", **common))
    resumed = main(Args(total_timesteps=800, exp_name="split", resume=half["run_dir"], **common))
    a, b = (load_checkpoint(Path(run["run_dir"]) / "checkpoint.pt") for run in (straight, resumed))
    for name in ("actor", "critic", "actor_target", "critic_target", "exploration_scales"):  # the statistics are inside
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"
    assert torch.equal(a["replay"]["episode_end"], b["replay"]["episode_end"]) and a["replay"]["episode_end"].any()
    for name in ("actor_optimizer", "critic_optimizer"):  # --weight-decay: AdamW's decoupled decay
        group = a[name]["param_groups"][0]
        assert group["weight_decay"] == 0.1 and group["decoupled_weight_decay"], name


def test_observation_statistics_come_from_the_observations_acted_on(runs_dir):
    result = main(
        Args(
            env_id="Pendulum-v1",
            total_timesteps=600,
            learning_starts=100,
            eval_every=0,
            runs_dir=runs_dir,
            **TINY,
            **_scale_flags(num_envs=2),
        )
    )
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    acted_on = state["replay"]["obs"][0]  # updated before acting, once per vector step: exactly the stored s
    statistics = {
        key.removeprefix("normalize."): value for key, value in state["actor"].items() if key.startswith("normalize.")
    }
    for network in ("critic", "actor_target", "critic_target"):  # one set of statistics, shared by all four networks
        copies = {key.rpartition("normalize.")[2]: value for key, value in state[network].items() if "normalize." in key}
        assert copies.keys() == statistics.keys() and all(torch.equal(copies[key], statistics[key]) for key in copies), network
    assert statistics["count"] == 600
    torch.testing.assert_close(statistics["mean"][0], acted_on.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(statistics["var"][0], acted_on.var(0, unbiased=False), rtol=1e-4, atol=1e-5)
    # evaluation and `cleanrl-plus eval` see normalised observations too
    from cleanrl_plus.normalization import RunningMeanStd

    policy = td3_load_policy(result, state)
    normalize = policy.actor.normalize
    assert isinstance(normalize, RunningMeanStd) and torch.equal(normalize.mean, statistics["mean"])


def td3_load_policy(result, state):
    import envs
    from agents.td3 import load_policy

    args = Args(env_id="Pendulum-v1", **TINY, **_scale_flags(num_envs=2))
    return load_policy(args, envs.make("Pendulum-v1"), state, torch.device("cpu"))


def test_each_env_explores_with_its_own_noise_scale_drawn_again_at_episode_ends(runs_dir):
    """ε_e ~ N(0, (σ_e·scale)²), σ_e ~ U[0.05, 0.4]: with the actor never updated, the stored actions minus μ(s) are that
    noise. Pendulum's episodes all end every 200 steps, so steps 600–749 of each env used the final, checkpointed σ_e,
    and steps 400–599 the σ_e drawn at step 400."""
    result = main(
        Args(
            env_id="Pendulum-v1",
            num_envs=4,
            total_timesteps=3_000,
            learning_starts=100,
            policy_frequency=10**6,
            runs_dir=runs_dir,
            eval_every=0,
            exploration_noise_min=0.05,
            exploration_noise_max=0.4,
            **TINY,
        )
    )
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    actor = Actor(3, gym.spaces.Box(-2.0, 2.0, (1,)), TINY["hidden_sizes"])
    actor.normalize = RunningMeanStd((3,), enabled=False)
    actor.load_state_dict(state["actor"])
    replay, sigma = state["replay"], state["exploration_scales"]["std"][0]
    assert ((sigma >= 0.05) & (sigma <= 0.4)).all() and sigma.std() > 0.02
    obs, actions = replay["obs"][0].reshape(750, 4, 3), replay["actions"][0].reshape(750, 4)
    with torch.no_grad():
        noise = (actions - actor(obs.reshape(1, -1, 3)).reshape(750, 4)) / 2.0  # Pendulum's action scale is 2
    inside = actions.abs() < 1.9
    spread = lambda steps, env: noise[steps, env][inside[steps, env]].std().item()
    for env in range(4):
        assert spread(slice(600, 750), env) == pytest.approx(sigma[env].item(), rel=0.2), env
    assert any(abs(spread(slice(400, 600), env) / sigma[env].item() - 1) > 0.3 for env in range(4))  # drawn anew at step 400


def test_least_stops_end_n_step_windows_like_any_episode_end(runs_dir):
    """A LEAST stop resets the env after the transition is stored: that row must close its n-step windows (a
    truncation), or they would run on into the next episode. Read independently: an env's episode ended at a row
    exactly where its next stored s is not this row's s'."""
    from plasticity.least import LEASTArgs

    result = main(
        Args(
            env_id="Pendulum-v1",
            num_envs=2,
            total_timesteps=1_600,
            learning_starts=200,
            n_step=3,
            runs_dir=runs_dir,
            eval_every=0,
            least=LEASTArgs(enabled=True, start=0.0, min_history=2, window=10),
            **TINY,
        )
    )
    replay = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")["replay"]
    obs, next_obs, ended = (
        replay[name][0].reshape(800, 2, *replay[name].shape[2:]) for name in ("obs", "next_obs", "episode_end")
    )
    restarted = (next_obs[:-1] != obs[1:]).any(dim=-1)
    assert torch.equal(ended[:-1], restarted)
    assert ended.sum() > 2 * 4  # more episode ends than Pendulum's time limit gives (every 200 steps): LEAST stopped some
    assert replay["terminated"].sum() == 0  # and a stop is never a termination


SHARED_SCALE_ERRORS = [  # config.validate_args checks these for TD3 and SAC alike
    (dict(critic=dict(distributional=True, v_min=5.0, v_max=-5.0)), "--critic.v-min < --critic.v-max"),
    (dict(critic=dict(distributional=True, num_atoms=1)), "--critic.num-atoms must be at least 2, got 1"),
    (dict(n_step=3, num_envs=4, buffer_size=10, batch_size=8), "at least n-step × num-envs = 12"),
    (dict(n_step=0), "--n-step must be at least 1"),
]


@pytest.mark.parametrize(
    "agent, flags, message",
    [
        *(("td3", flags, message) for flags, message in SHARED_SCALE_ERRORS),
        *(("sac_simba", flags, message) for flags, message in SHARED_SCALE_ERRORS),
        ("td3", dict(exploration_noise_min=0.5, exploration_noise_max=0.2), "--exploration-noise-min 0.5 is above"),
        ("td3", dict(update_every=0, seeds=(1, 2)), "--update-every 0 trains at each episode's end, which needs one seed"),
        ("td3", dict(update_every=0, num_envs=2), "--update-every 0 trains at each episode's end, which needs one seed"),
    ],
)
def test_many_env_flags_that_cannot_work_are_one_line_errors(agent, flags, message, runs_dir):
    from agents import sac_simba, td3
    from cleanrl_plus.distributional import CriticArgs
    from envs.errors import UserError

    module, tiny = (td3, TINY) if agent == "td3" else (sac_simba, SAC_TINY)
    if "critic" in flags:
        flags = flags | {"critic": CriticArgs(**flags["critic"])}
    with pytest.raises(UserError, match=re.escape(message)):
        module.main(module.Args(env_id="Pendulum-v1", total_timesteps=10, runs_dir=runs_dir, **(tiny | flags)))
    assert not Path(runs_dir).exists()
