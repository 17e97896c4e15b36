"""The `cleanrl-plus` console command. Subcommands: compare, sweep, report, bench, remedies."""

from __future__ import annotations

import sys

from cleanrl_plus.errors import UserError, exit_with

USAGE = """usage: cleanrl-plus <command> [flags]

commands:
  compare  baseline vs a remedy over seeds, then the report (default: PPO on continual CartPole, a few minutes)
  sweep    agent × env × remedy configuration × seed, idempotent, local pool / Slurm (submitit) / Ray:
           cleanrl-plus sweep --agent ppo --env-id CartPole-v1 --seeds 1 2 3 --config baseline= --config sp="--reset.method shrink-perturb"
  report   IQM tables with 95% CIs and plots from run directories: cleanrl-plus report runs/ --baseline ppo
  bench    time an agent's real training loop: cleanrl-plus bench td3 --env-id Hopper-v5
  remedies the agent × plasticity-remedy applicability matrix (from plasticity/catalogue.py)

Each command explains its flags: cleanrl-plus <command> --help

Agents run as scripts: python agents/td3.py --help
"""


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return
    command, rest = argv[0], argv[1:]
    try:
        if command == "bench":
            from cleanrl_plus import bench

            bench.main(rest)
        elif command == "sweep":
            from cleanrl_plus import sweep

            sweep.main(rest)
        elif command == "compare":
            from cleanrl_plus import compare

            compare.main(rest)
        elif command == "remedies":
            from plasticity import catalogue

            catalogue.main(rest)
        elif command == "report":
            from cleanrl_plus import report

            report.main(rest)
        else:
            raise UserError(f"unknown command '{command}' — run `cleanrl-plus --help` for the list")
    except UserError as error:
        exit_with(error)


if __name__ == "__main__":
    main()
