"""One writer per run directory: an OS file lock held by the process that writes the run; and one sweep per run: a
claim that a sweep takes before it starts the run's process."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import socket
from pathlib import Path

from cleanrl_plus.errors import file_system_error
from envs.errors import UserError

LOCK_NAME = "run.lock"


def _open_locked(path: Path) -> tuple[int, bool]:
    """(descriptor of `path`, created if missing; whether this process now holds its exclusive OS lock)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise file_system_error(path, error) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return fd, False
    return fd, True


def lock_run_dir(run_dir: Path) -> int:
    """Hold an OS lock on the run directory for as long as this process writes it (the OS drops it when the process
    ends, `kill -9` included, so no stale lock survives); a second writer gets one line naming the holder."""
    path = run_dir / LOCK_NAME
    fd, locked = _open_locked(path)
    if not locked:
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


# ----------------------------------------------------------------------------------------------------------------
# Claims: which process of which sweep runs a run. A sweep claims a run before it starts the run's process, so that
# two sweeps on one runs folder never start one run twice, and a run's agent keeps its claim (it inherits the claim's
# file descriptor) until it exits.
# ----------------------------------------------------------------------------------------------------------------
class RunClaimed(Exception):
    """A run claimed by another live process; `holder` says which (`process 123 on node7`)."""

    def __init__(self, name: str, holder: str) -> None:
        super().__init__(f"{name} is claimed by {holder}")
        self.name, self.holder = name, holder


@dataclasses.dataclass
class Claim:
    """Exclusive flocks on `<claims folder>/<run name>.claim`, one per run; released (and the files removed) at once."""

    files: list[tuple[Path, int]]

    @property
    def fds(self) -> tuple[int, ...]:
        """The descriptors a run's process inherits (pass_fds), so that the claim lasts as long as the process."""
        return tuple(fd for _, fd in self.files)

    def release(self) -> None:
        for path, fd in self.files:
            with contextlib.suppress(OSError):
                path.unlink()  # under the lock: a process that opens it now finds it gone and opens it again
            os.close(fd)
        self.files.clear()


def claim_runs(folder: Path, names: list[str]) -> Claim:
    """Claim every run of `names`, all or none (in name order, so two claimers never each hold half); raises RunClaimed
    naming the live process that holds one. The OS drops a flock when the last process holding it dies (`kill -9`
    included), so a claim is never stale; a claim file left behind by a killed claimer is simply taken."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise file_system_error(folder, error) from None
    claim = Claim([])
    try:
        for name in sorted(set(names)):
            claim.files.append(_claim_file(folder / f"{name}.claim", name))
    except BaseException:
        claim.release()
        raise
    return claim


def _claim_file(path: Path, name: str) -> tuple[Path, int]:
    while True:
        fd, locked = _open_locked(path)
        if not locked:
            holder = _described_holder(fd)
            os.close(fd)
            raise RunClaimed(name, holder) from None
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
            return path, fd
        os.close(fd)  # its holder released it (and removed the file) between our open and our lock: open it again


def claim_holder(folder: Path, name: str) -> str | None:
    """Who holds the claim on run `name` (`sweep process 123 on node7`), or None; creates nothing."""
    try:
        fd = os.open(folder / f"{name}.claim", os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _described_holder(fd)
    finally:
        os.close(fd)
    return None


def _described_holder(fd: int) -> str:
    holder = os.read(fd, 256).decode(errors="replace").split()
    return f"sweep process {holder[0]} on {holder[1]}" if len(holder) == 2 else "another sweep"
