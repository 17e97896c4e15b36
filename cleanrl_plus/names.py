"""Names a user types: the agents' (`AGENTS`, the one list every command and the remedy catalogue read;
commands/agent_modules.py loads them, the library never imports agents/), and names that become file names (--run-name,
--exp-name, a sweep's configuration names): one check for what the file system refuses and for what would break a
one-line message or a shell loop over runs, for every command that turns a name into a path."""

from __future__ import annotations

import os
import unicodedata

from cleanrl_plus.errors import printable
from envs.errors import UserError, did_you_mean

AGENTS = ("td3", "sac_simba", "ddqn", "ppo", "gtr")  # agents/<name>.py, each with Args, check, main and load_policy
NAME_MAX = 255  # bytes in one file name on Linux's and macOS's file systems


def check_printable(name: str, flag: str) -> None:
    """One line for a name holding a control character (a newline, a tab, an escape): a folder named so splits every
    log line that names it and every `for run in runs/*` loop."""
    control = next((char for char in name if unicodedata.category(char) == "Cc"), None)
    if control is not None:
        raise UserError(
            f"{flag} '{printable(name)}' holds the control character {repr(control)[1:-1]} — a name that becomes a "
            "folder's takes printable characters only"
        )


def check_name_length(name: str, flag: str, what: str, fix: str) -> None:
    """One line, before anything is created, for a file name the file system would refuse (over NAME_MAX bytes),
    instead of an OSError: `{flag}: {what} would be N bytes, over the file system's limit of 255 — choose {fix}`."""
    size = len(os.fsencode(name))
    if size > NAME_MAX:
        raise UserError(f"{flag}: {what} would be {size} bytes, over the file system's limit of {NAME_MAX} — choose {fix}")


def check_agent_name(name: str) -> None:
    """One-line UserError for a name that is not an agent's, with the closest one or the list."""
    if name not in AGENTS:
        raise UserError(f"unknown agent '{name}'{did_you_mean(name, AGENTS) or ' — choose one of ' + ', '.join(AGENTS)}")
