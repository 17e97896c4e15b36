"""`cleanrl-plus compare`: a baseline against one remedy over several seeds, then the report — one command.

    cleanrl-plus compare            # PPO on continual CartPole: baseline vs shrink-and-perturb, 10 seeds each
    cleanrl-plus compare --agent td3 --env-id Pendulum-v1 --remedy "--cir.critic" --remedy-name cir \\
                         --flags "--total-timesteps 10000 --learning-starts 1000 --eval-every 2000"

The default is the cheapest real plasticity experiment we know (docs/experiments.md):
PPO with rl-zoo's CartPole recipe at a constant learning rate on continual CartPole, where a random N(0, 2²)
observation offset arrives every 40k steps (3 tasks). A single persistent PPO agent tends to collapse to ≈ 9 after a
switch; the report shows whether the remedy keeps it learning. `--oracle` adds a fresh agent per task as the
reference. It is a sweep (`runs/compare/`, idempotent: rerunning skips finished runs) followed by `report`. Each
configuration's seeds train as one group (`--seeds`, one process), so the default, 10 seeds per configuration (the
fewest the report accepts for a claim), is two processes, one per core (time: docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from cleanrl_plus.flags import parse_flags
from commands import sweep
from commands.report import MIN_SEEDS_FOR_COMPARISONS
from envs.errors import UserError
from envs.ranges import AtLeastOne, Count

# rl-zoo's PPO CartPole recipe (docs/agents/ppo.md) with a constant learning rate, as in the continual CartPole measurements
PPO_CONTINUAL_CARTPOLE_RECIPE = (
    "--num-envs 8 --num-steps 32 --num-minibatches 1 --update-epochs 20 --gae-lambda 0.8 --gamma 0.98 "
    "--learning-rate 1e-3 --no-anneal-lr --no-clip-vloss --no-normalize-obs --no-normalize-reward --eval-episodes 20"
)
# compare's default: that recipe on a schedule shortened to 3 tasks × 40k steps, evaluated every 10k
CONTINUAL_CARTPOLE_FLAGS = (
    PPO_CONTINUAL_CARTPOLE_RECIPE + " --eval-every 10000 --continual.steps-per-task 40000 --continual.num-tasks 3"
)


@dataclasses.dataclass
class CompareArgs:
    agent: str = "ppo"
    """the agent (td3, sac_simba, ddqn, ppo, gtr)"""
    env_id: str = "continual:cartpole-offset-small"
    """the task (a continual id or any env id)"""
    remedy: str = "--reset.method shrink-perturb --reset.every 1000"
    """the remedy's flags, added to the baseline's"""
    remedy_name: str = "shrink-perturb"
    """the remedy's name in the report (its runs are {agent}-{remedy_name})"""
    flags: str = CONTINUAL_CARTPOLE_FLAGS
    """flags for every run (default: PPO's CartPole recipe on a 3 × 40k-step continual schedule)"""
    seeds: AtLeastOne = MIN_SEEDS_FOR_COMPARISONS
    """seeds per configuration (10: enough for a claim; each configuration's seeds train together in one process)"""
    oracle: bool = False
    """also run a fresh agent per task (--continual.oracle) and report the ratios to it"""
    runs_dir: str = "runs/compare"
    """where the runs and the report go"""
    workers: Count = 0
    """runs at a time (0 = one per CPU core)"""
    reps: AtLeastOne = 2000
    """bootstrap resamples per confidence interval"""


def parse(argv: list[str]) -> CompareArgs:
    return parse_flags(CompareArgs, sweep.glue_flag_values(argv, ("--flags", "--remedy")), prog="cleanrl-plus compare")


def plan(args: CompareArgs) -> sweep.SweepArgs:
    """The sweep compare runs: the baseline, the remedy (and the oracle), seeds 1..--seeds of each."""
    configs = [f"{sweep.BASELINE}=", f"{args.remedy_name}={args.remedy}"]
    if args.oracle:
        configs.append("oracle=--continual.oracle")
    return sweep.SweepArgs(
        agent=(args.agent,),
        env_id=(args.env_id,),
        seeds=tuple(range(1, args.seeds + 1)),
        config=tuple(configs),
        flags=args.flags,
        runs_dir=args.runs_dir,
        workers=args.workers,
    )


def main(argv: list[str]) -> Path:
    args = parse(argv)
    print(
        f"compare: {args.agent} on {args.env_id}, baseline vs {args.remedy_name} ({args.remedy})"
        f"{' and the oracle' if args.oracle else ''}, {args.seeds} seeds each",
        flush=True,
    )
    print(f"  every run: {shlex.join(shlex.split(args.flags))}", flush=True)
    results = sweep.run_sweep(plan(args))
    if any(r["state"] != "finished" for r in results):
        raise UserError("some runs did not finish (listed above) — rerun the same command to resume them")
    from commands.report import write_report

    oracle = f"{args.agent}-oracle" if args.oracle else None
    return write_report(
        [args.runs_dir], Path(args.runs_dir) / "report", baseline=args.agent, oracle=oracle, reps=args.reps, verbose=True
    )
