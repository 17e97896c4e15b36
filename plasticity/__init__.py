"""Plug-in plasticity remedies and diagnostics: SWD (swd.py), the reset family incl. CBP, layer
resetting and ReGraMa (resets.py), CIR (cir.py), LEAST (least.py), LayerNorm/CReLU/Fourier/NaP
(architecture.py), L2/L2-init/Parseval/weight clipping (regularizers.py), C-CHAIN (cchain.py),
TRAC/Kron (optimizers.py) and the diagnostics (diagnostics.py). catalogue.py declares which agent
each remedy applies to; hooks.py is how agents call the loss/step remedies.

Each remedy is one module with one settings dataclass nested in an agent's Args (`--swd.enabled`,
`--reset.method redo`, ...) and a few hook functions the agent calls. `ActorCriticRemedies` bundles
the settings every off-policy actor-critic agent (TD3, SAC) takes, so they are declared once;
`RemedyArgs` (hooks.py) holds the settings every agent takes.
"""

from __future__ import annotations

import dataclasses

from plasticity.cir import CIRArgs
from plasticity.diagnostics import DiagnosticsArgs
from plasticity.hooks import RemedyArgs
from plasticity.least import LEASTArgs
from plasticity.network import Network as Network
from plasticity.resets import ResetArgs
from plasticity.swd import SWDArgs
from plasticity.wiring import Plasticity as Plasticity


@dataclasses.dataclass
class ActorCriticRemedies(RemedyArgs):
    swd: SWDArgs = dataclasses.field(default_factory=SWDArgs)
    """Sample Weight Decay: replay sampling that favours recent transitions (plasticity/swd.py)"""
    diagnostics: DiagnosticsArgs = dataclasses.field(default_factory=DiagnosticsArgs)
    """plasticity diagnostics of actor and critic on a probe batch (plasticity/diagnostics.py)"""
    reset: ResetArgs = dataclasses.field(default_factory=ResetArgs)
    """neuron resets: full reset, shrink-and-perturb, ReDo, plasticity injection or continual
    backprop on actor and/or critic (plasticity/resets.py)"""
    cir: CIRArgs = dataclasses.field(default_factory=CIRArgs)
    """CIR: constrained-initial-representation critic torso and the convex min/max target
    (plasticity/cir.py)"""
    least: LEASTArgs = dataclasses.field(default_factory=LEASTArgs)
    """LEAST: stop unpromising episodes early, stored as truncations (plasticity/least.py)"""
