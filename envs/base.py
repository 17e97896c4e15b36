"""The batched-environment contract every backend speaks: torch tensors in, torch tensors out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from cleanrl_plus.errors import UserError


def generator_seed(seed: int, limit: int = 2**32) -> int:
    """`seed` folded into [0, limit) for generators that take no more: numpy's RandomState (dm-control, MinAtar) seeds
    below 2**32, envpool below 2**31. Any --seed is below 2**32, but the seeds derived from it (+ the sub-env's index,
    + the evaluation offset) may not be; smaller ones are unchanged."""
    return seed % limit


class StepResult(NamedTuple):
    """One step of a batch of environments; every tensor has leading dimension num_envs, on the env's device.

    `obs` is what to act on next (already the reset observation where an episode ended);
    `next_obs` is the true next observation to store (the final observation where an episode ended).
    """

    obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    next_obs: torch.Tensor


@dataclass
class EpisodeStats:
    """Episodes that finished since the last drain: undiscounted return, length, and the env step at which each ended."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    end_steps: list[int] = field(default_factory=list)
    task_ids: list[int] = field(default_factory=list)  # continual envs only: the task each episode ran in

    def __len__(self) -> int:
        return len(self.returns)


class TorchVecEnv:
    """Base class of the batched environments returned by `envs.make`.

    Subclasses implement `reset`, `step`, `state_dict` and `load_state_dict`; they fill
    `num_envs`, `single_observation_space`, `single_action_space`, `device`, and call
    `_track_episodes` (host-side backends) so that `drain_episode_stats` works the same for every backend.
    """

    env_id: str
    num_envs: int
    device: torch.device
    single_observation_space: gym.Space
    single_action_space: gym.Space
    can_terminate: bool = True  # False for tasks that only ever end by time limit (SimBa then uses one critic)
    max_episode_steps: int = 0  # the time limit in agent steps (0 = none known)

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.env_steps = 0  # total sub-env steps taken, i.e. the global env-step counter
        self._finished = EpisodeStats()
        self._episode_return = np.zeros(num_envs, dtype=np.float64)
        self._episode_length = np.zeros(num_envs, dtype=np.int64)

    # --- interface --------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> torch.Tensor:
        raise NotImplementedError

    def step(self, action: torch.Tensor) -> StepResult:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def reset_where(self, mask: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """End the episodes of the sub-envs in `mask` now (an early stop, i.e. a truncation) and return the batch of
        observations to act on, with fresh initial observations where `mask` is set."""
        raise UserError(f"{type(self).__name__} cannot stop episodes early; LEAST needs the gymnasium or torch backend")

    # --- shared helpers -----------------------------------------------------------------------------------
    def _to_torch(self, array: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(np.asarray(array), dtype=dtype).to(self.device, non_blocking=True)

    def drain_episode_stats(self) -> EpisodeStats:
        """Return the episodes finished since the previous call (cheap; call it at logging intervals)."""
        finished, self._finished = self._finished, EpisodeStats()
        return finished

    def _track_episodes(self, reward: np.ndarray, done: np.ndarray) -> None:
        """Count the step, accumulate returns, and record the episodes that ended (host-side backends)."""
        self.env_steps += self.num_envs
        self._episode_return += reward
        self._episode_length += 1
        self._end_episodes(done)

    def _end_episodes(self, done: np.ndarray) -> None:
        for i in np.flatnonzero(done):
            self._finished.returns.append(float(self._episode_return[i]))
            self._finished.lengths.append(int(self._episode_length[i]))
            self._finished.end_steps.append(self.env_steps)
        self._episode_return[done] = 0.0
        self._episode_length[done] = 0

    def _reset_episode_tracking(self) -> None:
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0

    def _tracking_state(self) -> dict[str, Any]:
        return {
            "env_steps": self.env_steps,
            "episode_return": self._episode_return.copy(),
            "episode_length": self._episode_length.copy(),
        }

    def _load_tracking_state(self, state: dict[str, Any]) -> None:
        self.env_steps = state["env_steps"]
        self._episode_return[:] = state["episode_return"]
        self._episode_length[:] = state["episode_length"]

    def _check_action(self, action: torch.Tensor) -> None:
        space = self.single_action_space
        expected = (self.num_envs, *space.shape)
        if not isinstance(action, torch.Tensor):
            raise UserError(f"{self.env_id}: actions must be a torch.Tensor of shape {expected}, got {type(action).__name__}")
        if tuple(action.shape) != expected:
            raise UserError(
                f"{self.env_id}: action batch has shape {tuple(action.shape)} but this env expects {expected} "
                f"(num_envs={self.num_envs}, action space {space})"
            )

    @property
    def is_continuous(self) -> bool:
        return isinstance(self.single_action_space, gym.spaces.Box)
