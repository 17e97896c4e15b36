"""Atomic checkpoints and RNG state capture, so that a killed run resumes exactly where it was."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cleanrl_plus.errors import UserError

CHECKPOINT_NAME = "checkpoint.pt"


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write to a temporary file, fsync, then rename: a kill mid-write leaves the previous checkpoint intact."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no checkpoint at {path} — the run was killed before its first checkpoint; start it again without --resume")
    try:
        # weights_only=False: our own files also hold env snapshots and numpy RNG states.
        state = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as error:
        raise UserError(
            f"checkpoint {path} is corrupt or unreadable ({type(error).__name__}) — delete it to restart the run, "
            "or resume another run"
        ) from None
    if not isinstance(state, dict) or "global_step" not in state:
        raise UserError(f"checkpoint {path} is incomplete (no global_step) — delete it to restart the run")
    return state


def capture_rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def state_dicts(**objects: Any) -> dict[str, Any]:
    """{name: obj.state_dict()} for modules, optimisers, replay, envs, normalisers alike."""
    return {name: obj.state_dict() for name, obj in objects.items()}


def load_state_dicts(state: dict[str, Any], **objects: Any) -> None:
    for name, obj in objects.items():
        obj.load_state_dict(state[name])
