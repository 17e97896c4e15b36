"""`cleanrl-plus eval RUN_DIR`: load a run's checkpoint, evaluate its policy, print mean ± std (CleanRL's "enjoy").

    cleanrl-plus eval runs/Hopper-v5__td3__1__1795375541 --episodes 20
    cleanrl-plus eval runs/<continual run> --task 2 --seed 7 --capture-video

The agent's own `load_policy(args, env, state, device)` rebuilds the evaluation policy (the one behind
`eval/episodic_return`) from `args.json` and `checkpoint.pt`; episodes run as one batch, as in training.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import tyro

from cleanrl_plus.errors import UserError


@dataclasses.dataclass
class EvalArgs:
    run_dir: tyro.conf.Positional[str]
    """the run directory (runs/<run>) holding args.json and checkpoint.pt"""
    episodes: int = 10
    """episodes to evaluate (run at once, one per sub-env)"""
    seed: int = -1
    """seed of the evaluation episodes (-1 = the run's own evaluation seed: its seed + 100000)"""
    task: int = -1
    """continual runs: the task to evaluate on (-1 = the task the run ended in)"""
    capture_video: bool = False
    """record one episode to RUN_DIR/videos/ (MuJoCo and dm-control need a headless GL backend, see the docs)"""
    device: str = "cpu"
    """where to run the policy (cpu, cuda, auto)"""


def parse(argv: list[str]) -> EvalArgs:
    return tyro.cli(EvalArgs, args=argv, prog="cleanrl-plus eval")


def main(argv: list[str]) -> dict:
    raise UserError("cleanrl-plus eval: not implemented yet")
