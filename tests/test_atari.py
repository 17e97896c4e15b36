"""Atari backends (ale-py, envpool) and the frame-deduplicating replay."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import envs
from cleanrl_plus.frame_replay import FrameStackReplay
from cleanrl_plus.members import Members
from cleanrl_plus.transition import Transition
from envs.errors import UserError
from plasticity.swd import SWDArgs, SWDSampler

BACKENDS = [
    "atari",
    pytest.param(
        "envpool", marks=pytest.mark.skipif(importlib.util.find_spec("envpool") is None, reason="envpool not installed")
    ),
]


# ---- frame-stack replay: the stack rebuilt from indices is the stack that was stored ---------------------------
class FakeFrameStream:
    """num_envs streams of K-frame stacks; each frame is unique; episodes end on a fixed schedule; resets repeat."""

    def __init__(self, num_envs: int, stack: int, episode_lengths: list[list[int]], first_frame: int = 0) -> None:
        self.num_envs, self.stack, self.lengths = num_envs, stack, [list(lengths) for lengths in episode_lengths]
        self.counter, self.t = first_frame, [0] * num_envs
        self.obs = torch.stack([self._reset_stack() for _ in range(num_envs)])

    def _frame(self) -> torch.Tensor:
        self.counter += 1
        return torch.full((3, 2), self.counter % 256, dtype=torch.uint8) + torch.tensor(
            [[0, 1], [2, 3], [4, 5]], dtype=torch.uint8
        ) * (self.counter // 256)

    def _reset_stack(self) -> torch.Tensor:
        return self._frame().expand(self.stack, 3, 2).clone()

    def step(self):
        next_obs = torch.cat([self.obs[:, 1:], torch.stack([self._frame() for _ in range(self.num_envs)])[:, None]], dim=1)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        truncated = torch.zeros(self.num_envs, dtype=torch.bool)
        obs = next_obs.clone()
        for i in range(self.num_envs):
            self.t[i] += 1
            if self.lengths[i] and self.t[i] == self.lengths[i][0]:
                self.lengths[i].pop(0)
                self.t[i] = 0
                (terminated if len(self.lengths[i]) % 2 else truncated)[i] = True
                obs[i] = self._reset_stack()
        return next_obs, terminated, truncated, obs


def _fill_and_check(replay: FrameStackReplay, streams: list[FakeFrameStream], steps: int, stored: dict | None = None) -> dict:
    """Each member's stream into the replay (members, num_envs, ...), then every member's stored transitions read back."""
    stored = {} if stored is None else stored
    for _ in range(steps):
        obs = torch.stack([stream.obs for stream in streams])
        next_obs, terminated, truncated, new_obs = (torch.stack(x) for x in zip(*(stream.step() for stream in streams)))
        for stream, member_obs in zip(streams, new_obs):
            stream.obs = member_obs
        stamp, n = replay.num_inserted, streams[0].num_envs
        actions = torch.arange(stamp, stamp + n).expand(len(streams), n)
        reward = actions.float()
        replay.add(
            Transition(obs=obs, action=actions, reward=reward, terminated=terminated, truncated=truncated, next_obs=next_obs)
        )
        for k in range(len(streams)):
            for i in range(n):
                stored[k, stamp + i] = (obs[k, i].clone(), next_obs[k, i].clone(), bool(terminated[k, i]))
    slots = torch.arange(replay.size).expand(len(streams), replay.size)
    obs, next_obs = replay._read_observations(slots)
    for k in range(len(streams)):
        for slot in range(replay.size):
            stamp = int(replay.insertion_step[k, slot])
            expected_obs, expected_next, expected_terminal = stored[k, stamp]
            assert torch.equal(obs[k, slot], expected_obs), f"obs of member {k}'s transition {stamp} (slot {slot})"
            assert torch.equal(next_obs[k, slot], expected_next), f"next_obs of member {k}'s transition {stamp} (slot {slot})"
            assert bool(replay.terminated[k, slot]) == expected_terminal and int(replay.actions[k, slot]) == stamp
    return stored


@pytest.mark.parametrize("num_envs,members", [(1, 1), (3, 1), (3, 2)])
def test_frame_stack_round_trip_across_episodes_and_wrap_around(num_envs, members):
    # episodes of 1, 2, 3, 5, … steps (shorter and longer than the stack), ending by termination and truncation,
    # in a buffer of 12 transitions per stream filled 4 times over; a second member's episodes end elsewhere
    lengths = [[1, 2, 3, 5, 1, 1, 7, 2, 4, 9, 3, 1, 6] * 2 for _ in range(num_envs)]
    lengths[-1] = lengths[-1][3:]
    replay = FrameStackReplay(12 * num_envs, (4, 3, 2), (), Members(tuple(range(members))), num_envs=num_envs)
    streams = [FakeFrameStream(num_envs, 4, [row[k:] for row in lengths], first_frame=100 * k) for k in range(members)]
    stored = {}
    for steps in (10, 30, 1, 1, 1, 1, 1, 1, 4):  # checked after each chunk: every oldest-transition phase of the ring
        _fill_and_check(replay, streams, steps, stored)
    assert replay.size == replay.capacity and replay.num_inserted == 50 * num_envs
    batch = replay.sample(64)  # the sampled batch goes through the same reconstruction
    assert batch.obs.shape == (members, 64, 4, 3, 2) and batch.next_obs.shape == (members, 64, 4, 3, 2)


def test_frame_stack_replay_state_dict_round_trip_and_swd_sampling():
    swd = SWDSampler(SWDArgs(enabled=True, decay_steps=4), 2)
    replay = FrameStackReplay(10, (4, 3, 2), (), Members((0,)), num_envs=2, sampler=swd)
    stream = FakeFrameStream(2, 4, [[3, 1, 4, 2, 6], [2, 5, 1, 3]])
    _fill_and_check(replay, [stream], 13)
    copy = FrameStackReplay(10, (4, 3, 2), (), Members((0,)), num_envs=2)
    copy.load_state_dict(replay.state_dict())
    slots = torch.arange(10)[None]
    for a, b in zip(replay._read_observations(slots), copy._read_observations(slots)):
        assert torch.equal(a, b)
    ages = replay.age(replay.sample(4000)).float()
    assert ages.max() < 10 and ages.mean() < 4.5  # SWD favours young transitions (uniform would give 4.5)
    # the copy continues identically
    no, stack = torch.zeros(1, 2, dtype=torch.bool), stream.obs[None]
    step = Transition(obs=stack, action=no.long(), reward=torch.zeros(1, 2), terminated=no, truncated=no, next_obs=stack)
    for target in (replay, copy):
        target.add(step)
    for a, b in zip(replay._read_observations(slots), copy._read_observations(slots)):
        assert torch.equal(a, b)


def test_frame_stack_replay_takes_one_step_of_every_env_at_once():
    replay = FrameStackReplay(8, (4, 3, 2), (), Members((0,)), num_envs=2)
    stack, no = torch.zeros(1, 1, 4, 3, 2, dtype=torch.uint8), torch.zeros(1, 1, dtype=torch.bool)
    one_env = Transition(obs=stack, action=no.long(), reward=torch.zeros(1, 1), terminated=no, truncated=no, next_obs=stack)
    with pytest.raises(ValueError, match="one step of all 2 envs at a time, got 1"):
        replay.add(one_env)


@pytest.mark.parametrize("backend", BACKENDS)
def test_real_atari_frames_round_trip_through_the_replay(backend):
    """Random play in Breakout loses lives (training episodes end) and wraps a 64-transition-per-env buffer."""
    env = envs.make("ALE/Breakout-v5", num_envs=2, seed=3, backend=backend)
    replay = FrameStackReplay(128, (4, 84, 84), (), Members((0,)), num_envs=2)
    generator = torch.Generator().manual_seed(0)
    obs, stored, ends = env.reset(), {}, 0
    for _ in range(300):
        step = env.step(torch.randint(0, 4, (2,), generator=generator))
        stamp = replay.num_inserted
        one = lambda x: x[None]  # one member
        replay.add(
            Transition(
                obs=one(obs),
                action=torch.zeros(1, 2, dtype=torch.int64),
                reward=one(step.reward),
                terminated=one(step.terminated),
                truncated=one(step.truncated),
                next_obs=one(step.next_obs),
            )
        )
        stored.update({stamp + i: (obs[i], step.next_obs[i]) for i in range(2)})
        ends += int((step.terminated | step.truncated).sum())
        obs = step.obs
    assert ends >= 2 and replay.num_inserted > replay.capacity
    rebuilt_obs, rebuilt_next = replay._read_observations(torch.arange(128)[None])
    for slot in range(128):
        expected_obs, expected_next = stored[int(replay.insertion_step[0, slot])]
        assert torch.equal(rebuilt_obs[0, slot], expected_obs) and torch.equal(rebuilt_next[0, slot], expected_next)


def test_a_restored_atari_env_continues_exactly_as_the_one_it_was_saved_from(tmp_path):
    """Mid-game state through a checkpoint file: frames, rewards and episode ends of the next 200 steps (life losses and
    sticky actions among them) equal the uninterrupted env's. A pickled ale-py env alone restarts its emulator's RNG."""
    env = envs.make("ALE/Breakout-v5", num_envs=2, seed=3, backend="atari")
    generator = torch.Generator().manual_seed(0)
    env.reset()
    for _ in range(40):
        env.step(torch.randint(0, 4, (2,), generator=generator))
    torch.save(env.state_dict(), tmp_path / "env.pt")
    actions = torch.randint(0, 4, (200, 2), generator=generator)
    straight = [env.step(a) for a in actions]
    restored = envs.make("ALE/Breakout-v5", num_envs=2, seed=99, backend="atari")
    restored.reset()
    restored.load_state_dict(torch.load(tmp_path / "env.pt", weights_only=False))
    ends = 0
    for a, expected in zip(actions, straight):
        step = restored.step(a)
        for field in ("obs", "reward", "terminated", "truncated", "next_obs"):
            assert torch.equal(getattr(step, field), getattr(expected, field)), field
        ends += int((step.terminated | step.truncated).sum())
    assert ends >= 1


# ---- the backends: preprocessing, life loss, unclipped scores ------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_training_clips_rewards_and_ends_episodes_on_life_loss_but_reports_full_unclipped_games(backend):
    """SpaceInvaders pays 5–30 points per alien: the reported game score must be the raw one over all 3 lives."""
    env = envs.make("ALE/SpaceInvaders-v5", num_envs=1, seed=0, backend=backend)
    obs = env.reset()
    assert obs.shape == (1, 4, 84, 84) and obs.dtype == torch.uint8 and env.frame_stack == 4
    generator = torch.Generator().manual_seed(0)
    clipped_sum, learning_episodes, steps = 0.0, 0, 0
    while not len(stats := env.drain_episode_stats()):
        step = env.step(torch.randint(0, 6, (1,), generator=generator))
        assert step.reward.item() in (-1.0, 0.0, 1.0)
        clipped_sum += step.reward.item()
        learning_episodes += int(step.terminated | step.truncated)
        steps += 1
    assert learning_episodes == 3, "every lost life (3 in SpaceInvaders) ends a learning episode"
    assert stats.lengths == [steps] and env.frames == 4 * steps
    assert stats.returns[0] > clipped_sum > 0 and stats.returns[0] % 5 == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_evaluation_env_plays_full_games_with_raw_rewards(backend):
    env = envs.make("ALE/SpaceInvaders-v5", num_envs=1, seed=0, backend=backend, training=False)
    env.reset()
    generator = torch.Generator().manual_seed(0)
    total, steps, rewards = 0.0, 0, set()
    while True:
        step = env.step(torch.randint(0, 6, (1,), generator=generator))
        total, steps = total + step.reward.item(), steps + 1
        rewards.add(step.reward.item())
        if bool(step.terminated | step.truncated):
            break
    stats = env.drain_episode_stats()
    assert stats.returns == [total] and stats.lengths == [steps]
    assert max(rewards) > 1 and steps > 200  # raw points, and one episode spans all lives


def test_unknown_atari_id_suggests_the_closest():
    with pytest.raises(UserError, match="unknown env id 'ALE/Breakot-v5' — did you mean 'ALE/Breakout-v5'"):
        envs.make("ALE/Breakot-v5")
    with pytest.raises(UserError, match="ALE/<Game>-v5 ids"):
        envs.make("CartPole-v1", backend="atari")


def test_missing_envpool_is_one_line_naming_the_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_envpool(name, *args, **kwargs):
        if name == "envpool":
            raise ImportError("No module named 'envpool'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_envpool)
    with pytest.raises(UserError, match=r"pip install envpool==1\.2\.5"):
        envs.make("ALE/Breakout-v5", backend="envpool")


def test_minatar_through_the_factory():
    env = envs.make("MinAtar/Breakout-v1", num_envs=2, seed=0)
    obs = env.reset()
    assert obs.shape == (2, 10, 10, 4) and obs.dtype == torch.uint8 and int(env.single_action_space.n) == 3
    again = envs.make("MinAtar/Breakout-v1", num_envs=2, seed=0).reset()
    assert torch.equal(obs, again)
    total = 0
    for _ in range(300):
        step = env.step(torch.randint(0, 3, (2,)))
        total += int(step.terminated.sum())
    assert total >= 1 and len(env.drain_episode_stats()) == total
    with pytest.raises(UserError, match="did you mean 'MinAtar/Breakout-v1'"):
        envs.make("MinAtar/Breakot-v1")


def test_minatar_seaquest_episodes_without_reward_are_truncated_after_1000_steps():
    """C-CHAIN's fix: never diving never ends a Seaquest game, so a greedy evaluation would hang without it."""
    import gymnasium as gym

    from envs.gymnasium_backend import NoRewardTimeout

    env = envs.make("MinAtar/Seaquest-v1", num_envs=1, seed=0)
    env.reset()
    for step in range(1, 1001):
        result = env.step(torch.zeros(1, dtype=torch.long))  # no-op at the surface: no reward, no death
        if step < 1000:
            assert not (result.terminated | result.truncated).any()
    assert result.truncated.item() and not result.terminated.item()  # a truncation: the agent still bootstraps
    assert env.drain_episode_stats().lengths == [1000]
    rewarded = NoRewardTimeout(gym.make("CartPole-v1"), steps=5)  # +1 per step: a rewarded episode runs on
    rewarded.reset(seed=0)
    assert not any(rewarded.step(i % 2)[3] for i in range(6))
