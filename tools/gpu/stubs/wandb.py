"""Stand-in for W&B when the peers' scripts run (LeanRL calls wandb.init/wandb.log unconditionally; W&B is not on the
GPU image and nothing may be uploaded): the logged scalars go to TensorBoard under ./runs/<name>, where
tools/gpu/rate.py reads their wall-clock times like those of CleanRL's and our runs. Only side_by_side.sh puts this
folder on PYTHONPATH."""

from __future__ import annotations

import atexit
import os

from torch.utils.tensorboard import SummaryWriter

_writer: SummaryWriter | None = None


def init(project: str | None = None, name: str | None = None, **_: object) -> None:
    global _writer
    _writer = SummaryWriter(os.path.join("runs", name or project or "run"))
    atexit.register(_writer.close)


def log(data: dict, step: int | None = None) -> None:
    for key, value in data.items():
        try:
            _writer.add_scalar(key, float(value), step)
        except (TypeError, ValueError):  # non-scalar values are not needed for the speed measurement
            pass
