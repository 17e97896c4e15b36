"""Generalised advantage estimation (Schulman et al. 2016, arXiv 1506.02438), PPO's and GTR's: only that.

Truncation is handled by bootstrapping, never by treating the cut as terminal: V(s'ₜ) is the value of the true next
observation (the final observation where an episode ended), and

    δₜ = rₜ + γ(1 − terminatedₜ)·V(s'ₜ) − V(sₜ)
    Âₜ = δₜ + γλ(1 − doneₜ)·Âₜ₊₁,      doneₜ = terminatedₜ ∨ truncatedₜ,   Â_T = 0.

Without truncations this is exactly CleanRL's recursion (ppo_continuous_action.py); with one, the cut step still
bootstraps from V(s_final) while the advantage does not leak into the next episode. Every tensor is (members, T, N):
each member's recursion runs over its own rollout.
"""

from __future__ import annotations

import torch


def generalized_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(γ, λ) over (members, T, N) tensors; returns (advantages, returns = advantages + values)."""
    not_terminated, not_done = 1.0 - terminated.float(), 1.0 - dones.float()
    deltas = rewards + gamma * not_terminated * next_values - values
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = deltas[:, t] + gamma * gae_lambda * not_done[:, t] * running
        advantages[:, t] = running
    return advantages, advantages + values
