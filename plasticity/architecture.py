"""Architecture remedies: LayerNorm, CReLU, deep Fourier features (--net.*) and
Normalize-and-Project (--nap.*).

- LayerNorm (Lyle, Zheng, Khetarpal, van Hasselt, Pascanu, Martens, Dabney, "Disentangling the
  causes of plasticity loss in neural networks", 2024): h = φ(LN(W·x + b)), LayerNorm (learnt
  scale and shift, ε = 1e-5, PyTorch's default) on the pre-activation of every hidden layer, before
  the nonlinearity [paper: "before each nonlinearity"]; the output layer is left alone.
- CReLU (Abbas, Zhao, Modayil, White, Machado, "Loss of plasticity in continual deep RL", CoLLAs
  2023): φ(z) = [ReLU(z), ReLU(−z)]: of each ± pair exactly one is active (z ≠ 0), so no unit
  is ever dormant for all inputs.
- Deep Fourier features (Lewandowski, Schuurmans, Machado, "Plastic learning with deep Fourier
  features", 2024): φ(z) = [sin(z), cos(z)] of each pre-activation, a unit that is locally linear
  around any z and never saturates.
- Width policy (ours; the papers compare both): CReLU and Fourier double the features, so a hidden
  layer of width w gets w/2 pre-activation units whose activation is w wide. Every layer reading it,
  every head and every diagnostic keeps its input width, and the parameter count stays close to the
  ReLU network's (cleanrl_plus.nn.units_for).
- Normalize-and-Project, NaP (Lyle, Zheng, Khetarpal, Martens, van Hasselt, Pascanu, Dabney,
  "Normalization and effective learning rates in reinforcement learning", NeurIPS 2024; no official
  code): a normalisation layer before every nonlinearity [paper], which makes each layer's output
  invariant to the scale of its weights, and after every optimiser step each weight matrix W
  rescaled to its norm at initialisation, W ← W·‖W₀‖_F/‖W‖_F, so growing norms cannot
  decay the effective learning rate [paper]. `--nap.enabled` therefore puts a LayerNorm before every
  nonlinearity of every torso: MLP hidden layers, the convolutions and dense layer of the CNNs
  (cleanrl_plus.encoders), and the expansion layer of SimBa's residual blocks, whose ReLU otherwise
  reads an unnormalised W₁·LN(h) (cleanrl_plus.simba). Projected: every weight matrix that a norm
  follows — hidden layers and CNN kernels, each member and copy on its own [paper]; left free:
  biases, the norms' scale and shift, and the output heads, whose scale sets the output's (a head
  projected to its initial norm, 0.01 for PPO's policy, pins μ near 0) [ours: the text of arXiv
  2407.01800v1 that we could check names no projection of the unnormalised output layer].

Reach: MLP torsos of every agent (incl. the twin-critic ensemble stack and SAC's MLP encoder), SimBa
residual blocks (activation; --net.norm layer is refused there, NaP adds its one norm), and DDQN's
and PPO's CNNs (--net.norm and NaP normalise every layer before a ReLU, the convolutions included;
--net.activation reaches the dense layer only). ReDo and CBP need units that can be dormant, so they
refuse CReLU and Fourier units (plasticity/catalogue.py).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
import torch.nn as nn

from plasticity.regularizers import weight_layers


@dataclasses.dataclass
class NetArgs:
    norm: Literal["none", "layer"] = "none"
    """normalisation before each hidden nonlinearity: none, or LayerNorm (Lyle et al. 2024)"""
    activation: Literal["auto", "relu", "leaky-relu", "tanh", "crelu", "fourier"] = "auto"
    """hidden nonlinearity: auto (the agent's own: ReLU; PPO's tanh, ReLU on Atari), ReLU, LeakyReLU
    (slope 0.1, TRAC's and C-CHAIN's classic control), tanh, CReLU [relu(z), relu(−z)] or deep
    Fourier features [sin z, cos z]; CReLU/Fourier layers get half the units (same feature width)"""


@dataclasses.dataclass
class NaPArgs:
    enabled: bool = False
    """Normalize-and-Project: a LayerNorm before every nonlinearity, and each weight matrix rescaled
    to its initial norm after every step"""


def torso_settings(net: NetArgs, nap: NaPArgs, default_activation: str = "relu") -> tuple[str, str]:
    """(norm, activation) for the network builders: NaP implies LayerNorm; 'auto' is the agent's own
    activation."""
    norm = "layer" if nap.enabled else net.norm
    return norm, default_activation if net.activation == "auto" else net.activation


def _matrix_norms(weight: torch.Tensor, ensemble: bool) -> torch.Tensor:
    """Frobenius norm of each weight matrix: one per ensemble entry (E, 1, …), else a scalar."""
    if ensemble:
        return torch.linalg.vector_norm(weight, dim=tuple(range(1, weight.dim())), keepdim=True)
    return torch.linalg.vector_norm(weight)


class NormProjector:
    """NaP's projection for one network, its `heads` left free: targets are the weight norms at
    construction (checkpointed)."""

    def __init__(self, module: nn.Module, heads: tuple[nn.Module, ...] = ()) -> None:
        head_layers = {id(m) for head in heads for m in head.modules()}
        # fixed at construction: resets write into these tensors
        self.layers = [
            (layer, ensemble)
            for layer, ensemble in weight_layers(module)
            if id(layer) not in head_layers
        ]
        self.targets = [
            _matrix_norms(layer.weight.detach(), ensemble).clone()
            for layer, ensemble in self.layers
        ]
        # in place: cleanrl_plus/speed.py
        self.projections = torch.zeros(
            (), dtype=torch.int64, device=next(module.parameters()).device
        )

    @torch.no_grad()
    def project(self) -> None:
        for (layer, ensemble), target in zip(self.layers, self.targets):
            layer.weight.mul_(target / _matrix_norms(layer.weight, ensemble).clamp_min(1e-12))
        self.projections += 1

    def state_dict(self) -> dict:
        return {"targets": self.targets, "projections": self.projections}

    def load_state_dict(self, state: dict) -> None:
        for target, saved in zip(self.targets, state["targets"]):
            target.copy_(saved)
        self.projections.copy_(state["projections"])
