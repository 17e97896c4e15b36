"""On-policy rollout storage, shared by PPO and GTR (GAE itself: cleanrl_plus/gae.py).

Every step stores the true next observation s'ₜ (the final observation where an episode ended), so that a
truncation bootstraps from V(s_final) (agents/ppo.py `estimate_advantages`).

Every tensor holds the members of a group first (cleanrl_plus.members): (members, num_steps, num_envs, ...); a
minibatch is (members, B, ...), each member's samples drawn from its own rollout with its own generator.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from cleanrl_plus.members import Members
from cleanrl_plus.transition import Transition
from envs.continual import is_continual
from envs.continual import parse as parse_continual_id
from envs.errors import UserError


class Minibatch(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    values: torch.Tensor
    extra: torch.Tensor  # per-sample quantities an agent adds (GTR: anchor log-probabilities); empty otherwise


class RolloutStorage:
    """Preallocated (members, num_steps, num_envs, ...) tensors of one rollout, on the training device. Every tensor is
    written in place, rollout after rollout, so a captured step (--cudagraphs) that reads them sees each new rollout.
    `members` (cleanrl_plus.members.Members) draws each member's minibatches and samples."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        device: torch.device,
        members: Members,
        action_dtype: torch.dtype = torch.float32,
        extra_features: int = 0,
        obs_dtype: torch.dtype = torch.float32,
    ) -> None:
        self.num_steps, self.num_envs, self.members = num_steps, num_envs, members
        self.rows = torch.arange(len(members), device=device).unsqueeze(1)  # indexes each member's own samples
        size = (len(members), num_steps, num_envs)
        # Atari frames stay uint8 (obs_dtype): a float copy of 128 × 8 stacks of 4×84×84 would take 4× the memory
        self.obs = torch.zeros(size + obs_shape, dtype=obs_dtype, device=device)
        self.next_obs = torch.zeros(size + obs_shape, dtype=obs_dtype, device=device)
        self.actions = torch.zeros(size + action_shape, dtype=action_dtype, device=device)
        self.logprobs = torch.zeros(size, device=device)
        self.rewards = torch.zeros(size, device=device)
        self.terminated = torch.zeros(size, dtype=torch.bool, device=device)
        self.dones = torch.zeros(size, dtype=torch.bool, device=device)
        self.values = torch.zeros(size, device=device)
        self.advantages = torch.zeros(size, device=device)
        self.returns = torch.zeros(size, device=device)
        self.extra = torch.zeros(size + (extra_features,), device=device)

    @classmethod
    def for_env(
        cls, num_steps: int, env: Any, device: torch.device, members: Members, extra_features: int = 0
    ) -> "RolloutStorage":
        """Storage for `num_steps` of `env` (each member's envs_per_member envs): Box actions as float vectors, Discrete
        ones as indices; uint8 frames as bytes."""
        continuous = isinstance(env.single_action_space, gym.spaces.Box)
        frames = env.single_observation_space.dtype == np.uint8  # Atari frame stacks
        return cls(
            num_steps,
            env.envs_per_member,
            tuple(env.single_observation_space.shape),
            tuple(env.single_action_space.shape),
            device,
            members,
            torch.float32 if continuous else torch.long,
            extra_features,
            torch.uint8 if frames else torch.float32,
        )

    def explained_variance(self) -> torch.Tensor:
        """1 − Var[R − V]/Var[R] over each member's rollout, (members,) (a device tensor)."""
        returns, errors = self.returns.flatten(1), (self.returns - self.values).flatten(1)
        return 1 - errors.var(dim=1) / returns.var(dim=1).clamp_min(1e-8)

    def add(self, t: int, transition: Transition) -> None:
        """Step t of every member's envs (its `logprob` is needed: the ratio π/π_old reads it)."""
        self.obs[:, t], self.actions[:, t], self.next_obs[:, t] = transition.obs, transition.action, transition.next_obs
        self.logprobs[:, t], self.rewards[:, t] = transition.logprob, transition.reward
        self.terminated[:, t], self.dones[:, t] = transition.terminated, transition.terminated | transition.truncated

    def normalize_advantages(self, eps: float = 1e-5) -> None:
        """Â ← (Â − mean)/(std + ε) over each member's whole rollout, the population std (TRAC/C-CHAIN's classic control:
        numpy's std, ε 1e-5), in place."""
        flat = self.advantages.flatten(1)
        mean, std = flat.mean(1), flat.std(1, unbiased=False)
        self.advantages.sub_(mean.view(-1, 1, 1)).div_(std.view(-1, 1, 1) + eps)

    def flat(self) -> Minibatch:
        """Each member's whole rollout as (members, num_steps·num_envs, ...) views."""
        fields = (self.obs, self.actions, self.logprobs, self.advantages, self.returns, self.values, self.extra)
        return Minibatch(*(x.flatten(1, 2) for x in fields))

    def minibatch_indices(self, num_minibatches: int) -> tuple[torch.Tensor, ...]:
        """One epoch: a fresh permutation of each member's flattened rollout, from its own generator, cut into
        `num_minibatches` parts of (members, B) indices (`gather` reads them)."""
        return self.members.randperm(self.num_steps * self.num_envs).chunk(num_minibatches, dim=1)

    def gather(self, indices: torch.Tensor) -> Minibatch:
        """Member k's transitions at indices[k] of its flattened rollout: (members, B, ...)."""
        return Minibatch(*(x[self.rows, indices] for x in self.flat()))

    def sample(self, batch_size: int) -> Minibatch:
        """Random transitions of each member's rollout (probe batches for diagnostics and ReDo, C-CHAIN's reference
        batch), drawn with its own generator."""
        return self.gather(self.members.randint(self.num_steps * self.num_envs, batch_size))


def check_rollout_flags(args: Any, agent: str, frames: bool) -> None:
    """One-line UserError for rollout settings that cannot work (before anything is created)."""
    rollout_size = args.num_steps * args.num_envs
    if args.target_kl and len(args.seeds) > 1:
        raise UserError(
            "--target-kl stops an iteration's epochs when the policy moved too far, which members of a --seeds group do at "
            "different epochs — drop --target-kl or train one seed per process"
        )
    if args.cudagraphs and rollout_size % args.num_minibatches:
        raise UserError(
            f"--cudagraphs replays one minibatch shape, but a rollout of {rollout_size} transitions does not split into "
            f"{args.num_minibatches} equal minibatches — pick --num-minibatches dividing {rollout_size}"
        )
    if frames and args.normalize_obs:
        raise UserError(
            f"--normalize-obs standardises vector observations; {agent}'s Nature CNN scales Atari frames by 1/255 — "
            "add --no-normalize-obs"
        )
    if is_continual(args.env_id) and parse_continual_id(args.env_id, args.continual).steps_per_task < rollout_size:
        raise UserError(
            f"--continual.steps-per-task {parse_continual_id(args.env_id, args.continual).steps_per_task} is shorter than one "
            f"rollout ({args.num_steps} steps × {args.num_envs} envs), so tasks would be skipped — raise it or lower "
            "--num-steps"
        )


def check_rollout_spaces(env: Any, env_id: str, agent: str, frames: bool) -> None:
    """One-line UserError for spaces an on-policy agent cannot take: it wants vector observations or Atari frames, and
    Discrete or Box actions."""
    space, obs_shape = env.single_action_space, env.single_observation_space.shape
    if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete)) or not (frames or len(obs_shape) == 1):
        raise UserError(
            f"{agent} supports vector observations or Atari frames with Discrete or Box actions; "
            f"{env_id} has {env.single_observation_space} → {space}"
        )
