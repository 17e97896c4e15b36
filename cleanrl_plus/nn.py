"""Small network building blocks shared by agents."""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from cleanrl_plus.normalization import RunningMeanStd
from envs.errors import UserError


class EnsembleLinear(nn.Module):
    """`ensemble_size` independent linear layers evaluated with one batched matmul: every dense layer of every agent.

    Input (ensemble_size, batch, in) -> output (ensemble_size, batch, out). The leading dimension holds the members of
    a group (cleanrl_plus.members), and within each member the copies it keeps (a twin critic's two), member-major; a
    one-seed network has ensemble_size 1 (2 for a twin critic). Each entry is initialised exactly like `nn.Linear`
    (uniform ±1/sqrt(in) for weights and biases), so a twin critic built from these is the same model as two separate
    MLPs, only faster (one bmm instead of two matmuls).

    A layer of one output (a value head) takes each member's product on its own, on a CPU: torch hands a batch of one
    matrix to MKL's gemm and a larger batch to MKL's batched gemm, which round a one-column product differently, so a
    member's values would depend on the size of its group (docs/experiments.md). `members` is the group's size,
    which `Members.build` sets.
    """

    members = 1

    def __init__(self, ensemble_size: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_features))
        self.reset_parameters()

    def _member_by_member(self, x: torch.Tensor) -> bool:
        return self.members > 1 and self.weight.shape[2] == 1 and x.is_cpu

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.weight.shape[1])
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._member_by_member(x):  # each member's copies as its one-seed run multiplies them
            blocks = zip(*(t.chunk(self.members) for t in (self.bias, x, self.weight)))
            return torch.cat([torch.baddbmm(bias, inputs, weight) for bias, inputs, weight in blocks])
        return torch.baddbmm(self.bias, x, self.weight)

    def forward_copy(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """Only entry `index` on a (batch, in) input, or, on a group's (members, batch, in) input, copy `index` of each
        member's copies (entries index, index + copies, …): the actor loss needs Q1 alone."""
        if x.dim() == 2:
            return torch.addmm(self.bias[index], x, self.weight[index])
        copies = self.weight.shape[0] // x.shape[0]
        bias, weight = self.bias[index::copies], self.weight[index::copies]
        if self._member_by_member(x):
            return torch.cat([torch.baddbmm(*blocks) for blocks in zip(bias.split(1), x.split(1), weight.split(1))])
        return torch.baddbmm(bias, x, weight)

    def extra_repr(self) -> str:
        n, i, o = self.weight.shape
        return f"ensemble_size={n}, in_features={i}, out_features={o}"


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last dim with a separate affine (scale, shift) per ensemble entry (each member's copies)."""

    def __init__(self, ensemble_size: int, width: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(ensemble_size, 1, width))
        self.bias = nn.Parameter(torch.zeros(ensemble_size, 1, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], eps=self.eps) * self.weight + self.bias

    def forward_copy(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """As EnsembleLinear.forward_copy: entry `index` on (batch, width), copy `index` of each member on (members,
        batch, width)."""
        if x.dim() == 2:
            return F.layer_norm(x, x.shape[-1:], eps=self.eps) * self.weight[index] + self.bias[index]
        copies = self.weight.shape[0] // x.shape[0]
        return F.layer_norm(x, x.shape[-1:], eps=self.eps) * self.weight[index::copies] + self.bias[index::copies]


# ---- torso builders: --net.norm and --net.activation (plasticity/architecture.py documents the remedies) ----------
class NormedLinear(nn.Linear):
    """nn.Linear followed by LayerNorm of its outputs, as one module: hooks on it (diagnostics, ReDo) see the normalised
    pre-activation, and ReDo's row/column bookkeeping still finds `.weight` (out, in) and `.bias` (out,)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(super().forward(x))


class NormedEnsembleLinear(EnsembleLinear):
    """EnsembleLinear followed by a LayerNorm with an affine per ensemble entry (the twin-critic form of NormedLinear)."""

    def __init__(self, ensemble_size: int, in_features: int, out_features: int) -> None:
        super().__init__(ensemble_size, in_features, out_features)
        self.norm = EnsembleLayerNorm(ensemble_size, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(super().forward(x))

    def forward_copy(self, index: int, x: torch.Tensor) -> torch.Tensor:
        return self.norm.forward_copy(index, super().forward_copy(index, x))


class MemberConv2d(nn.Module):
    """`members` independent Conv2d layers as one grouped convolution. Feature maps hold the members' channels
    member-major, (B, members·C, H, W), so a stack of these runs every member's CNN at once; weight
    (members, out, in, k, k) and bias (members, out), each member initialised as nn.Conv2d (uniform ±1/√(in·k·k))."""

    def __init__(self, members: int, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1) -> None:
        super().__init__()
        self.stride = stride
        self.weight = nn.Parameter(torch.empty(members, out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(members, out_channels))
        bound = 1.0 / math.sqrt(in_channels * kernel_size * kernel_size)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight.flatten(0, 1), self.bias.flatten(), self.stride, groups=self.weight.shape[0])

    def extra_repr(self) -> str:
        members, out, inputs, k, _ = self.weight.shape
        return f"members={members}, in_channels={inputs}, out_channels={out}, kernel_size={k}, stride={self.stride}"


class NormedMemberConv2d(MemberConv2d):
    """MemberConv2d followed by a LayerNorm of each member's (C, H, W) output per sample with a scale and shift per
    channel (GroupNorm with one group per member), as one module, like NormedLinear."""

    def __init__(self, members: int, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1) -> None:
        super().__init__(members, in_channels, out_channels, kernel_size, stride)
        self.norm = nn.GroupNorm(members, members * out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(super().forward(x))


def member_maps(x: torch.Tensor) -> torch.Tensor:
    """(members, B, C, H, W) images → (B, members·C, H, W) feature maps for MemberConv2d."""
    return x.transpose(0, 1).flatten(1, 2)


def member_features(x: torch.Tensor, members: int) -> torch.Tensor:
    """(B, members·C, H, W) feature maps → (members, B, C·H·W) flat features for EnsembleLinear."""
    return x.reshape(x.shape[0], members, -1).transpose(0, 1)


class CReLU(nn.Module):
    """Concatenated ReLU: x ↦ [ReLU(x), ReLU(−x)] along the last dim (doubles the features)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([F.relu(x), F.relu(-x)], dim=-1)


class FourierFeatures(nn.Module):
    """Deep Fourier features: x ↦ [sin(x), cos(x)] along the last dim (doubles the features)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.sin(x), torch.cos(x)], dim=-1)


class _RectifierFromOutput(torch.autograd.Function):
    """y = leaky_relu(x, slope) (slope 0: ReLU) whose backward reads the sign from y, not from a saved mask: the
    gradient eager autograd computes (g where x > 0, else slope·g; y > 0 exactly where x > 0), but inductor keeps a float
    activation instead of a bool mask per layer, whose store its CPU kernels write ~100× slower (docs/speed.md)."""

    @staticmethod
    def forward(x: torch.Tensor, slope: float) -> torch.Tensor:
        return F.leaky_relu(x, slope) if slope else F.relu(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(output)
        ctx.slope = inputs[1]

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (y,) = ctx.saved_tensors
        return torch.where(y > 0, grad, grad * ctx.slope if ctx.slope else torch.zeros_like(grad)), None


class ReLU(nn.ReLU):
    """nn.ReLU; inside torch.compile its backward reads the output's sign (`_RectifierFromOutput`), eager it is torch's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RectifierFromOutput.apply(x, 0.0) if torch.compiler.is_compiling() else F.relu(x)


class LeakyReLU(nn.LeakyReLU):
    """LeakyReLU with slope 0.1 for x < 0: TRAC's and C-CHAIN's classic-control networks (`nn.LeakyReLU(0.1)`); compiled
    as ReLU is."""

    def __init__(self) -> None:
        super().__init__(negative_slope=0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return _RectifierFromOutput.apply(x, self.negative_slope)
        return F.leaky_relu(x, self.negative_slope)


# XLA's CPU tanh (github tensorflow/tensorflow, tensorflow/compiler/xla/service/llvm_ir/math_ops.cc, EmitFastTanh; Eigen
# and ONNX Runtime use the same): x·P(x²)/Q(x²) on x clamped to [−9, 9], x itself where |x| < 0.0004; we clamp y to [−1, 1]
TANH_NUMERATOR = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08)
TANH_NUMERATOR += (1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
TANH_DENOMINATOR = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def _horner(x: torch.Tensor, coefficients: tuple[float, ...]) -> torch.Tensor:
    """The polynomial with `coefficients` (highest power first) at x."""
    value = x * coefficients[0] + coefficients[1]
    for coefficient in coefficients[2:]:
        value = value * x + coefficient
    return value


def rational_tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) as XLA computes it on a CPU (within 7 float32 ulps of the true value; tests/test_compiled_rollout.py)."""
    clamped = x.clamp(-9.0, 9.0)
    square = clamped * clamped
    numerator, denominator = _horner(square, TANH_NUMERATOR), _horner(square, TANH_DENOMINATOR)
    # the clamp keeps |y| ≤ 1 (the rational overshoots by up to 2.4e-7 near ±9), so 1 − y² ≥ 0 in backward
    return torch.where(x.abs() < 0.0004, x, (clamped * numerator / denominator).clamp(-1.0, 1.0))


class _TanhFromOutput(torch.autograd.Function):
    """y = `rational_tanh(x)`, dy/dx = 1 − y² read from y (as torch's tanh backward)."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return rational_tanh(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)


class Tanh(nn.Tanh):
    """nn.Tanh; inside torch.compile `COMPILED_TANH`, XLA's rational tanh: inductor fuses it into one vectorised kernel
    ≈ 6× faster than torch's own CPU tanh, eager or compiled (docs/speed.md). A compiled run therefore differs from an
    eager one by this rounding (≤ 7 float32 ulps per activation), growing over training as any rounding does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return COMPILED_TANH(x) if torch.compiler.is_compiling() else torch.tanh(x)


# tests that compare a compiled run with an eager one bit for bit set torch.tanh here
COMPILED_TANH: Callable[[torch.Tensor], torch.Tensor] = _TanhFromOutput.apply


ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": ReLU,
    "leaky-relu": LeakyReLU,
    "tanh": Tanh,
    "crelu": CReLU,
    "fourier": FourierFeatures,
}
DOUBLING_ACTIVATIONS = ("crelu", "fourier")


def units_for(width: int, activation: str) -> int:
    """Pre-activation units of a hidden layer whose activation output is `width` wide. Width policy: a doubling
    activation (CReLU, Fourier) gets width/2 units, so every layer reading it keeps its input width and the network
    keeps (about) its parameter count; heads and diagnostics see the same feature width as with ReLU."""
    if activation not in DOUBLING_ACTIVATIONS:
        return width
    if width % 2:
        raise UserError(
            f"--net.activation {activation} halves each hidden layer's units (width policy), so widths must be even; got "
            f"{width}"
        )
    return width // 2


@torch.no_grad()
def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """CleanRL's init: orthogonal weights with gain `std`, constant bias; each entry of an ensemble or member layer gets
    its own orthogonal (out, in) matrix, drawn as nn.init.orthogonal_ draws it for nn.Linear / nn.Conv2d."""
    if isinstance(layer, EnsembleLinear):  # stored (E, in, out)
        for weight in layer.weight:
            matrix = torch.empty(weight.shape[1], weight.shape[0], device=weight.device)
            weight.copy_(nn.init.orthogonal_(matrix, std).T)
    elif isinstance(layer, MemberConv2d):
        for weight in layer.weight:
            nn.init.orthogonal_(weight, std)
    else:
        nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def hidden_linear(ensemble_size: int, in_features: int, units: int, norm: str = "none") -> EnsembleLinear:
    """A hidden dense layer of `ensemble_size` entries (cleanrl_plus.members), with --net.norm's LayerNorm."""
    layer = NormedEnsembleLinear if norm == "layer" else EnsembleLinear
    return layer(ensemble_size, in_features, units)


def hidden_conv(
    members: int, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, norm: str = "none"
) -> MemberConv2d:
    layer = NormedMemberConv2d if norm == "layer" else MemberConv2d
    return layer(members, in_channels, out_channels, kernel_size, stride)


def mlp_torso(
    ensemble_size: int, in_features: int, hidden: tuple[int, ...], norm: str = "none", activation: str = "relu"
) -> nn.Sequential:
    """Hidden layers only, each Linear (→ LayerNorm) → activation; the output is hidden[-1] wide."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [hidden_linear(ensemble_size, in_features, units_for(width, activation), norm), ACTIVATIONS[activation]()]
        in_features = width
    return nn.Sequential(*layers)


def mlp(
    ensemble_size: int,
    in_features: int,
    out_features: int,
    hidden: tuple[int, ...] = (256, 256),
    norm: str = "none",
    activation: str = "relu",
) -> nn.Sequential:
    """A ReLU MLP (defaults), or with LayerNorm before each nonlinearity and/or CReLU / Fourier units (--net.*)."""
    torso = mlp_torso(ensemble_size, in_features, hidden, norm, activation)
    return nn.Sequential(*torso, EnsembleLinear(ensemble_size, hidden[-1] if hidden else in_features, out_features))


def ensemble_hidden(
    ensemble_size: int, widths: tuple[int, ...], norm: str = "none", activation: str = "relu"
) -> list[EnsembleLinear]:
    """Hidden ensemble layers widths[0] → … → widths[-1] (activation outputs), sized and normalised for `activation`/`norm`."""
    return [hidden_linear(ensemble_size, i, units_for(o, activation), norm) for i, o in zip(widths[:-1], widths[1:])]


def ensemble_stack(ensemble_size: int, widths: tuple[int, ...], norm: str = "none", activation: str = "relu") -> nn.ModuleList:
    """Ensemble layers widths[0] → … → widths[-1]: the hidden ones as `ensemble_hidden`, the last (the head) plain."""
    return nn.ModuleList(
        [*ensemble_hidden(ensemble_size, widths[:-1], norm, activation), EnsembleLinear(ensemble_size, widths[-2], widths[-1])]
    )


class frozen:
    """Context manager: no gradients for `module`'s parameters, while gradients still flow through it.

    The TD3/SAC actor loss backpropagates through the critic to the action; skipping the critic's
    weight gradients there saves a third of that backward pass.
    """

    def __init__(self, module: nn.Module) -> None:
        self.parameters = [p for p in module.parameters() if p.requires_grad]

    def __enter__(self) -> None:
        for p in self.parameters:
            p.requires_grad_(False)

    def __exit__(self, *exc: object) -> None:
        for p in self.parameters:
            p.requires_grad_(True)


def target_copy(module: nn.Module) -> nn.Module:
    """A target network for `module`: a copy with its own parameters that reads the same observation statistics (the
    RunningMeanStd modules inside are shared, not copied: acting updates them, for online and target networks alike)."""
    shared = {id(m): m for m in module.modules() if isinstance(m, RunningMeanStd)}
    return copy.deepcopy(module, memo=shared)


def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """θ̄ ← (1 − τ)·θ̄ + τ·θ, in place over all parameters at once."""
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)
