"""One env for a group of member seeds (envs.make(members=...)): member k's sub-envs are a one-seed env of its seed,
step for step, whatever the group; checkpoints cut per member; the evaluator scores each member as it would alone."""

from __future__ import annotations

import importlib.util
import types

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import assert_states_equal

import envs
from cleanrl_plus.evaluator import EVAL_SEED_OFFSET, Evaluator, make_envs
from cleanrl_plus.members import Members
from envs.base import EpisodeStats, member_seeds
from envs.continual import ContinualArgs
from envs.errors import UserError

SEEDS = (5, 12, 3)  # not evenly spaced: a group seeded from its first seed on would not pass for its members
N = 2  # sub-envs per member
SHORT_TASKS = ContinualArgs(steps_per_task=100, num_tasks=4)  # a member's 2 envs switch tasks every 50 steps

# id → (steps, env keywords); every one ends episodes within its steps under random actions
CASES = {
    "torch:CartPole-v1": (300, {}),
    "torch:Pendulum-v1": (300, {}),
    "CartPole-v1": (300, {}),
    "continual:obs-offset:torch:CartPole-v1": (300, {"continual": SHORT_TASKS}),
    "continual:cartpole-permute": (300, {"continual": SHORT_TASKS}),
    "continual:gravity:CartPole-v1": (300, {"continual": SHORT_TASKS}),  # simulator edits, per member's own factors
    "MinAtar/Breakout-v1": (300, {}),
    "continual:minatar3": (200, {"continual": SHORT_TASKS}),  # a game sequence, each sub-env's games seeded apart
    "dmc:cartpole-swingup": (300, {"action_repeat": 4}),  # 250 agent steps per episode
    "ALE/SpaceInvaders-v5": (300, {}),  # ale-py: lost lives end learning episodes
    "ALE/Breakout-v5": (300, {"backend": "envpool"}),  # one pool per member
    "warp:Hopper-v5": (100, {}),
    "continual:friction:warp:Hopper-v5": (80, {"continual": SHORT_TASKS}),  # per-world physics, per member's factors
    "continual:cchain-lunarlander": (300, {"continual": SHORT_TASKS}),  # Box2D: restored by replaying each episode
}
NEEDS = {
    "MinAtar": "minatar",
    "continual:minatar": "minatar",
    "dmc:": "dm_control",
    "ALE/": "ale_py",
    "warp:": "mujoco_warp",
    "continual:cchain-lunarlander": "Box2D",
}
RESETS_WHERE = ("torch:CartPole", "CartPole-v1", "continual:obs-offset", "continual:cartpole-permute", "MinAtar")  # LEAST's


def case(env_id: str):
    modules = [module for prefix, module in NEEDS.items() if env_id.startswith(prefix)]
    modules += ["envpool"] if CASES.get(env_id, (0, {}))[1].get("backend") == "envpool" else []
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    return pytest.param(env_id, marks=pytest.mark.skipif(bool(missing), reason=f"{missing} not installed"))


def actions_for(space: gym.Space, generator: torch.Generator) -> torch.Tensor:
    """N random actions from a member's own stream (so a one-seed env can be given the same)."""
    if isinstance(space, gym.spaces.Discrete):
        return torch.randint(int(space.n), (N,), generator=generator)
    low, high = (torch.as_tensor(bound, dtype=torch.float32) for bound in (space.low, space.high))
    return low + (high - low) * torch.rand(N, *space.shape, generator=generator)


def members_of(stats: EpisodeStats, count: int) -> list[EpisodeStats]:
    """Each member's episodes, by the sub-env they ran in, with member-relative sub-env indices."""
    members = [EpisodeStats() for _ in range(count)]
    for i, env in enumerate(stats.envs):
        member = members[env // N]
        member.returns.append(stats.returns[i])
        member.lengths.append(stats.lengths[i])
        member.end_steps.append(stats.end_steps[i])
        member.envs.append(env % N)
        if stats.task_ids:
            member.task_ids.append(stats.task_ids[i])
    return members


def assert_steps_equal(group_step, single_step, rows: slice, where: str) -> None:
    for name, group_value, single_value in zip(group_step._fields, group_step, single_step):
        assert torch.equal(group_value[rows], single_value), f"{where}: {name} differs"


def drive(group, singles, steps: int, generators: list[torch.Generator], reset_where: bool = False) -> int:
    """Step the group and each member's one-seed env with the same per-member random actions, comparing every result
    (and, every 37 steps, an early stop of random sub-envs); returns how many episodes ended."""
    space, ended = group.single_action_space, 0
    for t in range(steps):
        actions = [actions_for(space, g) for g in generators]
        step = group.step(torch.cat(actions))
        for k, (single, member_actions) in enumerate(zip(singles, actions)):
            assert_steps_equal(step, single.step(member_actions), group.member_rows(k), f"member {k}, step {t}")
        ended += int((step.terminated | step.truncated).sum())
        if reset_where and t % 37 == 36:
            masks = [torch.rand(N, generator=g) < 0.5 for g in generators]
            fresh = group.reset_where(torch.cat(masks), step.obs)
            for k, (single, mask) in enumerate(zip(singles, masks)):
                rows = group.member_rows(k)
                assert torch.equal(fresh[rows], single.reset_where(mask, step.obs[rows])), f"member {k} reset_where"
    return ended


def group_and_singles(env_id: str, seeds: tuple[int, ...] = SEEDS, **env_kwargs):
    group = envs.make(env_id, N, members=seeds, **env_kwargs)
    singles = [envs.make(env_id, N, seed=seed, **env_kwargs) for seed in seeds]
    obs = group.reset(seed=seeds)
    for k, single in enumerate(singles):
        assert torch.equal(obs[group.member_rows(k)], single.reset()), f"member {k}: initial observations differ"
    return group, singles


@pytest.mark.parametrize("env_id", [case(env_id) for env_id in CASES])
def test_each_member_steps_as_a_one_seed_env_of_its_seed(env_id):
    """Observations, rewards, flags, next observations, early stops and the episodes each member finished (split by
    sub-env: returns, lengths, its own end steps, tasks) equal those of a one-seed env of the member's seed."""
    steps, env_kwargs = CASES[env_id]
    group, singles = group_and_singles(env_id, **env_kwargs)
    assert (group.members, group.envs_per_member, group.num_envs) == (len(SEEDS), N, len(SEEDS) * N)
    generators = [torch.Generator().manual_seed(1000 + seed) for seed in SEEDS]
    ended = drive(group, singles, steps, generators, reset_where=env_id.startswith(RESETS_WHERE))
    assert ended > 0, "no episode ended: the test would not see the resets"
    assert group.env_steps == singles[0].env_steps == steps * N  # a member's count, not the group's
    for k, (member, single) in enumerate(zip(members_of(group.drain_episode_stats(), len(SEEDS)), singles)):
        expected = single.drain_episode_stats()
        assert len(expected) > 0 or env_id.startswith("ALE/"), f"member {k} finished no episode"  # a lost life is not a game
        assert member == expected, f"member {k}'s episodes differ"
    if hasattr(group, "frames"):
        assert group.frames == singles[0].frames
    group.close()


def test_a_group_of_one_is_the_plain_env():
    for env_id in ("torch:CartPole-v1", "CartPole-v1", "continual:obs-offset:torch:CartPole-v1"):
        plain, group = envs.make(env_id, N, seed=4), envs.make(env_id, N, seed=123, members=(4,))
        assert torch.equal(plain.reset(), group.reset(seed=4)) and group.members == 1
        generators = [torch.Generator().manual_seed(0)]
        drive(group, [plain], 60, generators)
        assert_states_equal(group.state_dict(), plain.state_dict(), env_id)
        assert group.drain_episode_stats() == plain.drain_episode_stats()


@pytest.mark.parametrize("env_id", ["torch:CartPole-v1", "CartPole-v1"])
def test_a_members_streams_do_not_depend_on_the_other_members(env_id):
    """Seed 7 alone, after a 3 and before 11 and 13: the same observations for the same actions."""
    space, seen = envs.make(env_id, N).single_action_space, []
    for seeds in ((7,), (3, 7), (7, 11, 13)):
        group = envs.make(env_id, N, members=seeds)
        rows = group.member_rows(seeds.index(7))
        observations = [group.reset()[rows]]
        generators = [torch.Generator().manual_seed(1000 + seed) for seed in seeds]
        for _ in range(100):
            observations.append(group.step(torch.cat([actions_for(space, g) for g in generators])).obs[rows])
        seen.append(torch.stack(observations))
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[0], seen[2])


def test_reset_takes_one_seed_per_member():
    group = envs.make("torch:CartPole-v1", N, members=(1, 2))
    assert torch.equal(group.reset(seed=(8, 9))[N:], envs.make("torch:CartPole-v1", N, seed=9).reset())
    assert torch.equal(group.reset(), group.reset(seed=(1, 2)))  # None: the members' own seeds
    for wrong in (8, (8,), (8, 9, 10)):
        with pytest.raises(UserError, match="one seed per member"):
            group.reset(seed=wrong)
    assert torch.equal(envs.make("CartPole-v1", N).reset(seed=(6,)), envs.make("CartPole-v1", N).reset(seed=6))
    assert member_seeds(3) == (3,) and member_seeds([3, np.int64(4)]) == (3, 4)
    with pytest.raises(UserError, match="at least one member seed"):
        envs.make("torch:CartPole-v1", N, members=())


@pytest.mark.parametrize("env_id", ["continual:obs-offset:torch:CartPole-v1", "continual:cartpole-permute"])
def test_each_member_draws_the_schedule_of_its_own_seed(env_id):
    group = envs.make(env_id, N, members=SEEDS, continual=SHORT_TASKS)
    described = [group.describe(member=k) for k in range(len(SEEDS))]
    assert described == [envs.make(env_id, N, seed=seed, continual=SHORT_TASKS).describe() for seed in SEEDS]
    assert described[0] != described[1] and group.describe() == described[0]
    fixed = ContinualArgs(steps_per_task=100, num_tasks=4, schedule_seed=3)  # a set schedule seed: every member's
    group = envs.make(env_id, N, members=SEEDS, continual=fixed)
    assert [group.describe(member=k) for k in range(len(SEEDS))] == [
        envs.make(env_id, 1, seed=3, continual=fixed).describe()
    ] * 3


# --- checkpoints --------------------------------------------------------------------------------------------------
CHECKPOINTED = [
    "torch:CartPole-v1",
    "torch:Pendulum-v1",
    "CartPole-v1",
    "continual:obs-offset:torch:CartPole-v1",
    "continual:gravity:CartPole-v1",
    "MinAtar/Breakout-v1",
    "dmc:cartpole-swingup",
    "warp:Hopper-v5",
    "continual:cchain-lunarlander",
]


@pytest.mark.parametrize("env_id", [case(env_id) for env_id in CHECKPOINTED])
def test_member_states_are_one_seed_states_and_restore_the_group(env_id):
    steps, env_kwargs = CASES[env_id]
    group, singles = group_and_singles(env_id, **env_kwargs)
    generators = [torch.Generator().manual_seed(1000 + seed) for seed in SEEDS]
    drive(group, singles, min(steps, 60), generators)
    states = [group.member_state_dict(k) for k in range(len(SEEDS))]
    for k, (state, single) in enumerate(zip(states, singles)):
        assert_states_equal(state, single.state_dict(), f"member {k}'s state")
    assert_states_equal(group.state_dict(), {"members": states}, "the group's checkpoint")
    # restored into envs of other seeds (continual: the same, as schedules are drawn from them, not checkpointed)
    other = SEEDS if env_id.startswith("continual:") else tuple(seed + 1 for seed in SEEDS)
    alone = [envs.make(env_id, N, seed=seed, **env_kwargs) for seed in other]  # a member's state restores its run
    for env, state in zip(alone, states):
        env.load_state_dict(state)
    restored = envs.make(env_id, N, members=other, **env_kwargs)  # a group from its members' states
    restored.load_member_state_dicts(states)
    reloaded = envs.make(env_id, N, members=other, **env_kwargs)  # a group from its own checkpoint
    reloaded.load_state_dict(group.state_dict())
    for t in range(40):  # each goes on as the original group
        actions = [actions_for(group.single_action_space, g) for g in generators]
        step = group.step(torch.cat(actions))
        assert_steps_equal(restored.step(torch.cat(actions)), step, slice(None), f"restored group, step {t}")
        assert_steps_equal(reloaded.step(torch.cat(actions)), step, slice(None), f"reloaded group, step {t}")
        for k, (env, member_actions) in enumerate(zip(alone, actions)):
            assert_steps_equal(step, env.step(member_actions), group.member_rows(k), f"member {k} restored alone, step {t}")


def test_state_dict_rejects_a_group_of_another_size():
    states = [envs.make("torch:CartPole-v1", N, seed=seed).state_dict() for seed in (1, 2)]
    with pytest.raises(UserError, match="2 member states for a group of 3"):
        envs.make("torch:CartPole-v1", N, members=(1, 2, 3)).load_member_state_dicts(states)


# --- evaluation -----------------------------------------------------------------------------------------------------
def epsilon_greedy(evaluator: Evaluator):
    """CartPole's lean-following policy, random with probability 0.3, from each member's own evaluation generator (the
    `members` the evaluator passes with the (members, episodes, ...) observations)."""

    def policy(obs: torch.Tensor, members: Members) -> torch.Tensor:
        assert members is evaluator.rng and obs.shape[0] == len(evaluator.seeds)
        explore = members.rand(obs.shape[1]) < 0.3
        random_action = members.randint(2, obs.shape[1])
        return torch.where(explore, random_action, (obs[..., 2] > 0).long())

    return policy


@pytest.mark.parametrize("env_id", ["CartPole-v1", "continual:obs-offset:torch:CartPole-v1"])
def test_a_group_evaluator_scores_each_member_as_its_one_seed_evaluator(env_id):
    kwargs = {"continual": SHORT_TASKS} if env_id.startswith("continual:") else {}
    group = Evaluator(env_id, 4, seed=0, device=torch.device("cpu"), members=SEEDS, **kwargs)
    assert group.seeds == tuple(seed + EVAL_SEED_OFFSET for seed in SEEDS)
    returns = group(epsilon_greedy(group))
    assert returns.shape == (len(SEEDS), 4)
    for k, seed in enumerate(SEEDS):
        alone = Evaluator(env_id, 4, seed=seed, device=torch.device("cpu"), **kwargs)
        np.testing.assert_array_equal(returns[k], alone(epsilon_greedy(alone))[0])
    np.testing.assert_array_equal(group(epsilon_greedy(group)), returns)  # every evaluation draws the same numbers
    assert len({tuple(row) for row in returns}) == len(SEEDS)
    if kwargs:  # evaluated on the schedules the members train on, not ones drawn from the evaluation seeds
        training = envs.make(env_id, N, members=SEEDS, **kwargs)
        assert [group.env.describe(member=k) for k in range(3)] == [training.describe(member=k) for k in range(3)]


def test_members_rng_is_fresh_per_member_generators_from_the_evaluation_seeds():
    evaluator = Evaluator("torch:CartPole-v1", 2, seed=0, device=torch.device("cpu"), members=(5, 7))
    first, second = evaluator.members_rng(), evaluator.members_rng()
    assert first.seeds == (5 + EVAL_SEED_OFFSET, 7 + EVAL_SEED_OFFSET)
    draws = first.rand(3)
    assert torch.equal(draws, second.rand(3))
    assert torch.equal(draws[1], torch.rand(3, generator=torch.Generator().manual_seed(7 + EVAL_SEED_OFFSET)))


def test_make_envs_builds_the_group_of_seeds_or_the_one_seed():
    args = types.SimpleNamespace(
        env_id="torch:CartPole-v1", num_envs=2, eval_episodes=3, seed=1, seeds=(5, 7), continual=ContinualArgs()
    )
    env, evaluator = make_envs(args, torch.device("cpu"))
    assert (env.members, env.envs_per_member, env.seeds) == (2, 2, (5, 7))
    assert evaluator.seeds == (5 + EVAL_SEED_OFFSET, 7 + EVAL_SEED_OFFSET) and evaluator.env.num_envs == 6
    env, evaluator = make_envs(types.SimpleNamespace(**(vars(args) | {"seeds": ()})), torch.device("cpu"))
    assert env.seeds == (1,) and evaluator.seeds == (1 + EVAL_SEED_OFFSET,)
