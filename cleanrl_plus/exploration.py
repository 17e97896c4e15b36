"""ε-greedy action selection, shared by Double DQN (acting and evaluation) and PPO's Atari evaluation."""

from __future__ import annotations

import torch


def exploration_draws(batch: int, num_actions: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The random numbers of ε-greedy, in the order it has always drawn them: a uniform action, then u ~ U(0, 1), per row."""
    random_actions = torch.randint(0, num_actions, (batch,), device=device)
    return random_actions, torch.rand((batch,), device=device)


def epsilon_greedy(q_values: torch.Tensor, epsilon: float | torch.Tensor, draws: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """A uniformly random action with probability ε, else the greedy one; (batch, actions) → (batch,), on device.
    `draws` = exploration_draws(…) made by the caller (a compiled or captured acting step), else drawn here."""
    greedy = q_values.argmax(dim=1)
    random_actions, uniform = exploration_draws(greedy.shape[0], q_values.shape[1], q_values.device) if draws is None else draws
    return torch.where(uniform < epsilon, random_actions, greedy)
