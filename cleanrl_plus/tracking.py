"""Weights & Biases logging for `--track` (CleanRL's flags): W&B mirrors the TensorBoard events of the run
(`sync_tensorboard`), so every scalar is logged once, in one place, and both tools show the same curves."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from cleanrl_plus.logger import flatten_args
from envs.errors import UserError


def require_wandb() -> None:
    """Checked before the run directory exists, so a missing extra costs nothing."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise UserError('--track needs Weights & Biases — install it with pip install -e ".[wandb]"') from None


def start_wandb(args: Any, run_dir: Path, resumed: bool) -> Any:
    """Start the W&B run before the TensorBoard writer exists (sync_tensorboard hooks the writer when it is made).
    The run directory's name is the W&B run id, so `--resume` continues the same W&B run; W&B's files go into the
    run directory unless WANDB_DIR says otherwise."""
    import wandb

    return wandb.init(
        project=args.wandb_project_name,
        entity=args.wandb_entity or None,
        name=run_dir.name,
        id=_wandb_id(run_dir.name),
        config=flatten_args(dataclasses.asdict(args)),
        sync_tensorboard=True,
        save_code=False,
        resume="allow" if resumed else None,
        dir=os.environ.get("WANDB_DIR") or str(run_dir),
    )


def _wandb_id(run_name: str) -> str:
    """W&B ids may not hold ':' or '/', which continual and Atari ids do."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in run_name)[:128]
