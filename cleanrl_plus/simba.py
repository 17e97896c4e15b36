"""SimBa network blocks (Lee et al., "SimBa: Simplicity Bias for Scaling Up Parameters in Deep RL", ICLR 2025).

Encoder: h₀ = W_in·z (orthogonal, gain 1, no activation); N residual blocks h ← h + W₂·ReLU(W₁·LN(h)) with
W₁: d → 4d and W₂: 4d → d (He-normal, truncated as in flax); a final LN. With `norm="layer"` (Normalize-and-Project,
which needs a norm right before every nonlinearity) a block computes h + W₂·ReLU(LN(W₁·LN(h))). Every layer is an ensemble
layer,
so twin critics run as one batched matmul per layer: inputs (E, B, in) → features (E, B, d).
The plain-MLP torso (ReLU MLP, PyTorch default init) lets a user compare SAC with SAC+SimBa in one file.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from cleanrl_plus.nn import (
    ACTIVATIONS,
    EnsembleLinear,
    ensemble_hidden,
    hidden_linear,
    units_for,
)
from cleanrl_plus.nn import (
    EnsembleLayerNorm as _EnsembleLayerNorm,
)

LAYER_NORM_EPS = 1e-6  # flax's LayerNorm default, as in the official SimBa code


def orthogonal_(layer: EnsembleLinear, gain: float = 1.0) -> EnsembleLinear:
    with torch.no_grad():
        for entry in layer.weight:  # one orthogonal matrix per ensemble entry (a copy of a member)
            nn.init.orthogonal_(entry, gain=gain)
        layer.bias.zero_()
    return layer


def he_normal_(layer: EnsembleLinear) -> EnsembleLinear:
    """flax he_normal: truncated normal at ±2σ, rescaled so the std is √(2 / fan_in)."""
    std = math.sqrt(2.0 / layer.weight.shape[1]) / 0.87962566103423978
    with torch.no_grad():
        nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
        layer.bias.zero_()
    return layer


def EnsembleLayerNorm(ensemble_size: int, width: int, eps: float = LAYER_NORM_EPS) -> _EnsembleLayerNorm:
    """cleanrl_plus.nn.EnsembleLayerNorm with flax's ε, as the official SimBa code."""
    return _EnsembleLayerNorm(ensemble_size, width, eps)


class ResidualBlock(nn.Module):
    def __init__(self, ensemble_size: int, width: int, activation: str = "relu", norm: str = "none") -> None:
        super().__init__()
        self.norm = EnsembleLayerNorm(ensemble_size, width)
        self.expand = he_normal_(hidden_linear(ensemble_size, width, units_for(4 * width, activation), norm))
        self.activation = ACTIVATIONS[activation]()
        self.contract = he_normal_(EnsembleLinear(ensemble_size, 4 * width, width))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.contract(self.activation(self.expand(self.norm(h))))


class SimbaEncoder(nn.Module):
    def __init__(
        self, ensemble_size: int, in_features: int, width: int, num_blocks: int, activation: str = "relu", norm: str = "none"
    ) -> None:
        super().__init__()
        self.embed = orthogonal_(EnsembleLinear(ensemble_size, in_features, width))
        self.blocks = nn.Sequential(*(ResidualBlock(ensemble_size, width, activation, norm) for _ in range(num_blocks)))
        self.final_norm = EnsembleLayerNorm(ensemble_size, width)
        self.out_features = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.final_norm(self.blocks(self.embed(x)))


class MLPEncoder(nn.Module):
    """Plain ReLU MLP torso (the 'SAC' baseline), ensemble layers with nn.Linear's default init, or with `init`
    "orthogonal" orthogonal weights of gain √2 and zero biases (SimBa's MLPBlock, SonyResearch/simba
    scale_rl/networks/layers.py); `norm`/`activation` as --net.norm/--net.activation (cleanrl_plus.nn.ensemble_stack)."""

    def __init__(
        self,
        ensemble_size: int,
        in_features: int,
        hidden: tuple[int, ...],
        norm: str = "none",
        activation: str = "relu",
        init: str = "default",
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(ensemble_hidden(ensemble_size, (in_features, *hidden), norm, activation))
        if init == "orthogonal":
            for layer in self.layers:
                orthogonal_(layer, gain=math.sqrt(2))
        self.activation = ACTIVATIONS[activation]()
        self.out_features = hidden[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = self.activation(layer(x))
        return x


def relu_layers(encoder: nn.Module) -> list[EnsembleLinear]:
    """The layers whose outputs go through a ReLU (hidden units for the plasticity diagnostics)."""
    if isinstance(encoder, SimbaEncoder):
        return [block.expand for block in encoder.blocks]
    return list(encoder.layers)


def unit_pairs(encoder: nn.Module, head: nn.Module | None = None) -> list[tuple[nn.Module, nn.Module]]:
    """(layer feeding a ReLU, the only layer reading it) pairs, for ReDo. `head=None` when several heads read the
    last hidden layer (the actor's mean and log-std), which then cannot be recycled with an unchanged output."""
    if isinstance(encoder, SimbaEncoder):
        return [(block.expand, block.contract) for block in encoder.blocks]
    readers = list(encoder.layers[1:]) + ([head] if head is not None else [])
    return list(zip(encoder.layers, readers))
