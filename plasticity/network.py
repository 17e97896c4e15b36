"""How an agent describes one of its networks to the plasticity code: once, in a `Network`.

A network holds every member of a group (cleanrl_plus.members): its layers are ensemble layers whose
leading dimension is member-major, it maps (members, B, ...) batches to (members, B, ...) outputs,
and `rebuild` draws each member's fresh initialisation from that member's own generator
(`Members.build`).

Every remedy and diagnostic reads what it needs from it: the loss/step hooks the module, its
optimiser and heads; the resets also the target, how to rebuild the network and which units they may
recycle; the diagnostics the probe and the forward on a batch. `plasticity.wiring.Plasticity` takes
an agent's networks and owns them all.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Sequence

import torch
import torch.nn as nn

from plasticity.cchain import ChurnTarget
from plasticity.diagnostics import ActivationProbe


class Layout(NamedTuple):
    """What a network module tells the plasticity code about its layers (its `layout()` method); the
    fields as in `Network`, which takes them from the module unless given."""

    hidden: Sequence[nn.Module]
    heads: tuple[nn.Module, ...]
    unit_pairs: list[tuple[nn.Module, nn.Module]] | None = None
    probe: ActivationProbe | None = None


@dataclasses.dataclass(eq=False)
class Network:
    """One trained network as every remedy and diagnostic sees it."""

    name: str
    """'critic', 'actor' or 'agent': the tags (plasticity/<name>_*, remedies/<name>_*) and
    --reset.networks"""
    module: nn.Module
    optimizer: torch.optim.Optimizer
    forward: Callable
    """forward(batch) → the module's output on a replay or rollout batch (C-CHAIN, churn, the NTK,
    ReDo's scores)"""
    rebuild: Callable[[], nn.Module]
    """a freshly initialised copy of the module, as the agent built it (resets, the continual
    oracle)"""
    target: nn.Module | None = None
    """its target network, kept in step by resets"""
    hidden: Sequence[nn.Module] = ()
    """the layers whose outputs go through the hidden nonlinearity, input to output (default: the
    module's `layout()`)"""
    heads: tuple[nn.Module, ...] = ()
    """its output layers: Parseval leaves them out, injection replaces a single one, layer resets
    count them as one"""
    unit_pairs: list[tuple[nn.Module, nn.Module]] | None = None
    """(layer feeding a unit, the one layer reading it) for ReDo, ReGraMa and CBP; None: `hidden` in
    a chain into a single head (several heads reading one layer cannot be recycled with an unchanged
    output)"""
    probe: ActivationProbe | None = None
    """what the diagnostics read as hidden units and features; None: the outputs of `hidden` and the
    head's input"""
    activation: Callable[[torch.Tensor], torch.Tensor] = torch.relu
    """the hidden nonlinearity the default probe applies (a tanh unit is dormant when |tanh| is
    small)"""
    distribution: Callable | None = None
    """stochastic policies: batch → the distribution's parameters, for the KL churn"""
    label: str | None = None
    """the diagnostics' name for it, where it differs from `name` (PPO's 'policy')"""
    restarts_with: tuple[Callable[[], None], ...] = ()
    """state outside the module that a full or layer reset of this network starts afresh too: SAC's
    temperature and its Adam state (Nikishin et al. 2022 build a new temperature with every
    reset)"""
    churn: ChurnTarget | None = None
    """what C-CHAIN keeps close to the previous update's values, where it is not `forward` with the
    value-network settings (PPO's policy: plasticity.cchain.policy_churn)"""
    actions: int = 0
    """a critic whose outputs are Q(s, ·) over this many discrete actions (DQN): the churn
    diagnostic also counts changed greedy actions"""
    parts: tuple["Network", ...] = ()
    """networks that one loss and optimiser train together (PPO's policy and value): the diagnostics
    watch each part, the resets act on each part unless the parts share parameters (one torso), and
    then on the whole"""

    def __post_init__(self) -> None:
        if not self.heads and hasattr(self.module, "layout"):
            layout = self.module.layout()
            self.hidden, self.heads = layout.hidden, layout.heads
            self.unit_pairs = layout.unit_pairs if self.unit_pairs is None else self.unit_pairs
            self.probe = layout.probe if self.probe is None else self.probe
        if self.unit_pairs is None:
            readers = list(self.hidden[1:]) + list(self.heads[:1] if len(self.heads) == 1 else ())
            self.unit_pairs = list(zip(self.hidden, readers))
        if self.probe is None and self.heads:
            self.probe = ActivationProbe(self.hidden, self.heads[0], self.activation)

    @property
    def head(self) -> nn.Module | None:
        """The single output layer plasticity injection replaces (None: several heads)."""
        return self.heads[0] if len(self.heads) == 1 else None

    @head.setter
    def head(self, module: nn.Module) -> None:
        self.heads = (module,)

    @property
    def tag(self) -> str:
        return self.label or self.name

    def reset_units(self) -> list["Network"]:
        """What resets act on: the parts, or the whole when parts share parameters."""
        if not self.parts:
            return [self]
        seen: set[int] = set()
        for part in self.parts:
            ids = {id(p) for p in part.module.parameters()}
            if ids & seen:
                return [self]
            seen |= ids
        return list(self.parts)
