"""C-CHAIN: continual churn approximated reduction (--cchain.*).

Paper: Tang, Obando-Ceron, Castro, Courville, Berseth, "Mitigating plasticity loss in continual
reinforcement learning by reducing churn", ICML 2025 (arXiv 2506.00592); official code
bluecontra/C-CHAIN, read for every rule below.

At update t, on a reference batch B_ref drawn apart from the training batch, of its size [code]:

    L_churn = D(f_θ(B_ref), f_θₜ₋₁(B_ref))       θₜ₋₁: the parameters one update ago
    L = L_main + c·L_churn

What f and D are, as the authors run them:
- a value network (DDQN's Q(s, ·)): f its outputs, D the mean squared difference over all of them
  [code: `crl_minatar/agents/double_dqn_c_chain.py`]; TD3/SAC critics Q(s, a) and actors μ(s) are
  treated the same way [ours: the paper has no TD3/SAC];
- PPO with Box actions: f the policy mean, D the mean squared difference [code:
  `crl_dmc/crl_run_ppo_c_chain_dmc.py`];
- PPO with Discrete actions: f the action probabilities, D the cross-entropy −Σₐ
  pₜ₋₁(a)·log(p_θ(a) + 1e-8) [code: `crl_gym_classic_control/basic_utils.py`]. PPO's value
  network is not regularised [code].

The coefficient is c₀ during a warm-up and afterwards, at every rescaling point,
    c = max(ρ·mean|L_scale| / (mean L_churn + 1e-8), c_min)
with both means over the values recorded at the last W rescaling points. L_scale is the loss c is
scaled against: the TD loss for DDQN, PPO's policy loss (`scale_against`: the clipped surrogate
minus c_H·entropy, the `policy_loss` of `basic_utils.py`; the DMC runs have c_H = 0). A rescaling
point is every update for value networks and the last update of each iteration for PPO. With a
Gaussian policy its values are that last minibatch's, as the DMC script records them; with a
categorical policy they are |mean L_scale| and mean L_churn over the iteration's updates, as the
classic-control script records them (`train_combined_networks_with_chain` returns the means; the
script takes `np.abs` of each) [code]. The new c applies from the next update. The authors' numbers
per kind (`AUTHORS`; a --cchain.* flag overrides one):

    kind            ρ      c₀    warm-up  W        c_min  restarts at a switch  source
    values          0.01   50    10,000   50,000   0      no                    double_dqn_c_chain.py (updates)
    policy mean     0.05   100   50       100      0      yes                   crl_run_ppo_c_chain_dmc.py (iterations)
    probabilities   1e4    1     11       50       1      yes                   control_train_aligned_c_chain.py (iterations)

(warm-up: rescaling points before c first moves; the classic-control script starts at its 11th
iteration of a task.) A restart (continual task switch) sets c back to c₀ and empties the means
[code: both PPO scripts reset their coefficient and loss lists per task]. Which updates have no churn
term follows each script's history of network copies, whose entry two back is θₜ₋₁ and which has
none while it holds ≤ 2 (PPO) or < 2 (DDQN) copies [code]:

    kind            updates without a churn term
    values          the run's first (the history starts with one copy; never emptied)
    policy mean     the first two of every task (crl_run_ppo_c_chain_dmc.py makes a new history per task)
    probabilities   the run's first two (control_train_aligned_c_chain.py never empties its history)

The DMC script multiplies c by the learning-rate annealing fraction, which is 1 in its runs
(annealing off); we do not [ours].

θₜ₋₁ is a parameter snapshot taken when the loss is built (just before the step);
f_θₜ₋₁ runs through `torch.func.functional_call` on the live module, so there is no network
copy. The schedule moves on in `after_step`, after the network's optimiser step (as the authors
rescale after it), so the loss and its backward read one c even when --compile recomputes part of
the backward from the loss's inputs. The snapshot, the recorded values, the coefficient and the
counters change in place and every decision is a `torch.where`, so a captured update (--cudagraphs)
keeps C-CHAIN's schedule [ours].

Members of a group (cleanrl_plus.members): the churn, the two running means and c are per member,
each from that member's own losses and reference batch; the counters are common, since every member
updates at the same steps.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Callable

import torch
import torch.nn as nn
from torch.func import functional_call

from envs.ranges import AtLeastOne, Count, NonNegative, Range


@dataclasses.dataclass
class CChainArgs:
    enabled: bool = False
    """C-CHAIN: penalise the change of each network's outputs on a separate reference batch since
    the last update"""
    relative_scale: Annotated[float, Range(gt=0)] | None = None
    """ρ: after the warm-up the churn term is scaled to ρ × the loss it is scaled against
    (default: the authors' value for the network: 0.01 for value networks, 0.05 for PPO's Gaussian
    policy, 1e4 for its categorical policy)"""
    initial_coef: NonNegative | None = None
    """c during the warm-up (default: the authors' 50, 100 or 1)"""
    warmup: Count | None = None
    """rescaling points (updates; PPO: iterations) at the initial coefficient (default: the authors'
    10,000, 50 or 11)"""
    window: AtLeastOne | None = None
    """rescaling points in the running means of the two losses (default: the authors' 50,000, 100 or
    50)"""
    min_coef: NonNegative | None = None
    """floor of the rescaled coefficient (default: the authors' 0, 0 or 1)"""


def member_means(values: torch.Tensor, members: int) -> torch.Tensor:
    """(members,) means of a tensor whose leading dimension is member-major."""
    return values.reshape(members, -1).mean(1)


def squared_error(current: torch.Tensor, previous: torch.Tensor, members: int = 1) -> torch.Tensor:
    """Mean over all entries of (f_θ − f_θₜ₋₁)², per member."""
    return member_means((current - previous).square(), members)


def cross_entropy(current: torch.Tensor, previous: torch.Tensor, members: int = 1) -> torch.Tensor:
    """Mean over the batch of −Σₐ pₜ₋₁(a)·log(p_θ(a) + 1e-8), probabilities in the last
    dim, per member."""
    return member_means(-(previous * torch.log(current + 1e-8)).sum(-1), members)


@dataclasses.dataclass(frozen=True)
class Schedule:
    divergence: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]
    relative_scale: float
    initial_coef: float
    warmup: int
    window: int
    min_coef: float
    restarts_each_task: bool
    # updates without a churn term at the run's start, and again at each restart where `skips_at_restart`
    skipped_updates: int = 1
    skips_at_restart: bool = False
    # a rescaling point records |mean L_scale| and mean L_churn over its updates, not the last
    point_means: bool = False


AUTHORS: dict[str, Schedule] = {  # module docstring: the official scripts' values
    "values": Schedule(squared_error, 0.01, 50.0, 10_000, 50_000, 0.0, False),
    "policy mean": Schedule(
        squared_error, 0.05, 100.0, 50, 100, 0.0, True, skipped_updates=2, skips_at_restart=True
    ),
    "probabilities": Schedule(
        cross_entropy, 1e4, 1.0, 11, 50, 1.0, True, skipped_updates=2, point_means=True
    ),
}


@dataclasses.dataclass(frozen=True)
class ChurnTarget:
    """What C-CHAIN keeps close to its value one update ago, for one network."""

    outputs: Callable
    """batch → f(batch)"""
    kind: str = "values"
    """a key of AUTHORS: the divergence and the authors' schedule"""
    rescale_every: int = 1
    """updates between rescaling points (PPO: the updates of one iteration)"""


def policy_churn(
    policy_outputs: Callable, continuous: bool, updates_per_iteration: int
) -> ChurnTarget:
    """PPO's policy as C-CHAIN sees it: the mean of a Gaussian policy, or the action probabilities
    from a categorical policy's logits; rescaled once per iteration."""
    if continuous:
        return ChurnTarget(policy_outputs, "policy mean", updates_per_iteration)
    return ChurnTarget(
        lambda batch: torch.softmax(policy_outputs(batch), dim=-1),
        "probabilities",
        updates_per_iteration,
    )


def schedule(args: CChainArgs, kind: str) -> Schedule:
    """The authors' schedule for `kind`, with the --cchain.* values that were given in its place."""
    given = {
        field: value
        for field in ("relative_scale", "initial_coef", "warmup", "window", "min_coef")
        if (value := getattr(args, field)) is not None
    }
    return dataclasses.replace(AUTHORS[kind], **given)


class _Outputs(nn.Module):
    """`outputs(batch)` as a module's forward, so functional_call can run it with other parameters
    of `net`."""

    def __init__(self, net: nn.Module, outputs: Callable) -> None:
        super().__init__()
        self.net, self.outputs = net, outputs

    def forward(self, batch) -> torch.Tensor:
        return self.outputs(batch)


class ChurnReducer:
    """C-CHAIN for one network: `loss(main_loss, reference_batch, scale_against)` returns c·L_churn
    and snapshots θ; `after_step()`, after the network's optimiser step, records the update and
    rescales c for the next one."""

    def __init__(
        self, args: CChainArgs, module: nn.Module, target: ChurnTarget, members: int = 1
    ) -> None:
        self.module, self.outputs, self.every, self.members = (
            module,
            target.outputs,
            target.rescale_every,
            members,
        )
        self.schedule = schedule(args, target.kind)
        self.wrapper = _Outputs(module, target.outputs)
        self.previous: dict[str, torch.Tensor] | None = None
        device = next(module.parameters()).device
        window = self.schedule.window
        # since the start or the last restart
        self.updates = torch.zeros((), dtype=torch.int64, device=device)
        self.points = torch.zeros((), dtype=torch.int64, device=device)  # rescaling points recorded
        # … of which with a churn value
        self.churn_points = torch.zeros((), dtype=torch.int64, device=device)
        # |L_scale| of the last W points, a ring
        self.scale_values = torch.zeros(members, window, device=device)
        # L_churn of the last W points with one, a ring
        self.churn_values = torch.zeros(members, window, device=device)
        self.coef = torch.full((members,), self.schedule.initial_coef, device=device)
        # updates left without a churn term (the first has none anyway: no θₜ₋₁ yet)
        self.skips_left = torch.full(
            (), self.schedule.skipped_updates, dtype=torch.int64, device=device
        )
        # this update's L_scale and L_churn, for after_step
        self.last_scale = torch.zeros(members, device=device)
        self.last_churn = torch.zeros(members, device=device)
        self.has_churn = torch.zeros((), dtype=torch.bool, device=device)
        # point_means: sums over the updates since the last point
        self.scale_sum = torch.zeros(members, device=device)
        self.churn_sum = torch.zeros(members, device=device)

    def _snapshot(self) -> None:
        self.previous = {
            f"net.{name}": p.detach().clone() for name, p in self.module.named_parameters()
        }

    def loss(
        self, main_loss: torch.Tensor, batch, scale_against: torch.Tensor | None = None
    ) -> torch.Tensor:
        """c·L_churn with this update's c; nothing the term reads changes before the backward pass
        (a compiled loss's backward may recompute from its inputs), so the schedule moves on in
        after_step."""
        with torch.no_grad():
            self.last_scale.copy_(main_loss if scale_against is None else scale_against)
        current = [f"net.{name}" for name, _ in self.module.named_parameters()]
        # first update, or the structure changed (injection)
        if self.previous is None or list(self.previous) != current:
            # new tensors: a captured step is captured again after either (cleanrl_plus/speed.py)
            self._snapshot()
            self.has_churn.fill_(False)
            return torch.zeros(self.members, device=main_loss.device)
        # f_θₜ₋₁: the snapshot swapped in for one call (attributes, not in-place writes)
        with torch.no_grad():
            previous_outputs = functional_call(self.wrapper, self.previous, (batch,))
        churn = self.schedule.divergence(self.outputs(batch), previous_outputs, self.members)
        with torch.no_grad():
            self.last_churn.copy_(churn)
            self.has_churn.copy_(self.skips_left == 0)
            # θₜ₋₁ of the next update
            torch._foreach_copy_(
                list(self.previous.values()), [p.detach() for p in self.module.parameters()]
            )
        return torch.where(self.skips_left > 0, 0.0, self.coef * churn)

    @torch.no_grad()
    def after_step(self) -> None:
        """Count the update; at a rescaling point record |L_scale| and L_churn and, after the
        warm-up, rescale c."""
        schedule, window = self.schedule, self.schedule.window
        self.updates += 1
        point = self.updates % self.every == 0
        # the classic-control script: the iteration's mean losses (a skipped churn counts 0)
        if schedule.point_means:
            self.scale_sum += self.last_scale
            self.churn_sum += torch.where(self.has_churn, self.last_churn, 0.0)
            scale, churn, has_churn = (
                (self.scale_sum / self.every).abs(),
                self.churn_sum / self.every,
                point,
            )
            self.scale_sum.mul_(~point)
            self.churn_sum.mul_(~point)
        else:
            scale, churn, has_churn = self.last_scale.abs(), self.last_churn, point & self.has_churn
        self._push(self.scale_values, self.points, scale, point)
        self._push(self.churn_values, self.churn_points, churn, has_churn)
        self.skips_left.sub_(1).clamp_(min=0)
        # entries not yet written are 0
        scale_mean = self.scale_values.sum(1) / self.points.clamp(1, window)
        churn_mean = self.churn_values.sum(1) / self.churn_points.clamp(1, window)
        relative = (schedule.relative_scale * scale_mean / (churn_mean + 1e-8)).clamp_min(
            schedule.min_coef
        )
        self.coef.copy_(torch.where(point & (self.points >= schedule.warmup), relative, self.coef))

    def _push(
        self, ring: torch.Tensor, count: torch.Tensor, value: torch.Tensor, record: torch.Tensor
    ) -> None:
        """Where `record`, write each member's `value` over the oldest of its ring's last W entries,
        and count it."""
        index = (count % self.schedule.window).view(1)
        ring.index_copy_(
            1, index, torch.where(record, value.view(-1, 1), ring.index_select(1, index))
        )
        count.add_(record.long())

    @torch.no_grad()
    def restart(self) -> None:
        """A new task: c₀ again, empty means, and where the authors' script does, no churn term at
        the next updates (module docstring)."""
        for counter in (self.updates, self.points, self.churn_points):
            counter.zero_()
        for values in (self.scale_values, self.churn_values, self.scale_sum, self.churn_sum):
            values.zero_()
        self.coef.fill_(self.schedule.initial_coef)
        if self.schedule.skips_at_restart:
            self.skips_left.fill_(self.schedule.skipped_updates)

    STATE = (
        "updates",
        "points",
        "churn_points",
        "scale_values",
        "churn_values",
        "coef",
        "skips_left",
        "scale_sum",
        "churn_sum",
    )

    def state_dict(self) -> dict:
        return {"previous": self.previous} | {key: getattr(self, key) for key in self.STATE}

    def load_state_dict(self, state: dict) -> None:
        device = self.coef.device
        self.previous = (
            None
            if state["previous"] is None
            else {name: value.to(device) for name, value in state["previous"].items()}
        )
        for key in self.STATE:
            # checkpoints from before point means hold no sums (a checkpoint falls between points)
            if key in state:
                getattr(self, key).copy_(state[key])
        if (
            "skip" in state
        ):  # checkpoints from before `skips_left` held one flag for the next update
            self.skips_left.fill_(int(bool(state["skip"])))
