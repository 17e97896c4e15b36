"""Categorical (C51) critics: Bellemare, Dabney, Munos, "A Distributional Perspective on RL", ICML 2017; as FastTD3
(Seo et al. 2025) uses them in TD3.

Each critic outputs logits over K atoms z_j = v_min + j·Δz, Δz = (v_max − v_min)/(K − 1); Q(s, a) = Σ_j p_j z_j.
The target distribution of a transition is the next state's distribution shifted and shrunk, r + d·z_j with
d = γ^m(1 − terminated), projected back onto the atoms (Φ: each shifted atom, clipped to [v_min, v_max], splits its
probability between its two neighbours in proportion to closeness); the critic minimises the cross-entropy
−Σ_j Φ_j log p_j(s, a).

Clipped double-Q on distributions (FastTD3): per transition, the target network with the smaller expected value at
(s', ã) supplies the distribution that both critics learn; with CIR's convex target (λ < 1) the mixture
λ·p_min + (1 − λ)·p_max, whose mean is CIR's λ·min + (1 − λ)·max. Defaults: FastTD3's 101 atoms on ±250 (their
`hyperparams.py`; MuJoCo Playground ±10, HumanoidBench up to ±10,000): the support must cover the task's returns.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import torch
import torch.nn as nn
import torch.nn.functional as F

from envs.ranges import AnyFinite, Range


@dataclasses.dataclass
class CriticArgs:
    distributional: bool = False
    """C51 critics: each twin predicts a distribution over --critic.num-atoms returns in [v-min, v-max], trained by
    cross-entropy to the projected target (FastTD3); the actor maximises its expected value"""
    num_atoms: Annotated[int, Range(ge=2)] = 101
    """atoms K of the categorical support (FastTD3: 101; 251 on IsaacLab)"""
    v_min: AnyFinite = -250.0
    """lowest return on the support (FastTD3: −250; it must cover the task's discounted returns)"""
    v_max: AnyFinite = 250.0
    """highest return on the support (FastTD3: 250)"""


def support(args: CriticArgs) -> torch.Tensor:
    """The atoms z_0 … z_{K−1}."""
    return torch.linspace(args.v_min, args.v_max, args.num_atoms)


def expected_value(logits: torch.Tensor, atoms: torch.Tensor) -> torch.Tensor:
    """Q = Σ_j softmax(logits)_j·z_j over the last dimension."""
    return (logits.softmax(dim=-1) * atoms).sum(dim=-1)


def project(atoms: torch.Tensor, rewards: torch.Tensor, discount: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Φ(r + d·z): probabilities `probs` (..., B, K) of the atoms, shifted per transition (rewards, discount: (..., B),
    e.g. (members, B)) and projected back onto the atoms. Scatter-adds only: static shapes, no host sync; the mass of
    every row stays 1."""
    num_atoms = atoms.shape[0]
    v_min, v_max = atoms[0], atoms[-1]
    shifted = (rewards[..., None] + discount[..., None] * atoms).clamp(v_min, v_max)  # (..., B, K)
    position = (shifted - v_min) / ((v_max - v_min) / (num_atoms - 1))  # in [0, K − 1]
    lower = position.floor().clamp(max=num_atoms - 2)
    upper_share = (position - lower).expand_as(probs)  # the part that goes to the upper neighbour lower + 1
    lower = lower.long().expand_as(probs)
    projected = torch.zeros_like(probs)
    projected.scatter_add_(-1, lower, probs * (1.0 - upper_share))
    return projected.scatter_add_(-1, lower + 1, probs * upper_share)


def clipped_double(probs: torch.Tensor, atoms: torch.Tensor, convex_lambda: float = 1.0) -> torch.Tensor:
    """The target distribution from each member's twin target distributions `probs` (members, 2, B, K): per transition
    the one with the smaller mean (clipped double-Q), or λ·p_min + (1 − λ)·p_max (CIR's convex target); (members, B, K).
    One critic (members, 1, B, K): its own."""
    if probs.shape[1] == 1:
        return probs[:, 0]
    means = (probs * atoms).sum(dim=-1)
    first_is_lower = (means[:, 0] <= means[:, 1])[..., None]
    lower = torch.where(first_is_lower, probs[:, 0], probs[:, 1])
    if convex_lambda == 1.0:
        return lower
    upper = torch.where(first_is_lower, probs[:, 1], probs[:, 0])
    return convex_lambda * lower + (1.0 - convex_lambda) * upper


def categorical_target(
    critic_target: "CategoricalCritic",
    next_obs: torch.Tensor,
    next_actions: torch.Tensor,
    rewards: torch.Tensor,
    discount: torch.Tensor,
    convex_lambda: float = 1.0,
) -> torch.Tensor:
    """C51's TD target: Φ(r + d·z) of the target distribution at (s', a') (clipped_double's), (members, B, K); SAC passes
    rewards already shifted by its entropy term, r − d·α·log π(a'|s')."""
    next_probs = clipped_double(critic_target.probabilities(next_obs, next_actions), critic_target.atoms, convex_lambda)
    return project(critic_target.atoms, rewards, discount, next_probs)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """−Σ_j target_j·log softmax(logits)_j over the last dimension."""
    return -(target * F.log_softmax(logits, dim=-1)).sum(dim=-1)


class CategoricalCritic(nn.Module):
    """An ensemble critic whose heads output K logits (`base(obs, action)` → (members, copies, B, K)). Called like a
    scalar critic it returns expected values (members, copies, B), so diagnostics, C-CHAIN, LEAST and the actor's Q₁
    work on it unchanged; `logits` and `probabilities` give the distributions the loss needs."""

    def __init__(self, base: nn.Module, args: CriticArgs) -> None:
        super().__init__()
        self.base = base
        self.register_buffer("atoms", support(args))

    def logits(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.base(obs, action)

    def probabilities(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.base(obs, action).softmax(dim=-1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return expected_value(self.base(obs, action), self.atoms)

    def q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return expected_value(self.base.q1(obs, action), self.atoms)

    @property
    def head(self) -> nn.Module:
        return self.base.head

    def layout(self):
        """What resets and diagnostics read: the base critic's layers (its head outputs the logits)."""
        return self.base.layout()
