"""C-CHAIN: continual churn approximated reduction (--cchain.*).

Paper: Tang, Obando-Ceron, Castro, Courville, Berseth, "Mitigating plasticity loss in continual reinforcement learning
by reducing churn", ICML 2025 (arXiv 2506.00592); official code bluecontra/C-CHAIN (`crl_minatar/agents/
double_dqn_c_chain.py`, read for the rule and defaults below).

At update t, on a reference batch B_ref drawn separately from the training batch (same size) [code]:

    L_churn = mean_{s ∈ B_ref} ‖f_θ(s) − f_θₜ₋₁(s)‖²       f: the network's outputs, θₜ₋₁ its parameters one update ago
    L = L_main + c·L_churn,   c = 50 for the first 10,000 updates, then c = ρ·mean|L_main| / (mean L_churn + 1e-8)  [code]

with ρ the target relative loss scale: 0.01 for DDQN on MinAtar [code], 0.02–0.05 in the PPO scripts [code]; our
default is 0.01. The official means run over the last 50,000 updates; we keep exponential moving averages with time
constant 50,000 updates (bias-corrected), which needs no list and no host sync [ours]. No loss at the first update
(no θₜ₋₁ yet), as the official code. θₜ₋₁ is a parameter snapshot taken when the loss is built (just before the
step); f_θₜ₋₁ runs through `torch.func.functional_call` on the live module, so there is no network copy. The snapshot,
the means, the coefficient and the update count change in place and the warm-up switch is a `torch.where`, so a
captured update (--cudagraphs) keeps C-CHAIN's schedule [ours].
Outputs f: Q(s_ref, a_ref) for TD3/SAC critics, all Q(s_ref, ·) for DDQN, μ(s_ref) for actors, and the policy's
logits/mean with the value for PPO/GTR's joint network.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn as nn
from torch.func import functional_call

from cleanrl_plus.ranges import Count, NonNegative

WINDOW = 50_000


@dataclasses.dataclass
class CChainArgs:
    enabled: bool = False
    """C-CHAIN: penalise the change of each network's outputs on a separate reference batch since the last update"""
    relative_scale: NonNegative = 0.01
    """ρ: the churn loss is scaled to ρ × the main loss (after the warm-up); official DDQN/MinAtar value"""
    initial_coef: NonNegative = 50.0
    """c during the warm-up"""
    warmup_updates: Count = 10_000
    """updates with the fixed coefficient before the relative scaling starts"""


class _Outputs(nn.Module):
    """`outputs(batch)` as a module's forward, so functional_call can run it with other parameters of `net`."""

    def __init__(self, net: nn.Module, outputs: Callable) -> None:
        super().__init__()
        self.net, self.outputs = net, outputs

    def forward(self, batch) -> torch.Tensor:
        return self.outputs(batch)


class ChurnReducer:
    """C-CHAIN for one network: `loss(main_loss, reference_batch)` returns c·L_churn and snapshots θ."""

    def __init__(self, args: CChainArgs, module: nn.Module, outputs: Callable) -> None:
        self.args, self.module, self.outputs = args, module, outputs
        self.wrapper = _Outputs(module, outputs)
        self.previous: dict[str, torch.Tensor] | None = None
        device = next(module.parameters()).device
        self.updates = torch.zeros((), dtype=torch.int64, device=device)  # updates with a churn loss
        self.main_mean = torch.zeros((), device=device)  # EMA of |L_main|
        self.churn_mean = torch.zeros((), device=device)  # EMA of L_churn
        self.coef = torch.full((), args.initial_coef, device=device)
        self.last_churn = torch.zeros((), device=device)

    def _snapshot(self) -> None:
        self.previous = {f"net.{name}": p.detach().clone() for name, p in self.module.named_parameters()}

    def loss(self, main_loss: torch.Tensor, batch) -> torch.Tensor:
        current = [f"net.{name}" for name, _ in self.module.named_parameters()]
        if self.previous is None or list(self.previous) != current:  # first update, or the structure changed (injection)
            self._snapshot()  # new tensors: a captured step is captured again after either (graphs.py)
            return torch.zeros((), device=main_loss.device)
        with torch.no_grad():  # f_θₜ₋₁: the snapshot swapped in for one call (attributes, not in-place writes)
            previous_outputs = functional_call(self.wrapper, self.previous, (batch,))
        churn = (self.outputs(batch) - previous_outputs).square().mean()
        self._track(main_loss.detach(), churn.detach())
        with torch.no_grad():  # θₜ₋₁ of the next update, in place
            torch._foreach_copy_(list(self.previous.values()), [p.detach() for p in self.module.parameters()])
        return self.coef * churn

    def _track(self, main: torch.Tensor, churn: torch.Tensor) -> None:
        self.updates += 1
        decay = 1.0 - 1.0 / WINDOW
        self.main_mean.mul_(decay).add_(main.abs(), alpha=1 - decay)
        self.churn_mean.mul_(decay).add_(churn, alpha=1 - decay)
        self.last_churn.copy_(churn)
        # both EMAs carry the same bias correction 1 − decay^t, which cancels in the ratio (except against the 1e-8)
        bias = (1e-8 * (1.0 - decay ** self.updates.double())).float()
        relative = self.args.relative_scale * self.main_mean / (self.churn_mean + bias)
        self.coef.copy_(torch.where(self.updates > self.args.warmup_updates, relative, self.coef))

    def state_dict(self) -> dict:
        return {"previous": self.previous, "updates": self.updates, "main_mean": self.main_mean, "churn_mean": self.churn_mean,
                "coef": self.coef}

    def load_state_dict(self, state: dict) -> None:
        device = self.coef.device
        self.previous = None if state["previous"] is None else {name: value.to(device) for name, value in state["previous"].items()}
        self.updates.copy_(torch.as_tensor(state["updates"]))  # a host int in checkpoints from before --cudagraphs
        for key in ("main_mean", "churn_mean", "coef"):
            getattr(self, key).copy_(state[key])
