"""A stochastic policy's actions from noise drawn outside the acting step, so that a captured step (--cudagraphs)
replays the same math and a GPU never waits for `dist.sample()`'s host sync. Every member's noise comes from its own
generator (cleanrl_plus/members.py)."""

from __future__ import annotations

import torch
from torch import Tensor

from cleanrl_plus.members import Members


def action_noise(members: Members, steps: int, batch: int, outputs: int, continuous: bool) -> Tensor:
    """The random numbers `sample_actions` turns into actions for `steps` successive batches of `batch` observations
    of each member, (members, steps, batch, outputs), drawn as torch's own samplers draw them: ε ~ N(0, 1) per action
    dimension (Box), E ~ Exp(1) per action (Discrete). Exponential draws take a generator's numbers in the same order
    whatever their size, so the Discrete block is one draw per member; normal draws do not (16 or more take another
    path), so Box noise is drawn step by step."""
    if continuous:
        return torch.stack([members.randn(batch, outputs) for _ in range(steps)], dim=1)
    return members.exponential(steps, batch, outputs)


def sample_actions(dist: torch.distributions.Distribution, noise: Tensor) -> tuple[Tensor, Tensor]:
    """(a ~ dist, log dist(a)) from `noise`: a = μ + σ·ε (a Normal, its log-probability summed over the action
    dimensions), or a = argmax p/E, the exponential race that torch.multinomial runs for one draw (a Categorical). The
    actions `dist.sample()` would give."""
    if isinstance(dist, torch.distributions.Normal):
        actions = dist.loc + dist.scale * noise
        return actions, dist.log_prob(actions).sum(-1)
    actions = (dist.probs / noise).argmax(dim=-1)
    return actions, dist.log_prob(actions)
