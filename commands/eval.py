"""`cleanrl-plus eval RUN_DIR`: load a run's checkpoint, evaluate its policy, print mean ± std (CleanRL's "enjoy").

    cleanrl-plus eval runs/Hopper-v5__td3__1__1795375541 --episodes 20
    cleanrl-plus eval runs/<continual run> --task 2 --seed 7 --capture-video

The agent's own `load_policy(args, env, state, device)` rebuilds the evaluation policy (the one behind
`eval/episodic_return`) from `args.json` and `checkpoint.pt`; episodes run as one batch, as in training.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Literal

import tyro

from cleanrl_plus.flags import parse_flags
from commands.agent_modules import agent_module
from envs.errors import UserError
from envs.ranges import SEED_MAX, AtLeastOne, Range


@dataclasses.dataclass
class EvalArgs:
    run_dir: tyro.conf.Positional[Annotated[str, tyro.conf.arg(metavar="RUN_DIR")]]
    """the run directory (runs/<run>) holding args.json and checkpoint.pt"""
    episodes: AtLeastOne = 10
    """episodes to evaluate (run at once, one per sub-env)"""
    seed: Annotated[int, Range(ge=-1, le=SEED_MAX)] = -1
    """episodes start as a run with this seed evaluates, from seed + 100000 on (-1 = the run's own seed)"""
    task: Annotated[int, Range(ge=-1)] = -1
    """continual runs: the task to evaluate on (-1 = the task the run ended in)"""
    capture_video: bool = False
    """record one episode to RUN_DIR/videos/ (MuJoCo and dm-control need a headless GL backend, see the docs)"""
    device: Literal["auto", "cpu", "cuda"] = "cpu"
    """where to run the policy"""


def parse(argv: list[str]) -> EvalArgs:
    return parse_flags(EvalArgs, argv, prog="cleanrl-plus eval")


def evaluate_run(options: EvalArgs) -> dict:
    """Evaluate a saved run; returns {"agent", "env_id", "task", "returns", "mean", "std", "video"}."""
    from cleanrl_plus.checkpoint import CHECKPOINT_NAME, load_checkpoint, load_error_detail
    from cleanrl_plus.config import load_saved_args
    from cleanrl_plus.evaluator import Evaluator, env_options
    from cleanrl_plus.run import resolve_device

    run_dir = Path(options.run_dir)
    if not (run_dir / CHECKPOINT_NAME).is_file():
        raise UserError(f"{run_dir}: no {CHECKPOINT_NAME} there — pass the directory of a run that saved a checkpoint")
    try:
        agent = json.loads((run_dir / "summary.json").read_text())["agent"]
        module = agent_module(agent)
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        raise UserError(
            f"{run_dir}: summary.json does not name a known agent — pass a run directory written by cleanrl_plus"
        ) from None
    args = load_saved_args(module.Args, run_dir)
    device = resolve_device(options.device)
    env_kwargs = env_options(args)
    seed = args.seed if options.seed < 0 else options.seed
    evaluator = Evaluator(args.env_id, options.episodes, seed, device, **env_kwargs)
    task = _task(options.task, evaluator.env, run_dir)
    if task is not None:
        evaluator.env.set_task(task)
    state = load_checkpoint(run_dir / CHECKPOINT_NAME, map_location=device)
    try:
        policy = module.load_policy(args, evaluator.env, state, device)
    except (RuntimeError, KeyError, ValueError) as error:
        raise UserError(f"{run_dir}: the checkpoint does not fit {agent}'s networks ({load_error_detail(error)})") from None
    returns = evaluator(policy)[0]  # the run's one member
    evaluator.close()
    result = {
        "agent": agent,
        "env_id": args.env_id,
        "task": task,
        "returns": returns.tolist(),
        "mean": float(returns.mean()),
        "std": float(returns.std()),
        "video": None,
    }
    if options.capture_video:
        from cleanrl_plus.video import VideoRecorder

        recorder = VideoRecorder(args.env_id, evaluator.seed, device, **env_kwargs)
        name = f"eval-seed{seed}" + (f"-task{task}" if task is not None else "") + ".mp4"
        recorder.record(policy, run_dir / "videos" / name, task=task)
        recorder.close()
        result["video"] = str(run_dir / "videos" / name)
    return result


def _task(requested: int, env, run_dir: Path) -> int | None:
    """The continual task to evaluate on: the one asked for, else the one the run ended in; None for other envs."""
    num_tasks = getattr(getattr(env, "setting", None), "num_tasks", None)
    if num_tasks is None:
        if requested >= 0:
            raise UserError(f"--task applies to continual runs; {run_dir} is not one — drop the flag")
        return None
    if requested >= num_tasks:
        raise UserError(f"--task {requested}: this run's schedule has tasks 0..{num_tasks - 1}")
    if requested >= 0:
        return requested
    tasks = json.loads((run_dir / "summary.json").read_text()).get("tasks") or [{"task": 0}]
    return int(tasks[-1]["task"])


def main(argv: list[str]) -> dict:
    result = evaluate_run(parse(argv))
    where = f" task {result['task']}" if result["task"] is not None else ""
    print(
        f"{result['agent']} on {result['env_id']}{where}: {result['mean']:.2f} ± {result['std']:.2f} "
        f"over {len(result['returns'])} episodes" + (f" — video {result['video']}" if result["video"] else "")
    )
    return result
