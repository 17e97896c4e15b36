"""What an agent keeps across a task switch of a continual env (envs/continual.py), as its `--continual.*` flags say.

Defaults keep everything (one agent lives through the whole sequence, as in C-CHAIN's continual MinAtar).
`--continual.oracle` is the reference learner of plasticity studies: a fresh agent at every switch (networks
re-drawn, optimiser moments dropped, targets re-synced, replay emptied, normalisers and exploration restarted).
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch.nn as nn

from cleanrl_plus.replay import ReplayBuffer
from envs.continual import ContinualArgs
from plasticity.resets import Resettable, full_reset


def on_task_switch(
    settings: ContinualArgs,
    networks: Iterable[Resettable] = (),
    replay: ReplayBuffer | None = None,
    normalizers: Iterable[nn.Module] = (),
    also_on_fresh_start: Iterable[Callable[[], None]] = (),
) -> None:
    """Apply the switch policy; `also_on_fresh_start` re-initialises what is not a network (e.g. SAC's temperature)."""
    if settings.oracle:
        for network in networks:
            full_reset(network)
        for reset in also_on_fresh_start:
            reset()
    if replay is not None and (settings.oracle or settings.reset_replay):
        replay.clear()
    if settings.oracle or settings.reset_obs_norm:
        for normalizer in normalizers:
            normalizer.reset()


def restarts_exploration(settings: ContinualArgs) -> bool:
    return settings.oracle or settings.reset_exploration
