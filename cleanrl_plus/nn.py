"""Small network building blocks shared by agents."""

from __future__ import annotations

import math

import torch
import torch.nn as nn


class EnsembleLinear(nn.Module):
    """`ensemble_size` independent linear layers evaluated with one batched matmul.

    Input (ensemble_size, batch, in) -> output (ensemble_size, batch, out). Each member is initialised
    exactly like `nn.Linear` (uniform ±1/sqrt(in) for weights and biases), so a twin critic built from
    these is the same model as two separate MLPs, only faster (one bmm instead of two matmuls).
    """

    def __init__(self, ensemble_size: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.weight.shape[1])
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)

    def member(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """Only member `index` on a (batch, in) input: the actor loss needs Q1 alone."""
        return torch.addmm(self.bias[index], x, self.weight[index])

    def extra_repr(self) -> str:
        n, i, o = self.weight.shape
        return f"ensemble_size={n}, in_features={i}, out_features={o}"


def mlp(in_features: int, out_features: int, hidden: tuple[int, ...] = (256, 256)) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_features, width), nn.ReLU()]
        in_features = width
    layers.append(nn.Linear(in_features, out_features))
    return nn.Sequential(*layers)


class frozen:
    """Context manager: no gradients for `module`'s parameters, while gradients still flow through it.

    The TD3/SAC actor loss backpropagates through the critic to the action; skipping the critic's
    weight gradients there saves a third of that backward pass.
    """

    def __init__(self, module: nn.Module) -> None:
        self.parameters = [p for p in module.parameters() if p.requires_grad]

    def __enter__(self) -> None:
        for p in self.parameters:
            p.requires_grad_(False)

    def __exit__(self, *exc: object) -> None:
        for p in self.parameters:
            p.requires_grad_(True)


def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """θ̄ ← (1 − τ)·θ̄ + τ·θ, in place over all parameters at once."""
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)


def adam(parameters, lr: float, device: torch.device, **kwargs) -> torch.optim.Adam:
    """Adam with the fused kernel where the device supports it (one kernel for all parameters)."""
    return torch.optim.Adam(parameters, lr=lr, fused=device.type in ("cpu", "cuda"), **kwargs)
