"""CIR: Constrained Initial Representations.

Paper: Lyu, Yang, Qiao, Liu, Liu, Ye, Lu, Li, "Temporal Difference Learning with Constrained Initial
Representations" (2026, arXiv 2602.11800). Official code: dmksjfl/CIR; the torso is `DoubleQFunc`
and AvgL1Norm is `AvgL1Norm` in `dmc/algo/cir.py` (HumanoidBench: `humanoidbench/algo/cir.py`).
Where each default is read: width 512 (`--hidden-sizes 512,512` in `dmc/train_dmc.py` and the
README's commands); one LayerNorm for every site of both critics (`DoubleQFunc.layernorm`);
PyTorch's default initialisation and LayerNorm ε (the code sets neither); the target λ = 0.3 on
DMC (`update_q_functions` in `dmc/algo/cir.py`) and plain min on HumanoidBench (the same in
`humanoidbench/algo/cir.py`); SMR with M = 2 (the README's `--smr --ratio 2`). Our default λ = 1
keeps TD3/SAC's clipped double-Q unless asked for [our choice].

Two plug-ins that TD3 and SAC take from the command line:

- the **CIR critic torso** (`--cir.critic`): for each critic, on x = concat(s, a) with no
  observation normaliser,
      z₀ = ELU(tanh(AvgL1Norm(LN(W₀x))))        the constrained initial representation
      z₁ = ELU(LN(W₁z₀)),  z₂ = ELU(LN(W₂z₁))   "down" layers
      z₃ = LN(M₁·ELU(LN(U₁z₂)) + z₂)            "up" block with a skip from z₂
      z₄ = LN(M₂·ELU(LN(U₂z₃)) + z₁)            the long shallow→deep skip from z₁
      Q = wᵀz₄ + b,     AvgL1Norm(z) = 0.1·z / max(mean|z|, 1e-8)
  width 512, PyTorch default init; by default ONE LayerNorm module is shared by every site of both
  critics, as in the official code (tied affine parameters; in a group, one per member);
  `--cir.no-shared-layer-norm` gives each site of each critic its own.
- the **convex Q target** (`--cir.convex-lambda λ`): λ·min(Q̄₁,
  Q̄₂) + (1 − λ)·max(Q̄₁, Q̄₂) over twin target
  critics, = mean + (½ − λ)·|Q̄₁ − Q̄₂|; λ = 1 is clipped double-Q (the default here),
  CIR uses 0.3 on DMC and plain min (λ = 1) on HumanoidBench.
CIR's update schedule, same-batch reuse (SMR, M = 2), is the agents' `--updates-per-step 2
--reuse-batch`.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

from cleanrl_plus.nn import EnsembleLayerNorm as _EnsembleLayerNorm
from cleanrl_plus.nn import EnsembleLinear
from cleanrl_plus.simba import EnsembleLayerNorm
from envs.ranges import AtLeastOne, Fraction
from plasticity.diagnostics import ActivationProbe
from plasticity.network import Layout

TORCH_LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, as CIR's PyTorch code


@dataclasses.dataclass
class CIRArgs:
    critic: bool = False
    """use CIR's critic torso (tanh-constrained first layer, U-shaped skips, width --cir.width) for
    every critic"""
    width: AtLeastOne = 512
    """hidden width H of the CIR critic"""
    shared_layer_norm: bool = True
    """one LayerNorm shared by every site of both critics, as the official code (False: one per site
    and critic)"""
    convex_lambda: Fraction = 1.0
    """twin-critic target λ·min + (1 − λ)·max: 1 = clipped double-Q; CIR on DMC uses 0.3"""


def avg_l1_norm(z: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """0.1·z / max(mean_j |z_j|, eps): every feature vector gets a mean absolute value of 0.1
    (TD7's AvgL1Norm)."""
    return 0.1 * z / z.abs().mean(dim=-1, keepdim=True).clamp_min(eps)


class MemberLayerNorm(_EnsembleLayerNorm):
    """One LayerNorm affine per member of a group, shared by its `copies` critics: (members·copies,
    B, H) inputs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = nn.functional.layer_norm(x, x.shape[-1:], eps=self.eps).unflatten(
            0, (self.weight.shape[0], -1)
        )
        return (normed * self.weight.unsqueeze(1) + self.bias.unsqueeze(1)).flatten(0, 1)


class CIREncoder(nn.Module):
    """CIR's critic torso for an ensemble of critics, `ensemble_size` = members × the critics of
    each (member-major): (E, B, in) → (E, B, H)."""

    SITES = 7  # LayerNorm sites: W₀, W₁, W₂, U₁, z₃, U₂, z₄

    def __init__(
        self,
        ensemble_size: int,
        in_features: int,
        width: int,
        shared_layer_norm: bool = True,
        members: int = 1,
    ) -> None:
        super().__init__()
        linear = lambda i, o: EnsembleLinear(ensemble_size, i, o)
        self.first, self.down1, self.down2 = (
            linear(in_features, width),
            linear(width, width),
            linear(width, width),
        )
        self.up1_in, self.up1_out = linear(width, width), linear(width, width)
        self.up2_in, self.up2_out = linear(width, width), linear(width, width)
        if shared_layer_norm:
            # one affine per member, over its critics
            shared = MemberLayerNorm(members, width, eps=TORCH_LAYER_NORM_EPS)
            self.norms = nn.ModuleList([shared] * self.SITES)
        else:
            self.norms = nn.ModuleList(
                EnsembleLayerNorm(ensemble_size, width, eps=TORCH_LAYER_NORM_EPS)
                for _ in range(self.SITES)
            )
        # one ELU module per site, so that diagnostics can read the hidden activations with hooks
        self.activations = nn.ModuleList(nn.ELU() for _ in range(5))
        # EnsembleLinear initialises like nn.Linear: PyTorch's default, as the official code
        self.out_features = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ln, act = self.norms, self.activations
        z0 = act[0](torch.tanh(avg_l1_norm(ln[0](self.first(x)))))
        z1 = act[1](ln[1](self.down1(z0)))
        z2 = act[2](ln[2](self.down2(z1)))
        z3 = ln[4](self.up1_out(act[3](ln[3](self.up1_in(z2)))) + z2)
        return ln[6](self.up2_out(act[4](ln[5](self.up2_in(z3)))) + z1)


class CIRCritic(nn.Module):
    """Twin Q-functions with CIR torsos for each of `members`, TD3's critic interface: (members, B,
    ...) inputs, forward → (members, 2, B); q1 → (members, B) (C51 logits: `outputs` per critic,
    (members, 2, B, outputs) and (members, B, outputs))."""

    def __init__(
        self, obs_dim: int, action_dim: int, args: CIRArgs, outputs: int = 1, members: int = 1
    ) -> None:
        super().__init__()
        # the agent's observation statistics (attached by it), not learned
        self.normalize: nn.Module = nn.Identity()
        self.encoder = CIREncoder(
            members * 2, obs_dim + action_dim, args.width, args.shared_layer_norm, members
        )
        self.head = EnsembleLinear(members * 2, args.width, outputs)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.normalize(obs), action], dim=-1)
        # each member's input to both of its critics
        x = x.unsqueeze(1).expand(-1, 2, -1, -1).flatten(0, 1)
        return self.head(self.encoder(x)).unflatten(0, (obs.shape[0], 2)).squeeze(-1)

    def q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self(obs, action)[:, 0]

    def layout(self) -> Layout:
        return cir_layout(self.encoder, self.head)


def cir_layout(encoder: CIREncoder, head: nn.Module) -> Layout:
    """Diagnostics read the five ELU outputs of a CIR torso as its hidden units; ReDo and CBP have
    no units to recycle (they cannot keep the output unchanged through LayerNorms and skips)."""
    return Layout(
        hidden=list(encoder.activations),
        heads=(head,),
        unit_pairs=[],
        probe=ActivationProbe(encoder.activations, head, activation=lambda h: h),
    )
