"""The optimisers: every agent's Adam (`ElementStepAdam`, whose entries resets can restart), and the
optimiser remedies (--optim.*): TRAC around the base optimiser, and PSGD-Kron from the `heavyball`
package.

- TRAC (Muppidi, Zhang, Yang, "Fast TRAC: a parameter-free optimizer for lifelong reinforcement
  learning", NeurIPS 2024; official code ComputationalRobotics/TRAC,
  `package/src/trac_optimizer/trac.py`, read for the rule below; tests/test_fidelity.py follows its
  update on Adam step by step). The base optimiser (our Adam) moves an offset Δ from the reference
  θ_ref = θ₀; the played parameters are θₜ = θ_ref + Sₜ·Δₜ with a scale Sₜ ≥ 0
  tuned online:

      Δₜ = (θₜ − θ_ref)/(Sₜ + ε)                  (recovered from θ, so resets and projections of θ stay visible)
      hₜ = ⟨gₜ, Δₜ⟩                                (gₜ: the gradient at θₜ; summed over the network's parameters)
      Δₜ₊₁ = Δₜ + (base step from θₜ)
      for each β in B:  v_β ← β²·v_β + hₜ²,  σ_β ← β·σ_β − hₜ
      s_β = s_init/erfi(1/√2) · erfi(σ_β/(√2·√v_β + ε)),   Sₜ₊₁ = max(Σ_β s_β, 0)
      θₜ₊₁ = θ_ref + Sₜ₊₁·Δₜ₊₁

  Defaults [code]: B = (0.9, 0.99, 0.999, 0.9999, 0.99999, 0.999999), s_init = 1e-8, ε = 1e-8,
  σ_β starts at 1e-8, v_β and s_β at 0. The reference is each parameter's value at its first
  TRAC step (a head added by plasticity injection gets its own then) [code]. erfi is evaluated in
  float64 by its power series (a closed form that needs no host sync); its argument is clamped to
  ±10, where erfi ≈ 1.5e42 and the scale is already meaningless [ours: the official float32 code
  overflows there]. In a group (cleanrl_plus.members) each member has its own S, v_β, σ_β and
  s_β, and hₜ sums over that member's own parameters (their member-major blocks) [ours: the paper
  has one run].
- Kron (PSGD with Kronecker-factored preconditioners; Li, "Preconditioned stochastic gradient
  descent", 2018) from the maintained `heavyball` package (`heavyball.PSGDKron`, its defaults; our
  learning rate and weight decay). heavyball compiles its step with torch.compile, whose CPU backend
  fails on torch 2.13 with heavyball 3.2.1, so we switch compilation off
  (`heavyball.utils.compile_mode = None`). Kron keeps no Adam moments, so remedies that edit
  optimiser state entry by entry (ReDo/CBP's per-element restarts) are refused with it
  (plasticity/catalogue.py).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import torch
from torch.optim.adam import adam as adam_step

from envs.ranges import Positive

# a member's block of a multiple of this many entries is whole vectors for torch's CPU kernels (8
# floats a vector with AVX2, 16 with AVX-512; elementwise loops take two vectors at a time)
WHOLE_VECTORS = 64


class ElementStepAdam(torch.optim.Adam):
    """torch.optim.Adam (AdamW with `decoupled_weight_decay=True`) whose entries can restart with a
    fresh bias correction.

    PyTorch counts Adam steps per tensor, so an entry whose moments a remedy zeroes (ReDo, CBP)
    takes its next update with bias corrections ≈ 1:
    ≈ lr·(1 − β₁)/√(1 − β₂)·sign(g), 3.2× lr for β = (0.9, 0.999), 0.1× lr for
    (0.99, 0.99). `restart(p, mask)` zeroes m and v of the masked entries and gives p per-element
    counts tᵢ (0 there, the tensor's t elsewhere), as CBP's reference AdamGnT keeps; from then on
    p steps with m̂ = m/(1 − β₁^tᵢ), v̂ = v/(1 − β₂^tᵢ), so a restarted entry's
    first update is lr·g/(|g| + ε) ≈ lr·sign(g), a fresh Adam's, and the other entries follow
    ordinary Adam. Parameters never restarted take the parent's fused/foreach step and cost nothing
    extra. The counts are kept as optimiser state `beta1_power` = β₁^tᵢ and
    `beta2_power` = β₂^tᵢ (a multiply per step; recomputing exp(tᵢ·log β) made the step
    ≈ 2× slower on CPU), hence checkpointed. With `capturable=True` (CUDA graphs) every count
    lives on the device and the per-element step is device-only too.

    In a group of `members` (cleanrl_plus.members), a parameter whose member blocks do not fill
    whole vectors (a head's bias of one or two outputs) steps each member's block as a tensor of
    its own: torch's CPU kernels run the whole vectors of a tensor through vector code and the rest
    through scalar code, which round differently, so stepped whole, which of its entries a member
    holds there would depend on the group's size (docs/experiments.md).
    """

    def __init__(self, params, members: int = 1, **kwargs) -> None:
        if kwargs.get("amsgrad"):
            raise ValueError("ElementStepAdam does not support amsgrad")
        super().__init__(params, **kwargs)
        self.members = members

    def member_blocks(self, parameter: torch.Tensor) -> int:
        """The blocks `parameter` steps in: its members' (`members`), where a member's block on a
        CPU is not a whole number of WHOLE_VECTORS entries, else 1 (the tensor at once)."""
        whole = (parameter.numel() // self.members) % WHOLE_VECTORS == 0
        return 1 if self.members == 1 or whole or not parameter.is_cpu else self.members

    def load_state_dict(self, state_dict: dict) -> None:
        """As Adam's, but `capturable` stays this run's choice: torch takes it from the saved
        groups, and a run resumed with --cudagraphs switched on or off would otherwise keep the
        saved run's setting."""
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group["capturable"] = self.defaults["capturable"]

    @torch.no_grad()
    def restart(self, parameter: torch.Tensor, mask: torch.Tensor) -> None:
        """m = v = 0 and tᵢ = 0 (β^tᵢ = 1) for the entries of `parameter` in `mask` (a bool
        tensor broadcastable to it)."""
        state = self.state.get(parameter)
        if not state:  # never stepped: its first step is a fresh Adam's anyway
            return
        state["exp_avg"].masked_fill_(mask, 0.0)
        state["exp_avg_sq"].masked_fill_(mask, 0.0)
        if "beta1_power" not in state:  # β^t of the tensor's count t for every entry
            betas = next(
                group["betas"]
                for group in self.param_groups
                if any(p is parameter for p in group["params"])
            )
            step = state["step"].to(parameter.device, torch.float32)
            for key, beta in zip(("beta1_power", "beta2_power"), betas):
                state[key] = torch.pow(beta, step).expand_as(parameter).clone()
        state["beta1_power"].masked_fill_(mask, 1.0)
        state["beta2_power"].masked_fill_(mask, 1.0)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # stepped here, not by the parent: restarted entries, and parameters stepped member by member
        own = [
            (p, group)
            for group in self.param_groups
            for p in group["params"]
            if p.grad is not None
            and ("beta1_power" in self.state.get(p, ()) or self.member_blocks(p) > 1)
        ]
        grads = [p.grad for p, _ in own]
        for p, _ in own:  # the parent's step skips parameters without a gradient
            p.grad = None
        try:
            super().step()
        finally:
            for (p, _), grad in zip(own, grads):
                p.grad = grad
        for p, group in own:
            if "beta1_power" in self.state[p]:
                self._step_per_element(p, group)
            else:
                self._step_member_by_member(p, group)
        return loss

    def _step_member_by_member(self, p: torch.Tensor, group: dict) -> None:
        """The parent's step (its kernel: fused, foreach or loop) on each member's block of `p`
        as a tensor of its own."""
        # torch.optim.Adam's own state initialisation, on a first step
        self._init_group({**group, "params": [p]}, [], [], [], [], [], [])
        state, blocks = self.state[p], self.member_blocks(p)
        # each block counts its own step, from the parameter's count, which moves on once
        steps = [state["step"].clone() for _ in range(blocks)]
        beta1, beta2 = group["betas"]
        adam_step(
            *(
                list(t.view(blocks, -1).unbind(0))
                for t in (p, p.grad, state["exp_avg"], state["exp_avg_sq"])
            ),
            [],
            steps,
            foreach=group["foreach"],
            capturable=group["capturable"],
            fused=group["fused"],
            decoupled_weight_decay=group["decoupled_weight_decay"],
            amsgrad=False,
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=group["maximize"],
        )
        state["step"].copy_(steps[0])

    def _step_per_element(self, p: torch.Tensor, group: dict) -> None:
        """Adam/AdamW on one parameter, with the bias corrections of each entry's own count tᵢ."""
        state = self.state[p]
        beta1, beta2 = group["betas"]
        lr, weight_decay = group["lr"], group["weight_decay"]
        grad = -p.grad if group["maximize"] else p.grad
        if weight_decay and group["decoupled_weight_decay"]:
            p.mul_(1 - lr * weight_decay)
        elif weight_decay:
            grad = grad.add(p, alpha=weight_decay)
        state["step"] += 1
        # tᵢ ← tᵢ + 1
        beta1_power, beta2_power = (
            state["beta1_power"].mul_(beta1),
            state["beta2_power"].mul_(beta2),
        )
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        # θ ← θ − lr·m̂/(√v̂ + ε), m̂ = m/(1 − β₁^tᵢ),
        # v̂ = v/(1 − β₂^tᵢ)
        denominator = exp_avg_sq.div(1 - beta2_power).sqrt_().add_(group["eps"])
        # lr may be a tensor (PPO anneals it in place)
        p.addcdiv_(exp_avg.div(1 - beta1_power).mul_(-lr), denominator)


def adam(
    parameters,
    lr: float,
    device: torch.device,
    capturable: bool = False,
    members: int = 1,
    **kwargs,
) -> ElementStepAdam:
    """Adam (AdamW with decoupled_weight_decay=True) with the fused kernel where the device supports
    it (one kernel for all parameters), and entries that resets can restart (ElementStepAdam) for
    a group of `members`.
    `capturable` (CUDA graphs, --cudagraphs) keeps its step counts on the device; on CPU it stays
    off, so eager runs keep today's numerics."""
    return ElementStepAdam(
        parameters,
        members=members,
        lr=lr,
        fused=device.type in ("cpu", "cuda"),
        capturable=capturable and device.type == "cuda",
        **kwargs,
    )


TRAC_BETAS = (0.9, 0.99, 0.999, 0.9999, 0.99999, 0.999999)


@dataclasses.dataclass
class OptimArgs:
    name: Literal["adam", "kron"] = "adam"
    """base optimiser of every network: the agent's Adam/AdamW, or PSGD-Kron (heavyball.PSGDKron)"""
    trac: bool = False
    """TRAC: wrap the base optimiser and learn the scale of its updates online (Muppidi et al.
    2024)"""
    trac_s_init: Positive = 1e-8
    """TRAC's s_init (official default)"""


_SERIES_TERMS = torch.arange(400, dtype=torch.float64)
_LOG_SERIES_DENOMINATOR = torch.lgamma(_SERIES_TERMS + 1) + torch.log(2 * _SERIES_TERMS + 1)
_SERIES_ON: dict[
    torch.device, tuple[torch.Tensor, torch.Tensor]
] = {}  # per device: a captured step copies nothing from the host


def _series(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if device not in _SERIES_ON:
        _SERIES_ON[device] = (_SERIES_TERMS.to(device), _LOG_SERIES_DENOMINATOR.to(device))
    return _SERIES_ON[device]


def erfi(x: torch.Tensor) -> torch.Tensor:
    """Imaginary error function erfi(x) = 2/√π·Σₙ x^(2n+1)/(n!(2n+1)), in float64, for |x|
    ≤ 10 (clamped beyond)."""
    x = x.to(torch.float64).clamp(-10.0, 10.0)
    n, log_denominator = _series(x.device)
    log_terms = (2 * n + 1) * torch.log(x.abs().unsqueeze(-1)) - log_denominator
    return torch.sign(x) * 2 / math.sqrt(math.pi) * torch.exp(log_terms).sum(-1)


class TRAC:
    """Wraps `optimizer` (its step, zero_grad, param_groups and state stay the base optimiser's).
    Its state changes in place, so a captured step (--cudagraphs) keeps tuning; a parameter's
    reference is taken at its first (eager) step."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        s_init: float = 1e-8,
        betas: tuple[float, ...] = TRAC_BETAS,
        eps: float = 1e-8,
        members: int = 1,
    ) -> None:
        self.optimizer, self.s_init, self.eps, self.members = optimizer, s_init, eps, members
        device = next(p.device for group in optimizer.param_groups for p in group["params"])
        self.betas = torch.tensor(betas, dtype=torch.float64, device=device)
        self.variance = torch.zeros(members, len(betas), dtype=torch.float64, device=device)
        self.sigma = torch.full((members, len(betas)), 1e-8, dtype=torch.float64, device=device)
        self.s = torch.zeros(members, len(betas), dtype=torch.float64, device=device)
        self.reference: dict[torch.Tensor, torch.Tensor] = {}
        self.steps = torch.zeros((), dtype=torch.int64, device=device)
        # once, at construction
        self.normaliser = s_init / erfi(torch.tensor(1 / math.sqrt(2), dtype=torch.float64)).item()

    @property
    def scale(self) -> torch.Tensor:
        """Sₜ = max(Σ_β s_β, 0), the factor on the base optimiser's offset, per member
        (members,)."""
        return self.s.sum(-1).clamp_min(0.0)

    def parameters(self) -> list[torch.Tensor]:
        return [
            p
            for group in self.optimizer.param_groups
            for p in group["params"]
            if p.grad is not None
        ]

    @torch.no_grad()
    def step(self) -> None:
        params = self.parameters()
        for p in params:
            if p not in self.reference:
                self.reference[p] = p.detach().clone()
        members = self.members
        played = [p.detach().clone() for p in params]
        grads = [p.grad.detach().clone() for p in params]
        # the official divides by the unclamped Σs
        offset_scale = (self.s.sum(-1) + self.eps).view(members, 1)
        self.optimizer.step()
        h = torch.zeros(members, dtype=torch.float64, device=self.s.device)
        offsets = []
        for p, theta, grad in zip(params, played, grads):
            # Δₜ, as (members, entries) rows: each member's block of the parameter
            offset = (theta - self.reference[p]).reshape(members, -1) / offset_scale.to(theta.dtype)
            # hₜ = ⟨gₜ, Δₜ⟩
            h += (offset * grad.reshape(members, -1)).sum(1).to(torch.float64)
            # Δₜ₊₁ = Δₜ + base update
            offsets.append(offset.add_((p - theta).reshape(members, -1)))
        h = h.unsqueeze(1)
        self.variance.mul_(self.betas.square()).add_(h.square())
        self.sigma.mul_(self.betas).sub_(h)
        self.s.copy_(
            self.normaliser * erfi(self.sigma / (math.sqrt(2.0) * self.variance.sqrt() + self.eps))
        )
        scale = self.scale.view(members, 1)
        for p, offset in zip(params, offsets):
            p.copy_(
                (self.reference[p].reshape(members, -1) + scale.to(p.dtype) * offset).view_as(p)
            )
        self.steps += 1

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        order = [p for group in self.optimizer.param_groups for p in group["params"]]
        return {
            "reference": [self.reference.get(p) for p in order],
            "variance": self.variance,
            "sigma": self.sigma,
            "s": self.s,
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict) -> None:
        order = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.reference = {
            p: ref.to(p.device) for p, ref in zip(order, state["reference"]) if ref is not None
        }
        for key in ("variance", "sigma", "s"):
            getattr(self, key).copy_(state[key])
        self.steps.copy_(state["steps"])


def make_optimizer(
    args: Any, parameters, device: torch.device, members: int = 1, **adam_kwargs
) -> torch.optim.Optimizer:
    """The agent's base optimiser of a group of `members` from its flags (--optim.name,
    --learning-rate, --cudagraphs): `adam` (above), capturable for --cudagraphs, with the agent's
    other settings, or PSGD-Kron with the same lr and weight decay (Adam's betas/eps do not carry
    over; the remedy catalogue refuses it with --compile/--cudagraphs, and in a group). TRAC wraps
    it later, in the hooks."""
    if args.optim.name == "adam":
        return adam(
            parameters,
            args.learning_rate,
            device,
            capturable=args.cudagraphs,
            members=members,
            **adam_kwargs,
        )
    import heavyball  # optional dependency path: only Kron runs need it

    heavyball.utils.compile_mode = None  # module docstring: inductor fails on CPU here
    return heavyball.PSGDKron(
        parameters, lr=args.learning_rate, weight_decay=adam_kwargs.get("weight_decay", 0.0)
    )


@torch.no_grad()
def clip_grad_norm_per_member(
    parameters: list[torch.Tensor], max_norm: float, members: int
) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ for each member of a group on its own: g ← g·min(1,
    c/(‖g_k‖ + 1e-6)), ‖g_k‖ the norm of member k's gradient blocks (the leading,
    member-major dimension of every parameter). A global norm would let one member's large gradient
    shrink every other member's step. Returns the norms before clipping, (members,)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    # (members, parameters) summed along each member's row: a sum down a column would add a
    # one-seed run's squares in another order than a group's
    squares = torch.stack([g.reshape(members, -1).square().sum(1) for g in grads], dim=1).sum(1)
    norms = squares.sqrt()
    coefficients = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.view(members, -1).mul_(coefficients.view(members, 1).to(g.dtype))
    return norms


def clip_each_members_gradient(
    optimizer: torch.optim.Optimizer, max_norm: float, members: int
) -> None:
    """Clip each member's gradient norm over the parameters `optimizer` trains to `max_norm` (0: no
    clipping): an injected network's frozen old head is in no parameter group, so its last gradient
    stays out of the norm."""
    if max_norm > 0:
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        clip_grad_norm_per_member(parameters, max_norm, members)


def set_learning_rate(
    optimizer: torch.optim.Optimizer, learning_rate: torch.Tensor, value: float
) -> None:
    """lr ← value in every parameter group and in those added later (a plasticity-injected head).
    Adam's groups share `learning_rate`, changed in place, so a captured optimiser step reads each
    new value; Kron (eager only) gets the float, which heavyball's own lr arithmetic expects."""
    learning_rate.fill_(value)
    shared = learning_rate if isinstance(optimizer, torch.optim.Adam) else value
    optimizer.defaults["lr"] = shared
    for group in optimizer.param_groups:
        group["lr"] = shared
