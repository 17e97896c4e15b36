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
- Plasticity injection (Nikishin et al., NeurIPS 2023; spec §6.4): once, at update F, the network's head h_θ
  becomes h_θ(φ) + h_θ′(φ) − h_θ′⁻(φ) with θ frozen, θ′ fresh and trainable, θ′⁻ a frozen copy of θ′, so the
  output is unchanged at injection; the optimiser loses θ (and its state) and gets θ′ as a new parameter
  group with fresh Adam state (pitfall §6.6.1: an optimiser that never sees θ′); the target network gets the
  same structure with its own frozen head and copies of θ′, θ′⁻. A resumed run re-creates the structure
  from the resetter's state before the weights are loaded.
Replacement parameters of full/S&P/ReDo are written into the existing tensors, so optimisers keep their
parameter lists.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable, Literal

import torch
import torch.nn as nn

from cleanrl_plus.errors import UserError
from cleanrl_plus.nn import EnsembleLinear
from plasticity.diagnostics import ActivationProbe, unit_scores

DEFAULT_EVERY = {"full": 200_000, "shrink-perturb": 200_000, "redo": 1_000, "inject": 250_000}


@dataclasses.dataclass
class ResetArgs:
    method: Literal["off", "full", "shrink-perturb", "redo", "inject"] = "off"
    """re-initialisation remedy: full reset (replay kept), shrink-and-perturb, ReDo (recycle dormant units), or plasticity injection (once)"""
    every: int = 0
    """gradient updates between events (injection: the update at which it happens, once); 0 = the method's default
    (full and S&P 200,000; ReDo 1,000; injection 250,000)"""
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
    head: nn.Module | None = None  # the output layer plasticity injection replaces (None: the network has several heads)


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


class InjectedHead(nn.Module):
    """h_θ(x) + h_θ′(x) − h_θ′⁻(x): the frozen old head, a fresh trainable head and a frozen copy of it."""

    def __init__(self, old: nn.Module, fresh: nn.Module) -> None:
        super().__init__()
        self.old, self.fresh, self.fresh_frozen = old, fresh, copy.deepcopy(fresh)
        self.old.requires_grad_(False)
        self.fresh_frozen.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.old(x) + self.fresh(x) - self.fresh_frozen(x)

    def member(self, index: int, x: torch.Tensor) -> torch.Tensor:  # ensemble heads: one member (TD3's Q₁)
        return self.old.member(index, x) + self.fresh.member(index, x) - self.fresh_frozen.member(index, x)


def _replace(root: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, attribute = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, attribute, module)


def inject_plasticity(net: Resettable) -> None:
    """Swap `net.head` for an InjectedHead in the network and its target, and move the optimiser onto θ′."""
    name = next(n for n, m in net.module.named_modules() if m is net.head)
    fresh = dict(net.make_fresh().named_modules())[name]
    injected = InjectedHead(net.head, fresh)
    _replace(net.module, name, injected)
    old_parameters = set(net.head.parameters())
    for group in net.optimizer.param_groups:
        group["params"] = [p for p in group["params"] if p not in old_parameters]
    drop_optimizer_state(net.optimizer, old_parameters)
    net.optimizer.add_param_group({"params": list(injected.fresh.parameters())})
    if net.target is not None:
        target_head = net.target.get_submodule(name)
        target_injected = InjectedHead(target_head, copy.deepcopy(injected.fresh).requires_grad_(False))
        target_injected.fresh_frozen.load_state_dict(injected.fresh_frozen.state_dict())
        _replace(net.target, name, target_injected)
    net.head = injected


class Resetter:
    """Applies the configured method to the chosen networks every `every` updates; logs what it did."""

    def __init__(self, args: ResetArgs, **networks: Resettable) -> None:
        self.args = args
        self.every = args.every or DEFAULT_EVERY.get(args.method, 0)
        chosen = ("critic", "actor") if args.networks == "both" else (args.networks,)
        self.networks = {name: net for name, net in networks.items() if name in chosen}
        self.count = 0
        self.injected: list[str] = []
        for name, net in self.networks.items():
            if args.method == "inject" and net.head is None:
                raise UserError(f"plasticity injection needs one output layer; this {name} has several heads — "
                                f"use --reset.networks to leave it out")
            if args.method == "redo" and not net.unit_pairs:
                raise UserError(f"ReDo does not apply to this {name}: its hidden units feed normalisations or skips, so recycling "
                                f"would change the output — use --reset.networks to leave it out, or another --reset.method")

    def after_update(self, num_updates: int, replay, logger, global_step: int) -> None:
        if self.args.method == "off" or num_updates % self.every:
            return
        if self.args.method == "inject":
            if num_updates == self.every:  # once
                for name, net in self.networks.items():
                    inject_plasticity(net)
                    self.injected.append(name)
                self.count += 1
                logger.scalars({"plasticity/resets": float(self.count)}, global_step)
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
        return {"count": self.count, "injected": list(self.injected)}

    def load_state_dict(self, state: dict) -> None:
        """Agents load the resetter before the networks, so an injected head exists again when weights arrive."""
        self.count = state["count"]
        for name in state.get("injected", []):
            if name not in self.injected:
                inject_plasticity(self.networks[name])
                self.injected.append(name)
