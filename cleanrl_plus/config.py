"""Command-line configuration shared by every agent: the common flags and `--resume`-aware parsing.

Each agent's `Args` dataclass inherits `RunArgs`; tyro turns the field docstrings into `--help`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import json
import math
import sys
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

from cleanrl_plus import recipes
from cleanrl_plus.flags import parse_flags
from cleanrl_plus.logger import flatten_args
from cleanrl_plus.names import check_printable
from cleanrl_plus.ranges import check_ranges
from envs.continual import ContinualArgs, is_continual
from envs.continual import parse as parse_continual_id
from envs.errors import UserError
from envs.ranges import AtLeastOne, Count, Seed

ArgsT = TypeVar("ArgsT")


@dataclasses.dataclass
class RunArgs:
    exp_name: str = "experiment"
    """name of this experiment (the run directory is runs/{env_id}__{exp_name}__{seed}__{unix_time})"""
    seed: Seed = 1
    """seed of the experiment: seeds python, numpy, torch and the environments"""
    seeds: tuple[Seed, ...] = ()
    """train these seeds at once as one batched group, each an ordinary run with its own directory (--seed is then
    ignored; docs/experiments.md); empty: --seed alone"""
    torch_deterministic: bool = True
    """make cuDNN deterministic (results reproduce for a seed; slightly slower on GPU)"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """where networks, replay and env tensors live: 'auto' picks cuda when available"""
    threads: Count = 0
    """torch CPU threads; 0 = min(2, cores), the fastest setting we measured for 256-wide MLPs on a 2-core CPU"""
    flush_denormal: bool = False
    """on the CPU, flush float32 values below 1.2e-38 to zero: a collapsed policy's gradients reach them, and Intel
    cores then multiply ≈ 200× slower (docs/speed.md); changes only those values, so results differ in the last bits"""
    env_id: str = "Hopper-v5"
    """the environment id (gymnasium ids such as Hopper-v5 or Pendulum-v1)"""
    num_envs: AtLeastOne = 1
    """number of parallel environments"""
    total_timesteps: AtLeastOne = 1_000_000
    """total environment steps (summed over the parallel environments)"""
    eval_every: Count = 10_000
    """environment steps between deterministic evaluations on a separately seeded env (0 = only at the end)"""
    eval_episodes: AtLeastOne = 10
    """episodes per evaluation (run as a batch of eval_episodes environments)"""
    log_every: AtLeastOne = 1_000
    """environment steps between loss logs (each log costs one device sync)"""
    checkpoint_every: Count = 50_000
    """environment steps between checkpoints (0 = only at the end); checkpoints hold everything needed to resume"""
    resume: str = ""
    """resume a killed run from its directory (runs/<name>); its saved flags are reused unless given again"""
    fork_from: str = ""
    """start a new run from the last checkpoint (step S) of the finished run in this directory, its whole group:
    networks, optimisers, replay, envs, RNG and evaluations; this run's flags apply from step S + 1 (give them all, as
    for a fresh run), so it equals a straight run with these flags where the flags that differ do nothing up to S
    (docs/experiments.md); the seeds are the source's"""
    runs_dir: str = "runs"
    """folder under which run directories are created"""
    run_name: str = ""
    """name of the run directory under --runs-dir (default {env_id}__{exp_name}__{seed}__{unix_time}); sweeps set it
    so that a rerun finds its runs"""
    progress: bool = True
    """show a progress line with SPS and ETA on stderr"""
    track: bool = False
    """also log to Weights & Biases (needs `pip install -e ".[wandb]"`); TensorBoard logging continues"""
    wandb_project_name: str = "cleanrl_plus"
    """the W&B project of a --track run"""
    wandb_entity: str = ""
    """the W&B entity (team or user) of a --track run (empty = your default entity)"""
    capture_video: bool = False
    """record the final evaluation's episode to runs/<run>/videos/ and TensorBoard (MuJoCo/dm-control need MUJOCO_GL)"""
    compile: bool = False
    """torch.compile the update's losses and the acting step (fullgraph); pays off on a GPU, not on CPU (docs/speed.md)"""
    cudagraphs: bool = False
    """capture each update step and the acting step as CUDA graphs and replay them (CUDA only; the big GPU win,
    docs/speed.md)"""
    continual: ContinualArgs = dataclasses.field(default_factory=ContinualArgs)
    """continual settings (`--env-id continual:<preset>`): the task schedule and what the agent keeps at a switch"""

    @classmethod
    def defaults_for(cls, env_id: str, **overrides: Any):
        """The agent's defaults for `env_id`: the field defaults, the values of its recipe for that id where it has one
        (cleanrl_plus/recipes/), then `overrides`."""
        recipe = recipes.find(agent_of(cls), env_id, cls)
        return cls(env_id=env_id, **((recipe.values if recipe else {}) | overrides))


# Flags that may differ between a run and its --resume: budgets, cadences and where/how it runs (--compile and
# --cudagraphs run the same math). Every other flag shapes the networks, the data or the schedule, so the checkpoint
# only makes sense with its saved value.
RESUMABLE_FLAGS = (
    "total_timesteps",
    "eval_every",
    "eval_episodes",
    "log_every",
    "checkpoint_every",
    "progress",
    "threads",
    "flush_denormal",
    "device",
    "torch_deterministic",
    "compile",
    "cudagraphs",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "capture_video",
    "resume",
    "runs_dir",
)

# What tells one run's settings from another's besides its seed: every flag that must equal the run's on --resume
# (`cleanrl-plus sweep` adopts, and `cleanrl-plus report` groups, only runs that agree on them), not the member
# bookkeeping of a group (`seeds`, `group`), the agent (compared on its own), nor the run's name (where it lives, not
# how it learns; a --resume still refuses another one).
NOT_SETTINGS = (*RESUMABLE_FLAGS, "seed", "seeds", "group", "forked", "agent", "run_name")


def run_settings(recorded: dict[str, Any]) -> dict[str, Any]:
    """A run's flags as args.json records them (or as dataclasses.asdict gives them), flattened to dotted names, less
    NOT_SETTINGS; a schedule seed equal to the run's seed is its default (-1), as prepare_run records it."""
    flat = flatten_args(json.loads(json.dumps(recorded)))
    if "continual.schedule_seed" in flat and flat["continual.schedule_seed"] == flat.get("seed"):
        flat["continual.schedule_seed"] = -1
    # a nested entry goes with its top name: a fork's `forked.from` names each seed's own source directory
    return {name: value for name, value in flat.items() if name.split(".")[0] not in NOT_SETTINGS}


def differing_settings(recorded: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """`--flag VALUE (not EXPECTED)` for each setting both know whose values differ (a flag only one of them knows, one
    added or removed since, is not compared: check_resume's rule)."""
    mine, theirs = run_settings(recorded), run_settings(expected)
    return [
        f"--{name.replace('_', '-')} {_shown(mine[name])} (not {_shown(theirs[name])})"
        for name in mine
        if name in theirs and mine[name] != theirs[name]
    ]


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(str, value)) or "(none)"
    return str(value) if value != "" else "''"


def describe_run(run_dir: Path) -> str:
    """What a run directory holds, in a few words (`a run of agents/ppo.py, seed 2, finished`), for errors about it."""
    try:
        saved = json.loads((run_dir / "args.json").read_text())
        what = f"a run of agents/{saved['agent']}.py, seed {saved['seed']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "files of another run"
    try:
        finished = json.loads((run_dir / "summary.json").read_text()).get("finished")
    except (OSError, ValueError, AttributeError):
        finished = False
    return what + (", finished" if finished else "")


def validate_args(args: RunArgs) -> None:
    """One-line UserError for a flag outside its range (each field declares it: cleanrl_plus/ranges.py) or for
    flags that cannot work together, before anything is created (run directory, envs)."""
    values = dataclasses.asdict(args)
    for name, value in flatten_args(values).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"--{name.replace('_', '-')} must be a finite number, got {value}")
    if len(set(args.seeds)) < len(args.seeds):
        raise UserError(f"--seeds {' '.join(map(str, args.seeds))} repeats a seed — each member trains its own seed")
    if len(args.seeds) > 1 and args.capture_video:
        raise UserError(
            "--capture-video records one run's evaluation; with --seeds, record each run afterwards with "
            "`cleanrl-plus eval <run dir> --capture-video`, or train one seed per process"
        )
    run_name = values.get("run_name", "")
    check_printable(run_name, "--run-name")
    check_printable(args.exp_name, "--exp-name")
    if run_name and (run_name in (".", "..") or "/" in run_name or "\\" in run_name):
        raise UserError(
            f"--run-name '{run_name}' must be a plain folder name (no '/' and not '..') — choose the folder with --runs-dir"
        )
    check_ranges(args)
    if values.get("buffer_size", 1) < values.get("batch_size", 0):
        raise UserError(
            f"--buffer-size {values['buffer_size']} is smaller than --batch-size {values['batch_size']} — raise it"
        )
    if values.get("n_step", 1) > 1 and values["buffer_size"] < values["n_step"] * values["num_envs"]:
        raise UserError(
            f"--n-step {values['n_step']} needs a --buffer-size of at least n-step × num-envs = "
            f"{values['n_step'] * values['num_envs']}"
        )
    critic = values.get("critic")
    if isinstance(critic, dict) and critic.get("distributional") and not critic["v_min"] < critic["v_max"]:
        raise UserError(
            f"--critic.distributional needs --critic.v-min < --critic.v-max, got [{critic['v_min']}, {critic['v_max']}]"
        )
    if not is_continual(args.env_id) and dataclasses.replace(args.continual, schedule_seed=-1) != ContinualArgs():
        raise UserError(
            f"--continual.* flags apply to continual ids; {args.env_id} is not one — use continual:<shift>:{args.env_id}"
        )


def parse_args(args_type: type[ArgsT], argv: list[str] | None = None) -> ArgsT:
    """Parse the command line; with `--resume DIR`, the run's saved flags become the defaults, else the
    agent's defaults for the env family of `--env-id` (`Args.defaults_for`)."""
    argv = sys.argv[1:] if argv is None else argv
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--resume", default="")
    pre.add_argument("--fork-from", "--fork_from", default="")
    pre.add_argument("--env-id", "--env_id", default=None)
    pre.add_argument(
        "--continual.steps-per-task", "--continual.steps_per_task", type=_int_or_0, default=0, dest="steps_per_task"
    )
    pre.add_argument("--continual.num-tasks", "--continual.num_tasks", type=_int_or_0, default=0, dest="num_tasks")
    known, _ = pre.parse_known_args(argv)
    sources: dict[str, str] = {}
    if known.resume:
        default = load_saved_args(args_type, Path(known.resume))
    else:
        env_id = known.env_id or _field_default(args_type, "env_id")
        default = from_recipe = args_type.defaults_for(env_id)
        if is_continual(env_id):  # a continual run spends its whole schedule unless --total-timesteps says otherwise
            schedule = parse_continual_id(
                env_id, ContinualArgs(steps_per_task=known.steps_per_task, num_tasks=known.num_tasks)
            )
            default = dataclasses.replace(default, total_timesteps=schedule.total_steps)
        if known.fork_from:  # a fork trains its source's seeds (cleanrl_plus.run.fork_members checks any given)
            default = dataclasses.replace(default, **_source_seeds(Path(known.fork_from)))
        recipe = recipes.find(agent_of(args_type), env_id, args_type)
        # --help names the file a default comes from, where the recipe's value is the one in force
        for flag in recipe.flags if recipe else ():
            if _value_at(default, flag) == _value_at(from_recipe, flag):
                sources[flag] = recipe.shown
    args = parse_flags(
        args_type, argv, default=default, check_numbers=False, unknown_group_hint=REMEDIES_HINT, sources=sources
    )
    validate_args(args)
    return args


def _source_seeds(run_dir: Path) -> dict[str, Any]:
    """The seed and group seeds of the run a --fork-from names, as defaults; none where its flags cannot be read yet
    (a sweep plans a fork before its source exists; starting the fork says what is missing)."""
    try:
        saved = read_saved_args(run_dir, "--fork-from")
        seeds = [read_saved_args(run_dir.parent / name, "--fork-from")["seed"] for name in saved.get("group") or ()]
        return {"seed": seeds[0] if seeds else saved["seed"], "seeds": tuple(seeds) if len(seeds) > 1 else ()}
    except (UserError, KeyError, TypeError):
        return {}


REMEDIES_HINT = " — `cleanrl-plus remedies` lists the remedies each agent takes (python agents/<agent>.py --help, its flags)"


def _int_or_0(text: str) -> int:
    """The pre-parser's reading of a number: what is not one is left for the real parser to refuse in one line."""
    try:
        return int(text)
    except ValueError:
        return 0


def _value_at(settings: Any, dotted: str) -> Any:
    return functools.reduce(getattr, dotted.split("."), settings)


def _field_default(args_type: type, name: str) -> Any:
    return next(field.default for field in dataclasses.fields(args_type) if field.name == name)


def agent_of(args_type: type) -> str:
    """The agent a flags class belongs to: the name of the file that defines it (agents/gtr.py → 'gtr')."""
    return Path(inspect.getfile(args_type)).stem


def read_saved_args(run_dir: Path, flag: str = "--resume") -> dict[str, Any]:
    """A run's args.json as written (flags plus the `agent` that wrote it), for --resume (or `flag`, --fork-from)."""
    path = run_dir / "args.json"
    if not path.is_file() and any((run_dir / name).is_file() for name in ("args.json.tmp", "run.lock")):
        raise UserError(
            f"{flag} {run_dir}: that run was killed before it recorded its flags, so before its first checkpoint: "
            f"nothing to {'resume' if flag == '--resume' else 'fork from'} — start it again without --resume (the same "
            "--run-name replaces what it left)"
        )
    if not path.is_file():
        raise UserError(f"{flag} {run_dir}: no args.json there — pass the directory of a run started by cleanrl_plus")
    try:
        saved = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{flag} {run_dir}: args.json is corrupt ({error}) — fix or remove that run directory") from None
    if not isinstance(saved, dict):
        raise UserError(f"{flag} {run_dir}: args.json is not a table of flags — fix or remove that run directory")
    return saved


def check_agent(run_dir: Path, saved: dict[str, Any], agent: str, flag: str = "--resume") -> None:
    """Refuse a run that args.json says another agent wrote, or that names no agent (an older cleanrl_plus wrote it)."""
    recorded = saved.get("agent")
    if recorded is None:
        raise UserError(f"{flag} {run_dir}: its args.json names no agent (an older cleanrl_plus wrote it) — start a new run")
    if recorded != agent:
        raise UserError(
            f"{flag} {run_dir}: that run was written by agents/{recorded}.py, not agents/{agent}.py — "
            f"{'resume' if flag == '--resume' else 'fork'} it with python agents/{recorded}.py {flag} {run_dir}"
        )


def check_resume(args: RunArgs, run_dir: Path) -> None:
    """Refuse a --resume whose agent or fixed flags differ from the run's, before anything in it is written."""
    saved = read_saved_args(run_dir)
    check_agent(run_dir, saved, agent_of(type(args)))
    given = flatten_args(json.loads(json.dumps(dataclasses.asdict(args))))
    if given.get("continual.schedule_seed", 0) < 0:  # prepare_run records the seed it defaults to
        given["continual.schedule_seed"] = given["seed"]
    for name, saved_value in flatten_args({k: v for k, v in saved.items() if k != "agent"}).items():
        if name in RESUMABLE_FLAGS or name not in given or given[name] == saved_value:
            continue
        flag = "--" + name.replace("_", "-")
        may_change = ", ".join("--" + f.replace("_", "-") for f in RESUMABLE_FLAGS if f not in ("resume", "runs_dir"))
        raise UserError(
            f"--resume {run_dir}: {flag} {given[name]} differs from the run's {saved_value} — only {may_change} "
            "may change on resume; start a new run for other settings"
        )


def check_resume_seeds(args: RunArgs, run_dir: Path, run_seeds: tuple[int, ...]) -> None:
    """Refuse seeds that differ from the run's: a resume takes each member's seed (and the schedule seed it
    defaulted) from its own args.json, so `check_resume` never sees the given ones. `args` holds the flags as given,
    whose defaults are the args.json of `run_dir`, the directory passed to --resume."""
    saved = read_saved_args(run_dir)
    listed = " ".join(map(str, run_seeds))
    run_has = f"the run's seeds {listed}" if len(run_seeds) > 1 else f"the run's seed {listed}"
    if args.seeds and tuple(args.seeds) != run_seeds:
        raise UserError(
            f"--resume {run_dir}: --seeds {' '.join(map(str, args.seeds))} differs from {run_has} — a resume continues "
            "every seed of the run; drop --seeds, or start a new run for other seeds"
        )
    if not args.seeds and args.seed != saved.get("seed", args.seed):  # --seed is ignored beside --seeds
        raise UserError(
            f"--resume {run_dir}: --seed {args.seed} differs from the run's {saved['seed']} — a resume continues "
            f"{run_has}; drop --seed, or start a new run for another seed"
        )
    given = args.continual.schedule_seed
    schedule_seed = saved.get("continual", {}).get("schedule_seed", given)
    if (given if given >= 0 else saved.get("seed", given)) != schedule_seed:  # -1: the run's seed, which prepare_run records
        raise UserError(
            f"--resume {run_dir}: --continual.schedule-seed {given} differs from the run's {schedule_seed} — the "
            "schedule is part of what the checkpoint means; start a new run for another schedule"
        )


def load_saved_args(args_type: type[ArgsT], run_dir: Path) -> ArgsT:
    saved = read_saved_args(run_dir)
    check_agent(run_dir, saved, agent_of(args_type))
    saved.pop("agent", None)
    saved.pop("group", None)  # the member directories of a group run (cleanrl_plus.run.group_of), not a flag
    saved.pop("forked", None)  # where a --fork-from run started (cleanrl_plus.run.fork_members), not a flag
    fields = {field.name for field in dataclasses.fields(args_type)}
    unknown = sorted(set(saved) - fields)
    if unknown:
        raise UserError(
            f"--resume {run_dir}: saved flags {unknown} are not flags of this agent — resume it with the agent that wrote it"
        )
    return args_type(**_rebuild_nested(args_type, saved))


def _rebuild_nested(args_type: type, saved: dict) -> dict:
    """Undo what JSON did: nested dicts become the remedy dataclasses again, lists become tuples."""
    rebuilt = dict(saved)
    for name, field_type in typing.get_type_hints(args_type).items():
        value = rebuilt.get(name)
        if dataclasses.is_dataclass(field_type) and isinstance(value, dict):
            rebuilt[name] = field_type(**_rebuild_nested(field_type, value))
        elif typing.get_origin(field_type) is tuple and isinstance(value, list):
            rebuilt[name] = tuple(value)
    return rebuilt
