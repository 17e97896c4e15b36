"""Every backend's reward bookkeeping against the environment underneath it, stepped by hand with the same actions:
the reward of each agent step (dm-control's action repeat sums its control steps; Atari's frame skip sums 4 frames and
training clips the sum to its sign), and the episode returns `drain_episode_stats` reports under autoreset (Atari: the
whole game's raw score across lost lives; continual reward shifts: the return the agent was paid)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from envs.continual import ContinualArgs

BACKENDS = [
    "atari",
    pytest.param(
        "envpool",
        marks=pytest.mark.skipif(__import__("importlib").util.find_spec("envpool") is None, reason="envpool not installed"),
    ),
]


def test_dmc_action_repeat_pays_the_sum_of_its_control_steps_rewards():
    """1000 control steps per episode in repeats of 3: 333 agent steps of 3 and a last one of 1, twice in a row."""
    seed, repeat = 5, 3
    env = envs.make("dmc:cheetah-run", num_envs=2, seed=seed, action_repeat=repeat)
    env.reset()
    from dm_control import suite  # after the backend, which keeps dm-control quiet without a display

    by_hand = [suite.load("cheetah", "run", task_kwargs={"random": seed + i}) for i in range(2)]
    for sub_env in by_hand:
        sub_env.reset()
    spec = by_hand[0].action_spec()
    generator = torch.Generator().manual_seed(0)
    returns, ended = [[0.0], [0.0]], [[], []]
    for _ in range(2 * 334):
        actions = torch.rand(2, 6, generator=generator) * 2 - 1
        step = env.step(actions)
        for i, sub_env in enumerate(by_hand):
            scaled = spec.minimum + (actions[i].double().numpy() + 1) * 0.5 * (spec.maximum - spec.minimum)
            paid = 0.0
            for _ in range(repeat):
                time_step = sub_env.step(scaled)
                paid += time_step.reward
                if time_step.last():
                    break
            assert step.reward[i].item() == pytest.approx(paid, rel=1e-5, abs=1e-6)
            returns[i][-1] += paid
            if time_step.last():
                assert bool(step.truncated[i]) and not bool(step.terminated[i])
                ended[i].append(returns[i][-1])
                returns[i].append(0.0)
                sub_env.reset()
    stats = env.drain_episode_stats()
    assert stats.lengths == [334, 334, 334, 334] and env.frames == 2 * 2 * 1000
    assert stats.returns == pytest.approx([ended[0][0], ended[1][0], ended[0][1], ended[1][1]], rel=1e-5)
    assert min(stats.returns) > 0  # cheetah-run pays for running: a sum of nothing would be caught too


@pytest.mark.parametrize("training", [True, False])
def test_ale_frame_skip_and_clipping_match_the_emulator_stepped_frame_by_frame(training):
    """SpaceInvaders pays 5–30 points per alien and has 3 lives: a training env pays sign(sum of 4 frames' points) and
    ends a learning episode at each lost life; either env reports the whole game's raw score once it is over."""
    env = envs.make("ALE/SpaceInvaders-v5", num_envs=1, seed=0, training=training)
    env.reset()
    game = env.vec.envs[0].unwrapped
    emulator = gym.make("ALE/SpaceInvaders-v5", frameskip=1)
    emulator.reset(seed=1)
    emulator.unwrapped.ale.restoreState(game.ale.cloneState(include_rng=True))  # after the no-op starts; RNG of sticky actions
    generator = torch.Generator().manual_seed(0)
    score, steps, lives_lost = 0.0, 0, 0
    while True:
        action = torch.randint(0, 6, (1,), generator=generator)
        step = env.step(action)
        points, over = 0.0, False
        lives = emulator.unwrapped.ale.lives()
        for _ in range(4):
            _, reward, terminated, truncated, _ = emulator.step(int(action))
            points, over = points + reward, terminated or truncated
            if over:
                break
        score, steps = score + points, steps + 1
        assert step.reward.item() == (np.sign(points) if training else points), steps
        life_lost = emulator.unwrapped.ale.lives() < lives and not over
        assert bool(step.terminated | step.truncated) == (over or (training and life_lost)), steps
        if training and life_lost:  # the next learning episode starts with one no-op step of the same game
            lives_lost += 1
            for _ in range(4):
                _, reward, terminated, truncated, _ = emulator.step(0)
                score += reward
        stats = env.drain_episode_stats()
        if over:
            break
        assert not len(stats)
    assert stats.returns == [score] and stats.lengths == [steps] and env.frames == 4 * steps
    assert score > steps // 100 and (lives_lost == 2 if training else lives_lost == 0)


def test_envpool_clipping_and_full_game_score_match_the_same_pool_unclipped_stepped_by_hand():
    pytest.importorskip("envpool")
    import envpool

    env = envs.make("ALE/SpaceInvaders-v5", num_envs=1, seed=0, backend="envpool")
    env.reset()
    raw = envpool.make(
        "SpaceInvaders-v5", env_type="gymnasium", num_envs=1, seed=0, **(env._settings | {"reward_clip": False})
    )
    raw.reset()
    generator = torch.Generator().manual_seed(0)
    score, steps, learning_episodes = 0.0, 0, 0
    while True:
        action = torch.randint(0, 6, (1,), generator=generator)
        step = env.step(action)
        _, points, terminated, truncated, info = raw.step(action.numpy())
        score, steps = score + float(points[0]), steps + 1
        assert step.reward.item() == np.sign(points[0]), steps
        if terminated[0] or truncated[0]:  # as the backend does: the finished env's reset step at once
            learning_episodes += 1
            _, reset_points, *_ = raw.step(np.zeros(1, dtype=np.int64), env_id=np.array([0]))
            score += float(reset_points[0])
        stats = env.drain_episode_stats()
        if info["terminated"][0] or truncated[0]:
            break
        assert not len(stats)
    assert stats.returns == [score] and stats.lengths == [steps] and learning_episodes == 3 and score > 0


def test_gymnasium_episode_returns_under_autoreset_are_the_sums_of_each_episode_rewards():
    """Three CartPoles that end at different steps: each episode's return and length, in the order they ended."""
    seed = 11
    env = envs.make("CartPole-v1", num_envs=3, seed=seed)
    env.reset()
    by_hand = [gym.make("CartPole-v1") for _ in range(3)]
    for i, sub_env in enumerate(by_hand):
        sub_env.reset(seed=seed + i)
    generator = torch.Generator().manual_seed(0)
    running, expected = [[0.0, 0] for _ in by_hand], []
    for t in range(400):
        actions = torch.randint(0, 2, (3,), generator=generator)
        step = env.step(actions)
        for i, sub_env in enumerate(by_hand):
            _, reward, terminated, truncated, _ = sub_env.step(int(actions[i]))
            assert step.reward[i].item() == reward and bool(step.terminated[i]) == terminated
            running[i][0] += reward
            running[i][1] += 1
            if terminated or truncated:
                expected.append((running[i][0], running[i][1], 3 * (t + 1)))
                running[i] = [0.0, 0]
                sub_env.reset()  # no seed: its generator goes on, as the vector env's autoreset does
    stats = env.drain_episode_stats()
    assert len(expected) > 10 and list(zip(stats.returns, stats.lengths, stats.end_steps)) == expected


def test_torch_pendulum_episode_returns_are_gymnasium_pendulum_rewards_summed():
    """torch:Pendulum-v1 (device tensors, float32) against gymnasium's Pendulum stepped from the same state each step:
    rewards per step and the returns of two episodes per env (truncated at 200 steps, reset at once)."""
    env = envs.make("torch:Pendulum-v1", num_envs=2, seed=3)
    env.reset()
    by_hand = [gym.make("Pendulum-v1").unwrapped for _ in range(2)]
    for sub_env in by_hand:
        sub_env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    running, expected = [0.0, 0.0], []
    for t in range(400):
        for i, sub_env in enumerate(by_hand):  # float32 and float64 trajectories drift apart: the same state every step
            sub_env.state = env.state[i].double().numpy().copy()
        actions = torch.rand(2, 1, generator=generator) * 4 - 2
        step = env.step(actions)
        for i, sub_env in enumerate(by_hand):
            _, reward, *_ = sub_env.step(actions[i].numpy())
            assert step.reward[i].item() == pytest.approx(reward, rel=1e-4, abs=1e-4)
            running[i] += reward
        if t % 200 == 199:
            assert bool(step.truncated.all())
            expected += running
            running = [0.0, 0.0]
    stats = env.drain_episode_stats()
    assert stats.lengths == [200] * 4 and stats.returns == pytest.approx(expected, rel=1e-4)


def test_a_continual_reward_shift_pays_and_reports_each_episode_in_its_own_task():
    """reward-flip on CartPole: odd tasks pay −1 per step. Tasks switch every 60 steps, each sub-env at its next episode:
    every step pays the plain reward times (−1)^its task, and each episode's reported return is what it paid."""
    seed = 2
    env = envs.make(
        "continual:reward-flip:CartPole-v1", num_envs=2, seed=seed, continual=ContinualArgs(steps_per_task=60, num_tasks=3)
    )
    env.reset(seed=seed)
    by_hand = [gym.make("CartPole-v1") for _ in range(2)]
    for i, sub_env in enumerate(by_hand):
        sub_env.reset(seed=seed + i)
    generator = torch.Generator().manual_seed(0)
    running, expected = [0.0, 0.0], []
    for _ in range(200):
        tasks = env.task_id.tolist()  # each sub-env's task for this step
        actions = torch.randint(0, 2, (2,), generator=generator)
        step = env.step(actions)
        for i, sub_env in enumerate(by_hand):
            _, reward, terminated, truncated, _ = sub_env.step(int(actions[i]))
            paid = reward * (-1) ** tasks[i]
            assert step.reward[i].item() == paid
            running[i] += paid
            if terminated or truncated:
                expected.append((running[i], tasks[i]))
                running[i] = 0.0
                sub_env.reset()
    stats = env.drain_episode_stats()
    assert list(zip(stats.returns, stats.task_ids)) == expected
    assert {task for _, task in expected} == {0, 1, 2}
