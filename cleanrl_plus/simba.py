"""The SimBa architecture (Lee et al., "SimBa: Simplicity Bias for Scaling Up Parameters in Deep RL", ICLR 2025) and
SAC's actor and critics built on it (Haarnoja et al. 2018; agents/sac_simba.py).

Encoder: h₀ = W_in·z (orthogonal, gain 1, no activation); N residual blocks h ← h + W₂·ReLU(W₁·LN(h)) with
W₁: d → 4d and W₂: 4d → d (He-normal, truncated as in flax); a final LN. With `norm="layer"` (Normalize-and-Project,
which needs a norm right before every nonlinearity) a block computes h + W₂·ReLU(LN(W₁·LN(h))). Every layer is an ensemble
layer, so twin critics run as one batched matmul per layer: inputs (E, B, in) → features (E, B, d).
The plain-MLP torso (ReLU MLP, PyTorch default init) lets a user compare SAC with SAC+SimBa in one file.

SAC's actor and critics take their encoder built and read no flag; `make_encoder` and `critics_for` read SAC's (`args`
is agents/sac_simba.py's Args; each docstring names the flags it reads). The agent chooses the encoders' norm and
activation (NaP, --net.*) and CIR's critic torso, and describes each network to the remedies (`layout()`): the core
imports nothing of plasticity/.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
import torch.nn as nn
import torch.nn.functional as F

from cleanrl_plus.nn import (
    ACTIVATIONS,
    EnsembleLinear,
    ensemble_hidden,
    hidden_linear,
    units_for,
)
from cleanrl_plus.nn import (
    EnsembleLayerNorm as _EnsembleLayerNorm,
)

LAYER_NORM_EPS = 1e-6  # flax's LayerNorm default, as in the official SimBa code


def orthogonal_(layer: EnsembleLinear, gain: float = 1.0) -> EnsembleLinear:
    with torch.no_grad():
        for entry in layer.weight:  # one orthogonal matrix per ensemble entry (a copy of a member)
            nn.init.orthogonal_(entry, gain=gain)
        layer.bias.zero_()
    return layer


def he_normal_(layer: EnsembleLinear) -> EnsembleLinear:
    """flax he_normal: truncated normal at ±2σ, rescaled so the std is √(2 / fan_in)."""
    std = math.sqrt(2.0 / layer.weight.shape[1]) / 0.87962566103423978
    with torch.no_grad():
        nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
        layer.bias.zero_()
    return layer


def EnsembleLayerNorm(ensemble_size: int, width: int, eps: float = LAYER_NORM_EPS) -> _EnsembleLayerNorm:
    """cleanrl_plus.nn.EnsembleLayerNorm with flax's ε, as the official SimBa code."""
    return _EnsembleLayerNorm(ensemble_size, width, eps)


class ResidualBlock(nn.Module):
    def __init__(self, ensemble_size: int, width: int, activation: str = "relu", norm: str = "none") -> None:
        super().__init__()
        self.norm = EnsembleLayerNorm(ensemble_size, width)
        self.expand = he_normal_(hidden_linear(ensemble_size, width, units_for(4 * width, activation), norm))
        self.activation = ACTIVATIONS[activation]()
        self.contract = he_normal_(EnsembleLinear(ensemble_size, 4 * width, width))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.contract(self.activation(self.expand(self.norm(h))))


class SimbaEncoder(nn.Module):
    def __init__(
        self, ensemble_size: int, in_features: int, width: int, num_blocks: int, activation: str = "relu", norm: str = "none"
    ) -> None:
        super().__init__()
        self.embed = orthogonal_(EnsembleLinear(ensemble_size, in_features, width))
        self.blocks = nn.Sequential(*(ResidualBlock(ensemble_size, width, activation, norm) for _ in range(num_blocks)))
        self.final_norm = EnsembleLayerNorm(ensemble_size, width)
        self.out_features = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.final_norm(self.blocks(self.embed(x)))


class MLPEncoder(nn.Module):
    """Plain ReLU MLP torso (the 'SAC' baseline), ensemble layers with nn.Linear's default init, or with `init`
    "orthogonal" orthogonal weights of gain √2 and zero biases (SimBa's MLPBlock, SonyResearch/simba
    scale_rl/networks/layers.py); `norm`/`activation` as --net.norm/--net.activation (cleanrl_plus.nn.ensemble_stack)."""

    def __init__(
        self,
        ensemble_size: int,
        in_features: int,
        hidden: tuple[int, ...],
        norm: str = "none",
        activation: str = "relu",
        init: str = "default",
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(ensemble_hidden(ensemble_size, (in_features, *hidden), norm, activation))
        if init == "orthogonal":
            for layer in self.layers:
                orthogonal_(layer, gain=math.sqrt(2))
        self.activation = ACTIVATIONS[activation]()
        self.out_features = hidden[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = self.activation(layer(x))
        return x


def relu_layers(encoder: nn.Module) -> list[EnsembleLinear]:
    """The layers whose outputs go through a ReLU (hidden units for the plasticity diagnostics)."""
    if isinstance(encoder, SimbaEncoder):
        return [block.expand for block in encoder.blocks]
    return list(encoder.layers)


def unit_pairs(encoder: nn.Module, head: nn.Module | None = None) -> list[tuple[nn.Module, nn.Module]]:
    """(layer feeding a ReLU, the only layer reading it) pairs, for ReDo. `head=None` when several heads read the
    last hidden layer (the actor's mean and log-std), which then cannot be recycled with an unchanged output."""
    if isinstance(encoder, SimbaEncoder):
        return [(block.expand, block.contract) for block in encoder.blocks]
    readers = list(encoder.layers[1:]) + ([head] if head is not None else [])
    return list(zip(encoder.layers, readers))


# ---- SAC's actor and critics ------------------------------------------------------------------------------------------
LOG_STD_MIN, LOG_STD_MAX = -10.0, 2.0


def make_encoder(args: Any, torso: tuple[str, str], size: int, in_features: int, width: int, blocks: int) -> nn.Module:
    """An encoder of `size` ensemble entries (members × their copies): SimBa's or an MLP. Reads SAC's --network,
    --mlp-hidden-sizes and --mlp-init from `args`; `torso` is the agent's (norm, activation)
    (plasticity.architecture.torso_settings: NaP's LayerNorm, --net.activation)."""
    norm, activation = torso
    # SimBa's blocks hold their own LayerNorms: --net.norm is refused by SAC's `check`, NaP adds one before the ReLU
    if args.network == "simba":
        return SimbaEncoder(size, in_features, width, blocks, activation, norm)
    return MLPEncoder(size, in_features, args.mlp_hidden_sizes, norm, activation, args.mlp_init)


class TanhGaussianActor(nn.Module):
    """SAC's tanh-Gaussian policy on x = norm(s) for each of `members`, its two heads reading `encoder` (of `members`
    entries): (members, B, obs) → (members, B, |A|); log σ = −10 + 6·(tanh ℓ + 1) lies in [−10, 2]. Its `normalize`,
    attached by the agent (`with_normalizer`), holds the observation statistics (shared with the critics, updated only
    by acting)."""

    def __init__(self, encoder: nn.Module, action_space: gym.spaces.Box, members: int = 1) -> None:
        super().__init__()
        self.normalize: nn.Module = nn.Identity()
        action_dim = action_space.shape[0]
        self.encoder = encoder
        features = self.encoder.out_features
        self.mean = orthogonal_(EnsembleLinear(members, features, action_dim))
        self.log_std = orthogonal_(EnsembleLinear(members, features, action_dim))
        low, high = torch.as_tensor(action_space.low), torch.as_tensor(action_space.high)
        self.register_buffer("action_scale", ((high - low) / 2).float())
        self.register_buffer("action_bias", ((high + low) / 2).float())

    def _distribution(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(self.normalize(x))
        squashed = torch.tanh(self.log_std(h)) + 1
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * squashed
        return self.mean(h), log_std

    def sample(self, x: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in the env's bounds, u = μ + σ·noise with noise ~ N(0, I) drawn by the caller
        (members, batch, |A|), and its log-probability (with the tanh correction), (members, batch)."""
        mean, log_std = self._distribution(x)
        u = mean + log_std.exp() * noise
        standard, log_normaliser = (u - mean) / log_std.exp(), 0.5 * math.log(2 * math.pi)
        gaussian_log_prob = (-0.5 * standard.square() - log_std - log_normaliser).sum(-1)
        # log(1 − tanh(u)²) = 2·(log 2 − u − softplus(−2u)), stable for large |u|
        log_derivative = 2 * (math.log(2) - u - F.softplus(-2 * u))
        squash_correction = (log_derivative + torch.log(self.action_scale)).sum(-1)
        action = torch.tanh(u) * self.action_scale + self.action_bias
        return action, gaussian_log_prob - squash_correction

    def distribution_parameters(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The pre-tanh Gaussian N(μ, σ²) (for KL churn): a ↦ tanh(a)·scale + bias is a bijection, so the KL between
        two such policies equals the KL between their Gaussians."""
        mean, log_std = self._distribution(x)
        return {"mean": mean, "log_std": log_std}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The deterministic action used for evaluation: tanh(μ(x))."""
        return torch.tanh(self._distribution(x)[0]) * self.action_scale + self.action_bias

    @property
    def bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The Box's (low, high)."""
        return self.action_bias - self.action_scale, self.action_bias + self.action_scale


class QEnsemble(nn.Module):
    """SAC's `num_critics` Q-functions of each of `members`, a head on `encoder` (of members × num_critics entries,
    member-major: each member's copies side by side): (members, num_critics, batch) values ((members, num_critics,
    batch, outputs) C51 logits). The head is orthogonal as SimBa's, or with `orthogonal_head=False` PyTorch's default
    (CIR's)."""

    def __init__(
        self, encoder: nn.Module, num_critics: int, outputs: int = 1, members: int = 1, orthogonal_head: bool = True
    ) -> None:
        super().__init__()
        self.normalize: nn.Module = nn.Identity()
        self.num_critics, self.encoder = num_critics, encoder
        head = EnsembleLinear(members * num_critics, self.encoder.out_features, outputs)
        self.head = orthogonal_(head) if orthogonal_head else head

    def forward(self, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        inputs = torch.cat([self.normalize(x), action], dim=-1)
        # each member's input, to each of its copies
        inputs = inputs.unsqueeze(1).expand(-1, self.num_critics, -1, -1).flatten(0, 1)
        values = self.head(self.encoder(inputs))
        return values.unflatten(0, (x.shape[0], self.num_critics)).squeeze(-1)


def critics_for(args: Any, env: Any) -> int:
    """Two critics with clipped double-Q where episodes can terminate, one where they cannot (SAC's
    --clipped-double-q auto, as SimBa; 'on' and 'off' choose), read with --env-id from `args`; says which."""
    choice = args.clipped_double_q
    use_cdq = env.can_terminate if choice == "auto" else choice == "on"
    print(
        f"sac_simba: {2 if use_cdq else 1} critic{'s with clipped double-Q' if use_cdq else ''} "
        f"({args.env_id} can terminate: {env.can_terminate})"
    )
    return 2 if use_cdq else 1
