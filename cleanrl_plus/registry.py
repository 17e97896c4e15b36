"""The agents, by name: the one list every command and the remedy catalogue read."""

from __future__ import annotations

import importlib
from types import ModuleType

from cleanrl_plus.errors import UserError, did_you_mean

AGENTS = ("td3", "sac_simba", "ddqn", "ppo", "gtr")  # agents/<name>.py, each with Args, check, main and load_policy


def agent_module(name: str) -> ModuleType:
    """agents/<name>.py, imported (a name not in AGENTS is a KeyError: callers check names first)."""
    if name not in AGENTS:
        raise KeyError(name)
    return importlib.import_module(f"agents.{name}")


def check_agent_name(name: str) -> None:
    """One-line UserError for a name that is not an agent's, with the closest one or the list."""
    if name not in AGENTS:
        raise UserError(f"unknown agent '{name}'{did_you_mean(name, AGENTS) or ' — choose one of ' + ', '.join(AGENTS)}")
