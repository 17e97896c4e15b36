"""Torsos that map observations to features: the Nature CNN (Double DQN and PPO on Atari), MinAtar's small CNN and
an MLP torso (Double DQN)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from cleanrl_plus.nn import ACTIVATIONS, hidden_conv, hidden_linear, layer_init, mlp_torso, units_for


class NatureCNN(nn.Module):
    """Mnih et al. 2015: (K, 84, 84) uint8 frames /255 → conv 32×8×8/4 → 64×4×4/2 → 64×3×3/1 → 512.
    --net.norm (and NaP) put a norm before every ReLU, the convolutions' included (cleanrl_plus.nn.NormedConv2d);
    --net.activation applies to the dense layer, the convolutions keep ReLU. PyTorch's default init (DDQN); PPO
    re-initialises it orthogonally as CleanRL's ppo_atari.py does (`orthogonal_nature_cnn`)."""

    def __init__(self, obs_shape: tuple[int, ...], norm: str = "none", activation: str = "relu") -> None:
        super().__init__()
        self.convs = nn.Sequential(
            hidden_conv(obs_shape[0], 32, 8, 4, norm),
            nn.ReLU(),
            hidden_conv(32, 64, 4, 2, norm),
            nn.ReLU(),
            hidden_conv(64, 64, 3, 1, norm),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *obs_shape)).shape[1]
        self.fc = hidden_linear(flat, units_for(512, activation), norm)
        self.activation = ACTIVATIONS[activation]()
        self.features = 512

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.activation(self.fc(self.convs(obs.float() / 255.0)))


class MinAtarCNN(nn.Module):
    """Young & Tian 2019: (10, 10, C) grids, channels last → conv 16×3×3 → 128 (--net.* as NatureCNN)."""

    def __init__(self, obs_shape: tuple[int, ...], norm: str = "none", activation: str = "relu") -> None:
        super().__init__()
        height, width, channels = obs_shape
        self.conv = hidden_conv(channels, 16, 3, 1, norm)
        self.fc = hidden_linear(16 * (height - 2) * (width - 2), units_for(128, activation), norm)
        self.activation = ACTIVATIONS[activation]()
        self.features = 128

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv(obs.float().permute(0, 3, 1, 2)))
        return self.activation(self.fc(x.flatten(1)))


class MLPTorso(nn.Module):
    def __init__(
        self, obs_shape: tuple[int, ...], hidden: tuple[int, ...], norm: str = "none", activation: str = "relu"
    ) -> None:
        super().__init__()
        self.net = mlp_torso(int(obs_shape[0]), hidden, norm, activation)
        self.features = hidden[-1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.float())


def orthogonal_nature_cnn(obs_shape: tuple[int, ...], norm: str = "none", activation: str = "relu") -> NatureCNN:
    """CleanRL's ppo_atari torso: the Nature CNN with orthogonal weights of gain √2 and zero biases."""
    torso = NatureCNN(obs_shape, norm, activation)
    for layer in torso.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            layer_init(layer)
    return torso
