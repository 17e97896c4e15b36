"""The two hooks through which an agent applies the loss, optimiser and architecture remedies to
each network.

    # + L2, L2-init, Parseval, C-CHAIN (reference: a replay batch, or None)
    loss = hooks.loss("critic", td_loss, reference)
    # TRAC or the base step, NaP, clipping
    optimizer.zero_grad(); loss.backward(); hooks.step("critic")

`RemedyArgs` holds the settings (nested flags --net.*, --nap.*, --reg.*, --clip.*, --cchain.*,
--optim.*); the methods themselves live in architecture.py, regularizers.py, cchain.py and
optimizers.py. With every remedy off, `loss` returns the main loss unchanged and `step` is the
optimiser's step. Everything the hooks keep (θ₀, NaP targets, clip bounds, C-CHAIN's snapshot and
means, TRAC's tuner) is checkpointed through `state_dict`.

Both hooks are capture-ready (cleanrl_plus/speed.py): which remedies act is fixed by the flags,
state changes in place, and the event counts (`remedies/<remedy>_events`) are device tensors, so a
compiled or replayed step keeps them right without a host sync. C-CHAIN's reference batch is drawn
by the agent (`Plasticity.reference_batch`), only when it is on.
"""

from __future__ import annotations

import dataclasses

import torch

from cleanrl_plus.replay import Batch
from plasticity.architecture import NaPArgs, NetArgs, NormProjector
from plasticity.cchain import CChainArgs, ChurnReducer, ChurnTarget
from plasticity.network import Network
from plasticity.optimizers import TRAC, OptimArgs
from plasticity.regularizers import (
    PARSEVAL_WIDTH,
    RegArgs,
    WeightClipArgs,
    WeightClipper,
    l2_init_penalty,
    l2_penalty,
    parseval_penalty,
    rows_as_units,
    trainable,
    weight_layers,
)


@dataclasses.dataclass
class RemedyArgs:
    net: NetArgs = dataclasses.field(default_factory=NetArgs)
    """network builder: LayerNorm, CReLU or deep Fourier features in the torsos
    (plasticity/architecture.py)"""
    nap: NaPArgs = dataclasses.field(default_factory=NaPArgs)
    """Normalize-and-Project (plasticity/architecture.py)"""
    reg: RegArgs = dataclasses.field(default_factory=RegArgs)
    """loss regularisers: L2, regenerative L2-init, Parseval (plasticity/regularizers.py)"""
    clip: WeightClipArgs = dataclasses.field(default_factory=WeightClipArgs)
    """weight clipping after every step (plasticity/regularizers.py)"""
    cchain: CChainArgs = dataclasses.field(default_factory=CChainArgs)
    """C-CHAIN churn reduction (plasticity/cchain.py)"""
    optim: OptimArgs = dataclasses.field(default_factory=OptimArgs)
    """base optimiser (Adam or Kron) and the TRAC wrapper (plasticity/optimizers.py)"""


class _NetworkHooks:
    def __init__(self, args: RemedyArgs, net: Network, members: int) -> None:
        self.args, self.net, self.members = args, net, members
        self.parameters = list(net.module.parameters())
        self.initial = [p.detach().clone() for p in self.parameters] if args.reg.l2_init else []
        head_ids = {id(m) for head in net.heads for m in head.modules()}
        self.hidden_layers = [
            (layer, ensemble)
            for layer, ensemble in weight_layers(net.module)
            if id(layer) not in head_ids
        ]
        self.projector = NormProjector(net.module, net.heads) if args.nap.enabled else None
        self.clipper = WeightClipper(net.module, args.clip.kappa) if args.clip.kappa > 0 else None
        self.churn = (
            ChurnReducer(args.cchain, net.module, net.churn or ChurnTarget(net.forward), members)
            if args.cchain.enabled
            else None
        )
        self.trac = (
            TRAC(net.optimizer, args.optim.trac_s_init, members=members)
            if args.optim.trac
            else None
        )
        self.logged: dict[str, torch.Tensor] = {}
        # the remedies each hook applies: fixed by the flags, so a captured step counts them right
        reg = args.reg
        self.loss_remedies = [
            name
            for name, on in (
                ("l2", reg.l2),
                ("l2_init", reg.l2_init),
                ("parseval", reg.parseval and self.hidden_layers),
                ("cchain", self.churn is not None),
            )
            if on
        ]
        self.step_remedies = [
            name
            for name, part in (("trac", self.trac), ("nap", self.projector), ("clip", self.clipper))
            if part is not None
        ]

    def loss(
        self, main_loss: torch.Tensor, reference, scale_against: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per member: main_loss (members,) + this network's regularisers of each member's own
        parameters."""
        reg, members = self.args.reg, self.members
        total = main_loss
        if reg.l2:
            penalty = l2_penalty(trainable(self.net.module.parameters()), members)
            total, self.logged["l2"] = total + reg.l2 * penalty, penalty.detach()
        if reg.l2_init:
            pairs = [(p, p0) for p, p0 in zip(self.parameters, self.initial) if p.requires_grad]
            penalty = l2_init_penalty([p for p, _ in pairs], [p0 for _, p0 in pairs], members)
            total, self.logged["l2_init"] = total + reg.l2_init * penalty, penalty.detach()
        if reg.parseval and self.hidden_layers:
            matrices = [rows_as_units(layer, ensemble) for layer, ensemble in self.hidden_layers]
            width = PARSEVAL_WIDTH if reg.parseval_width_scaling else None
            penalty = parseval_penalty(matrices, reg.parseval_scale, width, members)
            total, self.logged["parseval"] = total + reg.parseval * penalty, penalty.detach()
        if self.churn is not None:
            if reference is None:
                raise ValueError("C-CHAIN needs a reference batch: pass reference= to hooks.loss")
            total = total + self.churn.loss(main_loss, reference, scale_against)
            self.logged["cchain_loss"], self.logged["cchain_coef"] = (
                self.churn.last_churn,
                self.churn.coef,
            )
        return total

    def on_task_switch(self) -> None:
        if self.churn is not None and self.churn.schedule.restarts_each_task:
            self.churn.restart()

    def step(self) -> None:
        if self.trac is not None:
            self.trac.step()
            self.logged["trac_scale"] = self.trac.scale
        else:
            self.net.optimizer.step()
        if self.projector is not None:
            self.projector.project()
        if self.clipper is not None:
            self.clipper.clip()
        if self.churn is not None:
            self.churn.after_step()

    def state_dict(self) -> dict:
        parts = {
            "projector": self.projector,
            "clipper": self.clipper,
            "churn": self.churn,
            "trac": self.trac,
        }
        return {"initial": self.initial} | {
            key: part.state_dict() for key, part in parts.items() if part is not None
        }

    def load_state_dict(self, state: dict) -> None:
        self.initial = [p0.to(p.device) for p, p0 in zip(self.parameters, state["initial"])]
        for key in ("projector", "clipper", "churn", "trac"):
            part = getattr(self, key)
            if part is not None:
                part.load_state_dict(state[key])


class RemedyHooks:
    """The loss/step hooks for the named networks of one agent (of each of its `members`); `acted`
    counts what each remedy did (device tensors)."""

    def __init__(self, args: RemedyArgs, networks: list[Network], members: int = 1) -> None:
        self.networks = {net.name: _NetworkHooks(args, net, members) for net in networks}
        self.acted: dict[str, torch.Tensor] = {}
        for hooks in self.networks.values():
            device = next(hooks.net.module.parameters()).device
            for remedy in hooks.loss_remedies + hooks.step_remedies:
                self.acted.setdefault(remedy, torch.zeros((), dtype=torch.int64, device=device))

    def loss(
        self,
        name: str,
        main_loss: torch.Tensor,
        reference: Batch | None = None,
        scale_against: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """main_loss + this network's regularisers, one value per member; `reference` is C-CHAIN's
        reference batch (None when it is off) and `scale_against` the loss its coefficient is scaled
        against (default main_loss; PPO: the policy loss)."""
        hooks = self.networks[name]
        total = hooks.loss(main_loss, reference, scale_against)
        self._count(hooks.loss_remedies)
        return total

    def step(self, name: str) -> None:
        """The optimiser step of this network (through TRAC when on), then NaP's projection and
        weight clipping."""
        hooks = self.networks[name]
        hooks.step()
        self._count(hooks.step_remedies)

    def on_task_switch(self) -> None:
        """A continual task switch: C-CHAIN restarts its schedule where its authors do (PPO's
        policies)."""
        for hooks in self.networks.values():
            hooks.on_task_switch()

    def _count(self, remedies: list[str]) -> None:
        for remedy in remedies:
            self.acted[remedy] += 1

    def report(self) -> dict[str, torch.Tensor]:
        """remedies/<network>_<quantity> of the last update and remedies/<remedy>_events (device
        tensors, no sync)."""
        report = {
            f"remedies/{name}_{key}": value
            for name, hooks in self.networks.items()
            for key, value in hooks.logged.items()
        }
        return report | {f"remedies/{remedy}_events": count for remedy, count in self.acted.items()}

    def state_dict(self) -> dict:
        return {
            "networks": {name: hooks.state_dict() for name, hooks in self.networks.items()},
            "acted": dict(self.acted),
        }

    def load_state_dict(self, state: dict) -> None:
        for name, hooks in self.networks.items():
            hooks.load_state_dict(state["networks"][name])
        for remedy, count in state["acted"].items():
            self.acted[remedy].copy_(count)
