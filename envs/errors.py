"""The user-facing error every layer raises, defined on the ground floor so that the environments can raise it too;
every layer imports it from here (the run's other errors: cleanrl_plus/errors.py)."""

from __future__ import annotations

import difflib
from typing import Iterable


class UserError(Exception):
    """A mistake in what the user asked for (bad id, flag, checkpoint); printed as one line, exit code 2."""

    exit_code = 2


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """' — did you mean 'X'?' for the closest candidate, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" — did you mean '{close[0]}'?" if close else ""
