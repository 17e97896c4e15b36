"""Torch-native classic control against gymnasium's own envs, stepped side by side from the same states."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from envs.errors import UserError
from envs.torch_classic import TASKS, DeviceEpisodeLog, ring_slots

NUM_ENVS = 16
# Wide boxes of states to jump to every 25 steps, so that the whole state space (and the termination rules) is compared.
STATE_BOXES = {
    "CartPole-v1": [(-2.4, 2.4), (-2.0, 2.0), (-0.21, 0.21), (-2.0, 2.0)],
    "Pendulum-v1": [(-np.pi, np.pi), (-8.0, 8.0)],
    "Acrobot-v1": [(-np.pi, np.pi), (-np.pi, np.pi), (-4 * np.pi, 4 * np.pi), (-9 * np.pi, 9 * np.pi)],
    "MountainCar-v0": [(-1.2, 0.6), (-0.07, 0.07)],
    "MountainCarContinuous-v0": [(-1.2, 0.6), (-0.07, 0.07)],
}


def _random_actions(space: gym.Space, generator: torch.Generator) -> torch.Tensor:
    if isinstance(space, gym.spaces.Discrete):
        return torch.randint(int(space.n), (NUM_ENVS,), generator=generator)
    low, high = float(space.low[0]) * 1.5, float(space.high[0]) * 1.5  # also out of bounds: the env must clip
    return low + (high - low) * torch.rand(NUM_ENVS, 1, generator=generator)


def _gym_step_from(reference: gym.Env, state: np.ndarray, action: torch.Tensor):
    """One gymnasium step of the unwrapped env started from `state` (float64 copy of ours)."""
    reference.unwrapped.state = state.astype(np.float64)
    reference.unwrapped.steps_beyond_terminated = None  # CartPole's "stepped after termination" flag: a fresh start
    if isinstance(reference.action_space, gym.spaces.Discrete):
        return reference.unwrapped.step(int(action))[:3]
    return reference.unwrapped.step(action.numpy().astype(np.float32))[:3]


@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_steps_match_gymnasium_from_identical_states(env_id):
    """300 steps × 16 envs from initial and from scattered states; ours in float32, gymnasium in float64,
    re-synchronised every step; observations agree to 1e-4, rewards to 1e-3 (relative), flags exactly."""
    env = envs.make(env_id, num_envs=NUM_ENVS, seed=3, backend="torch")
    reference = gym.make(env_id)
    reference.reset(seed=0)
    generator = torch.Generator().manual_seed(1)
    env.reset()
    compared_terminations = 0
    low, high = torch.tensor(STATE_BOXES[env_id]).T
    for t in range(300):
        if t % 25 == 0:
            env.state = low + (high - low) * torch.rand(NUM_ENVS, len(low), generator=generator)
        states = env.state.numpy().copy()
        actions = _random_actions(env.single_action_space, generator)
        step = env.step(actions)
        for i in range(NUM_ENVS):
            obs, reward, terminated = _gym_step_from(reference, states[i], actions[i])
            np.testing.assert_allclose(step.next_obs[i].numpy(), obs, rtol=1e-4, atol=1e-4)
            assert abs(float(step.reward[i]) - float(reward)) < 1e-3 * max(1.0, abs(float(reward)))
            assert bool(step.terminated[i]) == terminated
            compared_terminations += terminated
    if env_id != "Pendulum-v1":
        assert compared_terminations > 0  # the termination rule was exercised, not only the dynamics


def test_finished_envs_reset_in_the_same_step_and_return_the_true_final_observation():
    env = envs.make("torch:CartPole-v1", num_envs=NUM_ENVS, seed=0)
    obs = env.reset()
    seen_end = False
    for _ in range(100):
        step = env.step(torch.ones(NUM_ENVS, dtype=torch.long))  # always push right: episodes end fast
        done = step.terminated | step.truncated
        if done.any():
            seen_end = True
            assert (step.next_obs[done].abs()[:, [0, 2]] > torch.tensor([2.4, 0.2094])).any(dim=1).all()  # out of bounds
            assert (step.obs[done].abs() <= 0.05).all()  # fresh initial states
            assert torch.equal(step.obs[~done], step.next_obs[~done])
        obs = step.obs
    assert seen_end and obs.shape == (NUM_ENVS, 4)
    stats = env.drain_episode_stats()
    assert len(stats) > 0 and all(r == length for r, length in zip(stats.returns, stats.lengths))


def test_time_limit_truncates_without_terminating():
    env = envs.make("torch:Pendulum-v1", num_envs=3, seed=0)
    env.reset()
    for t in range(200):
        step = env.step(torch.zeros(3, 1))
        assert bool(step.truncated.any()) == (t == 199) and not step.terminated.any()
    assert env.drain_episode_stats().lengths == [200, 200, 200]


def test_same_seed_same_episodes_and_state_dict_round_trip():
    def rollout(env, steps):
        generator = torch.Generator().manual_seed(7)
        return torch.stack([env.step(torch.randint(3, (4,), generator=generator)).obs for _ in range(steps)])

    a, b = envs.make("torch:Acrobot-v1", num_envs=4, seed=5), envs.make("torch:Acrobot-v1", num_envs=4, seed=5)
    a.reset(), b.reset()
    assert torch.equal(rollout(a, 50), rollout(b, 50))
    saved = a.state_dict()
    after = rollout(a, 20)
    a.load_state_dict(saved)
    assert torch.equal(rollout(a, 20), after)


def test_device_episode_log_keeps_order_and_the_newest_when_full():
    log = DeviceEpisodeLog(capacity=3, device=torch.device("cpu"))
    log.record(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1, 2, 3]), torch.tensor([True, False, True]), end_step=10)
    log.record(torch.tensor([4.0, 5.0, 6.0]), torch.tensor([4, 5, 6]), torch.tensor([False, True, True]), end_step=20)
    stats = log.drain()
    assert stats.returns == [3.0, 5.0, 6.0] and stats.lengths == [3, 5, 6] and stats.end_steps == [10, 20, 20]
    assert stats.envs == [2, 1, 2]  # the sub-env each ended in
    assert len(log.drain()) == 0


def test_ring_slots_place_selected_rows_in_order_wrap_and_send_the_rest_to_scratch():
    selected = torch.tensor([True, False, True, True])
    assert ring_slots(selected, torch.tensor(2), capacity=3).tolist() == [2, 3, 0, 1]


def test_unknown_torch_id_is_a_one_line_error():
    with pytest.raises(UserError, match="did you mean 'CartPole-v1'"):
        envs.validate_env_id("torch:CartPol-v1")
