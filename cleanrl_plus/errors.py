"""User-facing errors: one line that names the fix, never a stack trace."""

from __future__ import annotations

import difflib
import sys
from typing import Iterable, NoReturn


class UserError(Exception):
    """A mistake in what the user asked for (bad id, flag, checkpoint); printed as one line, exit code 2."""


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """' — did you mean 'X'?' for the closest candidate, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" — did you mean '{close[0]}'?" if close else ""


def exit_with(error: UserError) -> NoReturn:
    print(f"error: {error}", file=sys.stderr)
    raise SystemExit(2)
