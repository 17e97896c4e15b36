"""The neuron-reset family: full resets, shrink-and-perturb and ReDo (spec §6 of remedies-and-agents.md).

- Full reset (Nikishin et al., "The Primacy Bias in Deep RL", ICML 2022): every F updates the network gets a
  fresh initialisation; the replay buffer is kept; its optimiser state is dropped (fresh moments and step);
  its target network is rebuilt from the new weights.
- Shrink & perturb (Ash & Adams 2020; RL form as in SR-SPR/BBF): θ ← α·θ + (1 − α)·φ with φ a fresh
  initialisation, α = 0.8 [our default, spec §6.3]; optimiser state dropped; targets keep tracking by Polyak.
- ReDo (Sokar et al., ICML 2023): every F = 1,000 updates, on a fresh replay batch (256), every hidden unit with
  τ-dormant score ≤ τ = 0.1 gets fresh incoming weights (from the network's own initialiser) and a zero bias,
  and zero outgoing weights, so the output is unchanged at that moment; the Adam moments of exactly those
  entries are zeroed. Adam's step counter is per tensor and is not reset (documented pitfall: the first
  update of a recycled entry is ≈ lr·(1 − β₁)/√(1 − β₂)·sign(g)). Targets need no change.
Replacement parameters are written into the existing tensors, so optimisers keep their parameter lists.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal

import torch
import torch.nn as nn

from cleanrl_plus.errors import UserError
from cleanrl_plus.nn import EnsembleLinear
from plasticity.diagnostics import ActivationProbe, unit_scores

DEFAULT_EVERY = {"full": 200_000, "shrink-perturb": 200_000, "redo": 1_000}


@dataclasses.dataclass
class ResetArgs:
    method: Literal["off", "full", "shrink-perturb", "redo"] = "off"
    """periodic re-initialisation remedy: full reset (replay kept), shrink-and-perturb, or ReDo (recycle dormant units)"""
    every: int = 0
    """gradient updates between events; 0 = the method's default (full and S&P 200,000; ReDo 1,000)"""
    networks: Literal["critic", "actor", "both"] = "both"
    """which networks the remedy touches"""
    redo_tau: float = 0.1
    """ReDo: units with τ-dormant score ≤ redo_tau are recycled"""
    redo_batch: int = 256
    """ReDo: replay batch used to score units"""
    shrink: float = 0.8
    """shrink-and-perturb: α in θ ← α·θ + (1 − α)·φ"""


@dataclasses.dataclass
class Resettable:
    """A network with what a reset must keep consistent: its optimiser, its target and how to build a fresh one."""

    module: nn.Module
    optimizer: torch.optim.Optimizer
    target: nn.Module | None
    make_fresh: Callable[[], nn.Module]
    unit_pairs: list[tuple[nn.Module, nn.Module]]  # (layer feeding a ReLU, layer reading it) for ReDo
    forward: Callable  # forward(batch) runs the module on a replay batch (for ReDo's scores)


def drop_optimizer_state(optimizer: torch.optim.Optimizer, parameters) -> None:
    for parameter in parameters:
        optimizer.state.pop(parameter, None)


@torch.no_grad()
def full_reset(net: Resettable) -> None:
    net.module.load_state_dict(net.make_fresh().state_dict())
    drop_optimizer_state(net.optimizer, net.module.parameters())
    if net.target is not None:
        net.target.load_state_dict(net.module.state_dict())


@torch.no_grad()
def shrink_and_perturb(net: Resettable, alpha: float) -> None:
    for parameter, fresh in zip(net.module.parameters(), net.make_fresh().parameters()):
        parameter.mul_(alpha).add_(fresh, alpha=1.0 - alpha)
    drop_optimizer_state(net.optimizer, net.module.parameters())


def _entry_masks(layer_in: nn.Module, layer_out: nn.Module, dormant: torch.Tensor) -> dict[torch.Tensor, tuple[torch.Tensor, bool]]:
    """parameter → (mask of its entries touched by recycling `dormant` units, whether they get fresh values)."""
    if isinstance(layer_in, EnsembleLinear):  # weights (E, in, H), bias (E, 1, H); next layer (E, H, out)
        return {
            layer_in.weight: (dormant[:, None, :].expand_as(layer_in.weight), True),
            layer_in.bias: (dormant[:, None, :].expand_as(layer_in.bias), False),
            layer_out.weight: (dormant[:, :, None].expand_as(layer_out.weight), False),
        }
    return {  # nn.Linear: weights (H, in), bias (H,); next layer (out, H)
        layer_in.weight: (dormant[:, None].expand_as(layer_in.weight), True),
        layer_in.bias: (dormant, False),
        layer_out.weight: (dormant[None, :].expand_as(layer_out.weight), False),
    }


@torch.no_grad()
def recycle_dormant(net: Resettable, batch, tau: float) -> float:
    """ReDo on every (layer_in, layer_out) pair; returns the fraction of hidden units recycled."""
    probe = ActivationProbe([pair[0] for pair in net.unit_pairs], net.unit_pairs[-1][1])
    hidden, _ = probe(lambda: net.forward(batch))
    fresh_layers = dict(net.make_fresh().named_modules())
    names = {module: name for name, module in net.module.named_modules()}
    recycled, total = 0, 0
    for (layer_in, layer_out), activation in zip(net.unit_pairs, hidden):
        dormant = unit_scores(activation) <= tau
        recycled, total = recycled + int(dormant.sum()), total + dormant.numel()
        fresh_in = fresh_layers[names[layer_in]]
        for parameter, (mask, fresh_values) in _entry_masks(layer_in, layer_out, dormant).items():
            replacement = fresh_in.weight if fresh_values else torch.zeros_like(parameter)
            parameter.copy_(torch.where(mask, replacement, parameter))
            state = net.optimizer.state.get(parameter, {})
            for moment in ("exp_avg", "exp_avg_sq"):
                if moment in state:
                    state[moment].masked_fill_(mask, 0.0)
    return recycled / max(total, 1)


class Resetter:
    """Applies the configured method to the chosen networks every `every` updates; logs what it did."""

    def __init__(self, args: ResetArgs, **networks: Resettable) -> None:
        self.args = args
        self.every = args.every or DEFAULT_EVERY.get(args.method, 0)
        chosen = ("critic", "actor") if args.networks == "both" else (args.networks,)
        self.networks = {name: net for name, net in networks.items() if name in chosen}
        self.count = 0
        for name, net in self.networks.items():
            if args.method == "redo" and not net.unit_pairs:
                raise UserError(f"ReDo does not apply to this {name}: its hidden units feed normalisations or skips, so recycling "
                                f"would change the output — use --reset.networks to leave it out, or another --reset.method")

    def after_update(self, num_updates: int, replay, logger, global_step: int) -> None:
        if self.args.method == "off" or num_updates % self.every:
            return
        self.count += 1
        report = {"plasticity/resets": float(self.count)}
        for name, net in self.networks.items():
            if self.args.method == "full":
                full_reset(net)
            elif self.args.method == "shrink-perturb":
                shrink_and_perturb(net, self.args.shrink)
            else:
                report[f"plasticity/{name}_recycled_fraction"] = recycle_dormant(net, replay.sample(self.args.redo_batch), self.args.redo_tau)
        logger.scalars(report, global_step)

    def state_dict(self) -> dict:
        return {"count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.count = state["count"]
