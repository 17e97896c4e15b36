"""Exploration: ε-greedy action selection, shared by Double DQN (acting and evaluation) and PPO's Atari evaluation, and
FastTD3's per-env Gaussian exploration scales (TD3 with --exploration-noise-max).

Every draw comes from the generator of the member it is for (cleanrl_plus.members): observations and actions are
(members, N, ...), and member k's exploration depends on its own seed only."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from cleanrl_plus.members import Members


def uniform_or_explore(
    act_randomly: bool, explore: Callable, obs: torch.Tensor, low: torch.Tensor, high: torch.Tensor, members: Members
) -> torch.Tensor:
    """The actions of an off-policy actor-critic in a Box [low, high]: drawn uniformly while it acts at random (before
    learning starts), else `explore(obs, noise)` with noise ~ N(0, I) of shape (members, envs, |A|), drawn here, outside
    any compiled or captured step."""
    shape = (obs.shape[1], low.shape[-1])
    if act_randomly:
        return low + members.rand(*shape) * (high - low)
    return explore(obs, members.randn(*shape))


def exploration_draws(members: Members, batch: int, num_actions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The random numbers of ε-greedy for `batch` rows of each member, in the order it has always drawn them: a uniform
    action, then u ~ U(0, 1), per row; (members, batch) each."""
    random_actions = members.randint(num_actions, batch)
    return random_actions, members.rand(batch)


def epsilon_greedy(
    q_values: torch.Tensor, epsilon: float | torch.Tensor, draws: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """A uniformly random action with probability ε, else the greedy one; (members, batch, actions) → (members, batch), on
    device. `draws` = exploration_draws(…), made by the caller outside any compiled or captured step."""
    random_actions, uniform = draws
    return torch.where(uniform < epsilon, random_actions, q_values.argmax(dim=-1))


class ExplorationScales(nn.Module):
    """FastTD3's per-env exploration (Seo et al. 2025): env i adds N(0, σᵢ²)·scale noise, σᵢ ~ U[low, high], drawn again
    when its episode ends (`redraw`, with the random numbers drawn outside any captured step); σ is (members, N)."""

    def __init__(self, members: Members, num_envs: int, low: float, high: float) -> None:
        super().__init__()
        self.low, self.high = low, high
        self.register_buffer("std", low + members.rand(num_envs) * (high - low))

    @torch.no_grad()
    def redraw(self, ended: torch.Tensor, members: Members) -> None:
        fresh = self.low + members.rand(self.std.shape[1]) * (self.high - self.low)
        self.std.copy_(torch.where(ended, fresh, self.std))
