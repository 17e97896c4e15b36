"""Optimiser remedies (--optim.*): TRAC around the base optimiser, and PSGD-Kron from the `heavyball` package.

- TRAC (Muppidi, Zhang, Yang, "Fast TRAC: a parameter-free optimizer for lifelong reinforcement learning", NeurIPS
  2024; official code ComputationalRobotics/TRAC, `package/src/trac_optimizer/trac.py`, read for the rule below).
  The base optimiser (our Adam) moves an offset Δ from the reference θ_ref = θ₀; the played parameters are
  θₜ = θ_ref + Sₜ·Δₜ with a scale Sₜ ≥ 0 tuned online:

      Δₜ = (θₜ − θ_ref)/(Sₜ + ε)                  (recovered from θ, so resets and projections of θ stay visible)
      hₜ = ⟨gₜ, Δₜ⟩                                (gₜ: the gradient at θₜ; summed over the network's parameters)
      Δₜ₊₁ = Δₜ + (base step from θₜ)
      for each β in B:  v_β ← β²·v_β + hₜ²,  σ_β ← β·σ_β − hₜ
      s_β = s_init/erfi(1/√2) · erfi(σ_β/(√2·√v_β + ε)),   Sₜ₊₁ = max(Σ_β s_β, 0)
      θₜ₊₁ = θ_ref + Sₜ₊₁·Δₜ₊₁

  Defaults [code]: B = (0.9, 0.99, 0.999, 0.9999, 0.99999, 0.999999), s_init = 1e-8, ε = 1e-8, σ_β starts at 1e-8,
  v_β and s_β at 0. The reference is each parameter's value at its first TRAC step (a head added by plasticity
  injection gets its own then) [code]. erfi is evaluated in float64 by its power series (a closed form that needs
  no host sync); its argument is clamped to ±10, where erfi ≈ 1.5e42 and the scale is already meaningless [ours:
  the official float32 code overflows there].
- Kron (PSGD with Kronecker-factored preconditioners; Li, "Preconditioned stochastic gradient descent", 2018) from
  the maintained `heavyball` package (`heavyball.PSGDKron`, its defaults; our learning rate and weight decay).
  heavyball compiles its step with torch.compile, whose CPU backend fails on torch 2.13 with heavyball 3.2.1, so we
  switch compilation off (`heavyball.utils.compile_mode = None`). Kron keeps no Adam moments, so remedies that edit
  optimiser state entry by entry (ReDo/CBP's per-element restarts) are refused with it (plasticity/catalogue.py).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import torch

from cleanrl_plus.nn import adam
from cleanrl_plus.ranges import Positive

TRAC_BETAS = (0.9, 0.99, 0.999, 0.9999, 0.99999, 0.999999)


@dataclasses.dataclass
class OptimArgs:
    name: Literal["adam", "kron"] = "adam"
    """base optimiser of every network: the agent's Adam/AdamW, or PSGD-Kron (heavyball.PSGDKron)"""
    trac: bool = False
    """TRAC: wrap the base optimiser and learn the scale of its updates online (Muppidi et al. 2024)"""
    trac_s_init: Positive = 1e-8
    """TRAC's s_init (official default)"""


_SERIES_TERMS = torch.arange(400, dtype=torch.float64)
_LOG_SERIES_DENOMINATOR = torch.lgamma(_SERIES_TERMS + 1) + torch.log(2 * _SERIES_TERMS + 1)
_SERIES_ON: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # per device: a captured step copies nothing from the host


def _series(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if device not in _SERIES_ON:
        _SERIES_ON[device] = (_SERIES_TERMS.to(device), _LOG_SERIES_DENOMINATOR.to(device))
    return _SERIES_ON[device]


def erfi(x: torch.Tensor) -> torch.Tensor:
    """Imaginary error function erfi(x) = 2/√π·Σₙ x^(2n+1)/(n!(2n+1)), in float64, for |x| ≤ 10 (clamped beyond)."""
    x = x.to(torch.float64).clamp(-10.0, 10.0)
    n, log_denominator = _series(x.device)
    log_terms = (2 * n + 1) * torch.log(x.abs().unsqueeze(-1)) - log_denominator
    return torch.sign(x) * 2 / math.sqrt(math.pi) * torch.exp(log_terms).sum(-1)


class TRAC:
    """Wraps `optimizer` (its step, zero_grad, param_groups and state stay the base optimiser's). Its state changes in
    place, so a captured step (--cudagraphs) keeps tuning; a parameter's reference is taken at its first (eager) step."""

    def __init__(self, optimizer: torch.optim.Optimizer, s_init: float = 1e-8, betas: tuple[float, ...] = TRAC_BETAS,
                 eps: float = 1e-8) -> None:
        self.optimizer, self.s_init, self.eps = optimizer, s_init, eps
        device = next(p.device for group in optimizer.param_groups for p in group["params"])
        self.betas = torch.tensor(betas, dtype=torch.float64, device=device)
        self.variance = torch.zeros(len(betas), dtype=torch.float64, device=device)
        self.sigma = torch.full((len(betas),), 1e-8, dtype=torch.float64, device=device)
        self.s = torch.zeros(len(betas), dtype=torch.float64, device=device)
        self.reference: dict[torch.Tensor, torch.Tensor] = {}
        self.steps = torch.zeros((), dtype=torch.int64, device=device)
        self.normaliser = s_init / erfi(torch.tensor(1 / math.sqrt(2), dtype=torch.float64)).item()  # once, at construction

    @property
    def scale(self) -> torch.Tensor:
        """Sₜ = max(Σ_β s_β, 0), the factor on the base optimiser's offset."""
        return self.s.sum().clamp_min(0.0)

    def parameters(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]

    @torch.no_grad()
    def step(self) -> None:
        params = self.parameters()
        for p in params:
            if p not in self.reference:
                self.reference[p] = p.detach().clone()
        played = [p.detach().clone() for p in params]
        grads = [p.grad.detach().clone() for p in params]
        offset_scale = self.s.sum() + self.eps  # the official divides by the unclamped Σs
        self.optimizer.step()
        h = torch.zeros((), dtype=torch.float64, device=self.s.device)
        offsets = []
        for p, theta, grad in zip(params, played, grads):
            offset = (theta - self.reference[p]) / offset_scale.to(theta.dtype)  # Δₜ
            h += torch.dot(offset.flatten(), grad.flatten()).to(torch.float64)  # hₜ = ⟨gₜ, Δₜ⟩
            offsets.append(offset.add_(p - theta))  # Δₜ₊₁ = Δₜ + base update
        self.variance.mul_(self.betas.square()).add_(h.square())
        self.sigma.mul_(self.betas).sub_(h)
        self.s.copy_(self.normaliser * erfi(self.sigma / (math.sqrt(2.0) * self.variance.sqrt() + self.eps)))
        scale = self.scale
        for p, offset in zip(params, offsets):
            p.copy_(self.reference[p] + scale.to(p.dtype) * offset)
        self.steps += 1

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        order = [p for group in self.optimizer.param_groups for p in group["params"]]
        return {"reference": [self.reference.get(p) for p in order], "variance": self.variance, "sigma": self.sigma, "s": self.s,
                "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        order = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.reference = {p: ref.to(p.device) for p, ref in zip(order, state["reference"]) if ref is not None}
        for key in ("variance", "sigma", "s"):
            getattr(self, key).copy_(state[key])
        self.steps.copy_(torch.as_tensor(state["steps"]))  # a host int in checkpoints from before --cudagraphs


def make_optimizer(args: OptimArgs, parameters, lr: float, device: torch.device, capturable: bool = False,
                   **adam_kwargs) -> torch.optim.Optimizer:
    """The agent's base optimiser: `cleanrl_plus.nn.adam` with the agent's settings (`capturable` for --cudagraphs), or
    PSGD-Kron with the same lr and weight decay (Adam's betas/eps do not carry over; the remedy catalogue refuses it
    with --compile/--cudagraphs). TRAC wraps it later, in the remedy hooks."""
    if args.name == "adam":
        return adam(parameters, lr, device, capturable=capturable, **adam_kwargs)
    import heavyball  # optional dependency path: only Kron runs need it

    heavyball.utils.compile_mode = None  # module docstring: inductor fails on CPU here
    return heavyball.PSGDKron(parameters, lr=lr, weight_decay=adam_kwargs.get("weight_decay", 0.0))


def set_learning_rate(optimizer: torch.optim.Optimizer, learning_rate: torch.Tensor, value: float) -> None:
    """lr ← value in every parameter group and in those added later (a plasticity-injected head). Adam's groups share
    `learning_rate`, changed in place, so a captured optimiser step reads each new value; Kron (eager only) gets the
    float, which heavyball's own lr arithmetic expects."""
    learning_rate.fill_(value)
    shared = learning_rate if isinstance(optimizer, torch.optim.Adam) else value
    optimizer.defaults["lr"] = shared
    for group in optimizer.param_groups:
        group["lr"] = shared
