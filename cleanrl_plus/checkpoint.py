"""Atomic checkpoints and RNG state capture, so that a killed run resumes exactly where it was."""

from __future__ import annotations

import errno
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cleanrl_plus.errors import file_system_error
from envs.errors import UserError

CHECKPOINT_NAME = "checkpoint.pt"
# 2: one "plasticity" entry for every remedy and diagnostic, observation statistics inside the networks (issue #26)
CHECKPOINT_FORMAT = 2


def write_atomically(path: Path, write: Any, named: Path | None = None) -> None:
    """`write(file)` into path.tmp, fsync, then rename: a kill or a full disk mid-write leaves the previous file
    intact, and a failed write leaves no temporary file behind. An error names `named` (default: path)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with open(tmp, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as error:
        cause = _os_error_behind(error, path.parent)
        tmp.unlink(missing_ok=True)
        if cause is None:
            raise
        raise file_system_error(named or path, cause) from None


def _os_error_behind(error: BaseException, folder: Path) -> OSError | None:
    """The OSError behind a failed write: torch.save reports a full disk as a RuntimeError of its zip writer
    ("unexpected pos"), with the OSError at most in the exception's context."""
    while error is not None:
        if isinstance(error, OSError):
            return error
        error = error.__cause__ or error.__context__
    try:
        stats = os.statvfs(folder)
    except OSError:
        return None
    if stats.f_bavail * stats.f_frsize < (1 << 20):  # under 1 MiB left: that is why the write failed
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def save_checkpoint(path: Path, state: dict[str, Any], named: Path | None = None) -> None:
    write_atomically(path, lambda file: torch.save({"format": CHECKPOINT_FORMAT} | state, file), named)


PENDING_SUFFIX = ".pending"


def pending_path(path: Path) -> Path:
    """Where a group writes a member's next checkpoint, complete, before any member's checkpoint is replaced."""
    return Path(path).with_suffix(Path(path).suffix + PENDING_SUFFIX)


def finish_group_checkpoint(paths: list[Path]) -> None:
    """A group replaces its members' checkpoints only once every member's next one is written (`pending_path`), so a
    kill between two replacements cannot leave members at different steps. If a kill came in between, complete what
    was started: every pending checkpoint replaces its member's when the others already hold that step; otherwise
    (a kill while they were being written) the pending ones are dropped and the old, consistent checkpoints stay."""
    pending = {path: pending_path(path) for path in paths if pending_path(path).exists()}
    if not pending:
        return
    steps = {int(torch.load(p, map_location="cpu", weights_only=False)["global_step"]) for p in pending.values()}
    held = [
        int(torch.load(path, map_location="cpu", weights_only=False)["global_step"]) if path.exists() else None
        for path in paths
        if path not in pending
    ]
    if len(steps) == 1 and all(step in steps for step in held):
        for path, next_checkpoint in pending.items():
            os.replace(next_checkpoint, path)
    else:
        for next_checkpoint in pending.values():
            next_checkpoint.unlink()


def first_non_finite(state: Any, skip: tuple[str, ...] = ("replay", "rng", "env", "plasticity.least")) -> str | None:
    """The name of the first floating tensor in a (nested) checkpoint state holding NaN or ±inf, or None.

    One device sync for the whole state; replay, RNG, env snapshots and LEAST's episode histories (data, not learned
    values; LEAST pads steps no episode reached with NaN) are skipped."""
    named: list[tuple[str, torch.Tensor]] = []

    def collect(value: Any, where: str) -> None:
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and value.numel():
                named.append((where, value))
        elif isinstance(value, dict):
            for key, item in value.items():
                path = f"{where}.{key}" if where else str(key)
                if path not in skip:
                    collect(item, path)
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                collect(item, f"{where}.{index}")

    collect(state, "")
    if not named:
        return None
    finite: dict[str, bool] = {}
    for device in {tensor.device for _, tensor in named}:  # one stacked copy per device
        on_device = [(where, tensor) for where, tensor in named if tensor.device == device]
        flags = torch.stack([tensor.isfinite().all() for _, tensor in on_device]).tolist()
        finite.update(zip((where for where, _ in on_device), flags))
    return next((where for where, _ in named if not finite[where]), None)


def missing_checkpoint(path: Path) -> UserError:
    """What a run directory without its checkpoint is, by its summary.json: a run that finished, or one that
    checkpointed before, lost its checkpoint (a run that cannot be started again under its name: the directory holds
    its results); without a summary, the run was killed before its first checkpoint."""
    try:
        summary = json.loads((path.parent / "summary.json").read_text())
    except (OSError, ValueError):
        summary = None
    if not isinstance(summary, dict):
        return UserError(
            f"no checkpoint at {path} — the run was killed before its first checkpoint; start it again without --resume "
            "(the same --run-name replaces what it left)"
        )
    step = summary.get("global_step", "?")
    found = f"a finished run (step {step})" if summary.get("finished") else f"a run that checkpointed (last at step {step})"
    return UserError(
        f"{path.parent} holds {found}, but its checkpoint.pt is missing — its summary.json and curves still report "
        "(cleanrl-plus report); to resume or evaluate it, put its checkpoint.pt back, or start the run again under "
        f"another --run-name (or once {path.parent} is moved aside)"
    )


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise missing_checkpoint(path)
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
    if state.get("format") != CHECKPOINT_FORMAT:
        raise UserError(
            f"checkpoint {path} was written by an older cleanrl_plus (checkpoint format {state.get('format', 1)}, this "
            f"version reads {CHECKPOINT_FORMAT}) — start a new run, or use the version that wrote it"
        )
    return state


_SIZE_MISMATCH = re.compile(
    r"size mismatch for (\S+): copying a param with shape torch\.Size\(\[([^\]]*)\]\) from checkpoint, "
    r"the shape in current model is torch\.Size\(\[([^\]]*)\]\)"
)


def load_error_detail(error: Exception, owner: str = "") -> str:
    """What a failed `load_state_dict` of `owner` (a checkpoint entry: "actor") means, in one clause: the tensor and both
    shapes for torch's size mismatch, else the first line that names something (missing or unexpected keys)."""
    text = str(error)
    mismatch = _SIZE_MISMATCH.search(text)
    if mismatch:
        tensor = f"{owner}.{mismatch[1]}" if owner else mismatch[1]
        return f"{tensor} has shape [{mismatch[2]}] in the checkpoint but [{mismatch[3]}] here"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    detail = (
        lines[1]
        if len(lines) > 1 and lines[0].startswith("Error(s) in loading")
        else (lines[0] if lines else type(error).__name__)
    )
    return detail if len(detail) <= 200 else detail[:197] + "..."


def capture_rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    # .cpu(): a checkpoint loaded with map_location=cuda holds these on the GPU; the setters take CPU ByteTensors
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([cuda_state.cpu() for cuda_state in state["cuda"]])
