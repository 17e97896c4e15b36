"""Image encoders shared by the agents that play from pixels (Double DQN and PPO on Atari)."""

from __future__ import annotations

import torch
import torch.nn as nn

from cleanrl_plus.nn import ACTIVATIONS, hidden_linear, units_for


class NatureCNN(nn.Module):
    """Mnih et al. 2015: (K, 84, 84) uint8 frames /255 → conv 32×8×8/4 → 64×4×4/2 → 64×3×3/1 → 512.
    --net.norm/--net.activation apply to the dense layer; the convolutions keep ReLU. PyTorch's default init (DDQN);
    PPO re-initialises it orthogonally as CleanRL's ppo_atari.py does (agents/ppo.py)."""

    def __init__(self, obs_shape: tuple[int, ...], norm: str = "none", activation: str = "relu") -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(obs_shape[0], 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *obs_shape)).shape[1]
        self.fc = hidden_linear(flat, units_for(512, activation), norm)
        self.activation = ACTIVATIONS[activation]()
        self.features = 512

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.activation(self.fc(self.convs(obs.float() / 255.0)))
