"""Loss and weight-constraint regularisers (--reg.*, --clip.*): L2, regenerative L2-init, Parseval,
weight clipping.

Each penalty is added to the loss of the network it regularises (TD3/SAC: critic and actor losses;
DDQN: the TD loss; PPO/GTR: the joint loss over policy and value network), before the backward pass,
so it goes through the network's own optimiser (Adam: a *coupled* penalty, not AdamW's decoupled
decay). Sums run over all entries.

- L2: λ·Σ_θ θ² over all trainable parameters (weights and biases). Studied as a plasticity
  remedy by Lyle et al. 2024 ("Disentangling the causes of plasticity loss"); no default in the
  papers we trust — off unless given.
- L2-init, regenerative regularisation (Kumar, Marklund, Van Roy, "Maintaining plasticity in
  continual learning via regenerative regularization", CoLLAs 2024): λ·Σ_θ (θ − θ₀)²,
  θ₀ the parameters at construction (kept through resets and checkpoints) [paper]. Their swept λ
  ∈ {1e-2, …, 1e-6} [paper]; off by default.
- Parseval (Chung, Cherif, Precup, Meger, "Parseval regularization for continual reinforcement
  learning", NeurIPS 2024; official code wechu/parseval_reg, `parseval_reg/agent.py`): λ·Σ_l
  (64/n_l)²·‖W_l W_lᵀ − s·I‖²_F over the hidden layers' weight matrices W_l (rows = the
  n_l units; output layers excluded, biases not regularised) [code]. s = 2, the squared gain √2²
  of their orthogonal initialisation (`scale = init_gain ** 2`, 2 when no gain is given) [code];
  (64/n)² rescales λ, "tuned for width 64", to other widths (their n is the network width; ours
  each layer's units, the same for their equal-width MLPs) [code; `--reg.no-parseval-width-scaling`
  drops it]. λ = 1e-3 (gridworld, MetaWorld) or 1e-4 (LunarLander, quadruped) [code: `main.py`];
  off by default. Their MetaWorld runs also add per-unit diagonal scale layers (`--add_diag_layer`),
  which we do not build. Conv kernels are flattened to (out, in·k·k) and each ensemble entry is
  its own W [ours: their networks have neither].

Members of a group (cleanrl_plus.members): every penalty is one value per member, the sum over that
member's own parameters (the leading, member-major dimension of each tensor), so no member's penalty
reads another's weights.
- Weight clipping (Elsayed, Lan, Lyle, Mahmood, "Weight clipping for deep continual and
  reinforcement learning", RLC 2024; official code mohmdelsayed/weight-clipping,
  `rl_experiments/weight_clipping.py`): after every optimiser step each weight and bias of a layer
  is clipped to [−κ·b_l, κ·b_l], b_l = 1/√fan_in, the bound of PyTorch's default uniform
  initialisation of that layer, whatever initialiser the network used (`InitBounds`) [code]; output
  layers are clipped too (`clip_last_layer` on) [code]. κ = 3 in their PPO runs
  (`ppo_continuous_action_clipped.py`) [code]; off by default. A parameter outside every layer is
  clipped too, as their optimiser clamps every entry of `agent.parameters()`: PPO's
  state-independent log σ, shape (1, A) in their agent, is a 2-D tensor whose fan-in
  (`_calculate_fan_in_and_fan_out`) is A, so it is clipped to ±κ/√A [code]; ours, (members, A),
  gets each member the same bound. LayerNorm scale/shift are not clipped [ours: their networks have
  no LayerNorm].
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn

from cleanrl_plus.nn import EnsembleLayerNorm, EnsembleLinear, MemberConv2d
from envs.ranges import NonNegative, Positive

PARSEVAL_WIDTH = 64  # the width the authors tuned λ at: λ·(64/n)² per layer of n units [code]


@dataclasses.dataclass
class RegArgs:
    l2: NonNegative = 0.0
    """L2 regularisation λ·Σθ² added to each network's loss (coupled, not AdamW's decay;
    0 = off)"""
    l2_init: NonNegative = 0.0
    """regenerative regularisation λ·Σ(θ − θ₀)² towards the initial parameters (Kumar et
    al. 2024; 0 = off)"""
    parseval: NonNegative = 0.0
    """Parseval regularisation λ·Σ(64/n)²‖WWᵀ − s·I‖²_F over hidden weight matrices
    (Chung et al. 2024: 1e-3 or 1e-4; 0 = off)"""
    parseval_scale: Positive = 2.0
    """s in ‖WWᵀ − s·I‖²_F: the authors' 2, the squared gain of their orthogonal
    initialisation"""
    parseval_width_scaling: bool = True
    """scale λ by (64/n)² per layer of n units, as the authors' code (their λ was tuned for width
    64)"""


@dataclasses.dataclass
class WeightClipArgs:
    kappa: NonNegative = 0.0
    """weight clipping: after every step clip each layer's weights and bias to ±κ/√fan_in
    (Elsayed et al. 2024: κ = 3 for PPO; 0 = off)"""


def weight_layers(module: nn.Module) -> list[tuple[nn.Module, bool]]:
    """(layer, is_ensemble) for every dense, ensemble or convolution layer, in registration order;
    ensemble layers (an EnsembleLinear, a MemberConv2d) hold one weight per entry along their
    leading dimension."""
    layers = []
    for layer in module.modules():
        if isinstance(layer, (EnsembleLinear, MemberConv2d)):
            layers.append((layer, True))
        elif isinstance(layer, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            layers.append((layer, False))
    return layers


def trainable(parameters) -> list[torch.Tensor]:
    return [p for p in parameters if p.requires_grad]


def per_member(values: torch.Tensor, members: int) -> torch.Tensor:
    """(members,) sums of a tensor whose leading dimension is member-major (each member's block
    summed)."""
    return values.reshape(members, -1).sum(1)


def sum_of_terms(terms: list[torch.Tensor]) -> torch.Tensor:
    """Σ of per-member terms (members,) → (members,), summed along each member's own row: a sum
    down the column would add a group of one's terms in another order than a larger group's."""
    return torch.stack(terms, dim=1).sum(1)


def l2_penalty(parameters: list[torch.Tensor], members: int = 1) -> torch.Tensor:
    """Σ_θ θ², per member: (members,)."""
    return sum_of_terms([per_member(p.square(), members) for p in parameters])


def l2_init_penalty(
    parameters: list[torch.Tensor], initial: list[torch.Tensor], members: int = 1
) -> torch.Tensor:
    """Σ_θ (θ − θ₀)², per member: (members,)."""
    return sum_of_terms(
        [per_member((p - p0).square(), members) for p, p0 in zip(parameters, initial)]
    )


def rows_as_units(layer: nn.Module, ensemble: bool) -> torch.Tensor:
    """The weight matrix with one row per output unit: (out, in), or (E, out, in) for an ensemble
    layer (kernels flattened to in·k·k)."""
    if isinstance(layer, EnsembleLinear):
        return layer.weight.transpose(1, 2)  # stored (E, in, out)
    return layer.weight.flatten(2) if ensemble else layer.weight.flatten(1)


def parseval_penalty(
    matrices: list[torch.Tensor], scale: float, reference_width: int | None = None, members: int = 1
) -> torch.Tensor:
    """Σ ‖W Wᵀ − s·I‖²_F over matrices W of shape (E, n, in) or (n, in), per member
    (members,); with `reference_width` r each term is weighted (r/n)²."""
    total = []
    for w in matrices:
        gram = w @ w.transpose(-1, -2)
        identity = torch.eye(gram.shape[-1], device=w.device, dtype=w.dtype)
        weight = 1.0 if reference_width is None else (reference_width / gram.shape[-1]) ** 2
        total.append(weight * per_member((gram - scale * identity).square(), members))
    return sum_of_terms(total)


def fan_in(layer: nn.Module, ensemble: bool) -> int:
    """Inputs per unit: in (nn.Linear, ensemble layers stored (E, in, out)), in·k·k
    (convolutions)."""
    if isinstance(layer, EnsembleLinear):
        return layer.weight.shape[1]
    return layer.weight[0, 0].numel() if ensemble else layer.weight[0].numel()


def free_parameters(module: nn.Module) -> list[torch.Tensor]:
    """Trainable parameters outside every weight layer and normalisation layer (PPO's
    state-independent log σ)."""
    norms = (nn.LayerNorm, EnsembleLayerNorm)
    owned = {id(p) for layer, _ in weight_layers(module) for p in layer.parameters()}
    owned |= {id(p) for m in module.modules() if isinstance(m, norms) for p in m.parameters()}
    return [p for p in module.parameters() if id(p) not in owned and p.requires_grad]


class WeightClipper:
    """Clip each layer's weight and bias to ±κ/√fan_in after every step, and each free parameter
    of shape (members, n) to ±κ/√n (module docstring)."""

    def __init__(self, module: nn.Module, kappa: float) -> None:
        layers = weight_layers(module)
        self.layers = [layer for layer, _ in layers]
        self.free = free_parameters(module)
        # host floats, once
        self.bounds = [kappa / math.sqrt(fan_in(layer, ensemble)) for layer, ensemble in layers]
        # their (1, A) log σ: fan-in A
        self.free_bounds = [kappa / math.sqrt(p.shape[-1]) for p in self.free]
        # in place: cleanrl_plus/speed.py
        self.clips = torch.zeros((), dtype=torch.int64, device=next(module.parameters()).device)

    @torch.no_grad()
    def clip(self) -> None:
        for layer, bound in zip(self.layers, self.bounds):
            layer.weight.clamp_(-bound, bound)
            if layer.bias is not None:
                layer.bias.clamp_(-bound, bound)
        for parameter, bound in zip(self.free, self.free_bounds):
            parameter.clamp_(-bound, bound)
        self.clips += 1

    def state_dict(self) -> dict:
        return {"bounds": list(self.bounds), "clips": self.clips}

    def load_state_dict(self, state: dict) -> None:
        self.bounds = list(state["bounds"])  # host floats: read before any step is captured
        self.clips.copy_(state["clips"])
