"""The record of one environment step that an agent hands to its storage (PureJaxRL's `Transition`, rejax's
`Trajectory`): `RolloutStorage.add(t, transition)` and the replay buffers' `add(transition)` take it whole, so a field
is named where it is made and where it is stored, and terminated cannot be passed for truncated, or s' for s.

A NamedTuple is a pytree to torch.compile and to CUDA-graph capture, so a captured step may take or return one.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Transition(NamedTuple):
    """One step of every member's envs: (members, num_envs, ...) tensors each.

    `next_obs` is the true next observation (the final one where an episode ended); `terminated` excludes time-limit
    truncations, which still bootstrap from it.
    """

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    next_obs: torch.Tensor
    # PPO's log π_old(a|s); the off-policy agents leave it None: one record for both storages, not two that repeat six
    # fields to differ in one
    logprob: torch.Tensor | None = None
