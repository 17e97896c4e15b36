"""Running mean / variance of observations (SimBa's RSNorm), kept as module buffers so checkpoints carry it."""

from __future__ import annotations

import torch
import torch.nn as nn

from cleanrl_plus.distributional import CategoricalCritic


class RunningMeanStd(nn.Module):
    """x̃ = (x − μ) / √(σ² + ε), with μ, σ² merged batch by batch (Chan et al.'s parallel formula), one μ, σ² per member
    of a group (cleanrl_plus.members): inputs are (members, batch, *shape), statistics (members, *shape).

    Call `update` only with observations the agent acts on, never with replay batches: under non-uniform
    sampling (e.g. SWD) replay would shift the statistics towards the sampled distribution. `update` keeps the
    sample count on the host as well, so it runs eagerly, never inside a captured CUDA graph (--cudagraphs).
    """

    def __init__(self, shape: tuple[int, ...], members: int = 1, epsilon: float = 1e-8, enabled: bool = True) -> None:
        super().__init__()
        self.epsilon, self.enabled = epsilon, enabled  # disabled: the identity, and `update`/`reset` do nothing
        self.register_buffer("mean", torch.zeros(members, *shape))
        self.register_buffer("var", torch.ones(members, *shape))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        # the count again, on the host: it never depends on the data, so the merge's scalar arithmetic runs in Python
        # (one-element kernels cost more than the update itself on a CPU) and never waits for a device
        self.host_count = 0.0
        self.register_load_state_dict_post_hook(lambda module, _: setattr(module, "host_count", float(module.count)))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        """Merge a (members, batch, *shape) batch into each member's statistics (every member sees as many samples)."""
        if not self.enabled:
            return
        mean, var = self.mean, self.var
        batch = batch.reshape(mean.shape[0], -1, *mean.shape[1:]).float()
        batch_count = batch.shape[1]
        count, total = self.host_count, self.host_count + batch_count
        # σ² ← (M2 + M2_batch + δ²·n·n_batch/n_total)/n_total with M2 = σ²·n, in place
        if batch_count == 1:  # one env: the batch's mean is its sample and its variance 0 (the same numbers, fewer kernels)
            delta = batch[:, 0] - mean
            var.mul_(count)
        else:
            delta = batch.mean(dim=1) - mean
            var.mul_(count).add_(batch.var(dim=1, unbiased=False) * batch_count)
        var.add_(delta.square().mul_(count * batch_count / total)).div_(total)
        mean.add_(delta * (batch_count / total))
        self.count.fill_(total)
        self.host_count = total

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(members, batch, *shape) → the same, standardised by each member's statistics."""
        if not self.enabled:
            return x
        return (x - self.mean.unsqueeze(1)) / torch.sqrt(self.var.unsqueeze(1) + self.epsilon)

    @torch.no_grad()
    def reset(self) -> None:
        """Forget the statistics (continual settings: `--continual.reset-obs-norm` at a task switch)."""
        if not self.enabled:
            return
        self.mean.zero_()
        self.var.fill_(1.0)
        self.count.zero_()
        self.host_count = 0.0


class ObservationNormalizer(nn.Module):
    """clip((x − μ)/σ, ±clip) with running statistics, as gymnasium's NormalizeObservation + clip in CleanRL's PPO.

    `update=True` only for observations the agent acts on during training; evaluation reads the statistics.
    Disabled, it is the identity (float vectors, uint8 frames; and still a module, so checkpoints have the same keys).
    """

    def __init__(self, shape: tuple[int, ...], enabled: bool, clip: float = 10.0, members: int = 1) -> None:
        super().__init__()
        self.enabled, self.clip = enabled, clip
        self.rms = RunningMeanStd(shape, members)

    def forward(self, obs: torch.Tensor, update: bool = False) -> torch.Tensor:
        if not self.enabled:  # uint8 frames pass as they are: the Nature CNN scales them, the rollout stores bytes
            return obs if obs.dtype == torch.uint8 else obs.float()
        if update:
            self.rms.update(obs)
        return self.rms(obs.float()).clamp(-self.clip, self.clip)

    def reset(self) -> None:
        self.rms.reset()


class RewardScaler(nn.Module):
    """r / √(Var[G] + ε), clipped, where G ← γG + r is each env's running discounted return (gymnasium's
    NormalizeReward + clip in CleanRL's PPO). G restarts at every episode end. Logged returns stay raw. Rewards and
    episode ends are (members, num_envs); Var[G] is each member's."""

    def __init__(
        self, num_envs: int, gamma: float, enabled: bool, clip: float = 10.0, epsilon: float = 1e-8, members: int = 1
    ) -> None:
        super().__init__()
        self.enabled, self.gamma, self.clip, self.epsilon = enabled, gamma, clip, epsilon
        self.return_rms = RunningMeanStd((), members)
        self.register_buffer("discounted_return", torch.zeros(members, num_envs))

    @torch.no_grad()
    def forward(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return reward
        self.discounted_return.mul_(self.gamma).add_(reward)
        self.return_rms.update(self.discounted_return)
        self.discounted_return.masked_fill_(done, 0.0)
        return (reward / torch.sqrt(self.return_rms.var.unsqueeze(1) + self.epsilon)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def reset(self) -> None:
        self.return_rms.reset()
        self.discounted_return.zero_()


def with_normalizer(module: nn.Module, normalizer: nn.Module) -> nn.Module:
    """`module` reading its inputs through `normalizer` (the group's observation statistics, one per member), attached
    after `Members.build` so each member's part of it is its own; a C51 critic's base network reads them."""
    (module.base if isinstance(module, CategoricalCritic) else module).normalize = normalizer
    return module
