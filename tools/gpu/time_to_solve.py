"""Wall-clock to solve a task: an agent's whole run timed in this process after the imports, as issue 17 counts it
("from process start to finish, excluding imports"). Runs on the GPU machine (the runbook's CartPole call), or anywhere.

The clock starts right before `main(args)` (run directory, envs, networks, the whole loop, the final evaluation and
checkpoint are inside it) and stops when it returns. The evaluations' times come from their TensorBoard events, so
the first evaluation ≥ --target is reported with its seconds since the start as well.

Usage: python tools/gpu/time_to_solve.py --agent ppo --target 500 -- --env-id torch:CartPole-v1 --num-envs 1024 …
       … --csv FILE                  → also appends a CSV row
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
import time
from pathlib import Path

import torch
import tyro
from csv_rows import append_row  # tools/gpu/csv_rows.py, beside this script
from curve import scalars  # tools/gpu/curve.py, next to this script

FIELDS = [
    "agent",
    "seed",
    "num_envs",
    "seconds",
    "final_eval",
    "solved",
    "first_solved_step",
    "first_solved_s",
    "global_step",
    "device",
    "torch",
    "command",
]


def time_to_solve(agent: str, flags: list[str], target: float) -> dict:
    module = importlib.import_module(f"agents.{agent}")
    args = tyro.cli(module.Args, args=flags)
    start = time.time()
    result = module.main(args)
    seconds = time.time() - start
    _, evaluations = scalars(Path(result["run_dir"]), ("eval/episodic_return",))
    solved = [(wall - start, step) for wall, step, _, mean in evaluations if mean >= target]
    final = result["eval"].get("mean")
    return {
        "agent": agent,
        "seed": args.seed,
        "num_envs": args.num_envs,
        "seconds": round(seconds, 2),
        "final_eval": final,
        "solved": final is not None and final >= target,
        "first_solved_step": solved[0][1] if solved else None,
        "first_solved_s": round(solved[0][0], 2) if solved else None,
        "global_step": result["global_step"],
        "device": result["device"],
        "torch": torch.__version__,
        "command": shlex.join(["python", f"agents/{agent}.py", *flags]),
    }


if __name__ == "__main__":
    argv = sys.argv[1:]
    flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="ppo")
    parser.add_argument("--target", type=float, default=500.0, help="the evaluation return that counts as solved")
    parser.add_argument("--csv", type=Path, help="append a row to this CSV file (header if new)")
    options = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    report = time_to_solve(options.agent, flags, options.target)
    print(json.dumps(report))
    if options.csv:
        append_row(options.csv, FIELDS, report)
