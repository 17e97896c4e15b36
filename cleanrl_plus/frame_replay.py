"""Replay for frame-stacked image observations (Atari) that stores each stacked frame once, not 4× per side.

Observations are stacks of K frames, oldest first, and a reset observation repeats its frame K times (the
Atari backends stack this way). Stored per env stream: the newest frame of every observation acted on, in a
ring of C + K − 1 rows (C = capacity / num_envs, so the K − 1 frames before the oldest stored transition are
still there); per transition: the newest frame of its next observation (exact final observations at episode
ends, where the next observation acted on is a reset one) and the steps since its episode began, capped at
K − 1. A sampled stack is rebuilt from indices; frames from before the episode began are replaced by its
first frame, exactly as the env padded them.

Memory: 2 frames per transition instead of 2·K. 1M transitions of 84×84 uint8 = 14.1 GB (obs + next_obs
stacks as separate rows: 56.4 GB), per member of a group. Same interface as ReplayBuffer (insertion stamps, samplers,
SWD, a leading member dimension).
"""

from __future__ import annotations

from typing import Any

import torch

from cleanrl_plus.members import Members
from cleanrl_plus.replay import ReplayBuffer, Sampler


class FrameStackReplay(ReplayBuffer):
    _STORED = ("next_frame", "episode_step", "actions", "rewards", "terminated", "insertion_step")

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        members: Members,
        num_envs: int = 1,
        action_dtype: torch.dtype = torch.int64,
        sampler: Sampler | None = None,
    ) -> None:
        if capacity % num_envs:
            raise ValueError(f"FrameStackReplay needs a capacity divisible by num_envs={num_envs} (got {capacity})")
        self.num_envs = num_envs
        super().__init__(capacity, obs_shape, action_shape, members, torch.uint8, action_dtype, sampler)

    def _allocate_observations(self, obs_shape: tuple[int, ...], obs_dtype: torch.dtype) -> None:
        self.stack = obs_shape[0]
        frame_shape = obs_shape[1:]
        self.ring_rows = self.capacity // self.num_envs + self.stack - 1
        K = len(self.members)
        # empty, not zeros: reads never reach unwritten rows, and a 1M-frame ring (7 GB) is then paged in as it fills
        # instead of zero-filled at start-up (25 s on the 2-core CPU)
        self.obs_frames = torch.empty((K, self.ring_rows, self.num_envs, *frame_shape), dtype=torch.uint8, device=self.device)
        self.next_frame = torch.empty((K, self.capacity, *frame_shape), dtype=torch.uint8, device=self.device)
        self.episode_step = torch.zeros(K, self.capacity, dtype=torch.uint8, device=self.device)
        self.stream_episode_step = torch.zeros(K, self.num_envs, dtype=torch.uint8, device=self.device)
        # offsets back in time of the K stacked frames, oldest first: K−1, …, 1, 0
        self._offsets = torch.arange(self.stack - 1, -1, -1, device=self.device)

    def _write_observations(
        self, slots: slice | torch.Tensor, obs: torch.Tensor, next_obs: torch.Tensor, episode_end: torch.Tensor
    ) -> None:
        if obs.shape[1] != self.num_envs:
            raise ValueError(f"FrameStackReplay stores one step of all {self.num_envs} envs at a time, got {obs.shape[1]}")
        step = self.num_inserted // self.num_envs
        self.obs_frames[:, step % self.ring_rows] = obs[:, :, -1]
        self.next_frame[:, slots] = next_obs[:, :, -1]
        self.episode_step[:, slots] = self.stream_episode_step
        advanced = (self.stream_episode_step + 1).clamp_(max=self.stack - 1)
        self.stream_episode_step = torch.where(episode_end, torch.zeros_like(advanced), advanced)

    def _read_observations(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        stamps = self.take(self.insertion_step, index)  # (members, B)
        step, stream = stamps // self.num_envs, stamps % self.num_envs
        # (members, B, stack): no frame before the episode
        back = torch.minimum(self._offsets, self.take(self.episode_step, index)[..., None].long())
        rows = (step[..., None] - back) % self.ring_rows
        obs = self.obs_frames[self.rows[..., None], rows, stream[..., None]]  # (members, B, stack, H, W)
        next_obs = torch.cat([obs[:, :, 1:], self.take(self.next_frame, index)[:, :, None]], dim=2)
        return obs, next_obs

    def state_dict(self) -> dict[str, Any]:
        steps = self.num_inserted // self.num_envs
        rows = min(steps, self.ring_rows)
        return super().state_dict() | {
            "obs_frames": self.obs_frames[:, :rows].clone(),
            "stream_episode_step": self.stream_episode_step.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.obs_frames[:, : state["obs_frames"].shape[1]] = state["obs_frames"].to(self.device)
        self.stream_episode_step = state["stream_episode_step"].to(self.device)
