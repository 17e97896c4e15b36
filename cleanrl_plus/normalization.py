"""Running mean / variance of observations (SimBa's RSNorm), kept as module buffers so checkpoints carry it."""

from __future__ import annotations

import torch
import torch.nn as nn


class RunningMeanStd(nn.Module):
    """x̃ = (x − μ) / √(σ² + ε), with μ, σ² merged batch by batch (Chan et al.'s parallel formula).

    Call `update` only with observations the agent acts on, never with replay batches: under non-uniform
    sampling (e.g. SWD) replay would shift the statistics towards the sampled distribution.
    """

    def __init__(self, shape: tuple[int, ...], epsilon: float = 1e-8) -> None:
        super().__init__()
        self.epsilon = epsilon
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        batch = batch.reshape(-1, *self.mean.shape).float()
        batch_count = batch.shape[0]
        batch_mean = batch.mean(dim=0)
        batch_var = batch.var(dim=0, unbiased=False)
        total = self.count + batch_count
        delta = batch_mean - self.mean
        weight = (batch_count / total).to(self.mean.dtype)
        m2 = self.var * self.count.to(self.var.dtype) + batch_var * batch_count + delta.square() * (self.count * batch_count / total).to(self.var.dtype)
        self.mean += delta * weight
        self.var.copy_(m2 / total.to(self.var.dtype))
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / torch.sqrt(self.var + self.epsilon)
