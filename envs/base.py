"""The batched-environment contract every backend speaks: torch tensors in, torch tensors out.

Several seeds in one process (cleanrl_plus/members.py): an env built for a group of K member seeds holds K·N sub-envs,
member-major (sub-env k·N + n is member k's env n), and member k's N sub-envs behave exactly as a one-seed env of its
seed would, whatever K and the other members are. Its counters are a member's: `env_steps` and episodes' `end_steps`
are what a one-seed run counts. Checkpoints cut per member: `member_state_dict(k)` is what that one-seed env's
`state_dict()` holds, and `load_member_state_dicts` restores a group from such states."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

import gymnasium as gym
import numpy as np
import torch

from envs.errors import UserError


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
    """Episodes that finished since the last drain: undiscounted return, length, the env step at which each ended (its
    member's `env_steps`), and the sub-env it ran in (member `env // envs_per_member`)."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    end_steps: list[int] = field(default_factory=list)
    task_ids: list[int] = field(default_factory=list)  # continual envs only: the task each episode ran in
    envs: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.returns)


class TorchVecEnv:
    """Base class of the batched environments returned by `envs.make`.

    Subclasses implement `reset`, `step`, and where they hold more than the episode counters `member_state_dict` and
    `load_member_state_dicts` (a group's `state_dict` is built from them); they fill `single_observation_space`,
    `single_action_space`, `device`, and call `_track_episodes` (host-side backends) so that `drain_episode_stats` works
    the same for every backend. `num_envs` counts all K·N sub-envs; `members` is K, `envs_per_member` N.
    """

    env_id: str
    device: torch.device
    single_observation_space: gym.Space
    single_action_space: gym.Space
    can_terminate: bool = True  # False for tasks that only ever end by time limit (SimBa then uses one critic)
    max_episode_steps: int = 0  # the time limit in agent steps (0 = none known)
    generators: list[torch.Generator] = []  # tensor backends: each member's reset-state stream, seeded by its seed

    def __init__(self, num_envs: int, seed: int | Sequence[int] = 0) -> None:
        """`num_envs` sub-envs per member; `seed`: one seed, or a group's member seeds (one per member)."""
        self.seeds = member_seeds(seed)
        self.members, self.envs_per_member = len(self.seeds), num_envs
        self.num_envs = self.members * num_envs
        self.env_steps = 0  # steps of each member's sub-envs: a one-seed run's global env-step counter
        self._finished = EpisodeStats()
        self._episode_return = np.zeros(self.num_envs, dtype=np.float64)
        self._episode_length = np.zeros(self.num_envs, dtype=np.int64)

    # --- interface --------------------------------------------------------------------------------------
    def reset(self, seed: int | Sequence[int] | None = None) -> torch.Tensor:
        """Start every sub-env afresh; `seed`: None (the env's seeds), an int (groups of one) or one per member."""
        raise NotImplementedError

    def step(self, action: torch.Tensor) -> StepResult:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def draw_ahead(self, steps: int) -> None:
        """Draw the random numbers of the next `steps` steps now (tensor backends; the others draw their own)."""

    def compile_steps(self, compiler: Any) -> None:
        """Compile the tensor part of a step with `compiler(fn)` (tensor backends; the others step on the host)."""

    def reset_where(self, mask: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """End the episodes of the sub-envs in `mask` now (an early stop, i.e. a truncation) and return the batch of
        observations to act on, with fresh initial observations where `mask` is set."""
        raise UserError(f"{type(self).__name__} cannot stop episodes early; LEAST needs the gymnasium or torch backend")

    def cut_episodes(self, mask: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """End the episodes in `mask` at a rollout's end (PPO's --restart-episodes): reset_where, except that a continual
        env starts the new episodes in the task scheduled now."""
        return self.reset_where(mask, obs)

    # --- checkpoints, cut per member ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A group of one saves what a one-seed run saves; a larger group its members' states."""
        if self.members == 1:
            return self.member_state_dict(0)
        return {"members": [self.member_state_dict(k) for k in range(self.members)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_member_state_dicts(state["members"] if "members" in state else [state])

    def member_state_dict(self, k: int) -> dict[str, Any]:
        """Member k's state: what `envs.make(..., seed=seeds[k]).state_dict()` holds after the same steps. Here the step
        counter, member k's rows of `_sub_env_arrays` and its generator; subclasses add what else they hold."""
        rows = self.member_rows(k)
        arrays = {key: _copy(value[rows]) for key, value in self._sub_env_arrays().items()}
        generator = {"generator": self.generators[k].get_state()} if self.generators else {}
        return {"env_steps": self.env_steps} | arrays | generator

    def load_member_state_dicts(self, states: list[dict[str, Any]]) -> None:
        """Restore the group from its members' states (the inverse of `member_state_dict`)."""
        if len(states) != self.members:
            raise UserError(f"{self.env_id}: {len(states)} member states for a group of {self.members}")
        self.env_steps = states[0]["env_steps"]  # the members step together: their counters agree
        for key, live in self._sub_env_arrays().items():  # in place: some are views of a simulator's memory
            parts = [state[key] for state in states]
            live[...] = (
                torch.cat([part.to(live.device) for part in parts])
                if isinstance(live, torch.Tensor)
                else np.concatenate(parts)
            )
        for generator, state in zip(self.generators, states):
            generator.set_state(state["generator"].cpu())

    def _sub_env_arrays(self) -> dict[str, torch.Tensor | np.ndarray]:
        """The state with one row per sub-env, by checkpoint key: the live tensors or arrays (loading writes into them)."""
        return {"episode_return": self._episode_return, "episode_length": self._episode_length}

    # --- members --------------------------------------------------------------------------------------------
    def member_rows(self, k: int) -> slice:
        """Member k's sub-envs."""
        return slice(k * self.envs_per_member, (k + 1) * self.envs_per_member)

    def reset_seeds(self, seed: int | Sequence[int] | None) -> tuple[int, ...]:
        """The member seeds `reset(seed=...)` asks for (None: the env's own)."""
        if seed is None:
            return self.seeds
        seeds = member_seeds(seed)
        if len(seeds) != self.members:
            raise UserError(f"{self.env_id}: reset(seed={seed}) needs one seed per member of the group ({self.members})")
        return seeds

    def _seed_generators(self, seed: int | Sequence[int] | None) -> None:
        """Restart each member's generator from its seed (`reset(seed=...)`'s, or the env's own)."""
        for generator, member_seed in zip(self.generators, self.reset_seeds(seed)):
            generator.manual_seed(member_seed)

    def sub_env_seeds(self, seeds: tuple[int, ...] | None = None) -> list[int]:
        """Each sub-env's seed: member k's env n gets seeds[k] + n, as in a one-seed env of seed seeds[k]."""
        return [seed + n for seed in seeds or self.seeds for n in range(self.envs_per_member)]

    # --- shared helpers -----------------------------------------------------------------------------------
    def _to_torch(self, array: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(np.asarray(array), dtype=dtype).to(self.device, non_blocking=True)

    def drain_episode_stats(self) -> EpisodeStats:
        """Return the episodes finished since the previous call (cheap; call it at logging intervals)."""
        finished, self._finished = self._finished, EpisodeStats()
        return finished

    def _track_episodes(self, reward: np.ndarray, done: np.ndarray) -> None:
        """Count the step, accumulate returns, and record the episodes that ended (host-side backends)."""
        self.env_steps += self.envs_per_member
        self._episode_return += reward
        self._episode_length += 1
        self._end_episodes(done)

    def _end_episodes(self, done: np.ndarray) -> None:
        for i in np.flatnonzero(done):
            self._finished.returns.append(float(self._episode_return[i]))
            self._finished.lengths.append(int(self._episode_length[i]))
            self._finished.end_steps.append(self.env_steps)
            self._finished.envs.append(int(i))
        self._episode_return[done] = 0.0
        self._episode_length[done] = 0

    def _reset_episode_tracking(self) -> None:
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0

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


def member_seeds(seed: int | Sequence[int]) -> tuple[int, ...]:
    """One seed, or a group's member seeds, as a tuple of ints."""
    seeds = (seed,) if isinstance(seed, (int, np.integer)) else tuple(seed)
    if not seeds:
        raise UserError("a group needs at least one member seed")
    return tuple(int(s) for s in seeds)


def _copy(rows: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
    return rows.clone() if isinstance(rows, torch.Tensor) else rows.copy()
