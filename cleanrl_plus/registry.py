"""The agents, by name: the one list every command and the remedy catalogue read (commands/agent_modules.py loads
them: the library never imports agents/)."""

from __future__ import annotations

from envs.errors import UserError, did_you_mean

AGENTS = ("td3", "sac_simba", "ddqn", "ppo", "gtr")  # agents/<name>.py, each with Args, check, main and load_policy


def check_agent_name(name: str) -> None:
    """One-line UserError for a name that is not an agent's, with the closest one or the list."""
    if name not in AGENTS:
        raise UserError(f"unknown agent '{name}'{did_you_mean(name, AGENTS) or ' — choose one of ' + ', '.join(AGENTS)}")
