"""`cleanrl-plus sweep`: agent × env × remedy configuration × seed, run idempotently on this machine or a cluster.

    cleanrl-plus sweep --agent ppo --env-id CartPole-v1 --seeds 1 2 3 --config baseline= \\
        --config sp="--reset.method shrink-perturb"
    cleanrl-plus sweep plan.toml                                # the same from a file (see `example_plan` / README)

- The manifest: one run per (agent, env, configuration, seed), named `{env}__{exp_name}__{seed}` where exp_name is
  the agent for the configuration called `baseline` and `{agent}-{name}` otherwise (the report groups by it).
- Idempotent: a rerun skips finished runs, resumes interrupted ones from their checkpoint (`--resume`), and moves
  a directory that died before its first checkpoint aside (`<name>.abandoned-<time>`, nothing deleted). It adopts
  only runs made with the configuration's flags: a run of a member's name made otherwise refuses the sweep. A run that
  diverged is kept as it stopped and not rerun (it would diverge again from the same checkpoint and flags).
- Groups: the seeds of one configuration train together, `--members-per-process` at a time, as one process whose
  members are ordinary runs (`--seeds`, cleanrl_plus.members): each member keeps the directory, name and files of the
  one-seed run of its seed. A configuration whose remedies cannot train several seeds at once (`cleanrl-plus
  remedies`) runs one seed per process. A killed group resumes as the group it was.
- Executors: `local` (default; a pool of subprocesses, one torch thread each on CPU, `--workers` at a time, GPUs
  shared round-robin), `submitit` (Slurm job arrays, requeued on preemption or timeout; `--slurm.cluster local`
  runs the same path on this machine) and `ray` (an existing cluster, `--address`). The cluster executors are
  optional extras: `pip install -e ".[cluster]"`.
- Each run's stdout/stderr goes to `<runs-dir>/logs/<run name>.log`; a status line shows done / running / failed /
  pending and the last evaluation return.
- Several sweeps on one runs folder (two terminals, a Slurm job requeued while the first still runs): a sweep claims a
  run before it starts its process (`logs/claims/<run>.claim`, an OS lock that the run's process inherits, so it
  lasts until the run stops, and dies with it); a sweep that finds a run claimed waits for it, then counts it
  finished, or resumes or starts it if the claimer died first. Only a run's claimer writes its log.
- Paths mean what they mean in the shell the sweep was started from: a relative --runs-dir (or a plan's runs_dir) is
  that folder's, and every run starts in it, whichever executor runs it and wherever the package is installed.
- The local executor's runs stop (checkpointing) when the sweep dies, however it dies: a rerun resumes them.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import itertools
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import typing
from pathlib import Path
from typing import Any, Callable, Literal

import tyro

from cleanrl_plus.errors import printable
from cleanrl_plus.flags import parse_flags
from cleanrl_plus.names import check_agent_name, check_name_length
from cleanrl_plus.ranges import check_ranges
from cleanrl_plus.runlock import Claim, RunClaimed, claim_holder, claim_runs, run_dir_holder
from commands.agent_modules import agent_module
from envs.errors import UserError, did_you_mean
from envs.ranges import AtLeastOne, Count, Seed

BASELINE = "baseline"
REPO = Path(__file__).resolve().parents[1]
AUTO_MEMBERS = 10  # CPU: chosen by measurement (docs/benchmarks.md, "Many seeds in one process")
AUTO_MEMBERS_GPU = 32


@dataclasses.dataclass
class SlurmArgs:
    cluster: Literal["slurm", "local"] = "slurm"
    """submitit backend: 'slurm' submits job arrays; 'local' runs the same submitit path on this machine"""
    partition: str = ""
    """Slurm partition (empty: the cluster's default)"""
    timeout_min: AtLeastOne = 240
    """wall-clock limit per job in minutes; a job that reaches it checkpoints and is requeued"""
    cpus_per_task: AtLeastOne = 1
    """CPU cores per run"""
    gpus_per_node: Count = 0
    """GPUs per run"""
    array_parallelism: AtLeastOne = 64
    """how many runs of the array run at once"""


@dataclasses.dataclass
class SweepArgs:
    plan: tyro.conf.Positional[str] = ""
    """optional TOML plan file; its keys are these flags' names (flags given as well override it)"""
    agent: tuple[str, ...] = ("ppo",)
    """agents (td3, sac_simba, ddqn, ppo, gtr)"""
    env_id: tuple[str, ...] = ("CartPole-v1",)
    """environment ids, continual ids included"""
    seeds: tuple[Seed, ...] = (1, 2, 3)
    """seeds; every configuration runs every seed"""
    config: tuple[str, ...] = (f"{BASELINE}=",)
    """remedy configurations as NAME=FLAGS, e.g. sp="--reset.method shrink-perturb"; the one named 'baseline' keeps the
    agent's name"""
    flags: str = ""
    """flags given to every run (e.g. "--total-timesteps 50000 --num-envs 8")"""
    flags_per_env: tuple[str, ...] = ()
    """flags given to the runs of one environment as ENV=FLAGS, after --flags and before the configuration's, e.g.
    HalfCheetah-v5="--random-steps 10000" (a recipe whose authors set a value per environment)"""
    runs_dir: str = "runs/sweep"
    """folder of the sweep's run directories (and logs/); a relative one is relative to the folder the sweep starts in"""
    executor: Literal["local", "submitit", "ray"] = "local"
    """where runs execute: a local process pool, Slurm through submitit, or a Ray cluster"""
    workers: Count = 0
    """local executor: processes at a time (0 = one per CPU core)"""
    members_per_process: Count = 0
    """seeds of a configuration trained together in one process (1 = one seed per process; 0 = automatic: up to 10
    on a CPU, up to 32 on a GPU, 1 for Atari, whose replay memory grows with every member)"""
    address: str = ""
    """ray executor: the cluster address (empty: start a local Ray instance)"""
    slurm: SlurmArgs = dataclasses.field(default_factory=SlurmArgs)
    """submitit executor settings"""
    dry_run: bool = False
    """print the manifest (what would run, resume or be skipped) and exit"""


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of the manifest."""

    agent: str
    env_id: str
    config: str
    seed: int
    flags: tuple[str, ...]
    runs_dir: str  # absolute: a run's directory is the same for the sweep and for a job on another machine
    cwd: str = ""  # the folder the sweep started in, where each run starts too (relative paths in flags are its)

    @property
    def exp_name(self) -> str:
        return self.agent if self.config == BASELINE else f"{self.agent}-{self.config}"

    @property
    def name(self) -> str:
        return f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', self.env_id)}__{self.exp_name}__{self.seed}"

    @property
    def dir(self) -> Path:
        return Path(self.runs_dir) / self.name

    @property
    def log(self) -> Path:
        return Path(self.runs_dir) / "logs" / f"{self.name}.log"


@dataclasses.dataclass(frozen=True)
class Job:
    """One process of the sweep: the runs of one configuration that train together (one run, or a group of seeds).
    `resume` is the member whose directory a killed group is resumed from (its args.json names the whole group)."""

    runs: tuple[RunSpec, ...]
    resume: bool = False

    @property
    def first(self) -> RunSpec:
        return self.runs[0]

    @property
    def name(self) -> str:
        if len(self.runs) == 1:
            return self.first.name
        env = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.first.env_id)
        return f"{env}__{self.first.exp_name}__seeds-{'-'.join(str(run.seed) for run in self.runs)}"

    @property
    def log(self) -> Path:
        return Path(self.first.runs_dir) / "logs" / f"{self.name}.log"

    @property
    def claim_names(self) -> list[str]:
        """The runs a sweep claims before it starts the job: its own, and for a resume every member of the group the
        agent resumes (args.json names them)."""
        return [run.name for run in self.runs] + (saved_group(self.first) if self.resume else [])


def parse_configs(configs: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    parsed: dict[str, tuple[str, ...]] = {}
    for entry in configs:
        name, sep, flags = entry.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise UserError(
                f"--config '{printable(entry)}' must look like NAME=FLAGS with NAME of letters, digits, '-', '_' (e.g. "
                'sp="--reset.method shrink-perturb")'
            )
        if name in parsed:
            raise UserError(f"--config name '{name}' is given twice")
        parsed[name] = tuple(shlex.split(flags))
    return parsed


def parse_env_flags(entries: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """--flags-per-env ENV=FLAGS entries → {env id: its flags}; each env id is checked as --env-id is."""
    import envs

    parsed: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        env_id, sep, flags = entry.partition("=")
        if not sep or not env_id:
            raise UserError(
                f"--flags-per-env '{entry}' must look like ENV=FLAGS (e.g. HalfCheetah-v5=\"--random-steps 10000\")"
            )
        if env_id in parsed:
            raise UserError(f"--flags-per-env names {env_id} twice")
        envs.validate_env_id(env_id)
        parsed[env_id] = tuple(shlex.split(flags))
    return parsed


RESERVED_FLAGS = ("--seed", "--env-id", "--exp-name", "--runs-dir", "--run-name", "--resume")


def manifest(args: SweepArgs) -> list[RunSpec]:
    """Expand agent × env × configuration × seed into runs (deterministic order and names)."""
    for agent in args.agent:
        check_agent_name(agent)
    import envs

    for env_id in args.env_id:
        envs.validate_env_id(env_id)
    if not args.seeds:
        raise UserError("--seeds needs at least one seed")
    check_ranges(args)
    common = tuple(shlex.split(args.flags))
    flags_per_env = parse_env_flags(args.flags_per_env)
    for reserved in RESERVED_FLAGS:
        for where, given in (("--flags", common), *((f"--flags-per-env {e}", f) for e, f in flags_per_env.items())):
            if any(flag == reserved or flag.startswith(reserved + "=") for flag in given):
                raise UserError(f"{reserved} is set by the sweep for every run — remove it from {where}")
    configs = parse_configs(args.config)
    runs_dir, cwd = str(Path(args.runs_dir).expanduser().absolute()), os.getcwd()
    specs = [
        RunSpec(agent, env_id, config, seed, common + flags_per_env.get(env_id, ()) + config_flags, runs_dir, cwd)
        for agent, env_id, (config, config_flags), seed in itertools.product(
            args.agent, args.env_id, configs.items(), args.seeds
        )
    ]
    check_file_names(specs)
    for spec in {(spec.agent, spec.env_id, spec.flags): spec for spec in specs}.values():
        check_agent_flags(spec)
    return specs


ABANDONED = ".abandoned-" + "0" * 10  # the suffix of a run directory set aside (prepare): the longest name of a run's


def check_file_names(specs: list[RunSpec]) -> None:
    """One line, before anything starts (and for --dry-run), for a configuration whose runs' file names the file system
    would refuse: a run's directory, set aside as <name>.abandoned-<time>, is the longest (its log and claim are
    shorter)."""
    for spec in specs:
        named = f"--config '{_shortened(spec.config)}'" if spec.config != BASELINE else f"--env-id {spec.env_id}"
        check_name_length(
            spec.name + ABANDONED,
            named,
            f"the file names of its runs ({_shortened(spec.name)}.abandoned-<time> the longest)",
            "a shorter configuration name" if spec.config != BASELINE else "another --env-id",
        )


def check_log_names(jobs: list[Job]) -> None:
    """The same for the log of a group of seeds, named after all of them."""
    for job in jobs:
        check_name_length(
            job.log.name,
            "--members-per-process",
            f"the log file of the {len(job.runs)} seeds of '{_shortened(job.first.exp_name)}' trained together",
            "fewer --members-per-process, or a shorter configuration name",
        )


def _shortened(name: str, keep: int = 40) -> str:
    return name if len(name) <= keep else f"{name[: keep - 10]}…{name[-9:]}"


def check_agent_flags(spec: RunSpec) -> None:
    """Parse a run's flags with its agent's own parser and run the agent's start-up checks (`check(args)`: ranges,
    combinations, remedy applicability, the env id), so that a configuration every run would refuse fails the sweep
    (and --dry-run) at once, instead of every run it would have started. The checks that depend on the machine
    (--device, --compile, --cudagraphs) are left to the run, which may start elsewhere (--dry-run on a cluster's login
    node)."""
    from cleanrl_plus.config import parse_args

    agent = agent_module(spec.agent)
    try:
        args = parse_args(agent.Args, [*spec.flags, "--env-id", spec.env_id, "--seed", str(spec.seed)])
        agent.check(args)
    except UserError as error:
        raise UserError(f"configuration '{spec.config}' of {spec.agent}: {error}") from None


def trains_in_groups(spec: RunSpec) -> bool:
    """Whether the configuration's flags may train several seeds in one process (its agent's start-up checks with
    --seeds pass); the single-seed checks have passed already (check_agent_flags)."""
    import contextlib
    import io

    from cleanrl_plus.config import parse_args

    agent = agent_module(spec.agent)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args = parse_args(
                agent.Args, [*spec.flags, "--env-id", spec.env_id, "--seeds", str(spec.seed), str(spec.seed + 1)]
            )
            agent.check(args)
    except (UserError, SystemExit):
        return False
    return True


def members_per_process(args: SweepArgs, spec: RunSpec) -> int:
    """How many seeds of a configuration one process trains: --members-per-process, or the automatic choice."""
    if args.members_per_process:
        return args.members_per_process
    from envs import backend_for
    from envs.continual import base_env_id

    if backend_for(base_env_id(spec.env_id)) == "atari":
        return 1
    flags = " ".join(spec.flags)
    on_gpu = "--device cuda" in flags or ("--device cpu" not in flags and _cuda_available())
    return AUTO_MEMBERS_GPU if on_gpu else AUTO_MEMBERS


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def plan_jobs(specs: list[RunSpec], states: dict[str, str], args: SweepArgs) -> list[Job]:
    """The processes that run what is left: a killed group resumes as the group it was; fresh seeds of a configuration
    are packed into groups of members_per_process in seed order; a held run is its own job (reported, never run)."""
    jobs: list[Job] = []
    by_config: dict[tuple, list[RunSpec]] = {}
    for spec in specs:
        if states[spec.name] not in ("finished", "diverged"):
            by_config.setdefault((spec.agent, spec.env_id, spec.config), []).append(spec)
    for todo in by_config.values():
        placed: set[str] = set()
        for spec in todo:
            if states[spec.name] == "resume" and spec.name not in placed:
                group = set(saved_group(spec))
                members = tuple(run for run in todo if run.name in group and states[run.name] == "resume")
                jobs.append(Job(members, resume=True))
                placed |= {run.name for run in members}
        held = [spec for spec in todo if spec.name not in placed and states[spec.name] == "held"]
        jobs += [Job((spec,)) for spec in held]
        fresh = [spec for spec in todo if spec.name not in placed and states[spec.name] == "fresh"]
        size = members_per_process(args, fresh[0]) if fresh else 1
        if size > 1 and len(fresh) > 1 and not trains_in_groups(fresh[0]):
            size = 1
        jobs += [Job(tuple(fresh[i : i + size])) for i in range(0, len(fresh), size)]
    return jobs


def saved_group(spec: RunSpec) -> list[str]:
    """The run names a killed run trained with (its args.json's group), or its own name alone."""
    try:
        saved = json.loads((spec.dir / "args.json").read_text())
    except (OSError, json.JSONDecodeError):
        return [spec.name]
    group = saved.get("group") if isinstance(saved, dict) else None
    return list(group) if isinstance(group, list) and spec.name in group else [spec.name]


def load_plan(path: str, given: list[str]) -> SweepArgs:
    """A TOML plan provides the defaults; flags on the command line override them."""
    try:
        plan = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"plan file {path} not found") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"plan file {path} is not valid TOML ({error})") from None
    fields = {f.name for f in dataclasses.fields(SweepArgs)} - {"plan"}
    unknown = sorted(set(plan) - fields)
    if unknown:
        raise UserError(f"plan file {path}: unknown keys {unknown}{did_you_mean(unknown[0], fields)}")
    for table in ("config", "flags_per_env"):  # [config] / [flags_per_env] tables: name = "flags"
        if isinstance(plan.get(table), dict):
            plan[table] = [f"{name}={flags}" for name, flags in plan[table].items()]
    for key in ("agent", "env_id", "seeds", "config", "flags_per_env"):
        if key in plan and not isinstance(plan[key], list):
            plan[key] = [plan[key]]
        if key in plan:
            plan[key] = tuple(plan[key])
    if "slurm" in plan:
        if not isinstance(plan["slurm"], dict):
            raise UserError(f"plan file {path}: slurm must be a table ([slurm]), got {plan['slurm']!r}")
        unknown = sorted(set(plan["slurm"]) - {f.name for f in dataclasses.fields(SlurmArgs)})
        if unknown:
            raise UserError(f"plan file {path}: unknown keys {unknown} in [slurm]")
        _check_plan_types(path, plan["slurm"], SlurmArgs, "slurm.")
        plan["slurm"] = SlurmArgs(**plan["slurm"])
    _check_plan_types(path, plan, SweepArgs)
    return parse_flags(SweepArgs, given, prog="cleanrl-plus sweep", default=SweepArgs(**plan))


def _check_plan_types(path: str, plan: dict[str, Any], settings: type, prefix: str = "") -> None:
    """A plan value of the wrong type (seeds = "one") is refused here, not by every run it would have started."""
    hints = typing.get_type_hints(settings, include_extras=False)
    for key, value in plan.items():
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            continue
        origin = typing.get_origin(hint)
        if origin is tuple:
            item_type = typing.get_args(hint)[0]
            wrong = [item for item in value if not _is_of(item, item_type)]
            if wrong:
                raise UserError(
                    f"plan file {path}: {prefix}{key} must be a list of {item_type.__name__} values, got {wrong[0]!r}"
                )
        elif origin is typing.Literal:
            if value not in typing.get_args(hint):
                raise UserError(f"plan file {path}: {prefix}{key} must be one of {list(typing.get_args(hint))}, got {value!r}")
        elif not _is_of(value, hint):
            raise UserError(f"plan file {path}: {prefix}{key} must be {hint.__name__}, got {value!r}")


def _is_of(value: Any, expected: type) -> bool:
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


# ----------------------------------------------------------------------------------------------------------------
# One run: decide fresh / resume / skip, then execute the agent in a subprocess
# ----------------------------------------------------------------------------------------------------------------
def read_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def status_of(spec: RunSpec) -> Literal["finished", "diverged", "resume", "fresh", "held"]:
    if run_dir_holder(spec.dir) is not None:  # a live process (another sweep, a manual --resume) writes it
        return "held"
    summary = read_summary(spec.dir)
    if summary is not None and summary.get("finished"):
        return "finished"
    if summary is not None and summary.get("diverged"):
        return "diverged"
    return "resume" if (spec.dir / "checkpoint.pt").is_file() else "fresh"


def adoption_conflict(spec: RunSpec, expected: dict[str, Any]) -> str | None:
    """Why the directory of a run the sweep would count as finished, diverged or to resume is not this configuration's
    run (None when it is): its args.json must name the configuration's agent and seed, and hold the flags the sweep
    passes it (`expected`, as the agent parses them) in every setting a --resume may not change."""
    from cleanrl_plus.config import differing_settings

    try:
        saved = json.loads((spec.dir / "args.json").read_text())
    except (OSError, ValueError):
        return "has no readable args.json, so its flags are unknown"
    if not isinstance(saved, dict):
        return "has no readable args.json, so its flags are unknown"
    if saved.get("agent") != spec.agent:
        return f"was written by agents/{saved.get('agent')}.py, not agents/{spec.agent}.py"
    if saved.get("seed") != spec.seed:
        return f"trains seed {saved.get('seed')}, not {spec.seed}"
    differences = differing_settings(saved, expected)
    return f"was made with {', '.join(differences)}" if differences else None


def check_adopted_runs(specs: list[RunSpec], states: dict[str, str], runs_dir: str) -> None:
    """Refuse a sweep whose runs directory holds, under a run's name, a run that this configuration did not make (one
    started by hand with other flags, or by a sweep with another --flags / --config): counting it as finished, or
    resuming it, would put a stranger's numbers in the configuration's group."""
    from cleanrl_plus.config import parse_args

    expected: dict[tuple, dict[str, Any]] = {}
    conflicts = []
    for spec in specs:
        if states[spec.name] not in ("finished", "diverged", "resume"):
            continue
        key = (spec.agent, spec.env_id, spec.flags, spec.exp_name)
        if key not in expected:
            argv = [*spec.flags, "--env-id", spec.env_id, "--exp-name", spec.exp_name]
            expected[key] = dataclasses.asdict(parse_args(agent_module(spec.agent).Args, argv))
        conflict = adoption_conflict(spec, expected[key])
        if conflict:
            conflicts.append((spec, conflict))
    if conflicts:
        spec, conflict = conflicts[0]
        more = (
            f" (and {len(conflicts) - 1} more runs: {', '.join(s.name for s, _ in conflicts[1:])})"
            if len(conflicts) > 1
            else ""
        )
        raise UserError(
            f"{Path(runs_dir) / spec.name} is not a run of configuration '{spec.config}' of {spec.agent}: it {conflict}{more} "
            f"— move it out of {runs_dir} (the sweep adopts only runs made with its flags), or sweep into another --runs-dir"
        )


def command_for(job: Job | RunSpec, threads: bool = True) -> list[str]:
    """The agent command line of a job: resume from its checkpoint if it has one (a group from any member's: the
    agent resumes every member), else start it fresh, one seed (--seed) or a group (--seeds; each member's directory
    is the run name plus __seed, the name its one-seed run would have). The agent runs as a script, from this package
    (never a folder called agents/ where the sweep started)."""
    job = job if isinstance(job, Job) else Job((job,), resume=status_of(job) == "resume")
    spec = job.first
    command = [sys.executable, str(REPO / "agents" / f"{spec.agent}.py"), *spec.flags]
    if threads and not any(flag.startswith("--threads") for flag in spec.flags):
        command += ["--threads", "1"]  # packed processes: one core each
    command += ["--no-progress", "--env-id", spec.env_id, "--exp-name", spec.exp_name, "--runs-dir", spec.runs_dir]
    if job.resume or status_of(spec) == "resume":
        return command + ["--resume", str(spec.dir)]
    if len(job.runs) == 1:
        return command + ["--seed", str(spec.seed), "--run-name", spec.name]
    return command + ["--seeds", *(str(run.seed) for run in job.runs), "--run-name", spec.name.rsplit("__", 1)[0]]


def prepare(spec: RunSpec) -> None:
    """Before a fresh start: a directory that died before its first checkpoint has nothing to resume; keep it aside
    (never one that a live process holds: that one is starting, not dead)."""
    if status_of(spec) == "fresh" and spec.dir.exists():
        spec.dir.rename(spec.dir.with_name(f"{spec.dir.name}.abandoned-{int(time.time())}"))
    spec.log.parent.mkdir(parents=True, exist_ok=True)


def claims_folder(runs_dir: str) -> Path:
    """Where a sweep's claims on its runs live (cleanrl_plus.runlock.claim_runs)."""
    return Path(runs_dir) / "logs" / "claims"


@dataclasses.dataclass
class Settled:
    """What a job comes to once its runs are claimed and looked at again."""

    claim: Claim | None = None  # start the job now, holding this claim
    holder: str = ""  # another live sweep holds one of its runs ('<run> is claimed by ...'): wait for it
    outcomes: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # runs that need nothing more
    replanned: list[Job] = dataclasses.field(default_factory=list)  # the rest, planned again, each claimed in turn


def settle(job: Job, args: SweepArgs) -> Settled:
    """Claim a job's runs, then look at them again under the claim: since the plan another sweep may have finished a
    run, or started one and been killed (a run to resume now, not to start). A run that a process no sweep started
    (a --resume by hand) writes is left alone and reported, without claiming anything."""
    folder = claims_folder(job.first.runs_dir)
    if any(status_of(spec) == "held" and claim_holder(folder, spec.name) is None for spec in job.runs):
        return Settled(outcomes=[held_outcome(spec) for spec in job.runs])
    try:
        claim = claim_runs(folder, job.claim_names)
    except RunClaimed as claimed:
        return Settled(holder=str(claimed))
    states = {spec.name: status_of(spec) for spec in job.runs}
    if "held" not in states.values() and plan_jobs(list(job.runs), states, args) == [job]:
        return Settled(claim=claim)
    claim.release()
    settled = Settled()
    for spec in job.runs:
        if states[spec.name] in ("finished", "diverged"):
            settled.outcomes.append(outcome(spec, 0) | {"by": "another sweep"})
        elif states[spec.name] == "held":
            settled.outcomes.append(held_outcome(spec))
    rest = [spec for spec in job.runs if states[spec.name] not in ("finished", "diverged", "held")]
    settled.replanned = plan_jobs(rest, states, args)
    return settled


def check_runs_dir(runs_dir: str) -> None:
    """One line for a --runs-dir that the runs could not be written to, before any run starts (also for --dry-run):
    its nearest existing folder must be a directory this process can create a folder in (tried, and removed again)."""
    folder = Path(runs_dir).expanduser().absolute()
    try:
        existing = next(path for path in (folder, *folder.parents) if path.exists())
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        tempfile.TemporaryDirectory(dir=existing).cleanup()
    except OSError as error:
        raise UserError(
            f"--runs-dir {runs_dir}: cannot create runs in {folder} ({error.strerror or error}) — pass a writable folder"
        ) from None


def agent_process(spec: RunSpec, log: Any, claim: Claim, env: dict[str, str] | None = None) -> dict[str, Any]:
    """subprocess.Popen/run keywords for a run's agent: it starts in the sweep's folder, imports this package (whatever
    the folder holds), writes to its log, keeps its runs' claim for as long as it lives (a sweep killed before it
    leaves its runs claimed until they checkpoint and stop), and is stopped (SIGTERM: it checkpoints) when the process
    that started it dies, however it dies."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cwd = spec.cwd if spec.cwd and Path(spec.cwd).is_dir() else None  # a cluster node without that folder: its own
    return dict(
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        pass_fds=claim.fds,
        preexec_fn=_stop_with_parent(os.getpid()),
    )


def open_log(job: Job, command: list[str]) -> Any:
    """The job's log, appended to (a rerun's lines follow the killed run's); only the sweep holding the job's claim
    writes it, and each process it starts is headed by a line naming that sweep."""
    log = open(job.log, "a")
    log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} sweep process {os.getpid()} on {socket.gethostname()}: ")
    log.write(shlex.join(command) + "\n")
    log.flush()
    return log


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _stop_with_parent(parent: int) -> Callable[[], None] | None:
    """Linux: the child asks the kernel for SIGTERM when its parent dies (kill -9 included), and stops itself if the
    parent died before it asked. Elsewhere: None (a sweep killed with SIGKILL leaves its runs to finish on their own)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def ask() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return ask


def execute_job(job: Job, args: SweepArgs | None = None) -> list[dict[str, Any]]:
    """Run (or finish) one job to completion, blocking, once its runs are claimed (waiting while another sweep holds
    one: a job requeued while the first still runs finds its runs finished); used by the cluster executors. Returns
    its runs' outcomes."""
    args = args or SweepArgs()
    todo, results, waiting_for = [job], [], ""
    while todo:
        settled = settle(todo[0], args)
        if settled.holder:
            if settled.holder != waiting_for:
                print(f"sweep: {settled.holder} — waiting for it", file=sys.stderr, flush=True)
                waiting_for = settled.holder
            time.sleep(1)
            continue
        current = todo.pop(0)
        results += settled.outcomes
        todo[:0] = settled.replanned
        if settled.claim is None:
            continue
        try:
            for spec in current.runs:
                prepare(spec)
            command = command_for(current)
            with open_log(current, command) as log:
                code = subprocess.run(command, **agent_process(current.first, log, settled.claim)).returncode
        finally:
            settled.claim.release()
        results += [outcome(spec, code, current) for spec in current.runs]
    return results


def execute(spec: RunSpec) -> dict[str, Any]:
    """One run on its own (a job of one)."""
    return execute_job(Job((spec,), resume=status_of(spec) == "resume"))[0]


def outcome(spec: RunSpec, returncode: int, job: Job | None = None) -> dict[str, Any]:
    summary = read_summary(spec.dir) or {}
    state = "finished" if summary.get("finished") else ("failed" if returncode else "stopped")
    if not summary.get("finished") and summary.get("diverged"):
        state = "diverged at step {step} ({quantity} not finite)".format(**summary["diverged"])
    log = str((job or Job((spec,))).log)
    return {
        "run": spec.name,
        "state": state,
        "returncode": returncode,
        "eval": summary.get("eval", {}).get("mean"),
        "log": log,
    }


def held_outcome(spec: RunSpec) -> dict[str, Any]:
    return {
        "run": spec.name,
        "state": f"held by process {run_dir_holder(spec.dir)}",
        "returncode": None,
        "eval": None,
        "log": str(spec.log),
    }


# ----------------------------------------------------------------------------------------------------------------
# Progress display
# ----------------------------------------------------------------------------------------------------------------
class Board:
    """done / running / failed / stopped / pending counts and the latest evaluation return, on one refreshing line.
    A run stopped by a signal checkpointed and resumes on the next sweep: it is counted apart from failed ones. A result
    from a process that was running leaves "running" as it is counted, so a member never shows as pending meanwhile."""

    def __init__(self, total: int, finished: int, failed: int = 0) -> None:
        self.total, self.done, self.failed, self.running, self.waiting = total, finished, failed, 0, 0
        self.stopped = 0
        self.last = ""
        self.tty = sys.stderr.isatty()
        self._shown = ""

    def finished(self, result: dict[str, Any], was_running: bool = False) -> None:
        self.running -= was_running
        if result["state"] == "finished":
            self.done += 1
            value = result["eval"]
            self.last = f"{result['run']}: eval {value:.1f}" if value is not None else result["run"]
            self.last += f" (by {result['by']})" if "by" in result else ""
        elif result["state"] == "stopped":
            self.stopped += 1
            self.last = f"{result['run']}: stopped (checkpointed)"
        else:
            self.failed += 1
            code = result["returncode"]
            self.last = f"{result['run']}: {result['state']}" + (f" (exit {code})" if code is not None else "")
        self.show(force=True)

    def show(self, force: bool = False) -> None:
        pending = self.total - self.done - self.failed - self.stopped - self.running - self.waiting
        line = f"sweep: {self.done}/{self.total} done, {self.running} running, {self.failed} failed"
        line += f", {self.stopped} stopped" if self.stopped else ""
        line += f", {pending} pending"
        line += f", {self.waiting} waiting for other sweeps" if self.waiting else ""
        line += f" | last: {self.last}" if self.last else ""
        if line == self._shown and not force:
            return
        self._shown = line
        print(("\r" + line.ljust(110)) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        """A line of its own (on a terminal, in place of the status line, which is drawn again below it)."""
        print(("\r" + text.ljust(110)) if self.tty else text, file=sys.stderr, flush=True)
        self._shown = ""

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


# ----------------------------------------------------------------------------------------------------------------
# Executors
# ----------------------------------------------------------------------------------------------------------------
def run_local(jobs: list[Job], workers: int, board: Board, args: SweepArgs) -> list[dict[str, Any]]:
    """A pool of agent subprocesses, each started once its runs are claimed; a job whose runs another live sweep
    claimed waits until that sweep lets go of them (then its runs are finished, or left to resume).
    SIGINT/SIGTERM reach every run (each checkpoints and exits); rerun to resume."""
    import torch

    gpus = torch.cuda.device_count()
    pending, running, results = list(jobs), {}, []
    waiting: dict[str, str] = {}  # job name → who holds one of its runs, said once
    stop = {"requested": False}

    def request_stop(signum: int, frame: Any) -> None:
        stop["requested"] = True
        for process, *_ in running.values():
            process.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        slot_ids = itertools.count()
        while pending or running:
            index = 0
            while index < len(pending) and len(running) < workers and not stop["requested"]:
                job = pending[index]
                settled = settle(job, args)
                if settled.holder:
                    if waiting.get(job.name) != settled.holder:
                        board.note(f"sweep: {settled.holder} — waiting for it")
                        waiting[job.name] = settled.holder
                    index += 1
                    continue
                pending.pop(index)
                if waiting.pop(job.name, None) is not None:
                    board.waiting -= len(job.runs)
                for result in settled.outcomes:
                    results.append(result)
                    board.finished(result)
                pending[index:index] = settled.replanned
                if settled.claim is None:
                    continue
                for spec in job.runs:
                    prepare(spec)
                env = dict(os.environ)
                slot = next(slot_ids)
                if gpus:  # several processes per GPU, GPUs round-robin
                    env["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)
                command = command_for(job)
                log = open_log(job, command)
                process = subprocess.Popen(
                    command, **agent_process(job.first, log, settled.claim, env), start_new_session=True
                )  # Ctrl-C reaches runs through us, once
                running[job.name] = (process, job, log, settled.claim)
                board.running += len(job.runs)
            board.waiting = sum(len(job.runs) for job in pending if job.name in waiting)
            board.show()
            time.sleep(0.2)
            for name, (process, job, log, claim) in list(running.items()):
                if process.poll() is not None:
                    log.close()
                    claim.release()
                    del running[name]
                    for spec in job.runs:
                        results.append(outcome(spec, process.returncode, job))
                        board.finished(results[-1], was_running=True)
            if stop["requested"] and not running:
                break
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stop["requested"]:
        board.close()
        raise UserError("sweep interrupted: running runs checkpointed — rerun the same command to resume them")
    return results


class SubmititRun:
    """A submitit job that requeues itself on preemption or timeout; the rerun resumes from the checkpoint."""

    def __init__(self, args: SweepArgs) -> None:
        self.args = args

    def __call__(self, job: Job) -> list[dict[str, Any]]:
        return execute_job(job, self.args)

    def checkpoint(self, job: Job) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(SubmititRun(self.args), job)


def run_submitit(jobs: list[Job], args: SweepArgs, board: Board) -> list[dict[str, Any]]:
    try:
        import submitit
    except ImportError:
        raise UserError('--executor submitit needs submitit — pip install -e ".[cluster]"') from None
    folder = Path(args.runs_dir) / "logs" / "submitit"
    executor = submitit.AutoExecutor(folder=folder, cluster=None if args.slurm.cluster == "slurm" else "local")
    parameters: dict[str, Any] = dict(timeout_min=args.slurm.timeout_min, cpus_per_task=args.slurm.cpus_per_task)
    if args.slurm.cluster == "slurm":
        parameters |= dict(slurm_array_parallelism=args.slurm.array_parallelism, gpus_per_node=args.slurm.gpus_per_node)
        if args.slurm.partition:
            parameters["slurm_partition"] = args.slurm.partition
    executor.update_parameters(**parameters)
    submitted = executor.map_array(SubmititRun(args), jobs)
    print(f"submitted {len(submitted)} jobs (first {submitted[0].job_id}); logs in {folder}", file=sys.stderr)
    return _wait_all(list(zip(submitted, jobs)), lambda h: h[0].done(), lambda h: h[0].result(), board)


def run_ray(jobs: list[Job], args: SweepArgs, board: Board) -> list[dict[str, Any]]:
    try:
        import ray
    except ImportError:
        raise UserError('--executor ray needs ray — pip install -e ".[cluster]"') from None
    ray.init(
        address=args.address or None,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},
    )
    try:
        remote = ray.remote(num_cpus=args.slurm.cpus_per_task, num_gpus=args.slurm.gpus_per_node, max_retries=3)(execute_job)
        handles = [(remote.remote(job, args), job) for job in jobs]
        return _wait_all(handles, lambda h: bool(ray.wait([h[0]], timeout=0)[0]), lambda h: ray.get(h[0]), board)
    finally:
        ray.shutdown()


def _wait_all(
    handles: list[tuple[Any, Job]], is_done: Callable[[Any], bool], result: Callable[[Any], list[dict]], board: Board
) -> list[dict[str, Any]]:
    results, waiting = [], list(handles)
    board.running = sum(len(job.runs) for _, job in waiting)
    while waiting:
        for handle in [h for h in waiting if is_done(h)]:
            waiting.remove(handle)
            job = handle[1]
            try:
                outcomes = result(handle)
            except Exception as error:  # a job that crashed outside the agent (node failure, ...)
                outcomes = [
                    {
                        "run": spec.name,
                        "state": "failed",
                        "returncode": -1,
                        "eval": None,
                        "log": str(job.log),
                        "error": str(error),
                    }
                    for spec in job.runs
                ]
            for one in outcomes:
                results.append(one)
                board.finished(one, was_running=True)
        board.show()
        time.sleep(0.5)
    return results


# ----------------------------------------------------------------------------------------------------------------
def run_sweep(args: SweepArgs) -> list[dict[str, Any]]:
    """Expand, skip what is finished, execute the rest; returns every run's outcome (finished ones included)."""
    specs = manifest(args)
    check_runs_dir(args.runs_dir)
    states = {spec.name: status_of(spec) for spec in specs}
    check_adopted_runs(specs, states, args.runs_dir)
    jobs = plan_jobs(specs, states, args)
    check_log_names(jobs)
    if args.dry_run:
        for spec in specs:
            if states[spec.name] in ("finished", "diverged"):
                print(f"{states[spec.name]:>8}  {spec.name}")
        for job in jobs:
            print(f"{states[job.first.name]:>8}  {shlex.join(command_for(job))}")
        return []
    done = ("finished", "diverged")
    todo = [spec for spec in specs if states[spec.name] not in done]
    skipped = len(specs) - len(todo)
    claimed = {spec.name for spec in todo if claim_holder(claims_folder(spec.runs_dir), spec.name)}
    mine = [spec for spec in todo if spec.name not in claimed]
    held = sum(states[s.name] == "held" for s in mine)
    diverged = sum(state == "diverged" for state in states.values())
    print(
        f"sweep: {len(specs)} runs in {args.runs_dir} ({skipped - diverged} finished already, "
        f"{sum(states[s.name] == 'resume' for s in mine)} to resume, {sum(states[s.name] == 'fresh' for s in mine)} to start"
        + (f", {diverged} diverged and not rerun" if diverged else "")
        + (f", {len(claimed)} running in other sweeps and waited for" if claimed else "")
        + (f", {held} held by other live processes and left alone" if held else "")
        + f"; {len(jobs)} processes)",
        file=sys.stderr,
    )
    board = Board(len(specs), skipped - diverged, failed=diverged)
    if args.executor == "local":
        results = run_local(jobs, args.workers or os.cpu_count() or 1, board, args)
    elif args.executor == "submitit":
        results = run_submitit(jobs, args, board) if jobs else []
    else:
        results = run_ray(jobs, args, board) if jobs else []
    board.close()
    results += [outcome(spec, 0) for spec in specs if states[spec.name] in done]
    failed = [r for r in results if r["state"] != "finished"]
    for result in failed:
        print(f"  {result['run']}: {result['state']} — see {result.get('log', '')}", file=sys.stderr)
    return results


def glue_flag_values(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """`--flags "--num-envs 8"` → `--flags=--num-envs 8`: values that are themselves flags would read as flags."""
    glued, i = [], 0
    while i < len(argv):
        if argv[i] in names and i + 1 < len(argv):
            glued.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            glued.append(argv[i])
            i += 1
    return glued


def gather_repeated(argv: list[str], name: str) -> list[str]:
    """`--config a= --config b=X` → `--config a= b=X` (tyro reads a repeated flag's last occurrence only)."""
    values, rest, i = [], [], 0
    while i < len(argv):
        if argv[i] == name:
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
        elif argv[i].startswith(name + "="):
            values.append(argv[i][len(name) + 1 :])
            i += 1
        else:
            rest.append(argv[i])
            i += 1
    return rest + ([name, *values] if values else [])


def parse(argv: list[str]) -> SweepArgs:
    argv = gather_repeated(gather_repeated(glue_flag_values(argv, ("--flags",)), "--config"), "--flags-per-env")
    plan = next((a for a in argv if a.endswith(".toml") and not a.startswith("-")), None)
    if plan is not None:
        return load_plan(plan, [a for a in argv if a != plan])
    return parse_flags(SweepArgs, argv, prog="cleanrl-plus sweep")


def main(argv: list[str]) -> list[dict[str, Any]]:
    results = run_sweep(parse(argv))
    if any(r["state"] != "finished" for r in results):
        raise UserError(
            "some runs did not finish (listed above) — fix the cause and rerun the same command; finished runs "
            "are skipped, and so are diverged ones (move a diverged run's directory aside to start it afresh)"
        )
    return results
