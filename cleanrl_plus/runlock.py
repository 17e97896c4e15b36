"""One writer per run directory: an OS file lock held by the process that writes the run."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from cleanrl_plus.errors import UserError, file_system_error

LOCK_NAME = "run.lock"


def lock_run_dir(run_dir: Path) -> int:
    """Hold an OS lock on the run directory for as long as this process writes it (the OS drops it when the process
    ends, `kill -9` included, so no stale lock survives); a second writer gets one line naming the holder."""
    path = run_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise file_system_error(path, error) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise UserError(
            f"{run_dir} is being written by process {holder} (another --resume or sweep?) — wait for it "
            f"to finish or stop it (kill {holder}); its checkpoint is safe either way"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def run_dir_holder(run_dir: Path) -> int | None:
    """The pid of the live process writing `run_dir`, or None (the lock is tried, never kept, and nothing is written)."""
    try:
        fd = os.open(run_dir / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.read(fd, 32).decode(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    finally:
        os.close(fd)
    return None
