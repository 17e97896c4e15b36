"""Exploration: ε-greedy action selection, shared by Double DQN (acting and evaluation) and PPO's Atari evaluation, and
FastTD3's per-env Gaussian exploration scales (TD3 with --exploration-noise-max)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn


def uniform_or_explore(
    act_randomly: bool, explore: Callable, obs: torch.Tensor, low: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """The actions of an off-policy actor-critic in a Box [low, high]: drawn uniformly while it acts at random (before
    learning starts), else `explore(obs, noise)` with noise ~ N(0, I) of shape (envs, |A|), drawn here, outside any
    compiled or captured step."""
    shape = (obs.shape[0], low.shape[-1])
    if act_randomly:
        return low + torch.rand(shape, device=low.device) * (high - low)
    return explore(obs, torch.randn(shape, device=low.device))


def exploration_draws(batch: int, num_actions: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The random numbers of ε-greedy, in the order it has always drawn them: a uniform action, then u ~ U(0, 1), per row."""
    random_actions = torch.randint(0, num_actions, (batch,), device=device)
    return random_actions, torch.rand((batch,), device=device)


def epsilon_greedy(
    q_values: torch.Tensor, epsilon: float | torch.Tensor, draws: tuple[torch.Tensor, torch.Tensor] | None = None
) -> torch.Tensor:
    """A uniformly random action with probability ε, else the greedy one; (batch, actions) → (batch,), on device.
    `draws` = exploration_draws(…) made by the caller (a compiled or captured acting step), else drawn here."""
    greedy = q_values.argmax(dim=1)
    random_actions, uniform = (
        exploration_draws(greedy.shape[0], q_values.shape[1], q_values.device) if draws is None else draws
    )
    return torch.where(uniform < epsilon, random_actions, greedy)


class ExplorationScales(nn.Module):
    """FastTD3's per-env exploration (Seo et al. 2025): env i adds N(0, σᵢ²)·scale noise, σᵢ ~ U[low, high], drawn again
    when its episode ends (`redraw`, with the random numbers drawn outside any captured step)."""

    def __init__(self, num_envs: int, low: float, high: float, device: torch.device) -> None:
        super().__init__()
        self.low, self.high = low, high
        self.register_buffer("std", low + torch.rand(num_envs, device=device) * (high - low))

    @torch.no_grad()
    def redraw(self, ended: torch.Tensor) -> None:
        self.std.copy_(torch.where(ended, self.low + torch.rand_like(self.std) * (self.high - self.low), self.std))
