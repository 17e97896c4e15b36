"""What TD3's and SAC's critics share around their targets (each target is written in its agent file: td3_target,
soft_target): the bootstrapped value over the critics, their losses and their tags.

    V̄(s') = λ·min_i Q̄_i(s', a') + (1 − λ)·max_i Q̄_i(s', a')
    minimise Σ_i (Q_i(s, a) − y)²   (C51: Σ_i cross-entropy(p_i(s, a), y); its target: distributional.categorical_target)

λ = 1 is clipped double-Q (Fujimoto et al. 2018); λ < 1 CIR's convex target (plasticity/cir.py). One critic: its own
value, whatever λ.

In a group (cleanrl_plus.members) every quantity carries the members first: batches (members, B, ...), a critic's
values (members, copies, B), α (members,); each member's losses are its own means.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from cleanrl_plus.distributional import CategoricalCritic, cross_entropy, expected_value


def convex_min_max(q: torch.Tensor, convex_lambda: float) -> torch.Tensor:
    """λ·min_i q_i + (1 − λ)·max_i q_i over the critics of each member, (members, copies, B) → (members, B); exactly the
    min when λ = 1."""
    if convex_lambda == 1.0:
        return q.min(dim=1).values
    return convex_lambda * q.min(dim=1).values + (1.0 - convex_lambda) * q.max(dim=1).values


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
