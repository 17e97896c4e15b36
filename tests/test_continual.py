"""Continual settings (envs/continual.py, cleanrl_plus/continual.py): schedules, switches at episode ends, each shift
changing what it claims, checkpoints, per-task summaries and the oracle's fresh start."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import envs
from agents import ddqn, ppo
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.config import parse_args
from cleanrl_plus.members import Members
from cleanrl_plus.normalization import ObservationNormalizer
from cleanrl_plus.replay import ReplayBuffer
from cleanrl_plus.transition import Transition
from envs.continual import PRESETS, ContinualArgs
from envs.errors import UserError
from plasticity.network import Network
from plasticity.wiring import Plasticity


def schedule(steps: int, tasks: int, seed: int = -1) -> ContinualArgs:
    return ContinualArgs(steps_per_task=steps, num_tasks=tasks, schedule_seed=seed)


def test_schedules_reproduce_per_seed_and_differ_across_seeds():
    a = envs.make("continual:cartpole-offset", 1, seed=1, continual=schedule(100, 4, seed=3)).describe()
    b = envs.make("continual:cartpole-offset", 2, seed=9, continual=schedule(100, 4, seed=3)).describe()
    c = envs.make("continual:cartpole-offset", 1, seed=1, continual=schedule(100, 4, seed=4)).describe()
    assert a == b  # the schedule depends on the schedule seed only, not on the env seed or count
    assert a[1]["offset"] != c[1]["offset"]
    assert a[0]["offset"] == [0.0] * 4 and [entry["start_step"] for entry in a] == [0, 100, 200, 300]


def _run_random(env, steps: int, generator: torch.Generator):
    """Step with random actions; per step: the switch index before, done, the switch index after, the step,
    the observation acted on and the action."""
    obs = env.reset(seed=0)
    history = []
    for _ in range(steps):
        before = env.switch_index.clone()
        action = torch.randint(0, 2, (env.num_envs,), generator=generator)
        step = env.step(action)
        history.append((before, step.terminated | step.truncated, env.switch_index.clone(), step, obs, action))
        obs = step.obs
    return history


def _cartpole_physics(state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """One step of CartPole-v1's Euler dynamics (Barto, Sutton & Anderson 1983, as gymnasium writes them), in float64."""
    gravity, cart_mass, pole_mass, half_length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass, pole_mass_length = cart_mass + pole_mass, pole_mass * half_length
    x, x_dot, theta, theta_dot = state.double().unbind(-1)
    force = torch.where(action == 1, force_mag, -force_mag).double()
    cos, sin = torch.cos(theta), torch.sin(theta)
    temp = (force + pole_mass_length * theta_dot**2 * sin) / total_mass
    theta_acc = (gravity * sin - cos * temp) / (half_length * (4.0 / 3.0 - pole_mass * cos**2 / total_mass))
    x_acc = temp - pole_mass_length * theta_acc * cos / total_mass
    return torch.stack([x + tau * x_dot, x_dot + tau * x_acc, theta + tau * theta_dot, theta_dot + tau * theta_acc], -1)


def test_sub_envs_switch_only_at_their_episode_ends_and_reset_into_the_new_task():
    env = envs.make("continual:cartpole-offset", 3, seed=2, continual=schedule(60, 3))
    offsets = env.setting.shift.offsets
    history = _run_random(env, 120, torch.Generator().manual_seed(0))
    switched = 0
    for before, done, after, step, obs, action in history:
        changed = after != before
        assert not (changed & ~done).any(), "a sub-env changed task in the middle of an episode"
        switched += int(changed.sum())
        # the observation to act on is in the new task's frame: minus its offset, a CartPole reset state (|s| ≤ 0.05)
        raw_reset = step.obs[done] - offsets[after[done]]
        assert (raw_reset.abs() <= 0.05 + 1e-6).all()
        # the stored s' is in the frame of the task the step ran in (the old one at a switch): minus that task's
        # offset it is CartPole's physics applied to the raw state acted on
        raw_next = _cartpole_physics(obs - offsets[before], action)
        torch.testing.assert_close((step.next_obs - offsets[before]).double(), raw_next, atol=1e-5, rtol=1e-5)
    assert switched >= 3 and (env.switch_index >= 1).all()


def test_episodes_are_labelled_with_the_task_they_ran_in():
    env = envs.make("continual:cartpole-offset", 2, seed=5, continual=schedule(50, 4))
    history = _run_random(env, 150, torch.Generator().manual_seed(1))
    expected = []
    for before, done, *_ in history:
        for i in torch.nonzero(done).flatten().tolist():
            expected.append(int(before[i]))
    stats = env.drain_episode_stats()
    assert sorted(stats.task_ids) == sorted(expected) and len(set(expected)) >= 3


def test_an_episode_ending_on_a_levels_last_step_restarts_in_the_next_level():
    """C-CHAIN's scripts (bluecontra/C-CHAIN crl_gym_classic_control/control_train_aligned_*.py) start every episode of
    iteration i under level i's offset. Random Acrobot episodes last the 400-step cap, so the first ends exactly on the
    first level's last step: every step of a level, the rollouts' cut included, must act in that level."""
    env = envs.make("continual:cchain-acrobot", 1, seed=1, continual=ContinualArgs(steps_per_task=400))
    offsets = env.setting.shift.offsets
    generator = torch.Generator().manual_seed(0)
    obs, rollout = env.reset(seed=1), 400
    for step_count in range(1200):
        level = step_count // 400
        assert env.switch_index.tolist() == [level], f"step {step_count} acts in an old level"
        # the observation acted on carries the level's offset (Acrobot's raw cos/sin/velocities are bounded)
        raw = obs - offsets[level]
        assert (raw[:, :4].abs() <= 1 + 1e-5).all() and (raw[:, 4].abs() <= 4 * torch.pi + 1e-4).all()
        step = env.step(torch.randint(0, 3, (1,), generator=generator))
        obs = step.obs
        if (step_count + 1) % rollout == 0:  # PPO's --restart-episodes at each rollout's end
            obs = env.cut_episodes(~(step.terminated | step.truncated), obs)
    stats = env.drain_episode_stats()
    assert stats.lengths[:3] == [400, 400, 400] and stats.task_ids[:3] == [0, 1, 2]


def _fixed_task_env(env_id: str, task: int, seed: int = 0):
    env = envs.make(env_id, 1, seed=seed, training=False, continual=schedule(100, 3, seed=0))
    env.set_task(task)
    return env


def test_observation_offset_and_permutation_transform_the_raw_observation():
    raw = envs.make("CartPole-v1", 1, seed=4).reset(seed=4)
    shifted = _fixed_task_env("continual:obs-offset:CartPole-v1", 2)
    assert torch.allclose(shifted.reset(seed=4), raw + shifted.setting.shift.offsets[2])
    permuted = _fixed_task_env("continual:obs-permute:CartPole-v1", 1)
    perm = permuted.setting.shift.perms[1]
    assert not torch.equal(perm, torch.arange(4))
    assert torch.equal(permuted.reset(seed=4), raw[:, perm])


def test_action_permutation_maps_actions_and_reward_flip_negates_rewards():
    shuffled = _fixed_task_env("continual:action-permute:Pendulum-v1", 1, seed=3)
    plain = envs.make("Pendulum-v1", 1, seed=3)
    shuffled.reset(seed=3), plain.reset(seed=3)
    signs = shuffled.setting.shift.signs[1]
    action = torch.tensor([[0.7]])
    assert torch.allclose(shuffled.step(action).obs, plain.step(action * signs).obs)

    # a whole flipped episode: every reward and the recorded episode return are the plain env's, negated
    flipped, plain = _fixed_task_env("continual:reward-flip:Pendulum-v1", 1), envs.make("Pendulum-v1", 1, seed=0)
    flipped.reset(seed=0), plain.reset(seed=0)
    plain_return, done = 0.0, False
    while not done:
        action = torch.full((1, 1), 0.5)
        flipped_step, plain_step = flipped.step(action), plain.step(action)
        torch.testing.assert_close(flipped_step.reward, -plain_step.reward)
        plain_return += float(plain_step.reward)
        done = bool(plain_step.truncated | plain_step.terminated)
    assert bool(flipped_step.truncated) and plain_return < 0  # Pendulum's costs became rewards
    assert flipped.drain_episode_stats().returns == pytest.approx([-plain_return], rel=1e-5)


def test_friction_is_edited_on_the_live_mujoco_model_and_survives_a_checkpoint():
    env = envs.make("continual:friction:Hopper-v5", 1, seed=0, continual=schedule(50, 3))
    model = env.inner.vec.envs[0].unwrapped.model
    default = model.geom_friction[:, 0].copy()  # untouched until the first reset applies task 0
    env.reset(seed=0)
    np.testing.assert_allclose(model.geom_friction[:, 0], default * env.setting.shift.factors[0], rtol=1e-6)
    action = torch.zeros(1, 3)
    while int(env.switch_index[0]) < 1:
        env.step(action)
    task = int(env.switch_index[0])
    np.testing.assert_allclose(model.geom_friction[:, 0], default * env.setting.shift.factors[task], rtol=1e-6)

    state = env.state_dict()
    actions = [torch.rand(1, 3, generator=torch.Generator().manual_seed(i)) * 2 - 1 for i in range(30)]
    after = [env.step(a).obs for a in actions]
    restored = envs.make("continual:friction:Hopper-v5", 1, seed=0, continual=schedule(50, 3))
    restored.reset(seed=0)
    restored.load_state_dict(state)
    np.testing.assert_allclose(restored.inner.vec.envs[0].unwrapped.model.geom_friction[:, 0], model.geom_friction[:, 0])
    for a, expected in zip(actions, after):
        assert torch.equal(restored.step(a).obs, expected)


def test_gravity_and_mass_change_classic_control_physics():
    env = envs.make("continual:gravity:CartPole-v1", 1, seed=0, continual=schedule(30, 2))
    cartpole = env.inner.vec.envs[0].unwrapped
    env.reset(seed=0)
    assert cartpole.gravity == pytest.approx(9.8 * env.setting.shift.factors[0])
    while int(env.switch_index[0]) < 1:
        env.step(torch.zeros(1, dtype=torch.long))
    assert cartpole.gravity == pytest.approx(9.8 * env.setting.shift.factors[1])
    heavy = envs.make("continual:mass:CartPole-v1", 1, seed=0, continual=schedule(30, 2))
    heavy.reset(seed=0)
    pole = heavy.inner.vec.envs[0].unwrapped
    assert pole.total_mass == pytest.approx(1.1 * heavy.setting.shift.factors[0])


def test_dmc_chain_switches_the_task_on_the_same_body():
    env = envs.make("continual:dmc-walker", 1, seed=0, continual=schedule(600, 3))
    env.reset(seed=0)
    speeds = []
    for _ in range(2):  # episodes are 1000 steps: task 1 is scheduled from step 600, task 2 from 1200
        for _ in range(1000):
            env.step(torch.zeros(1, 6))
        speeds.append(env.inner.envs[0].task._move_speed)
    assert speeds == [1.0, 8.0]  # stand → walk (switch at the 1st episode end) → run (2nd); walker-stand has speed 0
    assert env.inner.sub_env_tasks == [2] and env.task_id.tolist() == [2]


def test_minatar_game_sequence_pads_channels_and_keeps_six_actions():
    env = envs.make("continual:minatar3", 1, seed=0, continual=schedule(1, 2))  # Asterix from the first episode end
    assert env.single_observation_space.shape == (10, 10, 10) and env.single_action_space.n == 6
    obs = env.reset(seed=0)
    games = env.inner.vec.envs[0].env
    assert obs.shape == (1, 10, 10, 10) and games.active == 0
    while int(env.switch_index[0]) < 1:
        step = env.step(torch.randint(0, 6, (1,)))
    assert games.active == 1 and games.games[1].spec.id == "MinAtar/Asterix-v0"
    assert step.obs[..., 4:].sum() == 0 and step.obs[..., :4].sum() > 0  # Asterix has 4 channels, zero-padded to 10


@pytest.mark.parametrize(
    "env_id, fix",
    [
        ("continual:cartpole-ofset", "continual:cartpole-offset"),
        ("continual:wobble:CartPole-v1", "shifts: obs-offset"),
        ("continual:frixion:CartPole-v1", "did you mean .friction"),
        ("continual:friction:torch:CartPole-v1", "gymnasium"),
        ("continual:obs-offset:MinAtar/Breakout-v1", "obs-permute"),
        ("continual:friction:Hoper-v5", "Hopper-v5"),
    ],
)
def test_bad_continual_ids_get_one_line_errors_naming_the_fix(env_id, fix):
    with pytest.raises(UserError, match=fix.replace("<", ".").replace(">", ".")):
        envs.validate_env_id(env_id)
        envs.make(env_id, 1, seed=0)


def test_every_preset_names_an_env_that_exists():
    for name in PRESETS:
        envs.validate_env_id(f"continual:{name}")


def test_a_continual_run_spends_its_schedule_by_default():
    args = parse_args(ppo.Args, ["--env-id", "continual:cartpole-offset-small"])
    assert args.total_timesteps == 5 * 60_000
    args = parse_args(ppo.Args, ["--env-id", "continual:cartpole-offset-small", "--continual.num-tasks", "2"])
    assert args.total_timesteps == 2 * 60_000 and args.continual.num_tasks == 2


def stored_step(obs: torch.Tensor) -> Transition:
    """A step of one member's obs.shape[1] envs, 2-dimensional actions, no episode ending."""
    rows, no = obs.shape[:2], torch.zeros(obs.shape[:2], dtype=torch.bool)
    action, reward, next_obs = torch.ones(*rows, 2), torch.ones(rows), torch.ones_like(obs)
    return Transition(obs=obs, action=action, reward=reward, terminated=no, truncated=no, next_obs=next_obs)


def test_on_task_switch_gives_the_oracle_a_fresh_agent_and_keeps_everything_by_default():
    net = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(net.parameters())
    net(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    plasticity = Plasticity(
        ddqn.Args(), Network("critic", net, optimizer, lambda b: None, lambda: torch.nn.Linear(3, 2)), logger=None
    )
    replay = ReplayBuffer(8, (3,), (2,), Members((0,)))  # one member: (1, rows, ...)
    replay.add(stored_step(torch.ones(1, 2, 3)))
    normalizer = ObservationNormalizer((3,), enabled=True)
    normalizer(torch.full((1, 4, 3), 5.0), update=True)
    weights = net.weight.detach().clone()

    plasticity.on_task_switch(ContinualArgs(), replay, [normalizer])
    assert torch.equal(net.weight, weights) and len(replay) == 2 and normalizer.rms.count > 0 and optimizer.state

    plasticity.on_task_switch(ContinualArgs(oracle=True), replay, [normalizer])
    assert not torch.equal(net.weight, weights) and len(replay) == 0 and normalizer.rms.count == 0
    assert not optimizer.state
    replay.add(stored_step(torch.full((1, 1, 3), 7.0)))
    assert torch.equal(replay.sample(4).obs, torch.full((1, 4, 3), 7.0))  # sampling sees only what came after the clear


TINY = dict(
    num_steps=32,
    num_minibatches=2,
    update_epochs=1,
    hidden_sizes=(16, 16),
    eval_episodes=2,
    progress=False,
    eval_every=0,
    num_envs=2,
    normalize_obs=False,
    normalize_reward=False,
)


def test_ppo_continual_run_writes_per_task_records_switch_markers_and_the_schedule(runs_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = ppo.Args(
        env_id="continual:cartpole-offset-small", total_timesteps=384, runs_dir=runs_dir, continual=schedule(128, 3), **TINY
    )
    result = ppo.main(args)
    tasks = result["tasks"]
    assert [t["task"] for t in tasks] == [0, 1, 2]
    assert [t["start_step"] for t in tasks] == [0, 128, 256] and tasks[-1]["end_step"] == 384
    assert all(t["final_eval"] is not None for t in tasks)  # an end-of-task evaluation for every task
    markers = EventAccumulator(result["run_dir"]).Reload().Scalars("continual/task")
    assert [(m.step, m.value) for m in markers] == [(0, 0.0), (128, 1.0), (256, 2.0)]
    saved = json.loads((Path(result["run_dir"]) / "schedule.json").read_text())
    assert len(saved) == 3 and saved[0]["offset"] == [0.0] * 4
    assert json.loads((Path(result["run_dir"]) / "args.json").read_text())["continual"]["schedule_seed"] == 1


def test_ppo_oracle_restarts_the_networks_at_each_switch_and_resumes_exactly(runs_dir):
    common = dict(env_id="continual:cartpole-offset-small", runs_dir=runs_dir, **TINY)
    oracle = ContinualArgs(steps_per_task=128, num_tasks=3, oracle=True)
    straight = ppo.main(ppo.Args(total_timesteps=320, exp_name="straight", continual=oracle, **common))
    half = ppo.main(ppo.Args(total_timesteps=192, exp_name="split", continual=oracle, **common))
    resumed = ppo.main(ppo.Args(total_timesteps=320, exp_name="split", continual=oracle, resume=half["run_dir"], **common))
    a = load_checkpoint(Path(straight["run_dir"]) / "checkpoint.pt")
    b = load_checkpoint(Path(resumed["run_dir"]) / "checkpoint.pt")
    assert all(torch.equal(a["agent"][k], b["agent"][k]) for k in a["agent"])
    assert [t["start_step"] for t in resumed["tasks"]] == [t["start_step"] for t in straight["tasks"]] == [0, 128, 256]

    persistent = ppo.main(ppo.Args(total_timesteps=320, exp_name="persistent", continual=schedule(128, 3), **common))
    c = load_checkpoint(Path(persistent["run_dir"]) / "checkpoint.pt")
    assert not all(torch.equal(a["agent"][k], c["agent"][k]) for k in a["agent"])


def test_a_group_resumed_from_the_command_line_keeps_each_members_schedule(runs_dir):
    # --resume takes its flags from the args.json of the directory named, which records the schedule seed that member
    # defaulted to (its own): the other member must still draw its schedule from its own seed, as the straight run did
    # (a constant learning rate: an annealed one follows each part's --total-timesteps)
    common = dict(env_id="continual:cartpole-offset-small", runs_dir=runs_dir, seeds=(1, 2), anneal_lr=False, **TINY)
    oracle = ContinualArgs(steps_per_task=128, num_tasks=2, oracle=True)
    ppo.main(ppo.Args(total_timesteps=256, exp_name="straight", continual=oracle, **common))
    ppo.main(ppo.Args(total_timesteps=192, exp_name="split", continual=oracle, **common))  # stops in task 1
    first, second = sorted(Path(runs_dir).glob("*split*"))
    ppo.main(parse_args(ppo.Args, ["--resume", str(second), "--total-timesteps", "256"]))
    for a, b in zip(sorted(Path(runs_dir).glob("*straight*")), (first, second)):
        assert json.loads((b / "schedule.json").read_text()) == json.loads((a / "schedule.json").read_text())
        x, y = load_checkpoint(a / "checkpoint.pt"), load_checkpoint(b / "checkpoint.pt")
        assert all(torch.equal(x["agent"][k], y["agent"][k]) for k in x["agent"]), b.name


def test_a_resume_whose_env_draws_another_schedule_than_a_members_record_is_refused_and_writes_nothing(runs_dir):
    # the guard that would have stopped the resumed-group bug: each member's env schedule must be its schedule.json
    common = dict(env_id="continual:cartpole-offset-small", runs_dir=runs_dir, seeds=(1, 2), **TINY)
    ppo.main(ppo.Args(total_timesteps=192, continual=ContinualArgs(steps_per_task=128, num_tasks=2), **common))
    first, second = sorted(Path(runs_dir).iterdir())
    schedule = json.loads((second / "schedule.json").read_text())
    schedule[1]["offset"][0] += 0.5  # as if the member had been drawn another seed's task 1
    (second / "schedule.json").write_text(json.dumps(schedule, indent=2))
    before = {path: path.read_bytes() for path in Path(runs_dir).rglob("*") if path.is_file() and path.name != "run.lock"}
    with pytest.raises(UserError, match=f"--resume {second}: its env would draw task 1 unlike the run's schedule.json"):
        ppo.main(parse_args(ppo.Args, ["--resume", str(first), "--total-timesteps", "256"]))
    after = {path: path.read_bytes() for path in Path(runs_dir).rglob("*") if path.is_file() and path.name != "run.lock"}
    assert after == before


def test_reset_exploration_restarts_the_epsilon_schedule_at_each_switch(runs_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from agents import ddqn

    def epsilons(reset_exploration: bool) -> dict[int, float]:
        args = ddqn.Args.defaults_for(
            "continual:obs-offset:CartPole-v1",
            total_timesteps=600,
            learning_starts=50,
            exploration_fraction=0.2,
            train_frequency=10,
            gradient_steps=1,
            log_every=50,
            eval_every=0,
            eval_episodes=2,
            progress=False,
            runs_dir=runs_dir,
            exp_name=str(reset_exploration),
            continual=ContinualArgs(steps_per_task=300, num_tasks=2, reset_exploration=reset_exploration),
        )
        run_dir = ddqn.main(args)["run_dir"]
        return {e.step: e.value for e in EventAccumulator(run_dir).Reload().Scalars("charts/epsilon")}

    kept, restarted = epsilons(False), epsilons(True)
    assert kept[550] == pytest.approx(ddqn.Args.defaults_for("CartPole-v1").end_e)  # 120 decay steps ended long ago
    assert restarted[400] > kept[400] and restarted[400] > restarted[250]  # decaying again from the task's start


def test_random_steps_per_task_act_at_random_and_pause_learning_at_every_task_start(runs_dir):
    from agents import ddqn

    assert envs.continual.parse("continual:minatar3").random_steps_per_task == 10_000  # C-CHAIN's INIT_RANDOM_STEPS
    assert envs.continual.parse("continual:minatar3", ContinualArgs(random_steps_per_task=0)).random_steps_per_task == 0
    assert envs.continual.parse("continual:obs-offset:CartPole-v1").random_steps_per_task == 0

    def updates(random_steps: int) -> int:
        args = ddqn.Args.defaults_for(
            "continual:obs-offset:CartPole-v1",
            total_timesteps=600,
            learning_starts=50,
            train_frequency=10,
            gradient_steps=1,
            eval_every=0,
            eval_episodes=2,
            progress=False,
            runs_dir=runs_dir,
            exp_name=f"r{random_steps}",
            continual=ContinualArgs(steps_per_task=300, num_tasks=2, random_steps_per_task=random_steps),
        )
        return ddqn.main(args)["num_updates"]

    # 100 random steps at each task start: learning begins at 100 instead of 50 (5 updates fewer), pauses for 300–400 (10)
    assert updates(0) - updates(100) == 15
    with pytest.raises(UserError, match="on-policy"):
        ppo.main(
            ppo.Args(
                env_id="continual:obs-offset:CartPole-v1", continual=ContinualArgs(random_steps_per_task=10), progress=False
            )
        )


def test_ppo_refuses_tasks_shorter_than_one_rollout(runs_dir):
    args = ppo.Args(
        env_id="continual:obs-offset:CartPole-v1",
        num_steps=128,
        num_envs=4,
        progress=False,
        runs_dir=runs_dir,
        continual=ContinualArgs(steps_per_task=500, num_tasks=2),
    )
    with pytest.raises(UserError, match="shorter than one rollout"):
        ppo.main(args)


def test_atari_game_switch_waits_for_the_game_to_end_not_a_lost_life():
    env = envs.make("continual:atari-switch", 1, seed=0, continual=schedule(1, 2))  # Atlantis from the first game end
    assert env.single_observation_space.shape == (4, 84, 84) and env.single_action_space.n == 18 and env.frame_stack == 4
    env.reset(seed=0)
    games, life_losses = env.inner.vec.envs[0].env, 0
    generator = torch.Generator().manual_seed(0)
    while int(env.switch_index[0]) < 1:
        step = env.step(torch.randint(0, 18, (1,), generator=generator))
        life_losses += int(step.terminated[0])
        assert games.active == 0 or int(env.switch_index[0]) == 1
    stats = env.drain_episode_stats()
    assert life_losses > 1 and len(stats) == 1 and stats.task_ids == [0]  # several lives lost, one game, then the switch
    assert games.active == 1 and games.names[1] == "ALE/Atlantis-v5"
