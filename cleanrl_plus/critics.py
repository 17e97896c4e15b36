"""The critic target and loss TD3 and SAC share, for scalar critics and for C51 critics (cleanrl_plus/distributional.py).

    y = r + d·(λ·min_i Q̄_i(s', a') + (1 − λ)·max_i Q̄_i(s', a') − α·log π(a'|s'))     d = γ^m(1 − terminated)
    C51: Φ(r − d·α·log π(a'|s') + d·z) of the target critic with the smaller mean (λ = 1) or the mixture (λ < 1)
    minimise Σ_i (Q_i(s, a) − y)²   (C51: Σ_i cross-entropy(p_i(s, a), y))

λ = 1 is clipped double-Q (Fujimoto et al. 2018); λ < 1 CIR's convex target (plasticity/cir.py). The entropy term is
SAC's (Haarnoja et al. 2018), absent for TD3; with n-step batches r is the n-step return and the entropy term enters
only at the bootstrap state, as FastSAC (Seo et al. 2025). One critic: its own value, whatever λ.

In a group (cleanrl_plus.members) every quantity carries the members first: batches (members, B, ...), a critic's
values (members, copies, B), α (members,); each member's losses are its own means.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from cleanrl_plus.distributional import CategoricalCritic, clipped_double, cross_entropy, expected_value, project
from cleanrl_plus.replay import Batch, bootstrap_discount


def convex_min_max(q: torch.Tensor, convex_lambda: float) -> torch.Tensor:
    """λ·min_i q_i + (1 − λ)·max_i q_i over the critics of each member, (members, copies, B) → (members, B); exactly the
    min when λ = 1."""
    if convex_lambda == 1.0:
        return q.min(dim=1).values
    return convex_lambda * q.min(dim=1).values + (1.0 - convex_lambda) * q.max(dim=1).values


def q_target(
    critic_target: nn.Module,
    batch: Batch,
    next_actions: torch.Tensor,
    gamma: float,
    convex_lambda: float = 1.0,
    alpha: torch.Tensor | None = None,
    next_log_prob: torch.Tensor | None = None,
) -> torch.Tensor:
    """The target of every critic for a replay batch and the actions a' at its s' (module docstring): (members, B) for
    scalar critics, (members, B, atoms) for C51; `alpha` (members,) and `next_log_prob` (members, B) give SAC's soft
    target. Call it under torch.no_grad()."""
    next_obs, rewards, discount = batch.next_obs, batch.rewards, bootstrap_discount(batch, gamma)
    if isinstance(critic_target, CategoricalCritic):
        next_probs = clipped_double(critic_target.probabilities(next_obs, next_actions), critic_target.atoms, convex_lambda)
        shifted = rewards if alpha is None else rewards - discount * alpha.unsqueeze(-1) * next_log_prob
        return project(critic_target.atoms, shifted, discount, next_probs)
    next_value = convex_min_max(critic_target(next_obs, next_actions), convex_lambda)
    if alpha is not None:
        next_value = next_value - alpha.unsqueeze(-1) * next_log_prob
    return rewards + discount * next_value


def critic_losses(
    critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(each critic's loss (members, copies), its Q-values (members, copies, B)): the mean squared TD error, or for C51
    the cross-entropy to the projected target distribution and the expected values."""
    if isinstance(critic, CategoricalCritic):
        logits = critic.logits(obs, actions)
        return cross_entropy(logits, target.unsqueeze(1).expand_as(logits)).mean(dim=-1), expected_value(logits, critic.atoms)
    q_values = critic(obs, actions)
    return F.mse_loss(q_values, target.unsqueeze(1).expand_as(q_values), reduction="none").mean(dim=-1), q_values


def critic_report(q_values: torch.Tensor, qf_losses: torch.Tensor) -> dict[str, torch.Tensor]:
    """CleanRL's critic tags: losses/qf{i}_values and losses/qf{i}_loss of each critic, losses/qf_loss their mean; one
    value per member each."""
    report = {"losses/qf_loss": qf_losses.mean(dim=1)}
    for i in range(qf_losses.shape[1]):
        report |= {f"losses/qf{i + 1}_values": q_values[:, i].mean(dim=-1), f"losses/qf{i + 1}_loss": qf_losses[:, i]}
    return report
