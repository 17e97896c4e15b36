"""Plasticity diagnostics on a probe batch (docs/remedies/index.md lists the tags).

- dormant fraction (ReDo, Sokar et al. 2023): unit score sᵢ = E|hᵢ| / mean_j E|h_j| per layer; a
  unit is τ-dormant if sᵢ ≤ τ; reported for τ ∈ {0, 0.025, 0.1} over all hidden units of a
  network.
- fraction of active units (FAU): 1 − fraction of exactly-zero post-ReLU activations.
- srank_δ (Kumar et al. 2021): min k with Σ_{i≤k} σᵢ / Σ σᵢ ≥ 1 − δ, δ = 0.01, of
  the penultimate features.
- effective rank (Roy & Vetterli 2007): exp(entropy of σ / Σσ).
- parameter RMS ‖θ‖/√P and distance from initialisation ‖θ − θ₀‖/√P; gradient L2
  norm before clipping.
- empirical NTK (Lyle et al. 2023, "Understanding plasticity in neural networks"): J ∈ ℝ^{B×P}
  holds the per-sample gradients
∇_θ f(x_b) of B = 64 probe samples,
  K = J·Jᵀ; logged: numerical rank #{λ > 10⁻⁶·λ_max}, effective rank and srank of K's
  eigenvalues, condition number λ_max/λ_min (λ_min floored at 10⁻⁶·λ_max) and the mean
  off-diagonal |cos| between gradients. f(x) is the network's output summed over its entries (Q for
  a critic, Q₁ + Q₂ for a twin critic, Σ_a Q(s, a) for DQN, Σ_j μ_j(s) for an actor). J keeps
  the last layers' parameters up to `ntk_max_params` (the choice is logged as `_ntk_params`). A loop
  of B backward passes: on CPU it measured 79 ms for TD3's 256-256 twin critic, 2.2× faster than
  torch.func's vmap(grad), and it takes any forward.
- churn across one update (Tang & Berseth 2024, "Improving deep RL by reducing the chain effect of
  value and policy churn"):
on a separate reference batch drawn just before
  update n, value churn E|Q_θ′ − Q_θ| for critics (mean over a critic's copies and, for DQN,
  actions; DQN also logs the fraction of states whose greedy action changes), policy churn
  E‖π_θ′(s) − π_θ(s)‖ for actors (the change of the deterministic action, of PPO's mean
  or logits) and, for stochastic policies, E KL(π_θ(·|s) ‖ π_θ′(·|s)) in closed form from
  the distributions' parameters (categorical logits, or a diagonal Gaussian's mean and log σ; SAC's
  tanh squashing is a bijection, so its pre-tanh Gaussians' KL is the policies' KL).

Hidden activations are read with forward hooks on the layers whose outputs feed a ReLU, so agent
networks need no special code: ensemble layers (E, B, H) count E·H units.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Callable, Iterable

import torch
import torch.nn as nn

from envs.ranges import AtLeastOne, Count, Range

DORMANT_TAUS = (0.0, 0.025, 0.1)


@dataclasses.dataclass
class DiagnosticsArgs:
    every: Count = 10_000
    """gradient updates between plasticity diagnostics on a probe batch (0 = never); logged as
    plasticity/*"""
    probe_size: AtLeastOne = 1024
    """probe batch size (≥ the feature width, so that feature ranks are meaningful)"""
    ntk_every: Count = 100_000
    """gradient updates between NTK / Gram-matrix ranks (0 = never); costly: ntk_batch backward
    passes per network"""
    ntk_batch: Annotated[int, Range(ge=2)] = 64
    """samples whose per-sample gradients form the Gram matrix K = J·Jᵀ (the probe batch's first
    ones when both are due)"""
    ntk_max_params: AtLeastOne = 250_000
    """J keeps the last layers' parameters up to this many (memory: ntk_batch × this many
    floats)"""
    churn_every: Count = 0
    """gradient updates between churn measurements across one update (0 = never; each draws one
    extra replay batch)"""
    churn_batch: AtLeastOne = 256
    """reference batch size for churn"""


def unit_scores(activation: torch.Tensor) -> torch.Tensor:
    """ReDo's τ-dormant scores sᵢ = E|hᵢ| / mean_j E|h_j|: shape (H,) for (B, H) activations,
    (E, H) for ensemble activations (E, B, H), each member's layer normalised on its own."""
    mean_abs = activation.abs().mean(dim=-2)
    return mean_abs / mean_abs.mean(dim=-1, keepdim=True).clamp_min(1e-12)


def member_rows(activation: torch.Tensor, members: int) -> torch.Tensor:
    """A layer's activations (E, B, H) (or (B, H) of a single network) as (members, …) rows: each
    member's entries."""
    return activation.reshape(members, -1) if activation.dim() == 3 else activation.reshape(1, -1)


def dormant_fraction(layers: Iterable[torch.Tensor], tau: float, members: int = 1) -> list[float]:
    """Fraction of each member's hidden units that are τ-dormant, over all its layers."""
    dormant, total = torch.zeros(members), 0
    for activation in layers:
        score = unit_scores(activation)
        rows = (score <= tau).reshape(members, -1)
        dormant, total = dormant + rows.sum(1).cpu(), total + rows.shape[1]
    return (dormant / max(total, 1)).tolist()


def active_fraction(layers: Iterable[torch.Tensor], members: int = 1) -> list[float]:
    """1 − fraction of each member's hidden activations that are exactly zero."""
    zeros, total = torch.zeros(members), 0
    for activation in layers:
        rows = member_rows(activation, members)
        zeros, total = zeros + (rows == 0).sum(1).cpu(), total + rows.shape[1]
    return (1.0 - zeros / max(total, 1)).tolist()


def singular_values(features: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(features.double())


def spectrum_srank(values: torch.Tensor, delta: float = 0.01) -> int:
    """min k with Σ_{i≤k} vᵢ / Σ vᵢ ≥ 1 − δ, for a spectrum v sorted in decreasing
    order."""
    cumulative = torch.cumsum(values, 0) / values.sum()
    return int((cumulative < 1 - delta).sum()) + 1


def spectrum_effective_rank(values: torch.Tensor) -> float:
    """exp(entropy of v / Σv)."""
    p = values / values.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def srank(features: torch.Tensor, delta: float = 0.01) -> int:
    return spectrum_srank(singular_values(features), delta)


def effective_rank(features: torch.Tensor) -> float:
    return spectrum_effective_rank(singular_values(features))


def member_parameters(parameters: Iterable[torch.Tensor], members: int) -> torch.Tensor:
    """All parameters as (members, P) rows: each member's blocks (the leading, member-major
    dimension), flattened."""
    return torch.cat([p.detach().reshape(members, -1) for p in parameters], dim=1)


def parameter_rms(parameters: Iterable[torch.Tensor], members: int = 1) -> list[float]:
    """‖θ‖/√P of each member's parameters."""
    flat = member_parameters(parameters, members)
    return (flat.norm(dim=1) / flat.shape[1] ** 0.5).tolist()


def distance_from(
    parameters: Iterable[torch.Tensor], initial: Iterable[torch.Tensor], members: int = 1
) -> list[float]:
    """‖θ − θ₀‖/√P of each member's parameters."""
    diffs = member_parameters([p.detach() - q for p, q in zip(parameters, initial)], members)
    return (diffs.norm(dim=1) / diffs.shape[1] ** 0.5).tolist()


def gradient_norm(parameters: Iterable[torch.Tensor], members: int = 1) -> list[float]:
    """‖∇θ‖ of each member's parameters (0 before any gradient)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    return member_parameters(grads, members).norm(dim=1).tolist() if grads else [0.0] * members


class ActivationProbe:
    """Records the activated outputs of `relu_inputs` and the input of `head` during one forward
    call.

    `activation` is the nonlinearity that follows those layers (ReLU unless the network says
    otherwise, e.g. tanh in PPO: a tanh unit is dormant when |tanh| is small on every probe input).
    """

    def __init__(
        self, relu_inputs: Iterable[nn.Module], head: nn.Module, activation: Callable = torch.relu
    ) -> None:
        self.relu_inputs, self.head, self.activation = list(relu_inputs), head, activation

    def __call__(
        self, forward: Callable[[], torch.Tensor]
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        hidden: list[torch.Tensor] = []
        features: list[torch.Tensor] = []
        handles = [
            m.register_forward_hook(
                lambda _m, _i, out: hidden.append(self.activation(out.detach()))
            )
            for m in self.relu_inputs
        ]
        handles.append(
            self.head.register_forward_pre_hook(
                lambda _m, inputs: features.append(inputs[0].detach())
            )
        )
        try:
            with torch.no_grad():
                forward()
        finally:
            for handle in handles:
                handle.remove()
        return hidden, features[0]


def member_features(features: torch.Tensor, members: int) -> list[torch.Tensor]:
    """Each member's (B, F) features from a head's input: (E, B, F) with E = members × copies (the
    first copy of each member's, e.g. a twin critic's Q₁), or (B, F) of a single network."""
    if features.dim() == 2:
        return [features]
    return list(features.reshape(members, -1, *features.shape[1:])[:, 0])


def network_report(
    name: str,
    network: nn.Module,
    probe: ActivationProbe,
    forward: Callable[[], torch.Tensor],
    initial_parameters: list[torch.Tensor],
    members: int = 1,
) -> dict[str, list[float]]:
    """All `plasticity/{name}_*` scalars for one network, one value per member (features of each
    member's first ensemble copy)."""
    hidden, features = probe(forward)
    report = {
        f"plasticity/{name}_dormant_{tau:g}": dormant_fraction(hidden, tau, members)
        for tau in DORMANT_TAUS
    }
    parameters = list(network.parameters())
    per_member = member_features(features, members)
    report |= {
        f"plasticity/{name}_active_units": active_fraction(hidden, members),
        f"plasticity/{name}_srank": [float(srank(phi)) for phi in per_member],
        f"plasticity/{name}_effective_rank": [effective_rank(phi) for phi in per_member],
        f"plasticity/{name}_feature_norm": [float(phi.norm(dim=-1).mean()) for phi in per_member],
        f"plasticity/{name}_param_rms": parameter_rms(parameters, members),
        f"plasticity/{name}_distance_from_init": distance_from(
            parameters, initial_parameters, members
        ),
        f"plasticity/{name}_grad_norm": gradient_norm(parameters, members),
    }
    return report


def batch_rows(batch, rows: slice):
    """The same replay batch (a NamedTuple of (members, B, ...) tensors; None for a field it lacks)
    cut to `rows` of every member's samples."""
    return type(batch)(*(None if field is None else field[:, rows] for field in batch))


def last_parameters(module: nn.Module, max_params: int) -> list[torch.Tensor]:
    """The trainable parameter tensors of the last layers (registration order), up to `max_params`
    entries (≥ 1 tensor)."""
    chosen: list[torch.Tensor] = []
    for parameter in reversed([p for p in module.parameters() if p.requires_grad]):
        if chosen and sum(p.numel() for p in chosen) + parameter.numel() > max_params:
            break
        chosen.append(parameter)
    return chosen[::-1]


class measuring:
    """Context for forwards that need gradients but are measurements, not training: remedies that
    watch training forwards (CBP's statistics) skip them."""

    active = False

    def __enter__(self) -> None:
        measuring.active = True

    def __exit__(self, *exc: object) -> None:
        measuring.active = False


def per_sample_gradients(
    forward: Callable, batch, parameters: list[torch.Tensor], members: int = 1
) -> torch.Tensor:
    """J ∈ ℝ^{members×B×P}: row b of member k is ∇_θ of its sample b's output summed over
    its entries, θ its own parameters. One backward pass per b serves every member: a member's
    output depends on its own parameters only."""
    rows = []
    with torch.enable_grad(), measuring():
        for b in range(batch[0].shape[1]):
            gradients = torch.autograd.grad(
                forward(batch_rows(batch, slice(b, b + 1))).sum(), parameters, allow_unused=True
            )
            rows.append(
                member_parameters(
                    [
                        g if g is not None else torch.zeros_like(p)
                        for g, p in zip(gradients, parameters)
                    ],
                    members,
                )
            )
    return torch.stack(rows, dim=1)


def ntk_report(
    name: str,
    module: nn.Module,
    forward: Callable,
    batch,
    max_params: int,
    tol: float = 1e-6,
    members: int = 1,
) -> dict[str, list[float]]:
    """Ranks of the empirical NTK K = J·Jᵀ on `batch` and the mean off-diagonal |cos| of the
    per-sample gradients, per member."""
    parameters = last_parameters(module, max_params)
    jacobians = per_sample_gradients(forward, batch, parameters, members).double()
    reports = [_ntk_spectrum(name, jacobian, tol) for jacobian in jacobians]
    params = float(sum(p.numel() for p in parameters) // members)
    # a member with no spectrum lacks the ranks
    keys = dict.fromkeys(key for report in reports for key in report)
    return {f"plasticity/{name}_ntk_params": [params] * members} | {
        key: [report.get(key, 0.0) for report in reports] for key in keys
    }


def _ntk_spectrum(name: str, jacobian: torch.Tensor, tol: float) -> dict[str, float]:
    gram = jacobian @ jacobian.T
    eigenvalues = torch.linalg.eigvalsh(gram).clamp_min(0).flip(0)  # decreasing
    largest = float(eigenvalues[0])
    norms = gram.diagonal().sqrt().clamp_min(1e-300)
    cosine = (gram / norms[:, None] / norms[None, :]).abs()
    off_diagonal = ~torch.eye(len(gram), dtype=torch.bool, device=gram.device)
    report = {f"plasticity/{name}_ntk_grad_cos": float(cosine[off_diagonal].mean())}
    if largest == 0:  # every gradient is zero (all units dead): no spectrum to rank
        return report | {f"plasticity/{name}_ntk_rank": 0.0}
    return report | {
        f"plasticity/{name}_ntk_rank": float((eigenvalues > tol * largest).sum()),
        f"plasticity/{name}_ntk_effective_rank": spectrum_effective_rank(eigenvalues),
        f"plasticity/{name}_ntk_srank": float(spectrum_srank(eigenvalues)),
        f"plasticity/{name}_ntk_condition": largest / max(float(eigenvalues[-1]), tol * largest),
    }


def policy_kl(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> torch.Tensor:
    """KL(π_θ(·|s) ‖ π_θ′(·|s)) per state, from distribution parameters: {"logits": (...,
    B, n)} for categorical policies, {"mean": (..., B, A), "log_std": broadcastable to it} for
    diagonal Gaussians (summed over the A action dimensions)."""
    if "logits" in before:  # Σ_k p_k·(log p_k − log q_k)
        log_p, log_q = before["logits"].log_softmax(-1), after["logits"].log_softmax(-1)
        return (log_p.exp() * (log_p - log_q)).sum(-1)
    # KL(N(μ₀, σ₀²) ‖ N(μ₁, σ₁²)) = log
    # σ₁/σ₀ + (σ₀² + (μ₀ − μ₁)²)/(2σ₁²) − ½ per dimension
    log_std0, log_std1 = before["log_std"], after["log_std"]
    variance_ratio = (2 * (log_std0 - log_std1)).exp()
    mean_term = ((before["mean"] - after["mean"]) / log_std1.exp()).square()
    return (log_std1 - log_std0 + 0.5 * (variance_ratio + mean_term - 1)).sum(-1)


def churn_report(
    name: str,
    before: torch.Tensor,
    after: torch.Tensor,
    batch_size: int,
    members: int = 1,
    actions: int = 0,
) -> dict[str, list[float]]:
    """Value churn for the network named "critic", policy churn for the others (module docstring),
    per member; outputs are member-major. `actions` > 1: the critic's outputs are Q(s, ·) of DQN,
    (members, B, actions)."""
    change = after - before
    if name != "critic":
        return {
            f"plasticity/{name}_churn": change.reshape(members, batch_size, -1)
            .norm(dim=2)
            .mean(1)
            .tolist()
        }
    report = {f"plasticity/{name}_churn": change.abs().reshape(members, -1).mean(1).tolist()}
    if actions > 1:
        greedy_changed = after.argmax(dim=-1) != before.argmax(dim=-1)
        report[f"plasticity/{name}_greedy_churn"] = (
            greedy_changed.reshape(members, -1).float().mean(1).tolist()
        )
    return report


class PlasticityMonitor:
    """Runs `network_report` for each named network every `args.every` updates on a fresh probe
    batch, the NTK report every `args.ntk_every` updates and churn across every
    `args.churn_every`-th update.

    Each network (plasticity.network.Network) is reported under its `tag`. The initial parameters
    (for distance from init) and a pending churn reference are part of the monitor's state, hence of
    checkpoints.
    """

    def __init__(self, args: DiagnosticsArgs, networks: list, members: int = 1) -> None:
        self.args, self.members = args, members
        self.networks = {net.tag: net for net in networks}
        self.initial = {
            name: [p.detach().clone() for p in net.module.parameters()]
            for name, net in self.networks.items()
        }
        # (batch, {name: output}, {name: distribution parameters}) taken right before the update
        # that churn measures
        self.churn_reference = None

    def after_update(self, num_updates: int, replay, logger, global_step: int) -> None:
        args = self.args
        report: dict[str, float] = {}
        if self.churn_reference is not None:
            report |= self.measure_churn()
        probe_batch = None
        if args.every and num_updates % args.every == 0:
            probe_batch = replay.sample(args.probe_size)
            for name, net in self.networks.items():
                report |= network_report(
                    name,
                    net.module,
                    net.probe,
                    lambda: net.forward(probe_batch),
                    self.initial[name],
                    self.members,
                )
        # reusing the probe batch leaves the replay's RNG alone
        if args.ntk_every and num_updates % args.ntk_every == 0:
            reuse = probe_batch is not None and args.probe_size >= args.ntk_batch
            ntk_batch = (
                batch_rows(probe_batch, slice(0, args.ntk_batch))
                if reuse
                else replay.sample(args.ntk_batch)
            )
            for name, net in self.networks.items():
                report |= ntk_report(
                    name,
                    net.module,
                    net.forward,
                    ntk_batch,
                    args.ntk_max_params,
                    members=self.members,
                )
        if args.churn_every and (num_updates + 1) % args.churn_every == 0:
            reference = replay.sample(args.churn_batch)
            with torch.no_grad():
                outputs = {name: net.forward(reference) for name, net in self.networks.items()}
                # copies: a state-independent log σ is the parameter itself, which the update
                # changes in place
                distributions = {
                    name: {key: value.clone() for key, value in net.distribution(reference).items()}
                    for name, net in self.networks.items()
                    if net.distribution is not None
                }
                self.churn_reference = (reference, outputs, distributions)
        if report:
            logger.scalars(report, global_step)

    def measure_churn(self) -> dict[str, float]:
        reference, before, before_distributions = self.churn_reference
        self.churn_reference = None
        report: dict[str, list[float]] = {}
        with torch.no_grad():
            for name, net in self.networks.items():
                batch_size = reference[0].shape[1]
                report |= churn_report(
                    name,
                    before[name],
                    net.forward(reference),
                    batch_size,
                    self.members,
                    net.actions,
                )
                if name in before_distributions:
                    kl = policy_kl(before_distributions[name], net.distribution(reference))
                    report[f"plasticity/{name}_kl_churn"] = (
                        kl.reshape(self.members, -1).mean(1).tolist()
                    )
        return report

    def state_dict(self) -> dict:
        return {"initial": self.initial, "churn_reference": self.churn_reference}

    def load_state_dict(self, state: dict) -> None:
        self.initial = state["initial"]
        self.churn_reference = state["churn_reference"]
