"""The neuron-reset family: full resets, shrink-and-perturb, layer resetting, ReDo, ReGraMa,
plasticity injection and CBP.

- Full reset (Nikishin, Schwarzer, D'Oro, Bacon, Courville, "The Primacy Bias in Deep RL", ICML
  2022; official code evgenii-nikishin/rl_with_resets, `train_dense.py`): every F environment steps
  the network gets a fresh initialisation; the replay buffer is kept; its optimiser state is dropped
  (fresh moments and step); its target network is rebuilt from the new weights; and what the network
  declares in `restarts_with` starts afresh too — SAC's temperature α and its Adam state, since
  the authors' reset builds a completely new agent, temperature included [code]. F = 200,000
  environment steps per member, counted from the run's start (`i % reset_interval == 0` after step
  i's updates and evaluation, `reset_interval` 2·10⁵) [code]: ours falls due after the last update
  of the environment step that reaches each multiple of F and lands at that step's end, after its
  evaluation and before its checkpoint (PPO: after the first update of its iteration).
- Shrink & perturb (Ash & Adams, "On Warm-Starting Neural Network Training", NeurIPS 2020, arXiv
  1910.08475, shrink the weights and add noise; the RL form of D'Oro, Schwarzer, Nikishin, Bacon,
  Bellemare, Courville, "Sample-Efficient Reinforcement Learning by Breaking the Replay Ratio
  Barrier", ICLR 2023, SR-SPR): θ ← α·θ + (1 − α)·φ with φ a fresh initialisation,
  α = 0.8 [SR-SPR's: `BBFAgent.shrink_factor = 0.8` and `perturb_factor = 0.2` in
  google-research/google-research `bigger_better_faster/bbf/configs/SR_SPR.gin`, combined as
  shrink·θ + perturb·φ by `interpolate_weights` in `bbf/agents/spr_agent.py`]; optimiser state
  dropped; targets keep tracking by Polyak.
- Layer resetting (Nikishin et al. 2022 as above; `train_pixels.py` resets DrQ's actor and critic
  heads): every F environment steps the last k layers of the network (`--reset.layers`, k = 1: the
  head) get a fresh initialisation from the network's own initialiser; the optimiser state of
  exactly those parameters is dropped, the same layers of the target network are overwritten with
  the new weights, and `restarts_with` starts afresh (DrQ's reset builds a new temperature too)
  [code]. F = 200,000 environment steps, counted as the full reset's, and k = 1 [ours]. Several
  heads reading the same features (SAC's mean and log σ) count as one layer. With --net.norm layer,
  a layer's LayerNorm is reset with it.
- ReDo (Sokar, Agarwal, Castro, Evci, "The Dormant Neuron Phenomenon in Deep RL", ICML 2023;
  official code google/dopamine, `dopamine/labs/redo/weight_recyclers.py`): every F = 1,000 updates,
  on a fresh replay batch (256), every hidden unit with τ-dormant score ≤ τ = 0.1 gets fresh
  incoming weights (from the network's own initialiser) and a zero bias, and zero outgoing weights,
  so the output is unchanged at that moment; the Adam moments of exactly those entries are zeroed
  and, by default, their Adam step counts restart (below). Targets need no change.
- ReGraMa (Liu, Wu, Obando-Ceron, Castro, Courville, Pan, "Measure gradients, not activations!
  Enhancing neuronal activity in deep reinforcement learning", 2025, arXiv 2505.24061; official
  code, linked from its v2 abstract: rippl-svg/grad-based-plasticity-metrics, `utils/ReDo.py`
  `GradientReDo`, run from `main.py`): every F = 1,000 updates, each unit i of every weight layer,
  the output layer included, is scored from the gradient of the last backward pass, sᵢ = mean_j
  |∂L/∂W_ij| over its incoming weights, divided by (the layer's mean score + 1e-9); units with
  sᵢ ≤ τ get fresh incoming weights and bias from the network's own initialiser (theirs:
  PyTorch's default, the initialiser of their networks); outgoing weights and the optimiser state
  are left as they are; τ = 0 (exactly zero gradient) [code; 0.1 in its README's example]. Only the
  critics, each twin on its own (`--reset.networks auto`) [code: `main.py` builds one GradientReDo
  per Q-network]. Theirs runs between the critic's backward and its Adam step, zeroing the recycled
  rows' gradients; ours runs after the step, on the gradients it kept, so the fresh rows skip that
  one step of Adam's momentum [ours: the update stays one captured graph]. `--reset.regrama-score
  preactivations` keeps this module's earlier reading of the paper's formula:
  sᵢ = E_x|∂L/∂zᵢ(x)| / mean_k E_x|∂L/∂z_k(x)|, zᵢ the pre-activation of hidden unit
  i, summed over every training batch since the last recycling by hooks on the backward passes,
  units recycled as ReDo's (fresh incoming, zero outgoing weights, Adam state restarted) [ours: an
  option, since we have not checked the paper's text against its code].
- Plasticity injection (Nikishin et al., "Deep Reinforcement Learning with Plasticity Injection",
  NeurIPS 2023; no official code): once, at update F, the network's head h_θ becomes
  h_θ(φ) + h_θ′(φ) − h_θ′⁻(φ) with θ frozen, θ′ fresh and trainable, θ′⁻ a
  frozen copy of θ′, so the output is unchanged at injection; the optimiser loses θ (and its
  state) and gets θ′ as a new parameter group with fresh Adam state; the target network gets the
  same structure with its own frozen head and copies of θ′, θ′⁻. A resumed run re-creates
  the structure from the resetter's state before the weights are loaded.
- Continual backprop (Dohare, Hernandez-Garcia, Lan, Rahman, Mahmood, Sutton, "Loss of plasticity in
  deep continual learning", Nature 2024; official code shibhansh/loss-of-plasticity,
  `lop/algos/gnt.py`, RL settings `lop/rl/cfg/ant/cbp.yml`): every update, each hidden unit i of a
  network keeps an age Aᵢ, a running mean activation f̄ᵢ
  ← η·f̄ᵢ + (1 − η)·mean_batch hᵢ and a contribution utility uᵢ
  ← η·uᵢ + (1 − η)·mean_k|w_kiᵒᵘᵗ|·mean_batch|hᵢ|, η = 0.99 [code]; ages grow by
  one, ρ·#{i: Aᵢ > m} replacements accumulate per layer (ρ = 1e-4, maturity m = 10,000, the RL
  setting [code]; the fractional part is carried over, the reference's `accumulate=True` [its RL
  runs use the default, a fraction realised as one replacement with that probability]), and the
  mature units with the lowest ûᵢ = uᵢ/(1 − η^Aᵢ) are replaced: fresh incoming weights
  from the network's own initialiser, bias 0, next-layer bias +=
  wᵒᵘᵗ_{·i}·f̄ᵢ/(1 − η^Aᵢ) (the expected output is kept), outgoing weights 0,
  Aᵢ = uᵢ = f̄ᵢ = 0, and the Adam moments and step counts of exactly those entries restarted
  (below; the RL runs use torch's Adam, whose state the reference leaves untouched). The statistics
  come from forward pre-hooks on the layers reading the units, during training forwards (grad on,
  weights trainable), so CBP sees each update's own batch at no extra forward; a network that did
  not train since the last step (TD3's delayed actor) does not age. The reference zeroes f̄ before
  compensating the bias, so its compensation adds 0; we compensate with f̄ as the paper describes.
Replacement parameters of full/S&P/ReDo/CBP/ReGraMa are written into the existing tensors, so
optimisers keep their parameter lists.

Adam state of recycled entries: PyTorch counts Adam steps per tensor, so zeroing only the moments of
some entries makes their next update ≈ lr·(1 − β₁)/√(1 − β₂)·sign(g) — 3.2× lr
for β = (0.9, 0.999), 0.1× lr for CBP's (0.99, 0.99) — and keeps it off lr·sign(g) for
~1/(1 − β₂) updates. With `--reset.per-element-adam-steps` (default) ReDo and CBP restart those
entries' bias correction too (per-element step counts, `plasticity.optimizers.ElementStepAdam`), so
their first update is lr·sign(g), a fresh Adam's. On for both: CBP's reference optimiser
(`lop/utils/AdamGnT.py`) keeps per-element steps, and the ReDo PyTorch port (timoklein/redo) found
resetting step counts crucial; Dopamine's optax ReDo keeps one shared count
(`--reset.no-per-element-adam-steps`, the old behaviour).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from typing import Literal

import torch
import torch.nn as nn

from cleanrl_plus.nn import EnsembleLinear
from envs.errors import UserError
from envs.ranges import AtLeastOne, Count, Fraction, NonNegative
from plasticity.diagnostics import ActivationProbe, measuring, unit_scores
from plasticity.network import Network
from plasticity.optimizers import ElementStepAdam
from plasticity.regularizers import weight_layers

DEFAULT_EVERY = {
    "full": 200_000,
    "shrink-perturb": 200_000,
    "redo": 1_000,
    "inject": 250_000,
    "cbp": 1,
    "layers": 200_000,
    "regrama": 1_000,
}
# F counts environment steps, as Nikishin et al. 2022 count them
ENV_STEP_METHODS = ("full", "layers")


@dataclasses.dataclass
class ResetArgs:
    method: Literal[
        "off", "full", "shrink-perturb", "redo", "inject", "cbp", "layers", "regrama"
    ] = "off"
    """re-initialisation remedy: full reset (replay kept), shrink-and-perturb, ReDo (recycle dormant
    units), plasticity injection (once), continual backprop (replace the least useful mature units),
    layer resetting (the last k layers), or ReGraMa (recycle units with vanishing gradients)"""
    every: Count = 0
    """full and layer resets: environment steps between resets (per member, as Nikishin et al. count
    them); the other methods: gradient updates between events (injection: the update at which it
    happens, once); 0 = the method's default (full, S&P and layers 200,000; ReDo and ReGraMa 1,000;
    injection 250,000; CBP 1)"""
    layers: AtLeastOne = 1
    """layer resetting: how many of the last layers to re-initialise (1 = the output layer)"""
    networks: Literal["auto", "critic", "actor", "both"] = "auto"
    """which networks the remedy touches ('both': all of them; PPO on Atari frames has one, policy
    and value on one torso; 'auto': the method's own — ReGraMa the critic, as its authors, every
    other method all)"""
    redo_tau: NonNegative = 0.1
    """ReDo: units with τ-dormant score ≤ redo_tau are recycled"""
    regrama_tau: NonNegative = 0.0
    """ReGraMa: units with gradient-magnitude score ≤ regrama_tau are recycled (official code: 0;
    its README example 0.1)"""
    regrama_score: Literal["weights", "preactivations"] = "weights"
    """ReGraMa's score: the official code's mean |∂L/∂W| over each unit's incoming weights from
    the last backward pass, every layer; or E_x|∂L/∂z| of each hidden unit's pre-activation
    since the last recycling (recycled as ReDo's)"""
    redo_batch: AtLeastOne = 256
    """ReDo: replay batch used to score units"""
    shrink: Fraction = 0.8
    """shrink-and-perturb: α in θ ← α·θ + (1 − α)·φ (0.8: SR-SPR's shrink factor)"""
    cbp_replacement_rate: Fraction = 1e-4
    """CBP: ρ, units replaced per step per mature unit of a layer (fractions accumulate)"""
    cbp_maturity: Count = 10_000
    """CBP: m, a unit can be replaced once it is older than m steps of its network (10,000: the
    paper's RL setting)"""
    cbp_decay: Fraction = 0.99
    """CBP: η, decay of the running mean activation and of the contribution utility"""
    per_element_adam_steps: bool = True
    """ReDo/CBP: recycled entries also restart their Adam step counts (fresh bias correction, as
    CBP's AdamGnT), not only their moments; off: PyTorch's per-tensor count, so their first update
    is ≈ lr·(1 − β₁)/√(1 − β₂)·sign(g)"""


def drop_optimizer_state(optimizer: torch.optim.Optimizer, parameters) -> None:
    for parameter in parameters:
        optimizer.state.pop(parameter, None)


@torch.no_grad()
def full_reset(net: Network) -> None:
    net.module.load_state_dict(net.rebuild().state_dict())
    drop_optimizer_state(net.optimizer, net.module.parameters())
    if net.target is not None:
        net.target.load_state_dict(net.module.state_dict())
    for restart in net.restarts_with:
        restart()


@torch.no_grad()
def shrink_and_perturb(net: Network, alpha: float) -> None:
    for parameter, fresh in zip(net.module.parameters(), net.rebuild().parameters()):
        parameter.mul_(alpha).add_(fresh, alpha=1.0 - alpha)
    drop_optimizer_state(net.optimizer, net.module.parameters())


def depth_levels(net: Network) -> list[list[nn.Module]]:
    """The network's trainable weight layers from input to output, one list per depth (several heads
    share the last)."""
    heads = list(net.heads)
    layers = [
        layer
        for layer, _ in weight_layers(net.module)
        if layer not in heads and any(p.requires_grad for p in layer.parameters())
    ]
    return [[layer] for layer in layers] + ([heads] if heads else [])


@torch.no_grad()
def reset_last_layers(net: Network, count: int) -> list[nn.Module]:
    """Fresh init of the last `count` layers (from a freshly built network), their optimiser state
    dropped, and the target's same layers overwritten; returns the layers reset."""
    names = {module: name for name, module in net.module.named_modules()}
    fresh = dict(net.rebuild().named_modules())
    chosen = [layer for level in depth_levels(net)[-count:] for layer in level]
    for layer in chosen:
        layer.load_state_dict(fresh[names[layer]].state_dict())
        drop_optimizer_state(net.optimizer, layer.parameters())
        if net.target is not None:
            net.target.get_submodule(names[layer]).load_state_dict(layer.state_dict())
    for restart in net.restarts_with:
        restart()
    return chosen


def _entry_masks(
    layer_in: nn.Module, layer_out: nn.Module, units: torch.Tensor
) -> dict[torch.Tensor, tuple[torch.Tensor, bool]]:
    """parameter → (mask of its entries touched by re-initialising `units`, whether they get fresh
    values)."""
    # weights (E, in, H), bias (E, 1, H); next layer (E, H, out)
    if isinstance(layer_in, EnsembleLinear):
        return {
            layer_in.weight: (units[:, None, :].expand_as(layer_in.weight), True),
            layer_in.bias: (units[:, None, :].expand_as(layer_in.bias), False),
            layer_out.weight: (units[:, :, None].expand_as(layer_out.weight), False),
        }
    return {  # nn.Linear: weights (H, in), bias (H,); next layer (out, H)
        layer_in.weight: (units[:, None].expand_as(layer_in.weight), True),
        layer_in.bias: (units, False),
        layer_out.weight: (units[None, :].expand_as(layer_out.weight), False),
    }


@torch.no_grad()
def reinitialise_units(
    net: Network,
    layer_in: nn.Module,
    layer_out: nn.Module,
    units: torch.Tensor,
    fresh_in: nn.Module,
    element_steps: bool = True,
) -> None:
    """Fresh incoming weights (from `fresh_in`, the same layer freshly built) and zero bias for
    `units`, zero outgoing weights, and zero Adam moments of exactly those entries; with
    `element_steps` their step counts restart too (net.optimizer must be an ElementStepAdam), else
    they keep the tensor's count (module docstring)."""
    for parameter, (mask, fresh_values) in _entry_masks(layer_in, layer_out, units).items():
        replacement = fresh_in.weight if fresh_values else torch.zeros_like(parameter)
        parameter.copy_(torch.where(mask, replacement, parameter))
        if element_steps:
            net.optimizer.restart(parameter, mask)
            continue
        state = net.optimizer.state.get(parameter, {})
        for moment in ("exp_avg", "exp_avg_sq"):
            if moment in state:
                state[moment].masked_fill_(mask, 0.0)


def fresh_layers(net: Network) -> dict[nn.Module, nn.Module]:
    """Each layer of `net.module` → the same layer of a freshly built network (its own
    initialiser)."""
    fresh = dict(net.rebuild().named_modules())
    return {module: fresh[name] for name, module in net.module.named_modules()}


class UnitCount:
    """Recycled and total hidden units of each member, summed over a network's layers."""

    def __init__(self, members: int) -> None:
        self.members, self.recycled, self.total = members, 0.0, 0

    def add(self, chosen: torch.Tensor) -> None:
        """`chosen`: a layer's (E, H) or (H,) mask of the units recycled, member-major."""
        rows = chosen.reshape(self.members, -1)
        self.recycled, self.total = self.recycled + rows.sum(1), self.total + rows.shape[1]

    def fraction(self) -> torch.Tensor:
        """(members,) fractions of each member's hidden units recycled."""
        return torch.as_tensor(self.recycled, dtype=torch.float32) / max(self.total, 1)


@torch.no_grad()
def recycle_dormant(
    net: Network, batch, tau: float, element_steps: bool = True, members: int = 1
) -> torch.Tensor:
    """ReDo on every (layer_in, layer_out) pair, each member's units scored on its own part of
    `batch`; returns the fraction of each member's hidden units recycled, (members,)."""
    probe = ActivationProbe([pair[0] for pair in net.unit_pairs], net.unit_pairs[-1][1])
    hidden, _ = probe(lambda: net.forward(batch))
    fresh = fresh_layers(net)
    counted = UnitCount(members)
    for (layer_in, layer_out), activation in zip(net.unit_pairs, hidden):
        dormant = unit_scores(activation) <= tau
        counted.add(dormant)
        # a layer without dormant units keeps its optimiser's fast path (no per-element steps)
        if bool(dormant.any()):
            reinitialise_units(net, layer_in, layer_out, dormant, fresh[layer_in], element_steps)
    return counted.fraction()


class PreactivationGradients:
    """ReGraMa's gradient magnitudes for the units of one network: Σₓ |∂L/∂zᵢ(x)| over
    every row of every training batch since the last recycling, zᵢ the output of the layer feeding
    unit i (the nonlinearity's input), summed in place by a hook on each training forward's output
    during its backward pass (no extra batch; capture-ready). Forwards that do not train the layer
    are left out: grad off, weights frozen (the critic inside an actor loss), the diagnostics'
    measurements, and copies of the layer."""

    def __init__(self, layers: list[nn.Module]) -> None:
        self.sums: dict[nn.Module, torch.Tensor] = {}
        for layer in layers:
            # ensemble (E, in, H): one row of sums per member; nn.Linear (H, in)
            weight = layer.weight
            shape = (
                (weight.shape[0], weight.shape[2])
                if isinstance(layer, EnsembleLinear)
                else (weight.shape[0],)
            )
            self.sums[layer] = torch.zeros(shape, device=weight.device)
            # a plain function, so that copies of the network (deepcopy) do not copy these sums
            layer.register_forward_hook(
                lambda layer, inputs, output, gradients=self: gradients.watch(layer, output)
            )

    def watch(self, layer: nn.Module, output: torch.Tensor) -> None:
        if (
            layer not in self.sums
            or not torch.is_grad_enabled()
            or not layer.weight.requires_grad
            or measuring.active
        ):
            return
        if output.requires_grad:
            output.register_hook(lambda grad, layer=layer: self.record(layer, grad))

    @torch.no_grad()
    def record(self, layer: nn.Module, grad: torch.Tensor) -> None:
        rows = (
            tuple(range(1, grad.dim() - 1))
            if isinstance(layer, EnsembleLinear)
            else tuple(range(grad.dim() - 1))
        )
        # returns None: the gradient flows on unchanged
        self.sums[layer].add_(grad.abs().sum(dim=rows))

    def scores(self, layer: nn.Module) -> torch.Tensor:
        """GraMa sᵢ = E|∂L/∂zᵢ| / mean_k E|∂L/∂z_k| over the layer's units (per ensemble
        member)."""
        sums = self.sums[layer]
        return sums / sums.mean(dim=-1, keepdim=True).clamp_min(torch.finfo(sums.dtype).tiny)

    def state_dict(self) -> list[torch.Tensor]:
        return list(self.sums.values())

    def load_state_dict(self, state: list[torch.Tensor]) -> None:
        for sums, saved in zip(self.sums.values(), state):
            sums.copy_(saved)


@torch.no_grad()
def recycle_low_gradient(
    net: Network,
    gradients: PreactivationGradients,
    tau: float,
    element_steps: bool = True,
    members: int = 1,
) -> torch.Tensor:
    """ReGraMa on every (layer_in, layer_out) pair: units with GraMa score ≤ τ (each member's
    layer scored on its own) are recycled as ReDo's; the sums restart. Returns the fraction of each
    member's hidden units recycled, (members,)."""
    fresh = None
    counted = UnitCount(members)
    for layer_in, layer_out in net.unit_pairs:
        # not trained since the last recycling (a host read, every F updates)
        if not bool(gradients.sums[layer_in].any()):
            continue
        inactive = gradients.scores(layer_in) <= tau
        counted.add(inactive)
        if bool(inactive.any()):
            fresh = fresh or fresh_layers(net)
            reinitialise_units(net, layer_in, layer_out, inactive, fresh[layer_in], element_steps)
    for sums in gradients.sums.values():
        sums.zero_()
    return counted.fraction()


def incoming_gradient_scores(layer: nn.Module, ensemble: bool) -> torch.Tensor:
    """ReGraMa's official score of each unit a layer feeds: mean_j |∂L/∂W_ij| over its incoming
    weights (the layer's gradient from the last backward pass), over (the layer's mean
    score + 1e-9); (E, H) per ensemble entry, else (H,)."""
    magnitude = layer.weight.grad.abs()
    if isinstance(layer, EnsembleLinear):  # (E, in, H)
        magnitude = magnitude.mean(dim=1)
    else:  # (out, in, …), or a member convolution's (members, out, in, k, k)
        magnitude = magnitude.flatten(2 if ensemble else 1).mean(dim=-1)
    return magnitude / (magnitude.mean(dim=-1, keepdim=True) + 1e-9)


@torch.no_grad()
def redraw_incoming(layer: nn.Module, units: torch.Tensor, fresh: nn.Module) -> None:
    """Fresh incoming weights and bias (from `fresh`, the same layer freshly built) for `units` ((E,
    H) or (H,)); the outgoing weights and the optimiser state stay as they are."""
    if isinstance(layer, EnsembleLinear):  # weights (E, in, H), bias (E, 1, H)
        masks = (units[:, None, :], units[:, None, :])
    else:  # weights (out, in, …) or (members, out, in, k, k), bias (out,) or (members, out)
        masks = (units.reshape(units.shape + (1,) * (layer.weight.dim() - units.dim())), units)
    for name, mask in zip(("weight", "bias"), masks):
        parameter = getattr(layer, name)
        if parameter is not None:
            parameter.copy_(torch.where(mask, getattr(fresh, name), parameter))


@torch.no_grad()
def recycle_low_weight_gradient(net: Network, tau: float, members: int = 1) -> torch.Tensor:
    """ReGraMa as its official code: every trained weight layer's units with score ≤ τ
    (incoming_gradient_scores, each member's layer on its own) get fresh incoming weights and bias.
    Returns the fraction of each member's units recycled, (members,)."""
    fresh = None
    counted = UnitCount(members)
    for layer, ensemble in weight_layers(net.module):
        # not trained (a frozen, injected head)
        if layer.weight.grad is None or not layer.weight.requires_grad:
            continue
        chosen = incoming_gradient_scores(layer, ensemble) <= tau
        counted.add(chosen)
        if bool(chosen.any()):
            fresh = fresh or fresh_layers(net)
            redraw_incoming(layer, chosen, fresh[layer])
    return counted.fraction()


class UnitStatistics:
    """CBP's state for the hidden units of one (layer_in, layer_out) pair, shaped (members, H) (one
    row for nn.Linear): the step each unit was born at (age A = steps − birth, so ageing costs
    nothing), mean activation f̄, contribution utility u, and the activations summed by the forward
    hook since the last step. The number of mature units is kept on the host, so no step reads the
    device."""

    def __init__(self, layer_in: nn.Module, layer_out: nn.Module) -> None:
        self.layer_in, self.layer_out = layer_in, layer_out
        # weights (E, in, H), next layer (E, H, out)
        self.ensemble = isinstance(layer_in, EnsembleLinear)
        weight = layer_in.weight
        members, self.width = (
            (weight.shape[0], weight.shape[2]) if self.ensemble else (1, weight.shape[0])
        )
        # set by ContinualBackprop: ensemble entries per member of the group
        self.entries_per_member = 1
        self.birth = torch.zeros(members, self.width, dtype=torch.int64, device=weight.device)
        self.mean_activation = torch.zeros(members, self.width, device=weight.device)
        self.utility = torch.zeros(members, self.width, device=weight.device)
        self.activation_sum = torch.zeros(members, self.width, device=weight.device)
        self.samples = 0  # batch rows summed into activation_sum since the last step
        self.steps = 0  # CBP steps this layer has taken
        self.owed = 0.0  # fractional replacements carried to the next step
        # (step, units replaced per member) of the last m steps: those units are immature. A unit is
        # replaced only when older than m, so none appears twice here, and #mature = H − their sum
        # once steps > m.
        self.recent: collections.deque[tuple[int, int]] = collections.deque()
        # units replaced so far in each ensemble entry (every entry replaces as many)
        self.replaced = 0

    @property
    def age(self) -> torch.Tensor:
        return self.steps - self.birth

    def record(self, layer: nn.Module, hidden: torch.Tensor) -> None:
        """Forward pre-hook of layer_out (its input is the ReLU output h, computed once by the
        network): sum h over the batch for training forwards only — not acting, targets, probes or
        the frozen critic of an actor loss (grad off or weights frozen), the NTK's per-sample
        gradients, nor copies of the layer (GTR's snapshots)."""
        if (
            layer is not self.layer_out
            or not torch.is_grad_enabled()
            or not layer.weight.requires_grad
            or measuring.active
        ):
            return
        with torch.no_grad():
            if not self.ensemble:
                hidden = hidden.reshape(1, -1, self.width)
            summed = hidden.detach().sum(dim=-2)
            self.activation_sum = summed if self.samples == 0 else self.activation_sum + summed
            self.samples += hidden.shape[-2]

    def mature_units(self, maturity: int) -> int:
        """#{i : Aᵢ > m} per member at this step (what the device's ages would say)."""
        while self.recent and self.recent[0][0] < self.steps - maturity:
            self.recent.popleft()
        return (self.width if self.steps > maturity else 0) - sum(units for _, units in self.recent)

    def update(self, decay: float) -> None:
        """One step older; f̄ ← η·f̄ + (1 − η)·mean h, u
        ← η·u + (1 − η)·mean_k|w_kiᵒᵘᵗ|·mean|h| (ReLU: |h| = h)."""
        weight = self.layer_out.weight
        fan_out = weight.shape[-1] if self.ensemble else weight.shape[0]
        # Σ_k |w_ki| (vector_norm is 5× slower on CPU)
        outgoing_l1 = weight.abs().sum(dim=-1 if self.ensemble else 0)
        self.mean_activation.mul_(decay).add_(self.activation_sum, alpha=(1 - decay) / self.samples)
        self.utility.mul_(decay).addcmul_(
            outgoing_l1, self.activation_sum, value=(1 - decay) / (self.samples * fan_out)
        )
        self.steps += 1
        self.samples = 0

    def add_to_next_bias(self, activation: torch.Tensor) -> None:
        """b_out += Σᵢ w_out[:, i]·activationᵢ: the next layer sees these constant activations
        through its bias."""
        if self.ensemble:
            self.layer_out.bias += torch.bmm(activation.unsqueeze(1), self.layer_out.weight)
        else:
            self.layer_out.bias += self.layer_out.weight @ activation[0]

    def state_dict(self) -> dict:
        tensors = {
            key: getattr(self, key).clone()
            for key in ("birth", "mean_activation", "utility", "activation_sum")
        }
        return tensors | {
            "samples": self.samples,
            "steps": self.steps,
            "owed": self.owed,
            "recent": list(self.recent),
            "replaced": self.replaced,
        }

    def load_state_dict(self, state: dict) -> None:
        for key in ("birth", "mean_activation", "utility", "activation_sum"):
            setattr(self, key, state[key].to(getattr(self, key).device).clone())
        self.samples, self.steps, self.owed, self.replaced = (
            state["samples"],
            state["steps"],
            state["owed"],
            state["replaced"],
        )
        self.recent = collections.deque(tuple(event) for event in state["recent"])


class ContinualBackprop:
    """CBP for one network: statistics from forward pre-hooks on the layers reading its hidden
    units, `step()` after each update."""

    def __init__(
        self,
        net: Network,
        replacement_rate: float,
        maturity: int,
        decay: float,
        element_steps: bool = True,
        members: int = 1,
    ) -> None:
        self.net, self.replacement_rate, self.maturity, self.decay = (
            net,
            replacement_rate,
            maturity,
            decay,
        )
        self.element_steps = element_steps
        self.layers = [
            UnitStatistics(layer_in, layer_out) for layer_in, layer_out in net.unit_pairs
        ]
        for stats in self.layers:
            stats.entries_per_member = stats.birth.shape[0] // members
            # a plain function, so that copies of the network (deepcopy) do not copy `stats`
            stats.layer_out.register_forward_pre_hook(
                lambda layer, inputs, stats=stats: stats.record(layer, inputs[0])
            )

    @property
    def replaced(self) -> int:
        """Units replaced so far in one member's network (its ensemble entries, e.g. a twin critic's
        two, together)."""
        return sum(stats.replaced * stats.entries_per_member for stats in self.layers)

    @torch.no_grad()
    def step(self) -> None:
        fresh = None
        for stats in self.layers:
            # not trained since the last step (TD3's delayed actor): it does not age
            if not stats.samples:
                continue
            stats.update(self.decay)
            mature = stats.mature_units(self.maturity)
            stats.owed += self.replacement_rate * mature
            count = min(int(stats.owed), mature)
            stats.owed -= count
            if count:
                if fresh is None:  # one fresh network per step, only on steps that replace
                    fresh = fresh_layers(self.net)
                self.replace(stats, count, fresh[stats.layer_in])

    @torch.no_grad()
    def replace(self, stats: UnitStatistics, count: int, fresh_in: nn.Module) -> None:
        """Replace the `count` mature units of lowest bias-corrected utility in every member."""
        age = stats.age
        # 1 − η^A, Adam-style bias correction of both running means
        correction = 1 - self.decay**age
        mature = age > self.maturity
        utility = torch.where(mature, stats.utility / correction, torch.inf)
        chosen = utility.topk(count, dim=-1, largest=False).indices
        units = torch.zeros_like(mature).scatter_(-1, chosen, True)
        stats.add_to_next_bias(torch.where(units, stats.mean_activation / correction, 0.0))
        reinitialise_units(
            self.net,
            stats.layer_in,
            stats.layer_out,
            units if stats.ensemble else units[0],
            fresh_in,
            self.element_steps,
        )
        stats.mean_activation.masked_fill_(units, 0.0)
        stats.utility.masked_fill_(units, 0.0)
        stats.birth.masked_fill_(units, stats.steps)
        stats.recent.append((stats.steps, count))
        stats.replaced += count

    def state_dict(self) -> list[dict]:
        return [stats.state_dict() for stats in self.layers]

    def load_state_dict(self, state: list[dict]) -> None:
        for stats, layer_state in zip(self.layers, state):
            stats.load_state_dict(layer_state)


class InjectedHead(nn.Module):
    """h_θ(x) + h_θ′(x) − h_θ′⁻(x): the frozen old head, a fresh trainable head and a
    frozen copy of it."""

    def __init__(self, old: nn.Module, fresh: nn.Module) -> None:
        super().__init__()
        self.old, self.fresh, self.fresh_frozen = old, fresh, copy.deepcopy(fresh)
        self.old.requires_grad_(False)
        self.fresh_frozen.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.old(x) + self.fresh(x) - self.fresh_frozen(x)

    def forward_copy(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """Ensemble heads: copy `index` of each member alone (TD3's Q₁)."""
        old, fresh = self.old.forward_copy(index, x), self.fresh.forward_copy(index, x)
        return old + fresh - self.fresh_frozen.forward_copy(index, x)


def _replace(root: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, attribute = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, attribute, module)


def inject_plasticity(net: Network) -> None:
    """Swap `net.head` for an InjectedHead in the network and its target, and move the optimiser
    onto θ′."""
    name = next(n for n, m in net.module.named_modules() if m is net.head)
    fresh = dict(net.rebuild().named_modules())[name]
    injected = InjectedHead(net.head, fresh)
    _replace(net.module, name, injected)
    old_parameters = set(net.head.parameters())
    for group in net.optimizer.param_groups:
        group["params"] = [p for p in group["params"] if p not in old_parameters]
    drop_optimizer_state(net.optimizer, old_parameters)
    net.optimizer.add_param_group({"params": list(injected.fresh.parameters())})
    if net.target is not None:
        target_head = net.target.get_submodule(name)
        target_injected = InjectedHead(
            target_head, copy.deepcopy(injected.fresh).requires_grad_(False)
        )
        target_injected.fresh_frozen.load_state_dict(injected.fresh_frozen.state_dict())
        _replace(net.target, name, target_injected)
    net.head = injected


def rebuild_injected_heads(module: nn.Module, state: dict[str, torch.Tensor]) -> nn.Module:
    """`module`, freshly built, with the injected heads that its checkpointed `state` has (keys
    '<head>.fresh.*'), so that the state loads into it (`cleanrl-plus eval` of a run that injected
    plasticity)."""
    for name in sorted({key.rpartition(".fresh.")[0] for key in state if ".fresh." in key}):
        head = module.get_submodule(name)
        _replace(module, name, InjectedHead(head, copy.deepcopy(head)))
    return module


class Resetter:
    """Applies the configured method to the chosen networks every `every` updates; logs what it
    did."""

    def __init__(self, args: ResetArgs, networks: list[Network], members: int = 1) -> None:
        self.args, self.members = args, members
        self.every = args.every or DEFAULT_EVERY.get(args.method, 0)
        self.counts_env_steps = args.method in ENV_STEP_METHODS
        self.preactivation_score = (
            args.method == "regrama" and args.regrama_score == "preactivations"
        )
        networks_chosen = args.networks
        # ReGraMa: the critics, as its authors (PPO on frames has one network, "agent")
        if networks_chosen == "auto":
            critic_only = args.method == "regrama" and any(net.name == "critic" for net in networks)
            networks_chosen = "critic" if critic_only else "both"
        chosen = [net.name for net in networks] if networks_chosen == "both" else [networks_chosen]
        self.networks = {net.name: net for net in networks if net.name in chosen}
        self.count = 0
        # full and layer resets: the last multiple of F environment steps reset at
        self.reset_period = 0
        # an off-policy step's due full or layer reset, made at the step's end (`at_step_end`)
        self.due_at_step_end = False
        self.injected: list[str] = []
        for name, net in self.networks.items():
            if args.method == "inject" and net.head is None:
                raise UserError(
                    f"plasticity injection needs one output layer; this {name} has several heads "
                    "— use --reset.networks to leave it out"
                )
            if args.method not in ("redo", "cbp") and not self.preactivation_score:
                continue
            method = {"redo": "ReDo", "cbp": "CBP", "regrama": "ReGraMa"}[args.method]
            if not net.unit_pairs:
                raise UserError(
                    f"{method} does not apply to this {name}: its hidden units feed normalisations "
                    "or skips, so recycling would change the output — use --reset.networks to "
                    "leave it out, or another --reset.method"
                )
            if args.per_element_adam_steps and not isinstance(net.optimizer, ElementStepAdam):
                raise UserError(
                    f"{method} with per-element Adam steps needs the {name}'s optimiser built by "
                    "plasticity.optimizers.adam (an ElementStepAdam), not "
                    f"{type(net.optimizer).__name__} — or add --reset.no-per-element-adam-steps"
                )
        if args.method == "layers":  # a range that depends on the network, checked once it exists
            for name, net in self.networks.items():
                depth = len(depth_levels(net))
                if args.layers > depth:
                    raise UserError(
                        f"--reset.layers must be in [1, {depth}] for this {name} (its weight "
                        f"layers, the heads counting as one), got {args.layers}"
                    )
        self.cbp = (
            {
                name: ContinualBackprop(
                    net,
                    args.cbp_replacement_rate,
                    args.cbp_maturity,
                    args.cbp_decay,
                    args.per_element_adam_steps,
                    members,
                )
                for name, net in self.networks.items()
            }
            if args.method == "cbp"
            else {}
        )
        self.gradients = (
            {
                name: PreactivationGradients([layer_in for layer_in, _ in net.unit_pairs])
                for name, net in self.networks.items()
            }
            if self.preactivation_score
            else {}
        )
        self.cbp_logged_step = 0

    def due(self, num_updates: int, global_step: int, last_of_step: bool) -> bool:
        """Full and layer resets: after the last update of the environment step that reaches a
        multiple of F (one reset for the multiples passed before learning started); the rest every F
        updates."""
        if self.counts_env_steps:
            return last_of_step and global_step // self.every > self.reset_period
        return num_updates % self.every == 0

    def after_update(
        self, num_updates: int, replay, logger, global_step: int, last_of_step: bool | None = None
    ) -> None:
        """`last_of_step`: no more updates follow at this environment step (where the full and layer
        resets fall due); None for an update outside the env loop's steps (PPO's epochs), where a due
        reset lands at once. In an off-policy step it lands at the step's end (`at_step_end`), after
        the step's evaluation: Nikishin et al.'s train_dense.py evaluates at step i, then builds the
        new agent."""
        if self.args.method == "off" or not self.due(
            num_updates, global_step, last_of_step is not False
        ):
            return
        if self.counts_env_steps:
            self.reset_period = global_step // self.every
            if last_of_step is not None:
                self.due_at_step_end = True
                return
        self.apply(num_updates, replay, logger, global_step)

    def at_step_end(self, num_updates: int, logger, global_step: int) -> None:
        """The full or layer reset that fell due in this off-policy step, once it was evaluated."""
        if self.due_at_step_end:
            self.due_at_step_end = False
            self.apply(num_updates, None, logger, global_step)

    def apply(self, num_updates: int, replay, logger, global_step: int) -> None:
        """The configured method, now (the schedule is `after_update`'s)."""
        if self.args.method == "cbp":
            for cbp in self.cbp.values():
                cbp.step()
            self.log_cbp(logger, global_step)
            return
        if self.args.method == "inject":
            if num_updates == self.every:  # once
                for name, net in self.networks.items():
                    inject_plasticity(net)
                    self.injected.append(name)
                self.count += 1
                logger.scalars({"plasticity/resets": float(self.count)}, global_step)
            return
        self.count += 1
        report = {"plasticity/resets": float(self.count)}
        for name, net in self.networks.items():
            if self.args.method == "full":
                full_reset(net)
            elif self.args.method == "shrink-perturb":
                shrink_and_perturb(net, self.args.shrink)
            elif self.args.method == "layers":
                reset_last_layers(net, self.args.layers)
            elif self.args.method == "regrama" and not self.preactivation_score:
                report[f"plasticity/{name}_recycled_fraction"] = recycle_low_weight_gradient(
                    net, self.args.regrama_tau, self.members
                )
            elif self.args.method == "regrama":
                report[f"plasticity/{name}_recycled_fraction"] = recycle_low_gradient(
                    net,
                    self.gradients[name],
                    self.args.regrama_tau,
                    self.args.per_element_adam_steps,
                    self.members,
                )
            else:
                batch = replay.sample(self.args.redo_batch)
                report[f"plasticity/{name}_recycled_fraction"] = recycle_dormant(
                    net, batch, self.args.redo_tau, self.args.per_element_adam_steps, self.members
                )
        logger.scalars(report, global_step)

    def log_cbp(self, logger, global_step: int) -> None:
        """Units replaced so far, when the agent logs its losses (every `log_every` env steps); host
        counts, no sync."""
        log_every = getattr(logger, "log_every", 0)
        if not log_every or global_step // log_every <= self.cbp_logged_step // log_every:
            return
        self.cbp_logged_step = global_step
        report = {
            f"plasticity/{name}_cbp_replaced": float(cbp.replaced) for name, cbp in self.cbp.items()
        }
        logger.scalars(report | {"plasticity/cbp_replaced": sum(report.values())}, global_step)

    def state_dict(self) -> dict:
        cbp = {name: cbp.state_dict() for name, cbp in self.cbp.items()}
        regrama = {name: gradients.state_dict() for name, gradients in self.gradients.items()}
        return {
            "count": self.count,
            "reset_period": self.reset_period,
            "injected": list(self.injected),
            "cbp": cbp,
            "cbp_logged_step": self.cbp_logged_step,
            "regrama": regrama,
        }

    def load_state_dict(self, state: dict) -> None:
        """Agents load the resetter before the networks, so an injected head exists again when
        weights arrive."""
        self.count = state["count"]
        self.reset_period = state.get("reset_period", 0)
        for name, cbp_state in state.get("cbp", {}).items():
            self.cbp[name].load_state_dict(cbp_state)
        self.cbp_logged_step = state.get("cbp_logged_step", 0)
        for name, sums in state.get("regrama", {}).items():
            self.gradients[name].load_state_dict(sums)
        for name in state.get("injected", []):
            if name not in self.injected:
                inject_plasticity(self.networks[name])
                self.injected.append(name)
