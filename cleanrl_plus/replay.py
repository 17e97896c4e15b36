"""Device-resident, preallocated replay with an insertion stamp per transition and a pluggable sampler.

The stamp `insertion_step[i]` is the buffer's insertion counter when transition i was written
(0, 1, 2, ... over the whole run), so the age of a stored transition is `num_inserted - 1 - insertion_step`.
Samplers (uniform here; Sample Weight Decay in `plasticity/`) only choose indices.

`NStepReplay` stores the same one-step transitions and turns each sampled one into an n-step transition when it is
sampled (FastTD3's n-step returns; Sutton & Barto §7.1): R = Σ_{k<m} γ^k r_{t+k}, bootstrapped from s_{t+m} with
discount γ^m, where m ≤ n stops after the first episode end (a termination: no bootstrap; a truncation: from the true
final observation) and at the newest stored step of that env.

Every stored tensor holds the members of a group first (cleanrl_plus.members): (members, capacity, ...), each member's
buffer exactly what a one-seed run of its seed stores; `add` takes one step's Transition (cleanrl_plus.transition) of
(members, num_envs, ...) tensors and `sample` draws each member's batch from its own transitions with its own generator,
(members, B, ...).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import torch

from cleanrl_plus.members import Members
from cleanrl_plus.transition import Transition


class Batch(NamedTuple):
    """Sampled transitions, (members, B, ...) each."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor  # float 1.0 only for true terminations: time-limit truncations bootstrap
    insertion_step: torch.Tensor
    discount: torch.Tensor | None = None  # γ^m of an n-step batch (before the 1 − terminated mask); None: one step, γ


def batch_gamma(batch: Batch, gamma: float) -> float | torch.Tensor:
    """The discount of each transition's bootstrap: γ for a one-step batch, γ^m for an n-step one."""
    return gamma if batch.discount is None else batch.discount


def bootstrap_discount(batch: Batch, gamma: float) -> torch.Tensor:
    """The factor of the bootstrapped value in y = r + factor·V(s'): γ(1 − terminated), or γ^m(1 − terminated) for an
    n-step batch."""
    return batch_gamma(batch, gamma) * (1.0 - batch.terminated)


class Sampler(Protocol):
    def sample_indices(self, buffer: "ReplayBuffer", batch_size: int) -> torch.Tensor: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class UniformSampler:
    """Every stored transition equally likely (with replacement), as in CleanRL; (members, batch_size) indices, each
    member's from its own generator."""

    def sample_indices(self, buffer: "ReplayBuffer", batch_size: int) -> torch.Tensor:
        return buffer.members.randint(buffer.size, batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class ReplayBuffer:
    """`capacity` transitions per member (module docstring)."""

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        members: Members,
        obs_dtype: torch.dtype = torch.float32,
        action_dtype: torch.dtype = torch.float32,
        sampler: Sampler | None = None,
    ) -> None:
        self.capacity, self.members, self.device = capacity, members, members.device
        self.sampler = sampler or UniformSampler()
        K = len(members)
        self.rows = torch.arange(K, device=self.device).unsqueeze(1)  # indexes each member's own transitions
        self._allocate_observations(obs_shape, obs_dtype)
        self.actions = torch.zeros((K, capacity, *action_shape), dtype=action_dtype, device=self.device)
        self.rewards = torch.zeros(K, capacity, device=self.device)
        self.terminated = torch.zeros(K, capacity, device=self.device)
        self.insertion_step = torch.full((K, capacity), -1, dtype=torch.int64, device=self.device)
        self.position = 0  # next slot to write
        self.size = 0
        self.num_inserted = 0

    def __len__(self) -> int:
        return self.size

    # --- observation storage: one row per transition here; FrameStackReplay stores frames once --------------
    def _allocate_observations(self, obs_shape: tuple[int, ...], obs_dtype: torch.dtype) -> None:
        self.obs = torch.zeros((len(self.members), self.capacity, *obs_shape), dtype=obs_dtype, device=self.device)
        self.next_obs = torch.zeros_like(self.obs)

    def _write_observations(
        self, slots: slice | torch.Tensor, obs: torch.Tensor, next_obs: torch.Tensor, episode_end: torch.Tensor
    ) -> None:
        self.obs[:, slots] = obs
        self.next_obs[:, slots] = next_obs

    def _read_observations(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.take(self.obs, index), self.take(self.next_obs, index)

    def take(self, stored: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Member k's rows index[k] of a stored (members, capacity, ...) tensor: (members, *index.shape[1:], ...)."""
        return stored[self.rows.view(-1, *[1] * (index.dim() - 1)), index]

    def add(self, transition: Transition) -> None:
        """Store one step of every member's envs; its `truncated` matters only to storages that must know where episodes
        end (NStepReplay, FrameStackReplay)."""
        n = transition.obs.shape[1]
        if n > self.capacity:
            raise ValueError(f"cannot add {n} transitions to a buffer of capacity {self.capacity}")
        stamps = torch.arange(self.num_inserted, self.num_inserted + n, device=self.device)
        if self.position + n <= self.capacity:
            slots: slice | torch.Tensor = slice(self.position, self.position + n)
        else:
            slots = (self.position + torch.arange(n, device=self.device)) % self.capacity
        episode_end = transition.terminated | transition.truncated
        self._write_observations(slots, transition.obs, transition.next_obs, episode_end)
        self.actions[:, slots] = transition.action
        self.rewards[:, slots] = transition.reward
        self.terminated[:, slots] = transition.terminated.to(self.terminated.dtype)
        self.insertion_step[:, slots] = stamps
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.num_inserted += n

    def clear(self) -> None:
        """Forget every stored transition (continual settings: `--continual.reset-replay` or the oracle at a task
        switch). The insertion counter keeps running, so ages and frame-stack rows stay consistent."""
        self.position, self.size = 0, 0

    def slots_by_age(self, ages: torch.Tensor) -> torch.Tensor:
        """Buffer slots of the transitions that are `ages` insertions old (0 = newest)."""
        return (self.position - 1 - ages) % self.capacity

    def sample(self, batch_size: int) -> Batch:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        index = self.sampler.sample_indices(self, batch_size)
        obs, next_obs = self._read_observations(index)
        take = self.take
        return Batch(
            obs,
            take(self.actions, index),
            take(self.rewards, index),
            next_obs,
            take(self.terminated, index),
            take(self.insertion_step, index),
        )

    def age(self, batch: Batch) -> torch.Tensor:
        """Age of each sampled transition in insertions (0 = newest); logged to compare samplers."""
        return self.num_inserted - 1 - batch.insertion_step

    _STORED = ("obs", "next_obs", "actions", "rewards", "terminated", "insertion_step")

    def state_dict(self) -> dict[str, Any]:
        """Only the filled part is saved (a 1M buffer at 25k steps costs 25k rows on disk)."""
        state: dict[str, Any] = {name: getattr(self, name)[:, : self.size].clone() for name in self._STORED}
        state.update(position=self.position, size=self.size, num_inserted=self.num_inserted, sampler=self.sampler.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["size"] > self.capacity:
            raise ValueError(f"checkpoint replay holds {state['size']} transitions but capacity is {self.capacity}")
        for name in self._STORED:
            getattr(self, name)[:, : state["size"]] = state[name].to(self.device)
        self.position, self.size, self.num_inserted = state["position"], state["size"], state["num_inserted"]
        self.sampler.load_state_dict(state["sampler"])


class NStepReplay(ReplayBuffer):
    """One-step transitions stored as ReplayBuffer does, each turned into an n-step one when sampled (module docstring).

    Rows arrive `num_envs` at a time in env order (every `add` is one vector step), so env e's next transition lies
    `num_envs` insertions later; a successor counts only if its slot holds exactly that insertion stamp (not yet
    written, or from an older lap of the ring, it does not). Sampling gathers (batch, n) rows: no host sync, static
    shapes. A truncation ends a window as a termination does, but bootstraps.
    """

    _STORED = ReplayBuffer._STORED + ("episode_end",)

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        members: Members,
        *,
        num_envs: int,
        n_step: int,
        gamma: float,
        **kwargs: Any,
    ) -> None:
        super().__init__(capacity, obs_shape, action_shape, members, **kwargs)
        if n_step < 1 or capacity < n_step * num_envs:
            raise ValueError(
                f"n-step replay needs n >= 1 and a capacity of at least n·num_envs rows (n={n_step}, num_envs={num_envs})"
            )
        self.num_envs, self.n_step = num_envs, n_step
        self.episode_end = torch.zeros(len(members), capacity, dtype=torch.bool, device=self.device)
        self.powers = gamma ** torch.arange(n_step + 1, dtype=torch.float64, device=self.device).float()  # γ^0 … γ^n

    def add(self, transition: Transition) -> None:
        if transition.obs.shape[1] != self.num_envs:
            raise ValueError(f"NStepReplay.add takes one vector step: {self.num_envs} rows")
        super().add(transition)

    def _write_observations(
        self, slots: slice | torch.Tensor, obs: torch.Tensor, next_obs: torch.Tensor, episode_end: torch.Tensor
    ) -> None:
        super()._write_observations(slots, obs, next_obs, episode_end)
        self.episode_end[:, slots] = episode_end

    def sample(self, batch_size: int) -> Batch:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return self.n_step_batch(self.sampler.sample_indices(self, batch_size))

    def n_step_batch(self, index: torch.Tensor) -> Batch:
        """The n-step transitions that start at each member's stored rows `index` (members, B)."""
        take = self.take
        k = torch.arange(self.n_step, device=self.device)
        slots = (index[..., None] + k * self.num_envs) % self.capacity  # (members, B, n): this env's next n steps
        stamps = take(self.insertion_step, slots)
        stored = stamps == stamps[..., :1] + k * self.num_envs
        # step k counts while every earlier step of the window is stored and none of them ended the episode
        open_before = torch.cat([torch.ones_like(stored[..., :1]), ~take(self.episode_end, slots[..., :-1])], dim=-1)
        counted = torch.cumprod((stored & open_before).to(torch.int32), dim=-1)
        steps = counted.sum(dim=-1)  # m ≥ 1: the first step always counts
        last = slots.gather(-1, (steps - 1)[..., None]).squeeze(-1)
        returns = (take(self.rewards, slots) * self.powers[:-1] * counted).sum(dim=-1)  # Σ_{k<m} γ^k r_{t+k}
        obs, _ = self._read_observations(index)
        _, next_obs = self._read_observations(last)
        return Batch(
            obs,
            take(self.actions, index),
            returns,
            next_obs,
            take(self.terminated, last),
            take(self.insertion_step, index),
            self.powers[steps],
        )


def make_replay(
    args: Any, obs_shape: tuple[int, ...], action_shape: tuple[int, ...], members: Members, sampler, num_envs: int
) -> ReplayBuffer:
    """The replay of an off-policy agent (--buffer-size per member): one-step transitions, or n-step returns computed when
    sampled (--n-step, with --gamma); `num_envs` per member."""
    if args.n_step > 1:
        return NStepReplay(
            args.buffer_size,
            obs_shape,
            action_shape,
            members,
            sampler=sampler,
            num_envs=num_envs,
            n_step=args.n_step,
            gamma=args.gamma,
        )
    return ReplayBuffer(args.buffer_size, obs_shape, action_shape, members, sampler=sampler)


def step_and_store(
    env: Any, replay: ReplayBuffer, obs: torch.Tensor, actions: torch.Tensor, plasticity: Any, global_step: int
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """Step the envs and store the step's Transition for an off-policy agent: s' is the true next observation (the final
    one where an episode ended), and only termination cuts the bootstrap; a time limit or one of LEAST's early stops
    (`plasticity.after_env_step`) is a truncation, which still bootstraps from s' and ends n-step windows. Returns (the
    step, the observations to act on next, truncated)."""
    step = env.step(actions)
    next_obs, truncated = plasticity.after_env_step(env, step, obs, actions, global_step)
    replay.add(
        Transition(
            obs=obs,
            action=actions,
            reward=step.reward,
            terminated=step.terminated,
            truncated=truncated,
            next_obs=step.next_obs,
        )
    )
    return step, next_obs, truncated
