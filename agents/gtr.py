"""GTR: Gaussian Trust Region policy optimisation — PPO plus a bounded, non-monotonic trust region.

Paper: B. Liu, J. Liu, Obando-Ceron, H. Wang, R. Liu, Castro, Courville, Pan, "Gaussian Trust Region
Policy Optimization", arXiv 2606.03382 (NeurIPS 2026). What is verified from it (abstract): PPO's
clipped updates are persistent but directionally inefficient under non-stationarity; GTR reshapes
the trust region with a Gaussian kernel — bounded and non-monotonic, strong local stability that
relaxes under sustained high-advantage updates — and anchors it to a Mixture Gaussian Anchor over
recent policies.

**RECONSTRUCTION.** The paper's loss, deviation measure, kernel width, anchor size and weights are
not public (docs/agents/gtr.md). Everything below is our documented reconstruction
(docs/agents/gtr.md), with every constant a flag so that the published formula can replace it:

    Δₜ = log π_θ(aₜ|sₜ) − log π_A(aₜ|sₜ)          per-sample deviation from the anchor
    P(Δ) = 1 − exp(−Δ²/2σ²)      bounded in [0, 1); |∂P/∂Δ| peaks at |Δ| = σ, vanishes beyond
    π_A = Σⱼ wⱼ·π_{θ_{k−j}},  wⱼ ∝ η^j,  j = 0..J−1
                                 mixture of the policies that collected the last J rollouts
                                 (j = 0 is π_old itself, so J = 1 makes Δ PPO's log-ratio)
    log π_A(a|s) = logsumexp_j(log wⱼ + log π_{θ_{k−j}}(a|s))     once per rollout: J passes
    L_π = L_clip + β·E[P(Δ)]            (--gtr.mode add, default)
       or −E[ρÂ] + β·E[P(Δ)]            (--gtr.mode replace)

Defaults σ = 0.2 (the clip ε on the log-ratio scale), β = 1, J = 4, η = 0.5 [our choice,
docs/agents/gtr.md]. Diagnostics, after each iteration's epochs: fraction of the rollout's samples
with |Δ| > σ under the updated policy ("released", gtr/released_fraction) and its KL to π_A
(gtr/kl_anchor; to π_old: PPO's losses/approx_kl) as k3 estimators on the rollout's actions, and
the cosine between successive iterations' policy-parameter updates (the paper's "directionally
inefficient" claim: PPO's successive updates point in inconsistent directions).

GTR is PPO (agents/ppo.py) with `GaussianTrustRegion` (a `ppo.TrustRegion`) in place of L_clip:
before the epochs it computes the anchor log-probs of the rollout, inside every minibatch it is the
policy loss (a pure function of tensors, so PPO's --compile/--cudagraphs cover it), and after the
epochs it reports the diagnostics. Everything else — rollout, GAE with truncation bootstrap, value
loss, normalisation — is PPO's.

Run: python agents/gtr.py --env-id CartPole-v1      (python agents/gtr.py --help lists every flag)
"""

from __future__ import annotations

import copy
import dataclasses
import math
from functools import partial
from typing import Annotated, Literal

import torch
from torch import Tensor

from agents import ppo
from cleanrl_plus.policy import Policy
from cleanrl_plus.rollout import Minibatch, RolloutStorage
from cleanrl_plus.run import cli_main
from envs.ranges import AtLeastOne, NonNegative, Positive, Range
from plasticity.diagnostics import member_parameters


@dataclasses.dataclass
class GTRArgs:
    sigma: Positive = 0.2
    """σ of the Gaussian kernel on Δ = log π_θ − log π_A (the restoring force peaks at
    |Δ| = σ)"""
    beta: NonNegative = 1.0
    """β, weight of the trust-region penalty E[1 − exp(−Δ²/2σ²)]"""
    anchor_size: AtLeastOne = 4
    """J, rollout-time policies in the Mixture Gaussian Anchor (1 = anchor on π_old)"""
    anchor_decay: Annotated[float, Range(gt=0, le=1)] = 0.5
    """η, mixture weights wⱼ ∝ η^j for the j-th most recent policy"""
    mode: Literal["add", "replace"] = "add"
    """add the penalty to PPO's clipped surrogate, or replace the clip (unclipped ρÂ plus the
    penalty)"""


@dataclasses.dataclass
class Args(ppo.Args):
    exp_name: str = "gtr"
    """name of this experiment (the run directory is
    runs/{env_id}__{exp_name}__{seed}__{unix_time})"""
    gtr: GTRArgs = dataclasses.field(default_factory=GTRArgs)
    """the Gaussian trust region (a reconstruction; see the module docstring)"""


def gaussian_penalty(delta: torch.Tensor, sigma: float) -> torch.Tensor:
    """P(Δ) = 1 − exp(−Δ²/2σ²), elementwise."""
    return 1.0 - torch.exp(-delta.square() / (2.0 * sigma**2))


def mixture_log_prob(snapshot_logprobs: torch.Tensor, decay: float) -> torch.Tensor:
    """log Σⱼ wⱼ·πⱼ(a|s) from (J, ...) per-snapshot log-probs, most recent first,
    wⱼ = η^j / Σ η^j."""
    num = snapshot_logprobs.shape[0]
    j = torch.arange(num, dtype=snapshot_logprobs.dtype, device=snapshot_logprobs.device)
    log_weights = j * math.log(decay)
    log_weights = log_weights - torch.logsumexp(log_weights, dim=0)
    # one weight per snapshot, broadcast over the samples
    log_weights = log_weights.view(-1, *[1] * (snapshot_logprobs.dim() - 1))
    return torch.logsumexp(log_weights + snapshot_logprobs, dim=0)


class MixtureAnchor:
    """The last J rollout-time policies (copies of the policy, most recent first) and the mixture's
    log-prob. Once J are kept, a push shifts their weights along the copies in place. Each copy
    holds every member's policy."""

    def __init__(self, policy: Policy, size: int, decay: float) -> None:
        self.size, self.decay = size, decay
        # made before any remedy hooks into the policy's layers
        self.template = copy.deepcopy(policy).requires_grad_(False)
        self.snapshots: list[Policy] = []

    @torch.no_grad()
    def push(self, policy: Policy) -> None:
        if len(self.snapshots) < self.size:
            self.snapshots.append(copy.deepcopy(self.template))
        # oldest first: each copy takes the weights of the next newer one
        for newer, older in zip(self.snapshots[-2::-1], self.snapshots[:0:-1]):
            older.load_state_dict(newer.state_dict())
        self.snapshots[0].load_state_dict(policy.state_dict())

    @torch.no_grad()
    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        logprobs = torch.stack([snapshot.log_prob(obs, actions)[0] for snapshot in self.snapshots])
        return mixture_log_prob(logprobs, self.decay)

    def state_dict(self) -> list[dict[str, torch.Tensor]]:
        return [snapshot.state_dict() for snapshot in self.snapshots]

    def load_state_dict(self, states: list[dict[str, torch.Tensor]]) -> None:
        self.snapshots = [copy.deepcopy(self.template) for _ in states]
        for snapshot, state in zip(self.snapshots, states):
            snapshot.load_state_dict(state)


class GaussianTrustRegion:
    """GTR's policy-loss term in PPO's loop (a `ppo.TrustRegion`): the anchor's log-probs before
    the epochs, the penalised loss in every minibatch, the gtr/* diagnostics after."""

    extra_features = 1  # log π_A(a|s) of every rollout sample, in storage.extra

    def __init__(self, args: GTRArgs, policy: Policy, members: int = 1) -> None:
        self.args, self.members = args, members
        self.anchor = MixtureAnchor(policy, args.anchor_size, args.anchor_decay)
        self.previous_direction: torch.Tensor | None = None
        self.parameters_before: torch.Tensor | None = None

    def before_update(self, storage: RolloutStorage, policy: Policy) -> None:
        self.anchor.push(policy)  # π_old joins the mixture as its most recent member
        rollout = storage.flat()
        anchor_logprobs = self.anchor.log_prob(rollout.obs, rollout.actions)
        storage.extra[..., 0] = anchor_logprobs.reshape(storage.logprobs.shape)  # in place
        self.parameters_before = member_parameters(policy.parameters(), self.members).clone()

    def __call__(
        self, ratio: Tensor, advantages: Tensor, new_logprobs: Tensor, minibatch: Minibatch, clip_coef: Tensor
    ) -> Tensor:
        # (members, B) quantities: one loss per member
        if self.args.mode == "add":
            surrogate = ppo.clipped_surrogate_loss(ratio, advantages, clip_coef)
        else:
            surrogate = -(ratio * advantages).mean(-1)
        delta = new_logprobs - minibatch.extra[..., 0]
        return surrogate + self.args.beta * gaussian_penalty(delta, self.args.sigma).mean(-1)

    @torch.no_grad()
    def after_update(self, storage: RolloutStorage, policy: Policy) -> dict[str, Tensor | float]:
        rollout = storage.flat()
        # Δ of the updated policy
        delta = policy.log_prob(rollout.obs, rollout.actions)[0] - rollout.extra[..., 0]
        # each member's step in parameter space, (members, P)
        direction = member_parameters(policy.parameters(), self.members) - self.parameters_before
        report = {
            "gtr/released_fraction": (delta.abs() > self.args.sigma).float().mean(-1),
            # k3 estimate of KL(π_A ‖ π_θ)
            "gtr/kl_anchor": (delta.exp() - 1 - delta).mean(-1),
            "gtr/anchor_policies": float(len(self.anchor.snapshots)),
        }
        if self.previous_direction is not None:
            report["gtr/update_cosine"] = torch.cosine_similarity(direction, self.previous_direction, dim=1)
        self.previous_direction = direction
        return report

    def state_dict(self) -> dict:
        return {
            "snapshots": self.anchor.state_dict(),
            "previous_direction": self.previous_direction,
        }

    def load_state_dict(self, state: dict) -> None:
        self.anchor.load_state_dict(state["snapshots"])
        self.previous_direction = state["previous_direction"]


def check(args: Args) -> None:
    """PPO's start-up checks, for GTR (`cleanrl-plus sweep` runs them for each configuration)."""
    ppo.check(args, agent_name="gtr")


def build(args: Args) -> ppo.PPOParts:
    """PPO's run with the Gaussian trust region as its policy-loss term, built on the policy of
    every member."""
    return ppo.build(args, trust_region=partial(GaussianTrustRegion, args.gtr), agent_name="gtr")


def main(args: Args) -> dict:
    return ppo.train(build(args))


load_policy = ppo.load_policy  # GTR's policy is PPO's; the anchor matters only for training


if __name__ == "__main__":
    cli_main(main, Args)
