"""Atari backend (ale-py): ids `ALE/<Game>-v5` with the standard DQN preprocessing (Mnih et al. 2015;
Machado et al. 2018 for v5's sticky actions).

- `gym.make(id, frameskip=1)` keeps v5's sticky actions (`repeat_action_probability=0.25`) and its 108k-frame
  limit (reported as truncation); gymnasium's `AtariPreprocessing` does up to 30 no-op actions at reset,
  frame skip 4 with a max-pool over the last two frames, 84×84 grayscale; `FrameStackObservation` stacks 4
  frames, channels first: observations are (4, 84, 84) uint8, and a reset observation repeats its frame 4 times.
- Training only (`training=True`): losing a life ends the learning episode (terminated) without resetting the
  game, and rewards are clipped to their sign. Evaluation envs (`training=False`) play full games with raw rewards.
- `drain_episode_stats()` always reports full games (over all lives) with the raw, unclipped score.
- `frames` counts emulator frames (4 per agent step), logged as `charts/frames`. No fire-on-reset wrapper.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from envs.errors import UserError
from envs.gymnasium_backend import GymnasiumVecEnv, check_env_id

FRAME_SKIP = 4
FRAME_STACK = 4
NOOP_MAX = 30
SCREEN_SIZE = 84


class LifeLossTerminal(gym.Wrapper):
    """Training only: a lost life ends the learning episode; the next reset continues the same game (a no-op step)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.ended_game = True  # whether the last step ended the real game (read by AtariVecEnv for statistics)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.ended_game = bool(terminated or truncated)
        lives = self.env.unwrapped.ale.lives()
        life_lost = 0 < lives < self.lives
        self.lives = lives
        return obs, reward, terminated or life_lost, truncated, info

    def reset(self, **kwargs: Any):
        if not self.ended_game:
            obs, _, terminated, truncated, info = self.env.step(0)
            if not (terminated or truncated):
                self.lives = self.env.unwrapped.ale.lives()
                return obs, info
        obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


def make_atari_env(env_id: str, training: bool, **ale_kwargs: Any) -> gym.Env:
    try:
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

        env = gym.make(env_id, frameskip=1, **ale_kwargs)
        env = AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=SCREEN_SIZE, grayscale_obs=True)
    except gym.error.DependencyNotInstalled:
        raise UserError("Atari preprocessing needs OpenCV — pip install opencv-python-headless") from None
    if training:
        env = LifeLossTerminal(env)
    return FrameStackObservation(env, FRAME_STACK)


class AtariVecEnv(GymnasiumVecEnv):
    frame_stack = FRAME_STACK  # observations are stacks of this many frames on axis 0 (replay stores frames once)

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | tuple[int, ...],
        device: torch.device,
        training: bool = True,
        make_env: Callable[[], gym.Env] | None = None,
        **ale_kwargs: Any,
    ) -> None:
        """`make_env` replaces the one-game env (envs/continual.py plays game sequences through it)."""
        check_atari_id(env_id)
        self.training = training
        super().__init__(
            env_id, num_envs, seed, device, make_env=make_env or (lambda: make_atari_env(env_id, training, **ale_kwargs))
        )

    @property
    def frames(self) -> int:  # a member's, as env_steps
        return self.env_steps * FRAME_SKIP

    def _learning_reward(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        if not self.training:
            return super()._learning_reward(reward, terminated, truncated)
        ended_game = np.array([_life_wrapper(env).ended_game for env in self.vec.envs])
        self._track_episodes(reward, (terminated | truncated) & ended_game)  # full games, raw score
        return np.sign(reward)


def _life_wrapper(env: gym.Env) -> LifeLossTerminal:
    while not isinstance(env, LifeLossTerminal):
        env = env.active_game if hasattr(env, "active_game") else env.env  # through a game sequence to the game played
    return env


def check_atari_id(env_id: str) -> None:
    """`ALE/<Game>-v5` only: the preprocessing above assumes v5 (sticky actions, no built-in frame skip)."""
    check_env_id(env_id)
    if not (env_id.startswith("ALE/") and env_id.endswith("-v5")):
        raise UserError(f"the Atari backends take ALE/<Game>-v5 ids (e.g. ALE/Breakout-v5), got '{env_id}'")
