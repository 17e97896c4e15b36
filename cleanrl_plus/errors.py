"""How a run's errors reach the user: one line that names the fix, never a stack trace. `UserError` and
`did_you_mean` live in envs/errors.py, below every layer that raises them, and are imported from there only."""

from __future__ import annotations

import errno
import sys
import unicodedata
from pathlib import Path
from typing import NoReturn

from envs.errors import UserError


class RunFailure(Exception):
    """A run that cannot go on through no fault of its flags (diverged, disk full); printed as one line, exit code 1."""

    exit_code = 1


# errno values that mean the path itself is unusable (the user's to fix); anything else (ENOSPC, EIO) is a failure
_BAD_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.EISDIR, errno.ENOENT}


def file_system_error(path: Path, error: OSError) -> UserError | RunFailure:
    """One line naming the path and the cause: a UserError (exit 2) for a path that cannot be written, a
    RunFailure (exit 1) for a disk that failed or filled up."""
    cause = error.strerror or str(error)
    if error.errno in _BAD_PATH_ERRNOS:
        return UserError(f"cannot write {path}: {cause} — pass a writable folder (--runs-dir)")
    return RunFailure(
        f"cannot write {path}: {cause} — the previous checkpoint, if any, is intact; free space and --resume the run"
    )


def printable(text: str) -> str:
    """`text` with its control characters written as escapes (a newline as \\n): what a one-line message shows."""
    return "".join(repr(char)[1:-1] if unicodedata.category(char) == "Cc" else char for char in text)


def exit_with(error: UserError | RunFailure) -> NoReturn:
    """The error as one line on stderr, whatever it quotes (a name given with a newline in it stays on that line)."""
    print(f"error: {printable(str(error))}", file=sys.stderr)
    raise SystemExit(error.exit_code)
