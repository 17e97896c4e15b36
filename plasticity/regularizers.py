"""Loss and weight-constraint regularisers (--reg.*, --clip.*): L2, regenerative L2-init, Parseval, weight clipping.

Each penalty is added to the loss of the network it regularises (TD3/SAC: critic and actor losses; DDQN: the TD
loss; PPO/GTR: the joint loss over policy and value network), before the backward pass, so it goes through the
network's own optimiser (Adam: a *coupled* penalty, not AdamW's decoupled decay). Sums run over all entries.

- L2: λ·Σ_θ θ² over all trainable parameters (weights and biases). Studied as a plasticity remedy by Lyle et al.
  2024 ("Disentangling the causes of plasticity loss"); no default in the papers we trust — off unless given.
- L2-init, regenerative regularisation (Kumar, Marklund, Van Roy, "Maintaining plasticity in continual learning via
  regenerative regularization", CoLLAs 2024): λ·Σ_θ (θ − θ₀)², θ₀ the parameters at construction (kept through resets
  and checkpoints) [paper]. Their swept λ ∈ {1e-2, …, 1e-6} [paper]; off by default.
- Parseval (Chung, Cherif, Meger, Precup, "Parseval regularization for continual reinforcement learning", NeurIPS
  2024): λ·Σ_l ‖W_l W_lᵀ − s·I‖²_F over the hidden layers' weight matrices W_l (rows = units; a conv kernel flattened
  to (out, in·k·k); each ensemble member its own W), output heads excluded [paper: all layers but the last].
  λ = 1e-3 for 64-wide networks [paper, as reported by a third-party summary: check before relying on it]; s = 1
  [ours: the paper also learns per-unit diagonal scales and an input scale, which we do not add].
- Weight clipping (Elsayed, Lan, Lyle, Mahmood, "Weight clipping for deep continual and reinforcement learning",
  RLC 2024): after every optimiser step each parameter of a layer is clipped to [−κ·b_l, κ·b_l], b_l the bound of
  the layer's initial weight distribution [paper]. We take b_l = max|W₀| of the layer's weights at construction (for
  PyTorch's uniform ±1/√fan_in init that is the bound itself; for orthogonal/normal inits the sample maximum)
  [ours]; the layer's bias is clipped to the same bound, LayerNorm scale/shift are not clipped [ours]. κ = 2 [recall:
  the paper's RL runs used small multiples of the init bound; check before relying on it].
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

from cleanrl_plus.nn import EnsembleLinear
from cleanrl_plus.ranges import NonNegative, Positive


@dataclasses.dataclass
class RegArgs:
    l2: NonNegative = 0.0
    """L2 regularisation λ·Σθ² added to each network's loss (coupled, not AdamW's decay; 0 = off)"""
    l2_init: NonNegative = 0.0
    """regenerative regularisation λ·Σ(θ − θ₀)² towards the initial parameters (Kumar et al. 2024; 0 = off)"""
    parseval: NonNegative = 0.0
    """Parseval regularisation λ·Σ‖WWᵀ − s·I‖²_F over hidden weight matrices (Chung et al. 2024; 1e-3 in the paper; 0 = off)"""
    parseval_scale: Positive = 1.0
    """s in ‖WWᵀ − s·I‖²_F"""


@dataclasses.dataclass
class WeightClipArgs:
    kappa: NonNegative = 0.0
    """weight clipping: after every step clip each layer's parameters to ±κ·(its initial weight bound) (Elsayed et al. 2024; 0 = off)"""


def weight_layers(module: nn.Module) -> list[tuple[nn.Module, bool]]:
    """(layer, is_ensemble) for every dense, ensemble or convolution layer, in registration order."""
    layers = []
    for layer in module.modules():
        if isinstance(layer, EnsembleLinear):
            layers.append((layer, True))
        elif isinstance(layer, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            layers.append((layer, False))
    return layers


def trainable(parameters) -> list[torch.Tensor]:
    return [p for p in parameters if p.requires_grad]


def l2_penalty(parameters: list[torch.Tensor]) -> torch.Tensor:
    """Σ_θ θ²."""
    return torch.stack([p.square().sum() for p in parameters]).sum()


def l2_init_penalty(parameters: list[torch.Tensor], initial: list[torch.Tensor]) -> torch.Tensor:
    """Σ_θ (θ − θ₀)²."""
    return torch.stack([(p - p0).square().sum() for p, p0 in zip(parameters, initial)]).sum()


def rows_as_units(layer: nn.Module, ensemble: bool) -> torch.Tensor:
    """The weight matrix with one row per output unit: (out, in), or (E, out, in) for an ensemble layer."""
    if ensemble:
        return layer.weight.transpose(1, 2)  # stored (E, in, out)
    return layer.weight.flatten(1)


def parseval_penalty(matrices: list[torch.Tensor], scale: float) -> torch.Tensor:
    """Σ ‖W Wᵀ − s·I‖²_F over matrices W of shape (..., out, in)."""
    total = []
    for w in matrices:
        gram = w @ w.transpose(-1, -2)
        identity = torch.eye(gram.shape[-1], device=w.device, dtype=w.dtype)
        total.append((gram - scale * identity).square().sum())
    return torch.stack(total).sum()


class WeightClipper:
    """Clip each layer's weight and bias to ±κ·b_l after every step; b_l = max|W₀| (module docstring)."""

    def __init__(self, module: nn.Module, kappa: float) -> None:
        self.layers = [layer for layer, _ in weight_layers(module)]
        self.bounds = [kappa * float(layer.weight.detach().abs().max()) for layer in self.layers]  # host floats, once
        self.clips = torch.zeros((), dtype=torch.int64, device=next(module.parameters()).device)  # in place: graphs.py

    @torch.no_grad()
    def clip(self) -> None:
        for layer, bound in zip(self.layers, self.bounds):
            layer.weight.clamp_(-bound, bound)
            if layer.bias is not None:
                layer.bias.clamp_(-bound, bound)
        self.clips += 1

    def state_dict(self) -> dict:
        return {"bounds": list(self.bounds), "clips": self.clips}

    def load_state_dict(self, state: dict) -> None:
        self.bounds = list(state["bounds"])  # host floats: read before any step is captured
        self.clips.copy_(torch.as_tensor(state["clips"]))  # a host int in checkpoints from before --cudagraphs
