"""The `cleanrl-plus` console command. Subcommands: compare, sweep, report, bench, eval, remedies."""

from __future__ import annotations

import importlib
import os
import sys

from cleanrl_plus.errors import exit_with
from envs.errors import UserError

USAGE = """usage: cleanrl-plus <command> [flags]

commands:
  compare  baseline vs a remedy over seeds, then the report (default: PPO on continual CartPole, a few minutes)
  sweep    agent × env × remedy configuration × seed, idempotent, local pool / Slurm (submitit) / Ray:
           cleanrl-plus sweep --agent ppo --env-id CartPole-v1 --seeds 1 2 3 --config baseline= \\
               --config sp="--reset.method shrink-perturb"
  report   IQM tables with 95% CIs and plots from run directories: cleanrl-plus report runs/ --baseline ppo
  bench    time an agent's real training loop: cleanrl-plus bench td3 --env-id Hopper-v5
           (bench groups: seeds as groups against one per process; bench profile: a group's time per operator)
  eval     evaluate a saved run's checkpoint: cleanrl-plus eval runs/<run> --episodes 20 [--capture-video]
  remedies the agent × plasticity-remedy applicability matrix (from plasticity/catalogue.py)

Each command explains its flags: cleanrl-plus <command> --help

Agents run as scripts: python agents/td3.py --help
"""


# command → the module whose main(argv) runs it and whose parse(argv) parses its flags
COMMANDS = {
    "compare": "commands.compare",
    "sweep": "commands.sweep",
    "report": "commands.report",
    "bench": "commands.bench",
    "eval": "commands.eval",
    "remedies": "commands.remedies",
}


def _module(command: str):
    if command not in COMMANDS:
        raise UserError(f"unknown command '{command}' — run `cleanrl-plus --help` for the list")
    return importlib.import_module(COMMANDS[command])


def parse_only(argv: list[str]):
    """Parse a command line's flags with the subcommand's real parser, without running it (the docs tests)."""
    return _module(argv[0]).parse(argv[1:])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return
    command, rest = argv[0], argv[1:]
    try:
        _module(command).main(rest)
        sys.stdout.flush()  # what is still buffered meets a reader that went away here, not in the interpreter's exit
    except UserError as error:
        exit_with(error)
    except BrokenPipeError:  # the reader went away (`cleanrl-plus sweep … --dry-run | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)


if __name__ == "__main__":
    main()
