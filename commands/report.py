"""`cleanrl-plus report`: seeds aggregated into tables and figures with rliable statistics, from the run directories.

    cleanrl-plus report runs/ [--baseline ppo] [--oracle ppo-oracle] [--out DIR] [--reps 2000]
                              [--metric eval|train|average-performance] [--published FILE]

Reads each run's TensorBoard events directly (no W&B), `args.json` (exp_name) and `summary.json` (agent, env_id,
seed, and per-task records of continual runs). Runs are grouped by (agent, env_id, exp_name); a sweep gives each
remedy configuration its own exp_name, and a group whose runs were made with different flags is refused. Writes
into --out (default: `<first runs dir>/report/`):

- `report.md`, `report.csv`: per env and group, final return and AUC as IQM [95% CI] and mean over seeds; an
  aggregate over envs (per-env min–max normalised) when there are several; P(group > baseline) with CI; and for
  continual runs the per-task table (end-of-task return and per-task AUC, and their ratios to an oracle group averaged
  over tasks 2..K; docs/continual.md);
- `points.csv`: every run's every point of the chosen return (env, agent, group, seed, step, return, finished): the
  per-evaluation numbers a benchmark page quotes, as data a reader can recompute every cell from;
- `curves.png` (IQM return vs steps with 95% CI bands, task switches dashed), `groups.png` (one panel per group
  beside its baseline and the oracle), `profiles.png` (performance profiles of normalised final returns) and, for
  continual runs, `tasks.png` (per-task bars).

Definitions (also written at the end of report.md): final = the last evaluation (train metric: the mean of the
last 10% of the training-return points); AUC = the trapezoidal area under the return curve between its first and
last point divided by that interval, i.e. the run's time-averaged return. Statistics: commands/stats.py.
`--metric average-performance` reports, besides the train metric's tables, C-CHAIN's score (Tang et al. 2025, Eq. 1, the
score of its Tables 1–3): per run the mean over PPO iterations of the iteration's mean training episode return, then the
mean ± standard error over seeds, as the paper prints it (`average_performance`).
`--published` with a file of published curves (benchmarks/published/offpolicy-curves.toml) sets, at each published step,
our mean ± standard error of the evaluation return beside the authors' (`evaluation_at`).
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Literal

import numpy as np
import tyro

from cleanrl_plus.flags import parse_flags
from commands import stats
from commands.published import (
    PublishedCurve,
    PublishedCurves,
    PublishedTable,
    differs,
    load_published,
    mean_and_standard_error,
)
from envs.errors import UserError, did_you_mean
from envs.ranges import AtLeastOne

METRIC_TAGS = {
    "eval": "eval/episodic_return",
    "train": "charts/episodic_return",
    "average-performance": "charts/episodic_return",
}
TASK_TAG = "continual/task"
TRAIN_FINAL_FRACTION = 0.1  # training returns are single noisy episodes: "final" averages the last 10% of points
BOOTSTRAP_SEED = 0  # fixed, so a report of the same runs reproduces its intervals
CURVE_POINTS = 100
PROFILE_TAUS = np.linspace(0.0, 1.0, 101)
MIN_SEEDS_FOR_COMPARISONS = 10  # method comparisons need ≥ 10 seeds per setting (docs/experiments.md)


@dataclasses.dataclass
class ReportArgs:
    paths: tyro.conf.Positional[list[str]]
    """run directories, folders holding run directories (runs/), or globs ('runs/Hopper-v5__*')"""
    baseline: str | None = None
    """exp_name of the group every other group is compared with; unset: per agent, the group named like the agent (e.g. ppo)"""
    oracle: str | None = None
    """exp_name of the fresh-learner-per-task group that continual runs are divided by (task 2..K ratios)"""
    out: str | None = None
    """output folder; unset: <first runs dir>/report/"""
    reps: AtLeastOne = 2000
    """bootstrap resamples per confidence interval (rliable's README uses 50,000 for final numbers)"""
    metric: Literal["eval", "train", "average-performance"] = "eval"
    """which return: 'eval' (deterministic evaluations, eval/episodic_return), 'train' (charts/episodic_return), or
    'average-performance': train, plus C-CHAIN's Eq. 1 score (mean over iterations of each iteration's mean training
    return; mean ± standard error over seeds) for PPO/GTR runs"""
    published: str | None = None
    """TOML file of a paper's table or of published curves (commands/published.py, e.g.
    benchmarks/published/cchain-table1.toml, offpolicy-curves.toml): each of its cells, or each curve at each of its
    steps, beside ours, mean ± s.e., with the difference; needs the file's --metric"""
    finished_only: bool = False
    """leave out runs that did not finish (killed or still running); by default they are included, and each cell
    built from them says how many (`seeds 4 (2 unfinished)`)"""


@dataclasses.dataclass
class RunRecord:
    """One run: who it is and its return curve (steps ascending) for the chosen metric."""

    directory: Path
    agent: str
    env_id: str
    exp_name: str
    seed: int
    steps: np.ndarray
    returns: np.ndarray
    switch_steps: list[int]  # task switches of continual runs (empty otherwise)
    tasks: list[dict[str, Any]]  # summary.json's per-task records of continual runs
    finished: bool = True
    iteration_steps: int = 0  # env steps of one member per PPO iteration (num_steps × num_envs; 0: not an on-policy run)
    flags: dict[str, Any] = dataclasses.field(default_factory=dict)  # its args.json

    @property
    def method(self) -> tuple[str, str]:
        return self.agent, self.exp_name


class SkippedRun(Exception):
    """A directory that cannot be reported on; the message says why."""


# ---------------------------------------------------------------- finding and reading runs


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "summary.json").exists() or (path / "args.json").exists())


def is_sweep_log_dir(path: Path) -> bool:
    """`cleanrl-plus sweep` writes each run's output to <runs-dir>/logs/<run>.log (its claims on runs to logs/claims,
    submitit's files to logs/submitit)."""
    return path.name == "logs" and all(p.suffix == ".log" or p.name in ("claims", "submitit") for p in path.iterdir())


def find_run_dirs(paths: Iterable[str], out_dir: Path | None = None) -> tuple[list[Path], list[str]]:
    """Run directories named by `paths` (a run, a folder of runs, or a glob of either) and notes on what was skipped."""
    found: list[Path] = []
    notes: list[str] = []
    for pattern in paths:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches or not Path(matches[0]).exists():
            notes.append(f"skipped {pattern}: no such file or directory")
            continue
        for match in map(Path, matches):
            if is_run_dir(match):
                found.append(match)
            elif match.is_dir():
                for child in sorted(p for p in match.iterdir() if p.is_dir()):
                    if is_run_dir(child):
                        found.append(child)
                    elif (
                        child.name != "report"
                        and not is_sweep_log_dir(child)
                        and (out_dir is None or child.resolve() != out_dir.resolve())
                    ):
                        notes.append(f"skipped {child}: not a run directory (no summary.json or args.json)")
            else:
                notes.append(f"skipped {match}: not a directory")
    unique = list(dict.fromkeys(found))
    return unique, notes


def read_scalars(directory: Path, tags: Iterable[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(steps, values) per tag from a run's TensorBoard event files: ascending steps, one value per step (the last
    written — a resumed run's purged events are already dropped by the accumulator)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    available = set(accumulator.Tags().get("scalars", []))
    curves = {}
    for tag in tags:
        if tag not in available:
            continue
        last_value_at_step = {event.step: event.value for event in accumulator.Scalars(tag)}
        steps = np.array(sorted(last_value_at_step), dtype=np.int64)
        curves[tag] = (steps, np.array([last_value_at_step[s] for s in steps], dtype=float))
    return curves


def load_run(directory: Path, metric: str) -> RunRecord:
    summary_path, args_path = directory / "summary.json", directory / "args.json"
    if not summary_path.exists():
        raise SkippedRun(f"skipped {directory}: no summary.json (stopped before its first checkpoint?)")
    try:
        summary = json.loads(summary_path.read_text())
        args = json.loads(args_path.read_text()) if args_path.exists() else {}
    except json.JSONDecodeError as error:
        raise SkippedRun(f"skipped {directory}: unreadable JSON ({error})") from None
    if not all(key in summary for key in ("agent", "env_id", "seed")):
        raise SkippedRun(f"skipped {directory}: summary.json lacks agent, env_id or seed")
    if summary.get("diverged"):
        diverged = summary["diverged"]
        raise SkippedRun(
            f"skipped {directory}: it diverged ({diverged.get('quantity')} not finite at step {diverged.get('step')})"
        )
    curves = read_scalars(directory, [METRIC_TAGS[metric], TASK_TAG])
    if METRIC_TAGS[metric] not in curves:
        what = "evaluations" if metric == "eval" else "training episodes"
        raise SkippedRun(f"skipped {directory}: no {what} ({METRIC_TAGS[metric]}) in its TensorBoard events")
    steps, returns = curves[METRIC_TAGS[metric]]
    if not np.isfinite(returns).all():  # runs from before divergence stopped a run, or NaN written by hand
        first = int(steps[~np.isfinite(returns)][0])
        raise SkippedRun(f"skipped {directory}: non-finite {METRIC_TAGS[metric]} at step {first} (the run diverged)")
    tasks = list(summary.get("tasks") or [])
    if TASK_TAG in curves:
        switch_steps = [int(step) for step in curves[TASK_TAG][0] if step > 0]
    else:
        switch_steps = [int(task["start_step"]) for task in tasks[1:]]
    return RunRecord(
        directory=directory,
        agent=str(summary["agent"]),
        env_id=str(summary["env_id"]),
        exp_name=str(args.get("exp_name", summary["agent"])),
        seed=int(summary["seed"]),
        steps=steps,
        returns=returns,
        switch_steps=switch_steps,
        tasks=tasks,
        finished=bool(summary.get("finished", True)),
        iteration_steps=int(args.get("num_steps", 0)) * int(args.get("num_envs", 0)),
        flags=args if isinstance(args, dict) else {},
    )


def check_groups_agree(runs: list[RunRecord]) -> None:
    """Refuse a group (agent, env, exp_name) whose runs were made with different flags (a run started by hand under a
    sweep's run name, a configuration changed between seeds): its statistics would pool two experiments. Each run is
    compared with the settings most of its group share (cleanrl_plus.config.run_settings: every flag a --resume may
    not change), and the first that differs is named."""
    import collections

    from cleanrl_plus.config import differing_settings, run_settings

    groups: dict[tuple[str, str, str], list[RunRecord]] = {}
    for run in runs:
        groups.setdefault((run.agent, run.env_id, run.exp_name), []).append(run)
    for (agent, env_id, exp_name), members in groups.items():
        keys = [json.dumps(run_settings(run.flags), sort_keys=True, default=str) for run in members]
        common = collections.Counter(keys).most_common(1)[0][0]
        reference = members[keys.index(common)]
        for run in members:
            differences = differing_settings(run.flags, reference.flags)
            if differences:
                raise UserError(
                    f"{run.directory} was made with {', '.join(differences)}, unlike the other runs of group {exp_name} "
                    f"({agent}) on {env_id} such as {reference.directory} — report it apart, or give runs made with other "
                    "flags their own --exp-name"
                )


# ---------------------------------------------------------------- per-run numbers


def final_return(returns: np.ndarray, metric: str) -> float:
    if metric == "eval":
        return float(returns[-1])
    return float(returns[-max(1, math.ceil(TRAIN_FINAL_FRACTION * len(returns))) :].mean())


def evaluation_at(steps: np.ndarray, returns: np.ndarray, step: int) -> float | None:
    """The run's evaluation return at agent step `step`: the last evaluation at or before it (so a run that evaluates
    every 5,000 steps is read at 50,000 itself, and one that evaluates every 10,000 at 40,000 for 45,000). None when the
    run has not reached `step` (no evaluation at it or later) or evaluated first after it."""
    if len(steps) == 0 or steps[-1] < step or steps[0] > step:
        return None
    return float(returns[np.searchsorted(steps, step, side="right") - 1])


def action_repeat_of(run: RunRecord) -> int:
    """Env frames per agent step of a run: its --action-repeat on dm-control, where the flag applies (as
    cleanrl_plus/evaluator.py env_options passes it), else 1."""
    from envs import backend_for

    return int(run.flags.get("action_repeat", 1)) if backend_for(run.env_id) == "dmc" else 1


def iteration_means(steps: np.ndarray, values: np.ndarray, iteration_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(iterations, means): per PPO iteration, the mean of the points logged in it (step s belongs to iteration
    ⌈s / iteration_steps⌉: an episode cut at an iteration's end is its last), ascending; iterations in which no episode
    ended have no row. Of the episodes' returns, the `itr_mean_return` series the authors' scripts log."""
    if iteration_steps < 1:
        raise ValueError("average performance needs the run's iteration length (num_steps × num_envs)")
    iterations, index = np.unique(-(-np.asarray(steps, dtype=np.int64) // iteration_steps), return_inverse=True)
    return iterations, np.bincount(index, weights=np.asarray(values, dtype=float)) / np.bincount(index)


def average_performance(steps: np.ndarray, returns: np.ndarray, iteration_steps: int) -> float:
    """C-CHAIN's Eq. 1 for one run: the mean over iterations of the mean return of the training episodes that ended in
    the iteration (`iteration_means`). Each logged point is one episode with one env per member; with more, the
    episodes that ended at one step are one point."""
    return float(iteration_means(steps, returns, iteration_steps)[1].mean())


def time_averaged_return(steps: np.ndarray, returns: np.ndarray) -> float:
    """AUC: area under the piecewise-linear return curve from its first to its last point, divided by that interval."""
    if len(steps) == 1 or steps[-1] == steps[0]:
        return float(returns.mean())
    return float(np.trapezoid(returns, steps) / (steps[-1] - steps[0]))


def per_task_returns(run: RunRecord, metric: str) -> list[tuple[float, float]]:
    """(end-of-task return, per-task AUC) for each task of a continual run, in visiting order (NaN when unknown).

    With the eval metric, summary.json's own `final_eval` and `auc_eval` are used; where they are null (and always
    with the train metric) they come from the curve points with start_step < step ≤ end_step."""
    values = []
    for task in run.tasks:
        inside = (run.steps > task["start_step"]) & (run.steps <= task["end_step"])
        steps, returns = run.steps[inside], run.returns[inside]
        from_curve = (
            (final_return(returns, metric), time_averaged_return(steps, returns)) if inside.any() else (math.nan, math.nan)
        )
        recorded = (task.get("final_eval"), task.get("auc_eval")) if metric == "eval" else (None, None)
        values.append(tuple(float(r) if r is not None else c for r, c in zip(recorded, from_curve)))
    return values


# ---------------------------------------------------------------- groups


def method_labels(runs: list[RunRecord]) -> dict[tuple[str, str], str]:
    """Each (agent, exp_name) is shown by its exp_name, or 'agent:exp_name' where two agents share an exp_name."""
    agents_per_name: dict[str, set[str]] = {}
    for run in runs:
        agents_per_name.setdefault(run.exp_name, set()).add(run.agent)
    methods = sorted({run.method for run in runs})
    return {m: m[1] if len(agents_per_name[m[1]]) == 1 else f"{m[0]}:{m[1]}" for m in methods}


def resolve_method(name: str, labels: dict[tuple[str, str], str], flag: str) -> tuple[str, str]:
    matches = [m for m, label in labels.items() if name in (label, m[1])]
    if len(matches) == 1:
        return matches[0]
    choices = sorted(labels.values())
    if matches:
        raise UserError(f"{flag} '{name}' names several groups — use one of: {', '.join(labels[m] for m in matches)}")
    raise UserError(f"unknown {flag} '{name}'{did_you_mean(name, choices)} — choose one of: {', '.join(choices)}")


def default_baselines(labels: dict[tuple[str, str], str]) -> dict[str, tuple[str, str]]:
    """Per agent, the group whose exp_name is the agent's name (the agent without remedies), else its first group
    alphabetically — so a report of TD3 and PPO sweeps compares each remedy with its own agent."""
    baselines = {}
    for agent in sorted({m[0] for m in labels}):
        groups = [m for m in labels if m[0] == agent]
        plain = [m for m in groups if m[1] == agent]
        baselines[agent] = min(plain or groups, key=lambda m: labels[m])
    return baselines


# ---------------------------------------------------------------- the report


@dataclasses.dataclass
class Row:
    """One line of report.csv: a statistic of one group (in one env, or aggregated), with its 95% CI when it has one."""

    table: str
    env_id: str
    group: str
    seeds: int
    statistic: str
    estimator: str
    value: float
    ci_low: float = math.nan
    ci_high: float = math.nan
    task: str = ""
    reference: str = ""


class Report:
    """The tables (as markdown lines and CSV rows) and figures for a set of runs; each table method adds its rows."""

    def __init__(
        self,
        runs: list[RunRecord],
        metric: str,
        reps: int,
        baseline: str | None,
        oracle: str | None,
        published: PublishedTable | PublishedCurves | None = None,
    ) -> None:
        self.runs, self.metric, self.reps, self.published = runs, metric, reps, published
        self.labels = method_labels(runs)
        if baseline:
            chosen = resolve_method(baseline, self.labels, "--baseline")
            self.baselines = {agent: chosen for agent, _ in self.labels}
        else:
            self.baselines = default_baselines(self.labels)
        self.oracle = resolve_method(oracle, self.labels, "--oracle") if oracle else None
        self.envs = sorted({run.env_id for run in runs})
        self.colors = dict(zip(self.labels, _palette(len(self.labels))))
        self.rows: list[Row] = []
        self.finals = {id(run): final_return(run.returns, metric) for run in runs}
        self.aucs = {id(run): time_averaged_return(run.steps, run.returns) for run in runs}

    def runs_of(self, env_id: str, method: tuple[str, str]) -> list[RunRecord]:
        return sorted((r for r in self.runs if r.env_id == env_id and r.method == method), key=lambda r: r.seed)

    def methods_in(self, env_id: str) -> list[tuple[str, str]]:
        return [m for m in self.labels if self.runs_of(env_id, m)]

    def estimate(self, scores: np.ndarray) -> stats.Estimate:
        return stats.bootstrap_ci(scores, "iqm", reps=self.reps, seed=BOOTSTRAP_SEED)

    def add_iqm_and_mean(
        self, table: str, env_id: str, group: str, statistic: str, scores: np.ndarray, **extra
    ) -> tuple[str, str]:
        """CSV rows for the IQM [CI] and the mean of `scores`; returns their markdown cells."""
        matrix = np.asarray(scores, dtype=float).reshape(len(scores), -1)
        seeds = int((~np.isnan(matrix)).sum(axis=0).max())  # runs in the largest env (NaN pads the others)
        estimate, mean = self.estimate(scores), stats.mean(scores)
        self.rows.append(
            Row(table, env_id, group, seeds, statistic, "iqm", estimate.value, estimate.low, estimate.high, **extra)
        )
        self.rows.append(Row(table, env_id, group, seeds, statistic, "mean", mean, **extra))
        return str(estimate), stats.format_number(mean)

    # --- tables (each returns markdown lines)

    def per_env_table(self) -> list[str]:
        lines = ["| env | group | seeds | final IQM [95% CI] | final mean | AUC IQM [95% CI] | AUC mean |", "|-|-|-|-|-|-|-|"]
        for env_id in self.envs:
            for method in self.methods_in(env_id):
                runs, label = self.runs_of(env_id, method), self.labels[method]
                finals = np.array([self.finals[id(r)] for r in runs])
                aucs = np.array([self.aucs[id(r)] for r in runs])
                cells = [
                    *self.add_iqm_and_mean("per_env", env_id, label, "final", finals),
                    *self.add_iqm_and_mean("per_env", env_id, label, "auc", aucs),
                ]
                lines.append(f"| {env_id} | {label} | {seeds_cell(runs)} | {' | '.join(cells)} |")
        return lines

    def average_performance_of(self, runs: list[RunRecord]) -> tuple[float, float]:
        """The mean and standard error over `runs` of their Eq. 1 values (s.e. NaN for one run)."""
        return mean_and_standard_error([average_performance(r.steps, r.returns, r.iteration_steps) for r in runs])

    def average_performance_table(self) -> list[str]:
        """C-CHAIN's score per env and group: the mean ± standard error over seeds of each run's Eq. 1 value."""
        lines = ["| env | group | seeds | average performance (Eq. 1) mean ± s.e. |", "|-|-|-|-|"]
        for env_id in self.envs:
            for method in self.methods_in(env_id):
                runs, label = self.runs_of(env_id, method), self.labels[method]
                mean, error = self.average_performance_of(runs)
                self.rows.append(Row("average_performance", env_id, label, len(runs), "eq1", "mean", mean))
                self.rows.append(Row("average_performance", env_id, label, len(runs), "eq1", "standard_error", error))
                lines.append(f"| {env_id} | {label} | {seeds_cell(runs)} | {_mean_and_error(mean, error)} |")
        return lines

    def published_table(self, table: PublishedTable) -> list[str]:
        """Each cell of a paper's table beside ours (its rows in its order, its columns in its order); a cell whose
        two values lie further apart than their standard errors combined is marked, since it needs an explanation."""
        lines = [
            "| paper's row (our env) | paper's column (our group) | seeds (ours / theirs) | ours mean ± s.e. "
            "| theirs mean ± s.e. | ours − theirs | beyond the s.e. combined |",
            "|-|-|-|-|-|-|-|",
        ]
        for row, env_id in table.rows.items():
            for column, exp_name in table.columns.items():
                theirs = table.values.get((row, column))
                runs = [r for r in self.runs if r.env_id == env_id and r.exp_name == exp_name]
                where = f"| {row} (`{env_id}`) | {column} (`{exp_name}`) |"
                theirs_cell = "—" if theirs is None else _mean_and_error(*theirs)
                if not runs:
                    lines.append(f"{where} 0 / {table.seeds} | not run | {theirs_cell} | | |")
                    continue
                ours = self.average_performance_of(runs)
                seeds = f"{seeds_cell(runs)} / {table.seeds}"
                for estimator, value in zip(("mean", "standard_error"), ours):
                    self.rows.append(Row("published", env_id, exp_name, len(runs), "eq1", estimator, value, reference=column))
                if theirs is None:
                    lines.append(f"{where} {seeds} | {_mean_and_error(*ours)} | — | | |")
                    continue
                for estimator, value in zip(("published_mean", "published_standard_error"), theirs):
                    self.rows.append(
                        Row("published", env_id, exp_name, table.seeds, "eq1", estimator, value, reference=column)
                    )
                verdict = "**yes**" if differs(ours, theirs) else "no"
                difference = stats.format_number(ours[0] - theirs[0])
                lines.append(f"{where} {seeds} | {_mean_and_error(*ours)} | {theirs_cell} | {difference} | {verdict} |")
        return lines

    def published_curves_table(self, published: PublishedCurves) -> tuple[list[str], list[str]]:
        """(table lines, notes): each published curve at each of its steps beside our runs of its env and group at the
        same env frames, each side's mean ± s.e. over seeds by one function (`mean_and_standard_error`); a point whose
        two values lie further apart than their standard errors combined is marked, as in the published table."""
        lines = [
            "| published curve | our env, group | published step = our agent step | seeds (ours / theirs) | ours mean ± s.e. "
            "| theirs mean ± s.e. | ours − theirs | beyond the s.e. combined |",
            "|-|-|-|-|-|-|-|-|",
        ]
        notes = []
        for curve in published.curves:
            runs = sorted(
                (r for r in self.runs if r.env_id == curve.env_id and r.exp_name == curve.group), key=lambda r: r.seed
            )
            repeat = action_repeat_of(runs[0]) if runs else curve.action_repeat
            if runs and repeat != curve.action_repeat:
                notes.append(
                    f"{curve.name}: our runs' action repeat is {repeat}, the authors' {curve.action_repeat}; compared at "
                    "equal env frames"
                )
            for step, theirs in curve.points.items():
                lines.append(self._published_point(curve, step, theirs, runs, repeat, notes))
        return lines, notes

    def _published_point(
        self, curve: PublishedCurve, step: int, theirs: tuple[float, float], runs: list[RunRecord], repeat: int, notes: list
    ) -> str:
        frames = curve.frames(step)
        our_step = frames // repeat
        if frames % repeat:
            notes.append(f"{curve.name}: {frames} env frames is no whole number of our agent steps; read at {our_step}")
        where = f"| {curve.name} | `{curve.env_id}`, `{curve.group}` | {step:,} {curve.step_unit} = {our_step:,} |"
        theirs_cell = _mean_and_error(*theirs)
        values = [evaluation_at(r.steps, r.returns, our_step) for r in runs]
        reached = [v for v in values if v is not None]
        behind = len(runs) - len(reached)
        seeds = f"{len(reached)}{f' ({behind} not reached)' if behind else ''} / {curve.seeds}"
        if not reached:
            return f"{where} {seeds} | {'not reached' if runs else 'not run'} | {theirs_cell} | | |"
        statistic = f"eval@{our_step}"
        ours = mean_and_standard_error(reached)
        estimators = ("mean", "standard_error", "published_mean", "published_standard_error")
        for estimator, value in zip(estimators, (*ours, *theirs)):
            count = len(reached) if not estimator.startswith("published") else curve.seeds
            self.rows.append(
                Row("published", curve.env_id, curve.group, count, statistic, estimator, value, reference=curve.name)
            )
        verdict = "**yes**" if differs(ours, theirs) else "no"
        difference = stats.format_number(ours[0] - theirs[0])
        return f"{where} {seeds} | {_mean_and_error(*ours)} | {theirs_cell} | {difference} | {verdict} |"

    def normalised_matrix(self, method: tuple[str, str], values: dict[int, float], envs: list[str]) -> np.ndarray:
        """(runs, envs) of `values` min–max normalised per env over every run of that env (all groups); NaN pads
        envs where the group has fewer runs."""
        columns = []
        for env_id in envs:
            every_run = np.array([values[id(r)] for r in self.runs if r.env_id == env_id])
            low, high = every_run.min(), every_run.max()
            mine = np.array([values[id(r)] for r in self.runs_of(env_id, method)])
            columns.append((mine - low) / (high - low) if high > low else np.zeros_like(mine))
        return nan_padded(columns)

    def aggregate_table(self) -> list[str]:
        lines = ["| group | envs | runs | final IQM [95% CI] | final mean | AUC IQM [95% CI] | AUC mean |", "|-|-|-|-|-|-|-|"]
        for method, label in self.labels.items():
            envs = [e for e in self.envs if self.runs_of(e, method)]
            cells = []
            for statistic, values in (("final", self.finals), ("auc", self.aucs)):
                matrix = self.normalised_matrix(method, values, envs)
                cells += self.add_iqm_and_mean("aggregate", "all", label, statistic, matrix)
            runs = sum(len(self.runs_of(e, method)) for e in envs)
            env_count = str(len(envs)) if len(envs) == len(self.envs) else f"{len(envs)} of {len(self.envs)}"
            lines.append(f"| {label} | {env_count} | {runs} | {' | '.join(cells)} |")
        return lines

    def improvement_table(self) -> list[str]:
        """P(group > baseline) per env and, for groups in several envs, over all envs both ran."""
        lines = ["| env | group | baseline | P(final > baseline) [95% CI] | P(AUC > baseline) [95% CI] |", "|-|-|-|-|-|"]
        for method, label in self.labels.items():
            baseline = self.baselines[method[0]]
            if method == baseline:
                continue
            shared = [e for e in self.envs if self.runs_of(e, method) and self.runs_of(e, baseline)]
            baseline_label = self.labels[baseline]
            for scope, envs in [(e, [e]) for e in shared] + ([("all", shared)] if len(shared) > 1 else []):
                cells = []
                for statistic, values in (("final", self.finals), ("auc", self.aucs)):
                    x, y = self._padded(method, envs, values), self._padded(baseline, envs, values)
                    estimate = stats.probability_of_improvement_ci(x, y, reps=self.reps, seed=BOOTSTRAP_SEED)
                    seeds = int(np.sum(~np.isnan(x[:, 0])))
                    self.rows.append(
                        Row(
                            "improvement",
                            scope,
                            label,
                            seeds,
                            statistic,
                            "P(group > baseline)",
                            estimate.value,
                            estimate.low,
                            estimate.high,
                            reference=baseline_label,
                        )
                    )
                    cells.append(str(estimate))
                lines.append(f"| {scope} | {label} | {baseline_label} | {' | '.join(cells)} |")
        return lines if len(lines) > 2 else []

    def _padded(self, method: tuple[str, str], envs: list[str], values: dict[int, float]) -> np.ndarray:
        return nan_padded([[values[id(r)] for r in self.runs_of(e, method)] for e in envs])

    def continual_envs(self) -> list[str]:
        return [e for e in self.envs if any(r.tasks for r in self.runs if r.env_id == e)]

    def task_values(self, env_id: str, method: tuple[str, str]) -> np.ndarray:
        """(runs, tasks, 2): end-of-task return and per-task AUC; NaN for tasks a run did not reach."""
        runs = [r for r in self.runs_of(env_id, method) if r.tasks]
        per_run = [per_task_returns(r, self.metric) for r in runs]
        values = np.full((len(runs), max((len(p) for p in per_run), default=0), 2), np.nan)
        for i, tasks in enumerate(per_run):
            values[i, : len(tasks)] = tasks
        return values

    def per_task_table(self) -> list[str]:
        lines = ["| env | group | task (id) | seeds | end-of-task IQM [95% CI] | per-task AUC IQM [95% CI] |", "|-|-|-|-|-|-|"]
        for env_id in self.continual_envs():
            for method in self.methods_in(env_id):
                values, label = self.task_values(env_id, method), self.labels[method]
                runs = [r for r in self.runs_of(env_id, method) if r.tasks]
                for k in range(values.shape[1]):
                    task_id = next((r.tasks[k].get("task", k) for r in runs if len(r.tasks) > k), k)
                    cells = []
                    for index, statistic in enumerate(("end_of_task", "task_auc")):
                        scores = values[:, k, index]
                        scores = scores[~np.isnan(scores)]
                        cells.append(
                            self.add_iqm_and_mean("per_task", env_id, label, statistic, scores, task=str(k + 1))[0]
                            if len(scores)
                            else "n/a"
                        )
                    seeds = int(np.sum(~np.isnan(values[:, k, 0])))
                    lines.append(f"| {env_id} | {label} | {k + 1} ({task_id}) | {seeds} | {' | '.join(cells)} |")
        return lines

    def oracle_table(self) -> tuple[list[str], list[str]]:
        """Per run, the mean over tasks 2..K of (its value on task k) / (the oracle's IQM over seeds on task k)."""
        oracle_label = self.labels[self.oracle]
        lines = [
            "| env | group | seeds | tasks | end-of-task / oracle IQM [95% CI] | AUC / oracle IQM [95% CI] |",
            "|-|-|-|-|-|-|",
        ]
        notes = []
        for env_id in self.continual_envs():
            oracle_values = self.task_values(env_id, self.oracle)
            if oracle_values.size == 0:
                notes.append(f"no oracle runs with tasks in {env_id}")
                continue
            references = np.array(
                [
                    [stats.iqm(col[~np.isnan(col)]) if (~np.isnan(col)).any() else np.nan for col in oracle_values[:, k, :].T]
                    for k in range(oracle_values.shape[1])
                ]
            )
            if np.any(references[1:] <= 0):
                notes.append(
                    f"{env_id}: the oracle's return is ≤ 0 on some task, where a ratio means nothing; those tasks are left out"
                )
            references = np.where(references > 0, references, np.nan)
            for method in self.methods_in(env_id):
                if method == self.oracle:
                    continue
                values, label = self.task_values(env_id, method), self.labels[method]
                tasks = min(values.shape[1], references.shape[0])
                if tasks < 2:
                    continue
                ratios = values[:, 1:tasks, :] / references[None, 1:tasks, :]  # tasks 2..K
                with np.errstate(invalid="ignore"):
                    per_run = np.nanmean(ratios, axis=1)  # (runs, 2)
                cells = []
                for index, statistic in enumerate(("end_of_task_ratio", "task_auc_ratio")):
                    scores = per_run[:, index][~np.isnan(per_run[:, index])]
                    cells.append(
                        self.add_iqm_and_mean(
                            "oracle_ratio", env_id, label, statistic, scores, task=f"2..{tasks}", reference=oracle_label
                        )[0]
                        if len(scores)
                        else "n/a"
                    )
                lines.append(f"| {env_id} | {label} | {len(values)} | 2..{tasks} | {' | '.join(cells)} |")
        return (lines if len(lines) > 2 else []), notes

    # --- figures

    def draw_curve(
        self, ax, env_id: str, method: tuple[str, str], color=None, linestyle: str = "-", band: float = 0.2
    ) -> None:
        """The IQM curve of one group in one env over a common step grid, with its 95% bootstrap band."""
        runs = self.runs_of(env_id, method)
        start, end = max(r.steps[0] for r in runs), min(r.steps[-1] for r in runs)
        grid = np.linspace(start, end, CURVE_POINTS) if end > start else np.array([end], dtype=float)
        curves = np.stack([np.interp(grid, r.steps, r.returns) for r in runs])
        middle, low, high = stats.bootstrap_iqm_curve(curves, reps=self.reps, seed=BOOTSTRAP_SEED)
        color = self.colors[method] if color is None else color
        ax.plot(
            grid, middle, color=color, linestyle=linestyle, label=self.labels[method], marker="o" if len(grid) == 1 else None
        )
        ax.fill_between(grid, low, high, color=color, alpha=band, linewidth=0)

    def decorate(self, ax, env_id: str, title: str) -> None:
        for k, step in enumerate(_median_switch_steps([r for r in self.runs if r.env_id == env_id])):
            ax.axvline(step, color="0.4", linestyle="--", linewidth=0.8, label="task switch" if k == 0 else None)
        _set_title(ax, title)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("evaluation return" if self.metric == "eval" else "training episodic return")
        _step_axis(ax)

    def plot_curves(self, path: Path) -> None:
        figure, axes = _subplots(len(self.envs))
        for ax, env_id in zip(axes, self.envs):
            for method in self.methods_in(env_id):
                self.draw_curve(ax, env_id, method)
            self.decorate(ax, env_id, f"{env_id} ({self.seed_range(env_id)} per group)")
        _suptitle(figure, f"{'Evaluation' if self.metric == 'eval' else 'Training'} return: IQM over seeds, 95% bootstrap CI")
        _figure_legend(figure, axes)
        _save(figure, path)

    def compared_groups(self) -> list[tuple[str, tuple[str, str]]]:
        """(env, group) of every group that has a baseline (and is neither a baseline nor the oracle) in that env."""
        references = set(self.baselines.values()) | {self.oracle}
        return [
            (env_id, method)
            for env_id in self.envs
            for method in self.methods_in(env_id)
            if method not in references and self.runs_of(env_id, self.baselines[method[0]])
        ]

    def plot_groups(self, path: Path) -> None:
        """One panel per group (blue) beside its baseline (grey) and the oracle (black, dashed; its band left out):
        with many groups, the one figure in which each curve can be told from the others."""
        pairs = self.compared_groups()
        figure, axes = _subplots(len(pairs), columns=4, panel=(4.0, 3.0))
        for ax, (env_id, method) in zip(axes, pairs):
            self.draw_curve(ax, env_id, self.baselines[method[0]], color="0.5", band=0.15)
            if self.oracle is not None and self.runs_of(env_id, self.oracle):
                self.draw_curve(ax, env_id, self.oracle, color="black", linestyle="--", band=0.0)
            self.draw_curve(ax, env_id, method, color="tab:blue", band=0.25)  # one colour that stands out in every panel
            self.decorate(ax, env_id, self.labels[method] + (f" — {env_id}" if len(self.envs) > 1 else ""))
            ax.legend(fontsize="x-small", loc="lower left")
        _suptitle(
            figure,
            f"Each group against its baseline{' and the oracle' if self.oracle else ''}: IQM over seeds, 95% bootstrap CI",
        )
        _save(figure, path)

    def seed_range(self, env_id: str) -> str:
        counts = [len(self.runs_of(env_id, m)) for m in self.methods_in(env_id)]
        return f"{min(counts)} seeds" if min(counts) == max(counts) else f"{min(counts)}–{max(counts)} seeds"

    def plot_profiles(self, path: Path) -> None:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(7.5, 4.4), layout="constrained")
        ax = figure.subplots()
        for method, label in self.labels.items():
            matrix = self.normalised_matrix(method, self.finals, [e for e in self.envs if self.runs_of(e, method)])
            profile = stats.performance_profile(matrix, PROFILE_TAUS, reps=self.reps, seed=BOOTSTRAP_SEED)
            ax.plot(profile.taus, profile.fraction, color=self.colors[method], label=label, drawstyle="steps-post")
            ax.fill_between(
                profile.taus, profile.low, profile.high, color=self.colors[method], alpha=0.2, linewidth=0, step="post"
            )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("normalised final return τ (per env: 0 = worst run, 1 = best run)")
        ax.set_ylabel("fraction of runs with score > τ")
        _set_title(
            ax, f"Performance profile over {len(self.envs)} env{'s' if len(self.envs) > 1 else ''} (95% bootstrap bands)"
        )
        ax.grid(alpha=0.3)
        _figure_legend(figure, [ax])
        _save(figure, path)

    def plot_tasks(self, path: Path) -> None:
        envs = self.continual_envs()
        figure, axes = _subplots(2 * len(envs), columns=2)
        for row, env_id in enumerate(envs):
            methods = self.methods_in(env_id)
            width = 0.8 / len(methods)
            for index, (title, y_label) in enumerate(
                (("end-of-task return", "return at the task's end"), ("per-task AUC", "mean return over the task"))
            ):
                ax = axes[2 * row + index]
                for position, method in enumerate(methods):
                    values = self.task_values(env_id, method)[:, :, index]
                    estimates = [self.estimate(col[~np.isnan(col)]) if (~np.isnan(col)).any() else None for col in values.T]
                    tasks = np.arange(1, len(estimates) + 1)
                    middle = np.array([e.value if e else np.nan for e in estimates])
                    errors = np.array([[e.value - e.low, e.high - e.value] if e else [np.nan, np.nan] for e in estimates]).T
                    ax.bar(
                        tasks + (position - (len(methods) - 1) / 2) * width,
                        middle,
                        width,
                        yerr=errors,
                        capsize=2,
                        color=self.colors[method],
                        label=self.labels[method],
                    )
                _set_title(ax, f"{env_id}: {title}")
                ax.set_xlabel("task (in visiting order)")
                ax.set_ylabel(y_label)
                ax.set_xticks(np.arange(1, max(self.task_values(env_id, m).shape[1] for m in methods) + 1))
                ax.grid(alpha=0.3, axis="y")
        _suptitle(figure, "Continual runs per task: IQM over seeds, 95% bootstrap CI")
        _figure_legend(figure, axes)
        _save(figure, path)

    # --- everything

    def markdown(self, notes: list[str]) -> tuple[str, str]:
        """(the tables, the methods section) of report.md; the tables are also printed."""
        metric_name = (
            "evaluation return (`eval/episodic_return`)"
            if self.metric == "eval"
            else "training episodic return (`charts/episodic_return`)"
        )
        seeds = [len(self.runs_of(e, m)) for e in self.envs for m in self.methods_in(e)]
        parts = [
            f"# Report: {len(self.runs)} runs, {len(self.envs)} env{'s' if len(self.envs) > 1 else ''}, {len(self.labels)} "
            "groups",
            "",
            f"Return: {metric_name}. Cells: IQM over seeds [95% stratified-bootstrap CI] and the mean.",
            "",
            "## Per environment",
            "",
            *self.per_env_table(),
        ]
        if self.metric == "average-performance":
            parts += ["", "## Average performance (C-CHAIN, Tang et al. 2025, Eq. 1): mean ± standard error over seeds", ""]
            parts += self.average_performance_table()
        if isinstance(self.published, PublishedTable):
            parts += ["", f"## Beside the published table: {self.published.source}", ""]
            parts += self.published_table(self.published)
        elif isinstance(self.published, PublishedCurves):
            curve_lines, curve_notes = self.published_curves_table(self.published)
            notes = notes + curve_notes
            parts += ["", f"## Beside published curves: {self.published.source}", ""]
            parts += [
                "Compared at equal env frames: a published step counted in agent steps is step × the authors' action "
                "repeat frames; our runs count agent steps and are read at frames ÷ their action repeat (the last "
                "evaluation at or before it).",
                "",
                *curve_lines,
            ]
        if len(self.envs) > 1:
            parts += [
                "",
                "## All environments (each env min–max normalised over all its runs: 0 = worst, 1 = best)",
                "",
                *self.aggregate_table(),
            ]
        improvement = self.improvement_table()
        if improvement:
            baselines = ", ".join(f"`{self.labels[m]}`" for m in sorted(set(self.baselines.values())))
            parts += ["", f"## Probability of improvement over the baseline ({baselines})", "", *improvement]
        if self.continual_envs():
            parts += ["", "## Continual runs: per task", "", *self.per_task_table()]
            if self.oracle:
                oracle_lines, oracle_notes = self.oracle_table()
                notes = notes + oracle_notes
                if oracle_lines:
                    parts += [
                        "",
                        f"## Continual runs: relative to the oracle `{self.labels[self.oracle]}` (mean over tasks 2..K of "
                        "value_k / oracle_k)",
                        "",
                        *oracle_lines,
                    ]
        if min(seeds) < MIN_SEEDS_FOR_COMPARISONS:
            parts += [
                "",
                f"Warning: {min(seeds)} seed{'s' if min(seeds) > 1 else ''} in the smallest group — 3–5 runs give unreliable "
                "estimates "
                f"(Agarwal et al. 2021, Deep RL at the Edge of the Statistical Precipice); compare methods with "
                f"≥ {MIN_SEEDS_FOR_COMPARISONS} seeds per setting.",
            ]
        final_definition = (
            "the last evaluation"
            if self.metric == "eval"
            else f"the mean of the last {TRAIN_FINAL_FRACTION:.0%} of the training-return points"
        )
        methods = [
            "## How these numbers were computed",
            "",
            f"- **final** = {final_definition} of each run.",
            *(
                [
                    "- **average performance** (Eq. 1) = per run, the mean over PPO iterations of the mean return of the "
                    "training episodes that ended in the iteration (an episode cut at an iteration's end belongs to it); "
                    "mean ± standard error (std with ddof 1 / √seeds) over seeds."
                ]
                if self.metric == "average-performance"
                else []
            ),
            *(
                [
                    "- **beside published curves**: per run, the evaluation at the published step (the last evaluation at "
                    "or before it, among runs that evaluated at it or later); mean ± standard error (std with ddof 1 / "
                    "√seeds) over seeds, the statistic the authors' per-seed values are given too."
                ]
                if isinstance(self.published, PublishedCurves)
                else []
            ),
            "- **AUC** = the area under the run's return curve (trapezoids between its points, from the first to the last "
            "point) "
            "divided by that interval: the run's time-averaged return.",
            "- **IQM**: the mean of the middle 50% of the runs' values (25% trimmed at each end, all runs × envs pooled); "
            "**mean**: the mean over envs of the mean over runs.",
            f"- **95% CI**: stratified percentile bootstrap (runs resampled with replacement within each env), {self.reps} "
            f"resamples, seed {BOOTSTRAP_SEED}, as in rliable (Agarwal et al. 2021).",
            "- **P(X > Y)**: per env the Mann–Whitney U statistic / (n·m) — the chance a run of X beats a run of Y, ties ½ — "
            "averaged over envs; CI with X's and Y's runs resampled independently. A lower bound above 0.5 suggests a real "
            "improvement.",
            "- **Aggregate over envs** and **profiles.png**: each env's values min–max normalised over every run of that env.",
            "- **Continual runs**: end-of-task return and per-task AUC come from summary.json's `final_eval` / `auc_eval` "
            "(eval metric) or from the curve points inside the task (start_step < step ≤ end_step). Oracle ratios: per run, "
            "the "
            "mean over tasks 2..K of value_k / oracle_k, with oracle_k the oracle group's IQM over seeds on task k.",
            "- Figures: `curves.png` (IQM curve over a common step grid, each run's curve linearly interpolated; dashed lines "
            "= task switches, median step over runs)"
            + (
                ", `groups.png` (each group's curve beside its baseline's" + (" and the oracle's" if self.oracle else "") + ")"
                if self.compared_groups()
                else ""
            )
            + ", `profiles.png`"
            + (", `tasks.png` (per-task bars)." if self.continual_envs() else "."),
        ]
        if notes:
            methods += ["", "Notes:", *[f"- {note}" for note in notes]]
        return "\n".join(parts) + "\n", "\n".join(methods) + "\n"

    def write_csv(self, path: Path) -> None:
        fields = [field.name for field in dataclasses.fields(Row)]
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=fields)
            writer.writeheader()
            for row in self.rows:
                writer.writerow(dataclasses.asdict(row))


def seeds_cell(runs: list[RunRecord]) -> str:
    """A cell's seed count, and how many of its runs did not finish (their curves stop early): `4 (2 unfinished)`."""
    unfinished = sum(not run.finished for run in runs)
    return f"{len(runs)}{f' ({unfinished} unfinished)' if unfinished else ''}"


def _mean_and_error(mean: float, error: float) -> str:
    return f"{stats.format_number(mean)} ± {stats.format_number(error)}"


def nan_padded(columns: list) -> np.ndarray:
    """Per-env columns of different lengths as one (runs, envs) matrix, NaN below each column's end (stats' convention)."""
    matrix = np.full((max(len(column) for column in columns), len(columns)), np.nan)
    for k, column in enumerate(columns):
        matrix[: len(column), k] = column
    return matrix


def _palette(count: int) -> list:
    from matplotlib import colormaps

    if count <= 10:
        return [colormaps["tab10"](i) for i in range(count)]
    colors = [colormaps[name](i) for name in ("tab20", "tab20b", "tab20c") for i in range(20)]  # 60 before one repeats
    return [colors[i % len(colors)] for i in range(count)]


def _subplots(count: int, columns: int = 3, panel: tuple[float, float] = (5.2, 3.9)):
    from matplotlib.figure import Figure

    columns = min(columns, count)
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(panel[0] * columns, panel[1] * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    return figure, list(axes[:count])


def _fitted(text: str, width_inches: float, size: str = "large") -> str:
    """`text` broken after spaces and hyphens into lines no wider than `width_inches` at font `size`: a title stays
    whole in a figure of one narrow panel, and a long group name (ppo-layernorm-l2init-…) in its panel."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    font, lines, line = FontProperties(size=size), [], ""
    for piece in re.split(r"(?<=[ -])", text):
        if (
            line
            and text_to_path.get_text_width_height_descent((line + piece).rstrip(), font, ismath=False)[0] > 72 * width_inches
        ):
            lines.append(line.rstrip())
            line = ""
        line += piece
    return "\n".join([*lines, line.rstrip()])


def _suptitle(figure, text: str) -> None:
    figure.suptitle(_fitted(text, 0.95 * figure.get_figwidth()))


def _set_title(ax, text: str) -> None:
    """The panel's title, in lines no wider than the panel (before the layout leaves room for its labels)."""
    ax.set_title(_fitted(text, ax.get_position().width * ax.figure.get_figwidth()))


def _figure_legend(figure, axes) -> None:
    """One legend below all subplots (colours are the same in every subplot), so no curve is hidden behind it."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    # as many columns as fit the figure's width, and the figure grown by the legend's rows, so that a comparison of
    # many remedies keeps every label and its curves their height
    column_inches = 0.7 + 0.075 * max((len(label) for label in entries), default=0)
    columns = max(1, min(5, len(entries), int(figure.get_figwidth() // column_inches)))
    figure.set_figheight(figure.get_figheight() + 0.22 * math.ceil(len(entries) / columns))
    figure.legend(entries.values(), entries.keys(), loc="outside lower center", ncols=columns, fontsize="small")


def _step_axis(ax) -> None:
    from matplotlib.ticker import EngFormatter

    ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 200k, 1M instead of an offset exponent
    ax.grid(alpha=0.3)


def _median_switch_steps(runs: list[RunRecord]) -> list[float]:
    """The k-th task switch drawn at the median over runs of its step (switches wait for episode ends, so they differ)."""
    count = max((len(r.switch_steps) for r in runs), default=0)
    return [float(np.median([r.switch_steps[k] for r in runs if len(r.switch_steps) > k])) for k in range(count)]


def _save(figure, path: Path) -> None:
    figure.savefig(path, dpi=120)


def write_points(runs: list[RunRecord], path: Path) -> None:
    """points.csv: one row per (run, step) of its return curve, runs in (env, agent, group, seed) order."""
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["env_id", "agent", "exp_name", "seed", "step", "return", "finished"])
        for run in sorted(runs, key=lambda r: (r.env_id, r.agent, r.exp_name, r.seed)):
            for step, value in zip(run.steps, run.returns):
                point = [int(step), f"{float(value):.6g}", run.finished]
                writer.writerow([run.env_id, run.agent, run.exp_name, run.seed, *point])


def default_out_dir(first_path: str) -> Path:
    matches = sorted(glob.glob(first_path)) if glob.has_magic(first_path) else [first_path]
    first = Path(matches[0]) if matches else Path(first_path)
    return (first.parent if is_run_dir(first) else first) / "report"


def write_report(
    paths: Iterable[str | Path],
    out_dir: str | Path | None = None,
    baseline: str | None = None,
    oracle: str | None = None,
    reps: int = 2000,
    metric: str = "eval",
    verbose: bool = False,
    published: str | Path | None = None,
    finished_only: bool = False,
) -> Path:
    """Read the runs under `paths`, write report.md, report.csv and the figures into `out_dir`; return report.md's path.

    `out_dir` None means `<first runs dir>/report/`. With `verbose`, notes go to stderr and the tables to stdout."""
    paths = [str(p) for p in paths]
    if not paths:
        raise UserError("no run directories given — pass runs/ or run directories, e.g. cleanrl-plus report runs/")
    if metric not in METRIC_TAGS:
        raise UserError(f"unknown --metric '{metric}' — use eval, train or average-performance")
    if reps < 1:
        raise UserError(f"--reps must be >= 1, got {reps}")
    table = load_published(published) if published is not None else None
    if table is not None and table.metric != metric:
        raise UserError(f"--published {published} holds {table.metric} scores — add --metric {table.metric}")
    out = Path(out_dir) if out_dir is not None else default_out_dir(paths[0])
    directories, notes = find_run_dirs(paths, out)
    runs = []
    for directory in directories:
        try:
            runs.append(load_run(directory, metric))
        except SkippedRun as skipped:
            notes.append(str(skipped))
            continue
        if not runs[-1].finished:  # its "final" return is from where it stopped, and it shortens its group's curve
            kept = "left out (--finished-only)" if finished_only else "it is included, and its cells say so"
            notes.append(f"{directory} did not finish (last point at step {runs[-1].steps[-1]}); {kept}")
            if finished_only:
                runs.pop()
    if not runs:  # one line, which says why (the notes would only say it again, above the error)
        why = f" ({notes[0]}{f'; and {len(notes) - 1} more skipped' if len(notes) > 1 else ''})" if notes else ""
        raise UserError(
            f"no runs with {'evaluations' if metric == 'eval' else 'training returns'} found in {' '.join(paths)}{why} "
            "— pass runs/ or run directories (runs/<env>__<exp_name>__<seed>__<time>)"
        )
    if verbose:
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    if metric == "average-performance" and (without := [r.directory for r in runs if r.iteration_steps < 1]):
        raise UserError(
            f"--metric average-performance needs PPO/GTR runs (iterations of num_steps × num_envs); {without[0]} has none "
            "— report it with --metric train"
        )
    check_groups_agree(runs)
    report = Report(runs, metric, reps, baseline, oracle, table)
    tables, methods = report.markdown(notes)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "report.md", out / "report.csv", out / "points.csv", out / "curves.png", out / "profiles.png"]
    written[0].write_text(tables + "\n" + methods)
    report.write_csv(written[1])
    write_points(runs, written[2])
    report.plot_curves(written[3])
    report.plot_profiles(written[4])
    if report.compared_groups():
        written.append(out / "groups.png")
        report.plot_groups(written[-1])
    if report.continual_envs():
        written.append(out / "tasks.png")
        report.plot_tasks(written[-1])
    if verbose:
        print(tables)
        print("wrote " + ", ".join(str(p) for p in written))
    return written[0]


def parse(argv: list[str] | None = None) -> ReportArgs:
    return parse_flags(ReportArgs, argv or [], prog="cleanrl-plus report", description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> Path:
    args = parse(argv)
    return write_report(
        args.paths,
        args.out,
        args.baseline,
        args.oracle,
        args.reps,
        args.metric,
        verbose=True,
        published=args.published,
        finished_only=args.finished_only,
    )
