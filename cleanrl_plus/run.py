"""Run setup shared by every agent: seeding, device, threads, run directory, logger, resume and stop signals."""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np
import torch

import envs
from cleanrl_plus import recipes
from cleanrl_plus.checkpoint import (
    CHECKPOINT_NAME,
    finish_group_checkpoint,
    first_non_finite,
    load_checkpoint,
    pending_path,
    save_checkpoint,
    write_atomically,
)
from cleanrl_plus.config import (
    RunArgs,
    agent_of,
    check_agent,
    check_resume,
    check_resume_seeds,
    describe_run,
    differing_settings,
    parse_args,
    read_saved_args,
    validate_args,
)
from cleanrl_plus.errors import RunFailure, exit_with, file_system_error
from cleanrl_plus.logger import GroupLogger, Logger
from cleanrl_plus.names import check_name_length
from cleanrl_plus.runlock import LOCK_NAME, lock_run_dir, run_dir_holder
from cleanrl_plus.speed import check_flags
from cleanrl_plus.tracking import require_wandb, start_wandb
from envs.errors import UserError

ArgsT = TypeVar("ArgsT", bound=RunArgs)


def seed_everything(seed: int, torch_deterministic: bool = True) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic
    torch.backends.cudnn.benchmark = not torch_deterministic


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda but no CUDA device is visible — use --device auto or --device cpu")
    return torch.device(name)


def resolve_threads(threads: int) -> int:
    """0 means min(2, cores): on a 2-core CPU, 2 threads ran the TD3 update faster than 1 (see README)."""
    if threads < 0:
        raise UserError(f"--threads must be >= 0 (0 = automatic), got {threads}")
    return threads or min(2, os.cpu_count() or 1)


def tune_allocator() -> None:
    """Keep freed memory in the heap instead of returning it to the OS.

    glibc hands large blocks (the 256x256 activations of every update) back to the kernel, and each new
    update then pays ~100 page faults; pinning the mmap/trim thresholds removed them and sped the TD3 update
    up by ~15% on a 2-core CPU.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 1 << 30)
    libc.mallopt(m_trim_threshold, 1 << 30)


def run_name_for(args: RunArgs, in_group: bool = False) -> str:
    """runs/{env_id}__{exp_name}__{seed}__{unix_time}; --run-name instead, with __{seed} appended for a member of a group."""
    if args.run_name:
        return f"{args.run_name}__{args.seed}" if in_group else args.run_name
    env_name = re.sub(r"[^A-Za-z0-9_.-]+", "-", args.env_id)
    return f"{env_name}__{args.exp_name}__{args.seed}__{int(time.time())}"


def check_run_names(args: RunArgs) -> None:
    """One line, before anything is created, for a run directory name the file system would refuse (a group member's
    name adds __<seed>), instead of an OSError."""
    if args.resume:
        return
    grouped = len(group_seeds(args)) > 1
    longest = max(
        (run_name_for(member_args, grouped) for member_args in member_flags(args)), key=lambda name: len(os.fsencode(name))
    )
    check_name_length(
        longest,
        "--run-name" if args.run_name else "--exp-name",
        "the run directory's name" + (" with a member's __<seed>" if grouped and args.run_name else ""),
        "a shorter --run-name" if args.run_name else "a shorter --exp-name, or name the run with --run-name",
    )


def finite_or_null(value: Any) -> Any:
    """NaN and ±inf become None (JSON null), recursively: summary.json stays strict JSON whatever the run did."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(item) for item in value]
    return value


def write_json(path: Path, value: Any) -> None:
    text = json.dumps(finite_or_null(value), indent=2, default=float, allow_nan=False)
    write_atomically(path, lambda file: file.write(text.encode()))


@dataclasses.dataclass
class MemberRun:
    """One member of a group: an ordinary run with its own directory, flags (its own seed), logger, lock, checkpoint and
    summary."""

    args: Any
    dir: Path
    logger: Logger
    resumed: dict[str, Any] | None  # its checkpoint, when the group resumes
    wandb_run: Any = None  # the W&B run of a --track run
    lock_fd: int | None = None  # the run directory's lock, held until close()
    args_to_record: dict[str, Any] | None = None  # a resume's flags: args.json is rewritten with the first checkpoint
    checkpoint_step: int | None = None  # the step of the last checkpoint written or resumed from
    forked_from: Path | None = None  # the source member's directory of a --fork-from run, until its directory exists
    recorded_args: dict[str, Any] | None = None  # the flags args.json records
    opened: bool = False  # whether the run has started writing (open)
    diverged: bool = False  # stopped by a NaN/inf: its summary says where, its checkpoint is the last good one
    divergence: tuple[int, str, Any] | None = None  # (step, quantity, value) once diverged

    def open(self) -> None:
        """Start writing: create and lock a fresh run's directory and record its flags (a resumed run's directory is
        locked already), start W&B. Called once the envs and networks are built and their own checks passed
        (TrainingSession.open_or_resume, or the first TensorBoard event), so that a run refused at start-up leaves nothing."""
        if self.opened:
            return
        self.opened = True
        if not self.resumed or self.forked_from:
            _make_run_dir(self.dir, self.args.runs_dir)
            _fresh_run_dirs.append(self.dir)
            self.lock_fd = lock_run_dir(self.dir)
            _remove_leftovers(self.dir)
            write_json(self.dir / "args.json", self.recorded_args)
        if self.forked_from:  # the source's curves up to the fork: TensorBoard drops its points after it (purge_step)
            for name in sorted(path.name for path in self.forked_from.glob(EVENTS_GLOB)) + ["schedule.json"]:
                if (self.forked_from / name).is_file():
                    try:
                        shutil.copy2(self.forked_from / name, self.dir / name)
                    except OSError as error:
                        raise file_system_error(self.dir, error) from None
        if self.args.track:  # before the TensorBoard writer exists: W&B hooks it when it is made
            self.wandb_run = start_wandb(self.args, self.dir, self.resumed is not None)

    def prepare_save(self, state: dict[str, Any], summary: dict[str, Any]) -> bool:
        """The first half of a checkpoint: every event logged so far handed to the OS, then the checkpoint written in
        full beside the current one (checkpoint.pt.pending), so that a kill right after keeps the curves it continues.
        A state holding NaN/inf is never written: the member is marked diverged instead (returns False)."""
        step = state["global_step"]
        bad = first_non_finite(state)
        if bad is not None:
            self.mark_diverged(step, bad, summary)
            return False
        try:
            self.logger.flush()
        except OSError as error:
            raise file_system_error(self.dir, error) from None
        if self.args_to_record is not None:
            write_json(self.dir / "args.json", self.args_to_record)
            self.args_to_record = None
        save_checkpoint(pending_path(self.dir / CHECKPOINT_NAME), state, named=self.dir / CHECKPOINT_NAME)
        return True

    def commit_save(self, step: int, summary: dict[str, Any]) -> None:
        """The second half, once every member of the group has its pending checkpoint: it becomes the checkpoint."""
        try:
            os.replace(pending_path(self.dir / CHECKPOINT_NAME), self.dir / CHECKPOINT_NAME)
        except OSError as error:
            raise file_system_error(self.dir, error) from None
        self.checkpoint_step = step
        if self.dir in _fresh_run_dirs:  # it holds a checkpoint now: never removed as a run that did not start
            _fresh_run_dirs.remove(self.dir)
        self.write_summary(summary)

    def save(self, state: dict[str, Any], summary: dict[str, Any]) -> bool:
        """Both halves at once, for a member saved on its own; False (nothing written) for a non-finite state."""
        if not self.prepare_save(state, summary):
            return False
        self.commit_save(state["global_step"], summary)
        return True

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json(self.dir / "summary.json", summary)

    def mark_diverged(self, step: int, quantity: str, summary: dict[str, Any], value: Any = "not finite") -> None:
        """Record the divergence in summary.json (the checkpoint stays the last good one); the member logs no more."""
        self.diverged = True
        self.divergence = (step, quantity, value)
        self.write_summary(summary | {"diverged": {"step": step, "quantity": quantity}})
        self.logger.flush()

    def close(self) -> None:
        self.logger.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # releases the lock
            self.lock_fd = None


@dataclasses.dataclass
class Run:
    """Everything an agent loop needs from its surroundings: the group's flags and device, its members' runs (one for a
    one-seed run), the logger that writes each member's values to its own run, and the stop request."""

    args: Any
    device: torch.device
    members: list[MemberRun]
    stop_requested: bool = False  # set by SIGTERM/SIGINT: the loop checkpoints and exits at the next step
    logger: GroupLogger | None = None  # each member's values to its own run
    opened: bool = False
    recipe: recipes.Recipe | None = None  # the defaults the env id picked (cleanrl_plus/recipes/), named at the start

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(member.args.seed for member in self.members)

    @property
    def resumed(self) -> list[dict[str, Any]] | None:
        """The members' checkpoints when the group resumes, else None."""
        return [member.resumed for member in self.members] if self.members[0].resumed else None

    @property
    def start_step(self) -> int:
        return self.members[0].resumed["global_step"] if self.resumed else 0

    @property
    def resumed_from(self) -> str:
        """Where the checkpoints a resumed group loads come from, as the flag that named them (for errors)."""
        forked_from = self.members[0].forked_from
        if forked_from:
            return f"--fork-from {forked_from}"
        return f"--resume {self.members[0].dir if len(self.members) == 1 else self.members[0].dir.parent}"

    def open(self, announce: bool = True) -> None:
        """Start every member's run (once: each member's first TensorBoard event asks too) and say where it logs."""
        if self.opened:
            return
        self.opened = True
        forked_from = self.members[0].forked_from
        lost = [
            member.dir
            for member in self.members
            if member.resumed and not forked_from and not list(member.dir.glob(EVENTS_GLOB))
        ]
        for member in self.members:
            member.open()
        if lost:  # TensorBoard would show a curve that starts at the resume, as if the run had started there
            where = ", ".join(map(str, lost))
            print(
                f"note: {where} held no TensorBoard events file (deleted?): the curve up to step {self.start_step} is "
                "gone; the resumed run logs from there on",
                file=sys.stderr,
                flush=True,
            )
        if not announce:
            return
        action = f"resuming from step {self.start_step} in" if self.resumed else "logging to"
        if forked_from:
            group = f" and its group of {len(self.members)}" if len(self.members) > 1 else ""
            action = f"forking {forked_from}{group} at step {self.start_step} into"
        where = self.members[0].dir if len(self.members) == 1 else f"{len(self.members)} runs in {self.members[0].dir.parent}"
        print(f"{action} {where} (device {self.device}, {torch.get_num_threads()} threads)", flush=True)
        if self.recipe:
            print(f"recipe: {self.recipe.name} ({self.recipe.shown})", flush=True)

    def close(self) -> None:
        for member in self.members:
            member.close()
        _restore_signal_handlers(self)
        if self in _open_runs:
            _open_runs.remove(self)

    def stop_if_all_diverged(self, step: int) -> None:
        """A group goes on while any member still trains; once every member diverged, the run stops with one line."""
        if all(member.diverged for member in self.members):
            if len(self.members) == 1:  # a one-seed run says where and what
                member = self.members[0]
                diverged_at, quantity, value = member.divergence
                kept = member.checkpoint_step
                where = f"the last good checkpoint (step {kept}) is kept" if kept is not None else "no checkpoint was written"
                self.close()
                raise RunFailure(
                    f"training diverged at step {diverged_at}: {quantity} is {value} — {where}; lower --learning-rate "
                    "or change the flags and start a new run"
                )
            kept = [member.checkpoint_step for member in self.members]
            where = "the last good checkpoints are kept" if any(k is not None for k in kept) else "no checkpoint was written"
            self.close()
            raise RunFailure(
                f"training diverged by step {step} (summary.json of each run says where) — {where}; lower --learning-rate "
                "or change the flags and start a new run"
            )


EVENTS_GLOB = "events.out.tfevents.*"
_fresh_run_dirs: list[Path] = []  # created by this process: removed again if a user error stops it before any checkpoint
_open_runs: list[Run] = []  # started by this process and not closed yet: closed before the process exits on an error


def _refuse_existing(run_dir: Path) -> None:
    if run_dir.exists() and (leftovers_of_a_killed_start(run_dir) is None or run_dir_holder(run_dir) is not None):
        raise UserError(
            f"run directory {run_dir} already holds {describe_run(run_dir)} — pick another --run-name or --runs-dir "
            f"(--resume {run_dir} continues that run with its own flags; it never starts yours)"
        )


# What a run writes into its directory before its first checkpoint (checkpoint.pt.pending, once complete, is one)
_BEFORE_FIRST_CHECKPOINT = (
    "args.json",
    "args.json.tmp",
    LOCK_NAME,
    "schedule.json",
    pending_path(CHECKPOINT_NAME).name + ".tmp",
)


def leftovers_of_a_killed_start(run_dir: Path) -> list[Path] | None:
    """The files a run killed before its first checkpoint left in `run_dir`, which starting the run again replaces;
    None if the directory holds anything else (a checkpoint, a summary, a folder, a file cleanrl_plus does not
    write) or none of the files that show cleanrl_plus made it."""
    try:
        entries = list(run_dir.iterdir())
    except OSError:
        return None
    written_here = any(entry.name in ("args.json", "args.json.tmp", LOCK_NAME) for entry in entries)
    ours = all(
        entry.is_file() and (entry.name in _BEFORE_FIRST_CHECKPOINT or entry.name.startswith("events.out.tfevents."))
        for entry in entries
    )
    return entries if written_here and ours else None


def _make_run_dir(run_dir: Path, runs_dir: str) -> None:
    _refuse_existing(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=run_dir.is_dir())  # a run killed before its first checkpoint is reused
    except OSError as error:
        _refuse_existing(run_dir)  # made by another process since prepare_run looked
        raise UserError(
            f"--runs-dir {runs_dir}: cannot create {run_dir} ({error.strerror or error}) — pass a writable folder"
        ) from None


def _remove_leftovers(run_dir: Path) -> None:
    """Starting a run again in the directory of one killed before its first checkpoint: what the killed run left goes
    (looked at again under this process's lock, so a run that wrote a checkpoint meanwhile is refused instead)."""
    leftovers = leftovers_of_a_killed_start(run_dir)
    if leftovers is None:
        raise UserError(
            f"run directory {run_dir} already exists — continue it with --resume {run_dir}, or pick another --run-name"
        )
    for path in leftovers:
        if path.name != LOCK_NAME:
            path.unlink(missing_ok=True)


def check_run_args(args: RunArgs) -> None:
    """The start-up checks that need no machine, env or network: flag ranges, the env id, run names, W&B."""
    validate_args(args)
    envs.validate_env_id(args.env_id)  # before the run directory exists, so a typo leaves nothing behind
    check_run_names(args)
    if args.track:
        require_wandb()


def prepare_run(args: RunArgs) -> Run:
    """Check the flags, then set up the run. Its directory is created by `Run.open` once the agent built and checked
    its envs and networks (TrainingSession.open_or_resume): a run refused before that leaves nothing behind."""
    check_run_args(args)
    tune_allocator()
    device = resolve_device(args.device)
    torch.set_num_threads(resolve_threads(args.threads))
    torch.set_flush_denormal(args.flush_denormal)  # the CPU's setting for the process; CUDA ignores it
    check_flags(args, device)  # --cudagraphs needs CUDA, --compile a working inductor
    if args.resume:
        # Everything is checked before anything in a run directory is written: a refused resume changes nothing.
        run_dirs = group_of(Path(args.resume))
        saved_args = [read_saved_args(run_dir) for run_dir in run_dirs]
        check_resume_seeds(args, Path(args.resume), tuple(saved["seed"] for saved in saved_args))
        members = []
        # members differ only in their seed and the schedule seed it defaulted
        for run_dir, saved in zip(run_dirs, saved_args):
            schedule_seed = saved.get("continual", {}).get("schedule_seed", args.continual.schedule_seed)
            member_args = dataclasses.replace(
                args,
                seed=saved["seed"],
                seeds=(),
                resume=str(run_dir),
                continual=dataclasses.replace(args.continual, schedule_seed=schedule_seed),
            )
            check_resume(member_args, run_dir)
            members.append((member_args, run_dir))
        finish_group_checkpoint([run_dir / CHECKPOINT_NAME for run_dir in run_dirs])
        members = [
            (member_args, run_dir, load_checkpoint(run_dir / CHECKPOINT_NAME, map_location=device))
            for member_args, run_dir in members
        ]
        for abandoned in [run for run in _open_runs if {m.dir for m in run.members} & set(run_dirs)]:
            abandoned.close()  # an earlier run of this process that an exception left open (tests run agents in-process)
        args.seeds = tuple(member_args.seed for member_args, _, _ in members) if len(members) > 1 else ()
        args.seed = members[0][0].seed
        # the flags' defaults are the args.json of the directory named, which records the schedule seed that member
        # defaulted to (its own seed); the group's envs draw each member's schedule from its own seed again
        if all(member_args.continual.schedule_seed == member_args.seed for member_args, _, _ in members):
            args.continual = dataclasses.replace(args.continual, schedule_seed=-1)
    elif args.fork_from:
        members, sources = fork_members(args, device)
    else:
        members = [
            (member_args, Path(args.runs_dir) / run_name_for(member_args, len(group_seeds(args)) > 1), None)
            for member_args in member_flags(args)
        ]
        for _, run_dir, _ in members:
            _refuse_existing(run_dir)
    names = [run_dir.name for _, run_dir, _ in members]
    if args.resume or not args.fork_from:
        sources = [None] * len(members)
    runs = []
    for (member_args, run_dir, resumed), source in zip(members, sources):
        if member_args.continual.schedule_seed < 0:  # recorded with the flags, so the evaluation env draws the same schedule
            member_args.continual.schedule_seed = member_args.seed
        recorded = dataclasses.asdict(member_args) | {"resume": "", "agent": agent_of(type(args))}
        if len(members) > 1:  # a --resume of any of them resumes them all
            recorded["group"] = names
        if source:
            recorded["forked"] = {"from": str(source), "step": resumed["global_step"]}
        elif args.resume and (forked := read_saved_args(run_dir).get("forked")):  # a fork resumed stays one
            recorded["forked"] = forked
        continued = resumed is not None and source is None  # a resume: its own directory, locked now
        member = MemberRun(
            args=member_args,
            dir=run_dir,
            logger=None,
            resumed=resumed,
            recorded_args=recorded,
            args_to_record=recorded if continued else None,
            checkpoint_step=resumed["global_step"] if continued else None,
            lock_fd=lock_run_dir(run_dir) if continued else None,
            forked_from=source,
        )
        runs.append(member)
    seed_everything(runs[0].args.seed, args.torch_deterministic)
    recipe = recipes.find(agent_of(type(args)), args.env_id, type(args))
    run = Run(args=args, device=device, members=runs, recipe=recipe)
    for member in runs:
        member.logger = Logger(
            str(member.dir), member.args, purge_step=_purge_step(member.resumed), before_first_event=run.open
        )
    run.logger = GroupLogger([member.logger for member in runs])
    _open_runs.append(run)
    _install_signal_handlers(run)
    return run


def group_seeds(args: RunArgs) -> tuple[int, ...]:
    """The seeds a run trains: --seeds, or --seed alone."""
    return tuple(args.seeds) or (args.seed,)


def member_flags(args: RunArgs) -> list[RunArgs]:
    """Each member's flags: the group's, with its own seed, as a one-seed run of that seed would have them."""
    return [
        dataclasses.replace(args, seed=seed, seeds=(), continual=dataclasses.replace(args.continual))
        for seed in group_seeds(args)
    ]


def group_of(run_dir: Path, flag: str = "--resume") -> list[Path]:
    """The run directories a --resume continues (or a --fork-from starts from): the run's whole group (its args.json
    names them), or the run alone."""
    names = read_saved_args(run_dir, flag).get("group") or [run_dir.name]
    return [run_dir.parent / name for name in names]


def fork_members(args: RunArgs, device: torch.device) -> tuple[list[tuple[RunArgs, Path, dict[str, Any]]], list[Path]]:
    """(flags, new directory, the source's checkpoint) for each member of a --fork-from run, and each member's source
    directory: one per member of the source's group, in its order, each with its source's seed. Everything is
    checked before anything is written: the source finished (its last checkpoint is its last step, so the fork point
    is its --total-timesteps), no process writes it, and this run trains beyond that step."""
    flag = f"--fork-from {args.fork_from}"
    source_dirs = group_of(Path(args.fork_from), "--fork-from")
    saved_args = [read_saved_args(run_dir, "--fork-from") for run_dir in source_dirs]
    for run_dir, saved in zip(source_dirs, saved_args):
        check_agent(run_dir, saved, agent_of(type(args)), "--fork-from")
    source_seeds = tuple(saved["seed"] for saved in saved_args)
    if tuple(group_seeds(args)) != source_seeds:
        listed = " ".join(map(str, source_seeds))
        raise UserError(
            f"{flag}: the seeds {' '.join(map(str, group_seeds(args)))} differ from the run's {listed} — a fork trains "
            "its source's seeds; drop --seed/--seeds"
        )
    steps = []
    for run_dir in source_dirs:
        holder = run_dir_holder(run_dir)
        if holder is not None:
            raise UserError(f"{flag}: {run_dir} is being written by process {holder} — fork it once it has finished")
        summary = _read_summary(run_dir)
        if not (summary.get("finished") and (run_dir / CHECKPOINT_NAME).is_file()):
            raise UserError(
                f"{flag}: {run_dir} has not finished — resume it to its end first (a fork starts from a finished "
                "run's last step; resuming with --total-timesteps N ends it at N)"
            )
        if pending_path(run_dir / CHECKPOINT_NAME).exists():
            raise UserError(f"{flag}: {run_dir} holds an unfinished group checkpoint — resume it once to settle it")
        steps.append(summary.get("global_step"))
    if len(set(steps)) > 1:
        raise UserError(f"{flag}: the group's members finished at different steps {steps} — fork a consistent group")
    if args.total_timesteps <= steps[0]:
        raise UserError(
            f"{flag}: --total-timesteps {args.total_timesteps} is not beyond the run's last step {steps[0]} — raise it"
        )
    members = []
    for member_args, source_dir in zip(member_flags(args), source_dirs):
        run_dir = Path(args.runs_dir) / run_name_for(member_args, len(source_dirs) > 1)
        _refuse_existing(run_dir)
        checkpoint = load_checkpoint(source_dir / CHECKPOINT_NAME, map_location=device)
        if checkpoint["global_step"] != steps[0]:
            raise UserError(
                f"{flag}: {source_dir}'s checkpoint is at step {checkpoint['global_step']}, its summary at {steps[0]} "
                "— fix or remove that run directory"
            )
        members.append((member_args, run_dir, checkpoint))
    changed = differing_settings(dataclasses.asdict(members[0][0]), saved_args[0])  # "--flag NEW (not THE SOURCE'S)"
    shown = [change for change in changed if not change.startswith(("--fork-from", "--exp-name"))]
    print(f"fork: from step {steps[0]} on, " + (", ".join(shown) if shown else "no setting differs"), flush=True)
    return members, source_dirs


def _read_summary(run_dir: Path) -> dict[str, Any]:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def _purge_step(resumed: dict[str, Any] | None) -> int | None:
    """TensorBoard drops a resumed run's events at steps >= purge_step: everything a killed run logged after its
    checkpoint step (logged again now), but not the points at the checkpoint step itself (never logged again)."""
    return resumed["global_step"] + 1 if resumed else None


_previous_handlers: dict[int, Any] = {}


def _install_signal_handlers(run: Run) -> None:
    """First SIGTERM/SIGINT asks the loop to checkpoint and stop; a second SIGINT interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        return

    def request_stop(signum: int, frame: Any) -> None:
        if run.stop_requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        run.stop_requested = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        _previous_handlers[signum] = signal.signal(signum, request_stop)


def _restore_signal_handlers(run: Run) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in _previous_handlers.items():
        signal.signal(signum, handler)
    _previous_handlers.clear()


def cli_main(main: Callable[[ArgsT], Any], args_type: type[ArgsT]) -> None:
    """Entry point of an agent script: parse flags, run, and turn user errors (exit 2) and run failures such as a
    divergence or a full disk (exit 1) into one line."""
    threading.excepthook = _quiet_about_full_disks
    try:
        main(parse_args(args_type))
    except UserError as error:
        _close_open_runs()
        _remove_runs_without_checkpoint()
        exit_with(error)
    except RunFailure as error:
        _close_open_runs()
        exit_with(error)
    except OSError as error:  # a disk that fills up or fails under the TensorBoard writer or an env
        if error.errno not in _DISK_ERRNOS:
            raise
        path = Path(error.filename) if error.filename else (_open_runs[0].members[0].dir if _open_runs else Path.cwd())
        _close_open_runs()
        exit_with(file_system_error(path, error))


_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)


def _quiet_about_full_disks(hook_args: Any) -> None:
    """The TensorBoard writer's thread meets a full disk first; the main thread reports it in one line right after."""
    if isinstance(hook_args.exc_value, OSError) and hook_args.exc_value.errno in _DISK_ERRNOS:
        return
    threading.__excepthook__(hook_args)


def _close_open_runs() -> None:
    """Close the TensorBoard writers (their thread would otherwise write into a directory being removed) and locks."""
    for run in list(_open_runs):
        try:
            run.close()
        except OSError:
            pass  # the events file is on the disk that just failed; the checkpoint is what matters


def _remove_runs_without_checkpoint() -> None:
    """A run stopped by a user error (e.g. TD3 on a discrete-action env) before its first checkpoint holds nothing
    worth keeping; its directory would only confuse `report` and block rerunning the same --run-name."""
    for run_dir in _fresh_run_dirs:
        if run_dir.is_dir() and not (run_dir / CHECKPOINT_NAME).exists():
            shutil.rmtree(run_dir, ignore_errors=True)
    _fresh_run_dirs.clear()
