"""C-CHAIN's continual Gym Control (Tang et al., ICML 2025, Table 1) as the suite runs it: the `continual:cchain-*`
presets and the PPO recipe they pick against the authors' values, the pieces of that recipe against the authors'
definitions (bluecontra/C-CHAIN crl_gym_classic_control/basic_utils.py), the paper's score (Eq. 1) against a hand
computation, and a learning gate: the recipe learns CartPole's first level."""

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from test_report import read_rows, value, write_run

import envs
from agents import ppo
from cleanrl_plus.members import Members
from cleanrl_plus.rollout import RolloutStorage
from commands import report
from envs import continual
from plasticity.cchain import AUTHORS

ROOT = Path(__file__).resolve().parents[1]

# The authors' setting, in one place. Env side: control_train_aligned_{vanilla,c_chain,oracle}.py's arguments
# (--obs_perturb_range 2 is the offset's standard deviation; --level_num 10; --level_switch 200; --iteration_steps 800;
# max_timesteps 400), MountainCar's from the label of assets/curves_for_crl_gym_control.png (ls400_on0.02).
AUTHORS_ENVS = {
    "cchain-cartpole": ("CartPole-v1", 2.0, 10, 200),
    "cchain-acrobot": ("Acrobot-v1", 2.0, 10, 200),
    "cchain-lunarlander": ("LunarLander-v3", 2.0, 10, 200),
    "cchain-mountaincar": ("MountainCar-v0", 0.02, 5, 400),
}
AUTHORS_ITERATION_STEPS, AUTHORS_EPISODE_CAP = 800, 400
# Agent side (our flag: their value), from the same scripts, basic_utils.py and networks.py.
AUTHORS_PPO = {
    "num_envs": 1,  # one gym env
    "num_steps": 800,  # --iteration_steps
    "num_minibatches": 25,  # 800 samples / --batch_size 32
    "update_epochs": 5,  # --epoch
    "learning_rate": 1e-3,  # --lr (f5ff6d2; 1e-2 before)
    "anneal_lr": False,
    "adam_eps": 1e-8,  # torch.optim.Adam's default
    "adam_betas": (0.9, 0.999),
    "max_grad_norm": 0.0,  # no clipping
    "clip_coef": 0.2,
    "clip_vloss": False,
    "ent_coef": 0.01,  # c1
    "vf_coef": 1.0,  # c2 · F.mse_loss = 0.5·MSE = 1.0 × our ½E[(V − R)²]
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "value_lambda": 1.0,  # rewards_to_go: the discounted return-to-go
    "norm_adv": True,
    "norm_adv_over": "rollout",  # normalize_list over the iteration's dataset
    "normalize_obs": False,  # state_scale 1.0
    "normalize_reward": False,
    "reward_scale": 1 / 20,  # reward_scale 20.0 divides
    "restart_episodes": True,  # every iteration resets the env
    "hidden_sizes": (256, 256, 256),
    "categorical_from": "probs",  # networks.py: Categorical(F.softmax(fc4(x)))
    "init": "default",  # nn.Linear's own
    "total_timesteps": 1_600_000,  # 2,000 iterations × 800
}


@pytest.mark.parametrize("preset", sorted(AUTHORS_ENVS))
def test_presets_and_their_ppo_recipe_are_the_authors_setting(preset):
    env_id, sigma, levels, iterations_per_level = AUTHORS_ENVS[preset]
    setting = continual.parse(f"continual:{preset}")
    assert setting.env_id.removeprefix("torch:") == env_id
    assert (setting.num_tasks, setting.steps_per_task) == (levels, iterations_per_level * AUTHORS_ITERATION_STEPS)
    assert setting.max_episode_steps == AUTHORS_EPISODE_CAP
    assert isinstance(setting.shift, continual.ObservationOffset) and setting.shift.sigma == sigma
    args = ppo.Args.defaults_for(f"continual:{preset}")
    assert {key: getattr(args, key) for key in AUTHORS_PPO} == AUTHORS_PPO
    assert args.net.activation == "leaky-relu" and ppo.network_settings(args) == ("none", "leaky-relu")
    assert args.total_timesteps == setting.total_steps
    assert ppo.Args.defaults_for("continual:cchain-cartpole", learning_rate=0.01).learning_rate == 0.01  # a flag wins
    assert ppo.Args.defaults_for("continual:obs-offset:torch:CartPole-v1").num_steps == ppo.Args().num_steps  # others not


@pytest.mark.parametrize("preset", ["cchain-cartpole", "cchain-acrobot", "cchain-mountaincar"])
def test_each_seed_meets_the_offsets_of_the_authors_same_seed(preset):
    """get_peturbations in control_train_aligned_*.py: numpy.random.seed(seed), then one normal(0, σ, dim) per level,
    level 0's zeroed. Every member of a group draws its own seed's (members 0 and 2 of seeds 2, 0, 7)."""
    _, sigma, levels, _ = AUTHORS_ENVS[preset]
    env = envs.make(f"continual:{preset}", 1, members=(2, 0, 7))
    for member, seed in enumerate([2, 0, 7]):
        theirs = _authors_offsets(seed, sigma, levels, env.single_observation_space.shape)
        ours = env.shifts[member].offsets
        np.testing.assert_allclose(ours.numpy(), np.array(theirs, dtype=np.float32), rtol=0, atol=0)
    env.close()


def _authors_offsets(seed: int, sigma: float, levels: int, shape) -> list[np.ndarray]:
    """get_peturbations in control_train_aligned_*.py: numpy.random.seed(seed), one normal(0, σ) per level, level 0's
    zeroed."""
    np.random.seed(seed)
    offsets = [np.random.normal(0, sigma, shape) for _ in range(levels)]
    offsets[0] = np.zeros_like(offsets[0])
    return offsets


def test_the_plan_is_the_tables_six_columns_with_the_authors_remedy_settings():
    plan = tomllib.loads((ROOT / "benchmarks" / "cchain-gym-control.toml").read_text())
    assert plan["agent"] == ["ppo"] and plan["seeds"] == [0, 1, 2, 3, 4, 5]  # six seeds, from the scripts' default 0
    assert plan["env_id"] == ["continual:cchain-cartpole", "continual:cchain-acrobot"]
    columns = plan["config"]
    assert list(columns) == ["baseline", "oracle", "trac", "weight-clipping", "l2-init", "c-chain"]
    assert columns["baseline"] == ""
    assert columns["oracle"] == "--continual.oracle"
    assert columns["trac"] == "--optim.trac"
    assert columns["c-chain"] == "--cchain.enabled"  # the authors' schedule for a categorical policy, by default:
    assert (AUTHORS["probabilities"].relative_scale, AUTHORS["probabilities"].initial_coef) == (1e4, 1.0)
    assert (AUTHORS["probabilities"].warmup, AUTHORS["probabilities"].window, AUTHORS["probabilities"].min_coef) == (11, 50, 1)
    assert AUTHORS["probabilities"].point_means  # train_combined_networks_with_chain's per-iteration means


def test_value_targets_and_advantages_are_the_authors_episode_sums():
    """λ_V = 1 gives Episode.end_episode's rewards_to_go, GAE gives its advantages, and the rollout normalisation is
    normalize_list's (numpy std, ε 1e-5), on a rollout with a termination, a 400-step-style cut and an iteration cut."""
    gamma, lam = 0.99, 0.95
    rewards = np.array([0.05, 0.05, 0.05, 0.05, 0.05, 0.05])
    values = np.array([0.3, 0.2, 0.4, 0.1, 0.5, 0.6])
    next_values = np.array([0.2, 0.4, 0.9, 0.5, 0.6, 0.7])  # V(s') (the value after a cut is a bootstrap)
    terminated = np.array([False, False, True, False, False, False])
    truncated = np.array([False, False, False, False, True, False])  # step 4 cut at the time limit; step 5 ends the rollout

    def authors_episode(rs, vs, last_value):  # basic_utils.Episode.end_episode
        rs, vs = list(rs) + [last_value], list(vs) + [last_value]
        deltas = [rs[t] + gamma * vs[t + 1] - vs[t] for t in range(len(rs) - 1)]
        advantages, running = [], 0.0
        for delta in reversed(deltas):
            running = delta + gamma * lam * running
            advantages.insert(0, running)
        returns, running = [], 0.0
        for r in reversed(rs):
            running = r + gamma * running
            returns.insert(0, running)
        return advantages, returns[:-1]

    episodes = [(0, 3, 0.0), (3, 5, next_values[4]), (5, 6, next_values[5])]  # terminated; cut at 400; iteration end
    expected_adv, expected_ret = [], []
    for start, end, last in episodes:
        advantages, returns = authors_episode(rewards[start:end], values[start:end], last)
        expected_adv += advantages
        expected_ret += returns
    storage = RolloutStorage(6, 1, (1,), (), torch.device("cpu"), Members((1,), torch.device("cpu")))
    as_rollout = lambda x, dtype=torch.float32: torch.as_tensor(x, dtype=dtype).view(1, 6, 1)  # noqa: E731
    storage.rewards.copy_(as_rollout(rewards))
    storage.terminated.copy_(as_rollout(terminated, torch.bool))
    storage.dones.copy_(as_rollout(terminated | truncated, torch.bool))
    storage.obs.copy_(as_rollout(np.arange(6)).unsqueeze(-1))
    storage.next_obs.copy_(as_rollout(np.arange(6) + 10).unsqueeze(-1))
    lookup = {float(i): v for i, v in enumerate(values)} | {float(i + 10): v for i, v in enumerate(next_values)}
    value_fn = lambda obs: torch.tensor([lookup[float(o)] for o in obs.flatten()], dtype=torch.float32)  # noqa: E731
    ppo.estimate_advantages(value_fn, storage, ppo.Args(gamma=gamma, gae_lambda=lam, value_lambda=1.0))
    np.testing.assert_allclose(storage.returns.flatten().numpy(), expected_ret, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(storage.advantages.flatten().numpy(), expected_adv, rtol=1e-5, atol=1e-6)
    storage.normalize_advantages()
    normalised = (np.array(expected_adv) - np.mean(expected_adv)) / (np.std(expected_adv) + 1e-5)  # normalize_list
    np.testing.assert_allclose(storage.advantages.flatten().numpy(), normalised, rtol=1e-4, atol=1e-5)


def test_rollout_normalisation_keeps_members_apart():
    members = Members((1, 2, 3), torch.device("cpu"))
    storage = RolloutStorage(5, 2, (1,), (), torch.device("cpu"), members)
    storage.advantages.copy_(torch.randn(3, 5, 2, generator=torch.Generator().manual_seed(0)))
    changed = RolloutStorage(5, 2, (1,), (), torch.device("cpu"), members)
    changed.advantages.copy_(storage.advantages)
    changed.advantages[1] *= 100.0  # member 1 alone
    storage.normalize_advantages()
    changed.normalize_advantages()
    for unchanged in (0, 2):
        assert torch.equal(storage.advantages[unchanged], changed.advantages[unchanged])


def test_every_rollout_starts_fresh_episodes_and_logs_the_cut_ones(runs_dir):
    """Each iteration's episodes add up to exactly its steps (the last one cut at the iteration's end and logged), no
    episode is longer than the 400-step cap, and the level switch lands on an iteration boundary."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = ppo.Args.defaults_for(
        "continual:cchain-cartpole",
        total_timesteps=3 * 512,
        num_steps=512,
        num_minibatches=4,
        update_epochs=1,
        hidden_sizes=(16,),
        runs_dir=runs_dir,
        progress=False,
        log_every=512,
        continual=continual.ContinualArgs(steps_per_task=1024),
    )
    summary = ppo.main(args)
    events = EventAccumulator(summary["run_dir"], size_guidance={"scalars": 0}).Reload()
    ends = [(e.step, int(e.value)) for e in events.Scalars("charts/episodic_length")]
    for iteration in (1, 2, 3):
        inside = [length for step, length in ends if (iteration - 1) * 512 < step <= iteration * 512]
        assert sum(inside) == 512, (iteration, inside)
    assert 1 <= min(length for _, length in ends) and max(length for _, length in ends) <= AUTHORS_EPISODE_CAP
    assert [task["start_step"] for task in summary["tasks"]] == [0, 1024]  # the new offset from the iteration's start


def test_an_episode_cut_at_a_rollouts_end_after_a_scheduled_switch_restarts_in_the_new_task():
    env = continual.ContinualVecEnv(
        "continual:cchain-cartpole", 1, 3, torch.device("cpu"), continual=continual.ContinualArgs(steps_per_task=4)
    )
    env.reset()
    for _ in range(4):  # CartPole cannot fall in 4 steps from its initial states (±0.05)
        step = env.step(torch.zeros(1, dtype=torch.long))
    fresh = env.cut_episodes(torch.ones(1, dtype=torch.bool), step.obs)
    assert int(env.switch_index[0]) == 1
    assert torch.all((fresh[0] - env.shifts[0].offsets[1]).abs() <= 0.05)  # an initial state under level 1's offset


def test_cchains_reference_batches_are_a_second_shuffled_pass_drawn_after_the_training_one(runs_dir):
    """control_train_aligned_c_chain.py zips the training loader with `reg_data_loader` (shuffle=True, batch 32): each
    epoch's reference batches cover the iteration's 800 samples once each, in an order of their own, each member's
    from its own generator (drawn after the epoch's training permutation); none are drawn with C-CHAIN off."""
    args = ppo.Args.defaults_for("continual:cchain-cartpole", seeds=(1, 2), runs_dir=runs_dir, progress=False)
    for enabled in (True, False):
        args.cchain.enabled = enabled
        parts = ppo.build(args)
        storage = parts.storage
        storage.obs[..., 0] = torch.arange(800, dtype=torch.float32).view(1, 800, 1)  # each sample's index
        state = [generator.get_state() for generator in parts.members.generators]
        training = storage.minibatch_indices(25)
        after_training = [generator.get_state() for generator in parts.members.generators]
        references = parts.plasticity.reference_pass(storage, 25)
        if not enabled:
            assert references == [None] * 25
            assert all(torch.equal(g.get_state(), s) for g, s in zip(parts.members.generators, after_training))
            continue
        drawn = torch.stack([reference.obs[..., 0] for reference in references], 1).long()  # (members, 25, 32)
        for k in range(2):
            assert sorted(drawn[k].flatten().tolist()) == list(range(800))
            assert not torch.equal(drawn[k].flatten(), torch.cat(training, 1)[k])
        # member 1's generator, as it stood: its training permutation first, then its reference pass
        generator = torch.Generator().set_state(state[1])
        assert torch.equal(torch.cat(training, 1)[1], torch.randperm(800, generator=generator))
        assert torch.equal(drawn[1].flatten(), torch.randperm(800, generator=generator))


def test_average_performance_is_eq1_by_hand(tmp_path):
    """Two seeds, iterations of 10 steps: per run the mean over iterations of the iteration's mean episode return (an
    episode ending exactly at step 10 is iteration 1's), then mean ± standard error over seeds."""
    runs_dir = tmp_path / "runs"
    env_id = "continual:cchain-cartpole"
    episodes = {1: [(4, 4.0), (10, 6.0), (13, 3.0), (20, 7.0), (30, 10.0)], 2: [(10, 10.0), (17, 7.0), (20, 3.0), (30, 2.0)]}
    for seed, points in episodes.items():
        directory = write_run(runs_dir, "ppo", "ppo", seed, [], env_id=env_id, train_points=points)
        args = json.loads((directory / "args.json").read_text()) | {"num_steps": 10, "num_envs": 1}
        (directory / "args.json").write_text(json.dumps(args))
    run_1 = np.mean([np.mean([4, 6]), np.mean([3, 7]), 10.0])  # 5, 5, 10 → 6.667
    run_2 = np.mean([10.0, np.mean([7, 3]), 2.0])  # 10, 5, 2 → 5.667
    assert report.average_performance(np.array([4, 10, 13, 20, 30]), np.array([4.0, 6, 3, 7, 10]), 10) == pytest.approx(run_1)
    report.main([str(runs_dir), "--metric", "average-performance", "--reps", "50"])
    rows = read_rows(runs_dir / "report")
    where = dict(table="average_performance", group="ppo", env_id=env_id)
    assert value(rows, estimator="mean", **where)[0] == pytest.approx((run_1 + run_2) / 2)
    assert value(rows, estimator="standard_error", **where)[0] == pytest.approx(np.std([run_1, run_2], ddof=1) / math.sqrt(2))
    assert "| continual:cchain-cartpole | ppo | 2 | 6.167 ± 0.500 |" in (runs_dir / "report" / "report.md").read_text()


def test_average_performance_refuses_runs_without_iterations(tmp_path):
    runs_dir = tmp_path / "runs"
    write_run(runs_dir, "td3", "td3", 1, [], train_points=[(5, 1.0)])
    with pytest.raises(report.UserError, match="needs PPO/GTR runs"):
        report.write_report([runs_dir], metric="average-performance")


def test_the_authors_recipe_learns_cartpoles_first_level(runs_dir):
    """The paper's curves reach ≈ 390 on level 0 within ≈ 25 iterations (assets/curves_for_crl_gym_control.png); here the
    training return of the last 5 iterations of 30 clears 200 in at least 2 of 3 seeds."""
    args = ppo.Args.defaults_for(
        "continual:cchain-cartpole", total_timesteps=30 * 800, seeds=(1, 2, 3), runs_dir=runs_dir, progress=False
    )
    summaries = ppo.main(args)["members"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    late = []
    for summary in summaries:
        events = EventAccumulator(summary["run_dir"], size_guidance={"scalars": 0}).Reload()
        points = [(e.step, e.value) for e in events.Scalars("charts/episodic_return")]
        late.append(report.average_performance(*map(np.array, zip(*[p for p in points if p[0] > 25 * 800])), 800))
    assert sum(score >= 200 for score in late) >= 2, late


def test_an_episode_that_ends_on_a_rollouts_last_step_is_not_cut_again(runs_dir):
    """Pendulum's episodes end by time limit after 200 steps, on every 200-step rollout's last step: each iteration
    logs exactly one 200-step episode (a second cut would log an empty one at the same step)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = ppo.Args(
        env_id="torch:Pendulum-v1",
        total_timesteps=600,
        num_steps=200,
        num_minibatches=2,
        update_epochs=1,
        hidden_sizes=(8,),
        restart_episodes=True,
        eval_every=0,
        eval_episodes=1,
        log_every=200,
        runs_dir=runs_dir,
        progress=False,
    )
    events = EventAccumulator(ppo.main(args)["run_dir"], size_guidance={"scalars": 0}).Reload()
    assert [(e.step, e.value) for e in events.Scalars("charts/episodic_length")] == [(200, 200.0), (400, 200.0), (600, 200.0)]


def test_the_lunarlander_level_adds_its_offset_to_the_real_env():
    """With the box2d extra: C-LunarLander's level 1 observes the real LunarLander-v3 plus seed 0's second numpy draw."""
    pytest.importorskip("Box2D")
    env = envs.make("continual:cchain-lunarlander", 1, members=(0,))
    np.random.seed(0)
    draws = [np.random.normal(0, 2.0, (8,)) for _ in range(2)]
    np.testing.assert_allclose(env.shifts[0].offsets[1].numpy(), draws[1].astype(np.float32))
    assert env.single_observation_space.shape == (8,) and env.max_episode_steps == 400
    env.close()


def _authors_episodes(env_id: str, start_episode, actions, starts, offsets, iterations: int):
    """control_train_aligned_vanilla.py's env loop (bluecontra/C-CHAIN @2f8bedf, lines 128-168) on gymnasium's own
    `env_id`: every iteration starts a fresh episode under its level's offset, `done` is the 5-tuple's first flag (gym's
    own truncation ignored), an episode is cut at `max_timesteps` 400 or at the iteration's end. Each reset starts the
    episode ours started (`start_episode(env, start)` with the next of `starts`, returning the raw observation) and each
    step takes the action ours took (`actions`), so the two envs drive the same simulator. Yields per step
    (level, observation acted on, reward, done, cut)."""
    import gymnasium

    env = gymnasium.make(env_id)
    env.reset(seed=0)
    starts, actions = iter(starts), iter(actions)
    for ite in range(iterations):
        random_perturbation = offsets[ite]  # their --level_switch here is 1: a new level every iteration
        ite_timestep = 0
        while ite_timestep < AUTHORS_ITERATION_STEPS:
            observation = start_episode(env, next(starts)) + random_perturbation
            for timestep in range(AUTHORS_EPISODE_CAP):
                new_observation, reward, done, _, _ = env.step(next(actions))
                new_observation = new_observation + random_perturbation
                ite_timestep += 1
                cut = not done and (timestep == AUTHORS_EPISODE_CAP - 1 or ite_timestep == AUTHORS_ITERATION_STEPS)
                yield ite, observation, reward, done, cut
                observation = new_observation
                if done or cut:
                    break


def _our_episodes(preset: str, seed: int, iterations: int, act, episode_start):
    """Ours on one seed, one 800-step rollout a level (steps_per_task 800), `act(raw observation, level)` choosing each
    action; `episode_start(env, raw observation)` records what the authors' loop needs to start the same episode.
    Returns our steps as (level, observation acted on, reward, terminated, truncated), the episodes' starts, the actions
    and the offsets."""
    env = envs.make(f"continual:{preset}", 1, seed=seed, continual=continual.ContinualArgs(steps_per_task=800))
    offsets = env.shifts[0].offsets
    _, sigma, levels, _ = AUTHORS_ENVS[preset]
    theirs_offsets = _authors_offsets(seed, sigma, levels, tuple(offsets.shape[1:]))
    np.testing.assert_allclose(offsets.numpy(), np.array(theirs_offsets, dtype=np.float32), rtol=0, atol=0)
    ours, starts, actions, obs = [], [], [], env.reset(seed=seed)
    new_episode = True
    for step_count in range(iterations * AUTHORS_ITERATION_STEPS):
        level = int(env.switch_index[0])
        raw = (obs[0] - offsets[level]).numpy()
        if new_episode:
            starts.append(episode_start(env, raw))
        action = act(raw, step_count // AUTHORS_ITERATION_STEPS)
        actions.append(action)
        step = env.step(torch.tensor([action]))
        ours.append((level, obs[0].numpy().copy(), float(step.reward[0]), bool(step.terminated[0]), bool(step.truncated[0])))
        obs, new_episode = step.obs, bool(step.terminated[0] | step.truncated[0])
        if (step_count + 1) % AUTHORS_ITERATION_STEPS == 0:  # PPO's --restart-episodes
            running = ~(step.terminated | step.truncated)
            obs, new_episode = env.cut_episodes(running, obs), True
    env.close()
    return ours, starts, actions, theirs_offsets


def _assert_same_steps(ours, theirs, iterations: int, atol: float) -> list[int]:
    """Every step in the same level on the same observation with the same reward, the same episodes ending the same
    way; returns the steps where the authors' episodes end."""
    assert len(theirs) == len(ours) == iterations * AUTHORS_ITERATION_STEPS
    for t, ((level, o, r, done, cut), (their_level, their_o, their_r, their_done, their_cut)) in enumerate(zip(ours, theirs)):
        assert level == their_level == t // AUTHORS_ITERATION_STEPS, t
        np.testing.assert_allclose(o, their_o, rtol=0, atol=atol, err_msg=f"step {t}")
        assert (r, done) == (pytest.approx(their_r, rel=1e-6, abs=1e-6), their_done), t
        # ours marks the 400-step cap as truncation; an episode still running at an iteration's end is cut by the
        # rollout's restart (theirs: the same `cut`), so ours' truncation is theirs' cap cut
        assert cut == their_cut or (their_cut and (t + 1) % AUTHORS_ITERATION_STEPS == 0), t
    return [t for t, step in enumerate(theirs) if step[3] or step[4]]


def test_c_mountaincar_steps_as_the_authors_loop_across_level_switches_and_the_400_step_cut():
    """Ours beside the authors' loop on one seed, one iteration a level: level 0 acts at random (two 400-step episodes,
    the second ending on the level's last step), levels 1-2 pump energy to the flag (episodes that terminate, the last
    cut by the iteration's end). Each of their resets takes the car's initial state ours drew."""
    rng = np.random.default_rng(0)

    def act(raw, level):  # raw: the car's own (position, velocity)
        return int(rng.integers(3)) if level == 0 else (2 if raw[1] >= 0 else 0)

    def start_from(env, raw_start):
        env.reset()
        env.unwrapped.state = np.array(raw_start, dtype=np.float64)
        return np.array(env.unwrapped.state, dtype=np.float32)

    iterations = 3
    ours, starts, actions, offsets = _our_episodes("cchain-mountaincar", 1, iterations, act, lambda env, raw: raw)
    theirs = list(_authors_episodes("MountainCar-v0", start_from, actions, starts, offsets, iterations))
    ends = _assert_same_steps(ours, theirs, iterations, atol=2e-4)  # float32 ours, float64 theirs
    assert ends[:2] == [399, 799]  # level 0: two episodes at the cap, the second on the level's last step
    assert sum(step[3] for step in theirs[800:1600]) >= 3  # level 1: the pumping car reaches the flag


def _lander_hovers(s: np.ndarray) -> int:
    """Gymnasium's `heuristic` (lunar_lander.py) with its hover target held at 0.8: the lander stays aloft."""
    angle_todo = (np.clip(s[0] * 0.5 + s[2], -0.4, 0.4) - s[4]) * 0.5 - s[5]
    hover_todo = (0.8 - s[1]) * 0.5 - s[3] * 0.5
    if hover_todo > abs(angle_todo) and hover_todo > 0.05:
        return 2
    return 3 if angle_todo < -0.05 else (1 if angle_todo > 0.05 else 0)


def test_c_lunarlander_steps_as_the_authors_loop_across_level_switches_and_the_400_step_cut():
    """Ours beside the authors' loop on gymnasium's LunarLander-v3 (their LunarLander-v2), one seed, one iteration a
    level: level 0 acts at random (crashes), level 1 hovers (two 400-step episodes, the second ending on the level's
    last step, the boundary where a switch once leaked the old level), level 2 lands with gymnasium's heuristic. Each
    of their resets is seeded as ours was, or starts from the generator state ours reset from, so the two draw the
    same terrain and push."""
    pytest.importorskip("Box2D")
    from gymnasium.envs.box2d.lunar_lander import heuristic

    from envs.gymnasium_backend import ReplayedEpisode

    rng = np.random.default_rng(0)
    lander = None

    def act(raw, level):
        if level == 0:
            return int(rng.integers(4))
        return _lander_hovers(raw) if level == 1 else int(heuristic(lander, raw))

    def episode_start(env, raw):
        nonlocal lander
        sub_env = env.inner.vec.envs[0]
        assert isinstance(sub_env, ReplayedEpisode)
        lander = sub_env.unwrapped
        return sub_env.reset_kwargs["seed"], sub_env.generator_before_reset

    def start_from(env, start):
        seed, generator_state = start  # the first reset is seeded, the later ones go on from the generator's state
        if seed is None:
            env.unwrapped.np_random.bit_generator.state = generator_state
        return env.reset(seed=seed)[0]

    iterations = 3
    ours, starts, actions, offsets = _our_episodes("cchain-lunarlander", 1, iterations, act, episode_start)
    theirs = list(_authors_episodes("LunarLander-v3", start_from, actions, starts, offsets, iterations))
    ends = _assert_same_steps(ours, theirs, iterations, atol=1e-6)
    assert sum(step[3] for step in theirs[:800]) >= 3  # level 0: random actions crash
    assert [t for t in ends if 800 <= t < 1600] == [1199, 1599]  # level 1: the cap twice, on the level's last step
    assert sum(step[3] for step in theirs[1600:]) >= 2  # level 2: the heuristic lands (the lander comes to rest)
