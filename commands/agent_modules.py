"""The agents' modules by name, for the commands that run them: cleanrl_plus/names.py names the agents (the remedy
catalogue reads the names too), and loading one, which imports agents/, is done up here, above the library."""

from __future__ import annotations

import importlib
from types import ModuleType

from cleanrl_plus.names import AGENTS


def agent_module(name: str) -> ModuleType:
    """agents/<name>.py, imported (a name not in AGENTS is a KeyError: callers check names first)."""
    if name not in AGENTS:
        raise KeyError(name)
    return importlib.import_module(f"agents.{name}")
