"""envpool backend for the same `ALE/<Game>-v5` ids and semantics as `envs/atari_backend.py` (C++ ALE; much
faster on CPU). `envs.make(id, backend="envpool")` or `--env-backend envpool`.

Settings matched to the ale-py backend: sticky actions 0.25, up to 30 no-ops at reset, frame skip 4 with max-pool,
84×84 grayscale (INTER_AREA), no fire-on-reset, 27k agent steps (108k frames) per game as truncation; training:
`episodic_life` and `reward_clip`, with the full-game raw score taken from `info["reward"]` and the real game
end from `info["terminated"]`. Frames are stacked here, not by envpool (whose stack keeps the frames from
before a lost life): 4 frames, and every reset observation repeats its frame, as in the ale-py backend.
envpool resets a finished env on the *next* step; this backend does that reset step at once for the finished
envs only, so `obs` is the reset observation and `next_obs` the final one, as in every backend.
Checkpoints keep the counters only: a resumed run starts fresh games (envpool cannot snapshot emulators).
A pool takes one seed (its env i gets seed + i), so a group of members runs one pool per member, each seeded as a
one-seed run's, stepped one after the other.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from envs.atari_backend import FRAME_SKIP, FRAME_STACK, NOOP_MAX, SCREEN_SIZE, check_atari_id
from envs.base import StepResult, TorchVecEnv, generator_seed
from envs.errors import UserError


class EnvpoolAtariVecEnv(TorchVecEnv):
    frame_stack = FRAME_STACK

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | tuple[int, ...],
        device: torch.device,
        training: bool = True,
        **envpool_kwargs: Any,
    ) -> None:
        """`num_envs` sub-envs per member of the group `seed` (one seed, or one per member)."""
        super().__init__(num_envs, seed)
        check_atari_id(env_id)
        try:
            import envpool  # noqa: F401 (the one-line error here; each pool imports it again)
        except ImportError:
            raise UserError(
                "the envpool backend needs envpool — pip install envpool==1.2.5 (or use --env-backend atari)"
            ) from None
        self.env_id, self.device, self.training = env_id, device, training
        self.task = env_id.removeprefix("ALE/")
        settings = dict(
            episodic_life=training,
            reward_clip=training,
            repeat_action_probability=0.25,
            noop_max=NOOP_MAX,
            frame_skip=FRAME_SKIP,
            img_height=SCREEN_SIZE,
            img_width=SCREEN_SIZE,
            use_fire_reset=False,
            max_episode_steps=108_000 // FRAME_SKIP,
            stack_num=1,
        )
        self._settings = settings | envpool_kwargs
        self.pools = [self._make_pool(member_seed) for member_seed in self.seeds]
        self.single_observation_space = gym.spaces.Box(0, 255, (FRAME_STACK, SCREEN_SIZE, SCREEN_SIZE), np.uint8)
        self.single_action_space = gym.spaces.Discrete(int(self.pools[0].action_space.n))
        self._stack = np.zeros((self.num_envs, FRAME_STACK, SCREEN_SIZE, SCREEN_SIZE), dtype=np.uint8)

    def _make_pool(self, seed: int) -> Any:
        """One member's pool (envpool seeds its env i with seed + i)."""
        import envpool

        return envpool.make(
            self.task,
            env_type="gymnasium",
            num_envs=self.envs_per_member,
            seed=generator_seed(seed, 2**31),
            **self._settings,
        )

    @property
    def frames(self) -> int:
        return self.env_steps * FRAME_SKIP

    def reset(self, seed: int | tuple[int, ...] | None = None) -> torch.Tensor:
        seeds = self.reset_seeds(seed)
        if seeds != self.seeds:  # envpool seeds at construction only
            self.close()
            self.seeds = seeds
            self.pools = [self._make_pool(member_seed) for member_seed in seeds]
        frames = np.concatenate([pool.reset()[0] for pool in self.pools])
        self._stack[:] = frames  # (N, 1, H, W) broadcast: the reset frame repeated
        self._reset_episode_tracking()
        return self._to_torch(self._stack.copy(), torch.uint8)

    def step(self, action: torch.Tensor) -> StepResult:
        self._check_action(action)
        actions = action.detach().cpu().numpy()
        steps = [pool.step(actions[self.member_rows(k)]) for k, pool in enumerate(self.pools)]
        frames, reward, terminated, truncated = (np.concatenate(part) for part in list(zip(*steps))[:4])
        info = {key: np.concatenate([member_info[key] for *_, member_info in steps]) for key in ("reward", "terminated")}
        self._stack[:, :-1] = self._stack[:, 1:]
        self._stack[:, -1] = frames[:, -1]
        final_obs = self._stack.copy()
        done = terminated | truncated
        for k, pool in enumerate(self.pools):
            finished = np.flatnonzero(done[self.member_rows(k)])
            if len(finished):
                reset_frames, *_, reset_info = pool.step(np.zeros(len(finished), dtype=np.int64), env_id=finished)
                self._stack[k * self.envs_per_member + reset_info["env_id"]] = reset_frames
        ended_game = truncated | info["terminated"].astype(bool) if self.training else done
        self._track_episodes(info["reward"], ended_game)  # full games, raw score
        return StepResult(
            obs=self._to_torch(self._stack.copy(), torch.uint8),  # a copy: the stack is updated in place
            reward=self._to_torch(reward, torch.float32),
            terminated=self._to_torch(terminated, torch.bool),
            truncated=self._to_torch(truncated, torch.bool),
            next_obs=self._to_torch(final_obs, torch.uint8),
        )

    # checkpoints: the base class's counters only, as envpool cannot snapshot its emulators
    def load_member_state_dicts(self, states: list[dict[str, Any]]) -> None:
        warnings.warn("envpool cannot restore emulator states: the resumed run starts fresh games")
        super().load_member_state_dicts(states)
        self._reset_episode_tracking()

    def close(self) -> None:
        for pool in self.pools:
            pool.close()
