"""A published table or published curves beside ours: `cleanrl-plus report [--metric average-performance] --published FILE`.

FILE (TOML) holds a paper's table once, with where it comes from, and says which of our env ids and groups (exp_names)
stand for its rows and columns:

    source = "Tang et al., ICML 2025 (arXiv 2506.00592), Table 1"
    metric = "average-performance"         # the score the paper prints; --metric must be the same
    seeds = 6                              # the paper's seeds per cell
    [rows]                                 # the paper's row → our env id
    "C-CartPole" = "continual:cchain-cartpole"
    [columns]                              # the paper's column → our group (exp_name), in the paper's order
    "Vanilla" = "ppo"
    [values."C-CartPole"]                  # mean and standard error, as printed
    "Vanilla" = [61.766, 6.927]

The report then gives each cell ours and theirs (mean ± s.e.), the difference, and whether the two differ by more than
their standard errors combined (|ours − theirs| > s.e.(ours) + s.e.(theirs)), the rule by which a cell needs an
explanation (docs/benchmarks.md).

A file of published learning curves (`[[curves]]`, e.g. benchmarks/published/offpolicy-curves.toml) holds instead,
per curve, the evaluation return's mean ± s.e. over the authors' seeds at a few steps, where it comes from (repository,
file, commit, and how to read it: benchmarks/published/offpolicy_curves.py recomputes it), the step unit, and which of
our env ids and groups it stands beside:

    metric = "eval"
    [[curves]]
    name = "TD3, HalfCheetah"
    env_id = "HalfCheetah-v5"              # our env id
    group = "td3"                          # our group (exp_name)
    source = "Fujimoto et al., ICML 2018 (arXiv 1802.09477), Figure 3"
    repository = "sfujim/TD3"
    commit = "34770ccdcb51df6f6c7d85c1ba7e40d71b940d16"
    files = "learning_curves/HalfCheetah/TD3_HalfCheetah-v1_*.npy"
    format = "npy"                         # npy (one array per seed), csv (long table), txt (step value per seed)
    evaluation_interval = 5000             # npy only: element k is the evaluation at step k × interval
    step_unit = "agent steps"              # or "env frames"
    action_repeat = 1                      # env frames per agent step in the authors' runs
    seeds = 10
    steps = [100000, 200000]
    mean = [5513.9, 6833.4]
    standard_error = [185.3, 228.1]

The report compares at equal env frames: a published step is frames = step (env frames) or step × action_repeat
(agent steps), and a run of ours is read at agent step frames / its own action repeat (its args.json, default 1).
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from pathlib import Path

import numpy as np

from envs.errors import UserError

SCORES = ("average-performance",)  # the metrics whose per-cell mean ± s.e. the report computes
CURVE_METRIC = "eval"  # published curves are of deterministic evaluations: eval/episodic_return
CURVE_FORMATS = ("npy", "csv", "txt")  # how the authors' per-seed files are laid out (offpolicy_curves.py reads each)
STEP_UNITS = ("agent steps", "env frames")


@dataclasses.dataclass(frozen=True)
class PublishedTable:
    source: str
    metric: str
    seeds: int
    rows: dict[str, str]  # the paper's row → our env id
    columns: dict[str, str]  # the paper's column → our exp_name, in the paper's order
    values: dict[tuple[str, str], tuple[float, float]]  # (row, column) → (mean, standard error)


@dataclasses.dataclass(frozen=True)
class PublishedCurve:
    """One published learning curve at a few steps: mean and standard error over the authors' seeds."""

    name: str
    env_id: str  # our env id
    group: str  # our exp_name
    source: str
    repository: str
    commit: str
    files: str  # path (a glob for one file per seed) inside the repository
    format: str
    select: dict[str, str]  # csv only: column → value picking this curve's rows
    evaluation_interval: int  # npy only: steps between consecutive elements (element 0: before any training)
    step_unit: str
    action_repeat: int
    seeds: int
    points: dict[int, tuple[float, float]]  # step (in step_unit) → (mean, standard error)

    def frames(self, step: int) -> int:
        """Env frames (control steps) at a published step."""
        return step if self.step_unit == "env frames" else step * self.action_repeat


@dataclasses.dataclass(frozen=True)
class PublishedCurves:
    source: str
    metric: str
    curves: list[PublishedCurve]


def mean_and_standard_error(values) -> tuple[float, float]:
    """Mean and standard error over seeds, s.e. = sample standard deviation (ddof 1) / √n; NaN s.e. for one value.
    Both sides of a comparison use it: ours from our runs, theirs from the authors' per-seed files."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        raise ValueError("mean and standard error of no values")
    error = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else math.nan
    return float(values.mean()), error


def _read_toml(path: str | Path) -> dict:
    name = f"--published {path}"
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(
            f"{name}: no such file — pass a TOML file of a published table or curves (e.g. benchmarks/published/)"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{name}: cannot read it ({error}) — pass a readable TOML file") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{name}: not valid TOML ({error}) — fix the file") from None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _load_curve(name: str, index: int, entry) -> PublishedCurve:
    where = f"{name}: curves[{index}]"
    if not isinstance(entry, dict):
        raise UserError(f"{where} must be a table ([[curves]]) — fix the file")
    texts = ("name", "env_id", "group", "source", "repository", "commit", "files", "format", "step_unit")
    for key in texts:
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise UserError(f"{where} needs `{key}` (a non-empty string) — add it (commands/published.py shows the layout)")
    where = f"{name}: curve '{entry['name']}'"
    if entry["format"] not in CURVE_FORMATS:
        raise UserError(f"{where}: format '{entry['format']}' is unknown — use one of {', '.join(CURVE_FORMATS)}")
    if entry["step_unit"] not in STEP_UNITS:
        raise UserError(f"{where}: step_unit '{entry['step_unit']}' is unknown — use {' or '.join(map(repr, STEP_UNITS))}")
    if not re.fullmatch(r"[0-9a-f]{40}", entry["commit"]):
        raise UserError(f"{where}: commit must be the full 40-character hash of the authors' repository — fix it")
    for key in ("action_repeat", "seeds"):
        if not _is_count(entry.get(key)):
            raise UserError(f"{where} needs `{key}` (an integer ≥ 1) — add it")
    select = entry.get("select", {})
    if entry["format"] == "csv" and not (
        isinstance(select, dict) and select and all(isinstance(v, str) for v in select.values())
    ):
        raise UserError(f'{where}: a csv curve needs `select` (column → value, e.g. {{env_name = "walker_walk"}}) — add it')
    interval = entry.get("evaluation_interval", 0)
    if entry["format"] == "npy" and not _is_count(interval):
        raise UserError(f"{where}: an npy curve needs `evaluation_interval` (steps per array element, ≥ 1) — add it")
    steps, means, errors = (entry.get(key) for key in ("steps", "mean", "standard_error"))
    if not all(isinstance(v, list) and v for v in (steps, means, errors)) or not len(steps) == len(means) == len(errors):
        raise UserError(f"{where}: `steps`, `mean` and `standard_error` must be lists of the same length — fix them")
    if not all(_is_count(step) for step in steps) or sorted(set(steps)) != steps:
        raise UserError(f"{where}: `steps` must be ascending distinct integers ≥ 1, got {steps!r}")
    if not all(_is_number(m) for m in means) or not all(_is_number(e) and e >= 0 for e in errors):
        raise UserError(f"{where}: `mean` must be finite numbers and `standard_error` finite numbers ≥ 0 — fix them")
    return PublishedCurve(
        **{key: entry[key] for key in texts},
        select=dict(select),
        evaluation_interval=int(interval),
        action_repeat=entry["action_repeat"],
        seeds=entry["seeds"],
        points={step: (float(m), float(e)) for step, m, e in zip(steps, means, errors)},
    )


def load_curves(path: str | Path, data: dict | None = None) -> PublishedCurves:
    """Read and check a file of published curves; every mistake is a UserError naming the key to fix."""
    name = f"--published {path}"
    data = _read_toml(path) if data is None else data
    if not isinstance(data.get("source"), str):
        raise UserError(f"{name}: needs `source` (str) — add it (commands/published.py shows the layout)")
    if data.get("metric") != CURVE_METRIC:
        raise UserError(f'{name}: published curves are of evaluation returns — set metric = "{CURVE_METRIC}"')
    if not isinstance(data.get("curves"), list) or not data["curves"]:
        raise UserError(f"{name}: needs [[curves]] entries — add them (commands/published.py shows the layout)")
    curves = [_load_curve(name, index, entry) for index, entry in enumerate(data["curves"])]
    names = [curve.name for curve in curves]
    if len(set(names)) < len(names):
        raise UserError(f"{name}: two curves are named '{next(n for n in names if names.count(n) > 1)}' — name each once")
    return PublishedCurves(data["source"], data["metric"], curves)


def load_published(path: str | Path) -> PublishedTable | PublishedCurves:
    """Read and check FILE, a paper's table or (with [[curves]]) published curves; every mistake is a UserError naming
    the key to fix."""
    name = f"--published {path}"
    data = _read_toml(path)
    if "curves" in data:
        return load_curves(path, data)
    for key, kind in (("source", str), ("metric", str), ("seeds", int), ("rows", dict), ("columns", dict), ("values", dict)):
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise UserError(f"{name}: needs `{key}` ({kind.__name__}) — add it (commands/published.py shows the layout)")
    if data["metric"] not in SCORES:
        raise UserError(f"{name}: metric '{data['metric']}' is not one the report scores — use {', '.join(SCORES)}")
    rows, columns = data["rows"], data["columns"]
    for table, mapping in (("rows", rows), ("columns", columns)):
        if not mapping or not all(isinstance(v, str) and v for v in mapping.values()):
            raise UserError(f"{name}: [{table}] must map each of the paper's names to one of ours (a non-empty string)")
    values = {}
    for row, cells in data["values"].items():
        if row not in rows:
            raise UserError(f'{name}: [values."{row}"] is not a row of [rows] — add it there or fix the name')
        for column, cell in cells.items():
            if column not in columns:
                raise UserError(f'{name}: values."{row}"."{column}" is not a column of [columns] — fix the name')
            if not (
                isinstance(cell, list)
                and len(cell) == 2
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in cell)
                and cell[1] >= 0
            ):
                raise UserError(f'{name}: values."{row}"."{column}" must be [mean, standard error ≥ 0], got {cell!r}')
            values[row, column] = (float(cell[0]), float(cell[1]))
    return PublishedTable(data["source"], data["metric"], data["seeds"], dict(rows), dict(columns), values)


def differs(ours: tuple[float, float], theirs: tuple[float, float]) -> bool:
    """Whether two mean ± s.e. cells lie further apart than their standard errors combined (a NaN s.e., one seed,
    counts as 0)."""
    spread = sum(0.0 if math.isnan(error) else error for _, error in (ours, theirs))
    return abs(ours[0] - theirs[0]) > spread
