"""Torsos that map observations to features: the Nature CNN (Double DQN and PPO on Atari), MinAtar's small CNN and
an MLP torso (Double DQN). Each holds the `members` of a group (cleanrl_plus.members): (members, B, ...) observations
→ (members, B, features); the convolutions run every member at once as grouped convolutions (cleanrl_plus.nn)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from cleanrl_plus.nn import (
    ACTIVATIONS,
    EnsembleLinear,
    MemberConv2d,
    hidden_conv,
    hidden_linear,
    layer_init,
    member_features,
    member_maps,
    mlp_torso,
    units_for,
)


class NatureCNN(nn.Module):
    """Mnih et al. 2015: (C, 84, 84) uint8 frames /255 → conv 32×8×8/4 → 64×4×4/2 → 64×3×3/1 → 512.
    --net.norm (and NaP) put a norm before every ReLU, the convolutions' included (cleanrl_plus.nn.NormedMemberConv2d);
    --net.activation applies to the dense layer, the convolutions keep ReLU. PyTorch's default init (DDQN); PPO
    re-initialises it orthogonally as CleanRL's ppo_atari.py does (`orthogonal_nature_cnn`)."""

    def __init__(self, members: int, obs_shape: tuple[int, ...], norm: str = "none", activation: str = "relu") -> None:
        super().__init__()
        self.members = members
        self.convs = nn.Sequential(
            hidden_conv(members, obs_shape[0], 32, 8, 4, norm),
            nn.ReLU(),
            hidden_conv(members, 32, 64, 4, 2, norm),
            nn.ReLU(),
            hidden_conv(members, 64, 64, 3, 1, norm),
            nn.ReLU(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, members * obs_shape[0], *obs_shape[1:])).shape[1:].numel() // members
        self.fc = hidden_linear(members, flat, units_for(512, activation), norm)
        self.activation = ACTIVATIONS[activation]()
        self.features = 512

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        maps = self.convs(member_maps(obs).float() / 255.0)
        return self.activation(self.fc(member_features(maps, self.members)))


class MinAtarCNN(nn.Module):
    """Young & Tian 2019: (10, 10, C) grids, channels last → conv 16×3×3 → 128 (--net.* as NatureCNN)."""

    def __init__(self, members: int, obs_shape: tuple[int, ...], norm: str = "none", activation: str = "relu") -> None:
        super().__init__()
        height, width, channels = obs_shape
        self.members = members
        self.conv = hidden_conv(members, channels, 16, 3, 1, norm)
        self.fc = hidden_linear(members, 16 * (height - 2) * (width - 2), units_for(128, activation), norm)
        self.activation = ACTIVATIONS[activation]()
        self.features = 128

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        maps = F.relu(self.conv(member_maps(obs.float().permute(0, 1, 4, 2, 3))))
        return self.activation(self.fc(member_features(maps, self.members)))


class MLPTorso(nn.Module):
    def __init__(
        self, members: int, obs_shape: tuple[int, ...], hidden: tuple[int, ...], norm: str = "none", activation: str = "relu"
    ) -> None:
        super().__init__()
        self.net = mlp_torso(members, int(obs_shape[0]), hidden, norm, activation)
        self.features = hidden[-1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.float())


def orthogonal_nature_cnn(members: int, obs_shape: tuple[int, ...], norm: str = "none", activation: str = "relu") -> NatureCNN:
    """CleanRL's ppo_atari torso: the Nature CNN with orthogonal weights of gain √2 and zero biases."""
    torso = NatureCNN(members, obs_shape, norm, activation)
    for layer in [*(m for m in torso.convs if isinstance(m, MemberConv2d)), torso.fc]:
        layer_init(layer)
    return torso


def ppo_mlp(
    members: int,
    in_features: int,
    out_features: int,
    hidden: tuple[int, ...],
    activation: str,
    out_std: float,
    norm: str = "none",
    init: str = "orthogonal",
) -> nn.Sequential:
    """CleanRL's PPO MLP (agents/ppo.py's policy and value networks, and their heads on the Nature CNN) of each member,
    orthogonally initialised (`out_std` the head's gain) or with nn.Linear's init (`init` "default"); `activation` and
    `norm` as --net.* (cleanrl_plus.nn)."""
    initialise = layer_init if init == "orthogonal" else lambda layer, std=None: layer
    layers: list[nn.Module] = []
    for width in hidden:
        layer = hidden_linear(members, in_features, units_for(width, activation), norm)
        layers += [initialise(layer), ACTIVATIONS[activation]()]
        in_features = width
    layers.append(initialise(EnsembleLinear(members, in_features, out_features), std=out_std))
    return nn.Sequential(*layers)
