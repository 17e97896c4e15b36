"""Plasticity diagnostics on a probe batch (definitions: ../shared/spec/remedies-and-agents.md §7).

- dormant fraction (ReDo, Sokar et al. 2023): unit score sᵢ = E|hᵢ| / mean_j E|h_j| per layer; a unit is
  τ-dormant if sᵢ ≤ τ; reported for τ ∈ {0, 0.025, 0.1} over all hidden units of a network.
- fraction of active units (FAU): 1 − fraction of exactly-zero post-ReLU activations.
- srank_δ (Kumar et al. 2021): min k with Σ_{i≤k} σᵢ / Σ σᵢ ≥ 1 − δ, δ = 0.01, of the penultimate features.
- effective rank (Roy & Vetterli 2007): exp(entropy of σ / Σσ).
- parameter RMS ‖θ‖/√P and distance from initialisation ‖θ − θ₀‖/√P; gradient L2 norm before clipping.

Hidden activations are read with forward hooks on the layers whose outputs feed a ReLU, so agent networks
need no special code: ensemble layers (E, B, H) count E·H units.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

import torch
import torch.nn as nn

DORMANT_TAUS = (0.0, 0.025, 0.1)


@dataclasses.dataclass
class DiagnosticsArgs:
    every: int = 10_000
    """gradient updates between plasticity diagnostics on a probe batch (0 = never); logged as plasticity/*"""
    probe_size: int = 1024
    """probe batch size (≥ the feature width, so that feature ranks are meaningful)"""


def unit_scores(activation: torch.Tensor) -> torch.Tensor:
    """ReDo's τ-dormant scores sᵢ = E|hᵢ| / mean_j E|h_j|: shape (H,) for (B, H) activations, (E, H) for
    ensemble activations (E, B, H), each member's layer normalised on its own."""
    mean_abs = activation.abs().mean(dim=-2)
    return mean_abs / mean_abs.mean(dim=-1, keepdim=True).clamp_min(1e-12)


def dormant_fraction(layers: Iterable[torch.Tensor], tau: float) -> float:
    dormant, total = 0, 0
    for activation in layers:
        score = unit_scores(activation)
        dormant += int((score <= tau).sum())
        total += score.numel()
    return dormant / max(total, 1)


def active_fraction(layers: Iterable[torch.Tensor]) -> float:
    zeros, total = 0, 0
    for activation in layers:
        zeros += int((activation == 0).sum())
        total += activation.numel()
    return 1.0 - zeros / max(total, 1)


def singular_values(features: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(features.double())


def srank(features: torch.Tensor, delta: float = 0.01) -> int:
    sigma = singular_values(features)
    cumulative = torch.cumsum(sigma, 0) / sigma.sum()
    return int((cumulative < 1 - delta).sum()) + 1


def effective_rank(features: torch.Tensor) -> float:
    sigma = singular_values(features)
    p = sigma / sigma.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def parameter_rms(parameters: Iterable[torch.Tensor]) -> float:
    flat = torch.cat([p.detach().reshape(-1) for p in parameters])
    return float(flat.norm() / flat.numel() ** 0.5)


def distance_from(parameters: Iterable[torch.Tensor], initial: Iterable[torch.Tensor]) -> float:
    diffs = torch.cat([(p.detach() - q).reshape(-1) for p, q in zip(parameters, initial)])
    return float(diffs.norm() / diffs.numel() ** 0.5)


def gradient_norm(parameters: Iterable[torch.Tensor]) -> float:
    grads = [p.grad.reshape(-1) for p in parameters if p.grad is not None]
    return float(torch.cat(grads).norm()) if grads else 0.0


class ActivationProbe:
    """Records the activated outputs of `relu_inputs` and the input of `head` during one forward call.

    `activation` is the nonlinearity that follows those layers (ReLU unless the network says otherwise, e.g.
    tanh in PPO: a tanh unit is dormant when |tanh| is small on every probe input).
    """

    def __init__(self, relu_inputs: Iterable[nn.Module], head: nn.Module, activation: Callable = torch.relu) -> None:
        self.relu_inputs, self.head, self.activation = list(relu_inputs), head, activation

    def __call__(self, forward: Callable[[], torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
        hidden: list[torch.Tensor] = []
        features: list[torch.Tensor] = []
        handles = [m.register_forward_hook(lambda _m, _i, out: hidden.append(self.activation(out.detach()))) for m in self.relu_inputs]
        handles.append(self.head.register_forward_pre_hook(lambda _m, inputs: features.append(inputs[0].detach())))
        try:
            with torch.no_grad():
                forward()
        finally:
            for handle in handles:
                handle.remove()
        phi = features[0]
        return hidden, phi.reshape(-1, phi.shape[-1]) if phi.dim() == 2 else phi[0]


def network_report(
    name: str,
    network: nn.Module,
    probe: ActivationProbe,
    forward: Callable[[], torch.Tensor],
    initial_parameters: list[torch.Tensor],
) -> dict[str, float]:
    """All `plasticity/{name}_*` scalars for one network (features of ensemble member 0)."""
    hidden, features = probe(forward)
    report = {f"plasticity/{name}_dormant_{tau:g}": dormant_fraction(hidden, tau) for tau in DORMANT_TAUS}
    parameters = list(network.parameters())
    report |= {
        f"plasticity/{name}_active_units": active_fraction(hidden),
        f"plasticity/{name}_srank": float(srank(features)),
        f"plasticity/{name}_effective_rank": effective_rank(features),
        f"plasticity/{name}_feature_norm": float(features.norm(dim=-1).mean()),
        f"plasticity/{name}_param_rms": parameter_rms(parameters),
        f"plasticity/{name}_distance_from_init": distance_from(parameters, initial_parameters),
        f"plasticity/{name}_grad_norm": gradient_norm(parameters),
    }
    return report


class PlasticityMonitor:
    """Runs `network_report` for each named network every `args.every` updates on a fresh probe batch.

    networks: name → (module, probe, forward) where forward(batch) runs the module on a replay batch.
    The initial parameters (for distance from init) are part of the monitor's state, hence of checkpoints.
    """

    def __init__(self, args: DiagnosticsArgs, **networks: tuple[nn.Module, ActivationProbe, Callable]) -> None:
        self.args, self.networks = args, networks
        self.initial = {name: [p.detach().clone() for p in module.parameters()] for name, (module, _, _) in networks.items()}

    def after_update(self, num_updates: int, replay, logger, global_step: int) -> None:
        if not self.args.every or num_updates % self.args.every:
            return
        batch = replay.sample(self.args.probe_size)
        report: dict[str, float] = {}
        for name, (module, probe, forward) in self.networks.items():
            report |= network_report(name, module, probe, lambda: forward(batch), self.initial[name])
        logger.scalars(report, global_step)

    def state_dict(self) -> dict:
        return {"initial": self.initial}

    def load_state_dict(self, state: dict) -> None:
        self.initial = state["initial"]
