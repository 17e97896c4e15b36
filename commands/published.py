"""A published table beside ours: `cleanrl-plus report --metric average-performance --published FILE`.

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
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

from cleanrl_plus.errors import UserError

SCORES = ("average-performance",)  # the metrics whose per-cell mean ± s.e. the report computes


@dataclasses.dataclass(frozen=True)
class PublishedTable:
    source: str
    metric: str
    seeds: int
    rows: dict[str, str]  # the paper's row → our env id
    columns: dict[str, str]  # the paper's column → our exp_name, in the paper's order
    values: dict[tuple[str, str], tuple[float, float]]  # (row, column) → (mean, standard error)


def load_published(path: str | Path) -> PublishedTable:
    """Read and check FILE; every mistake is a UserError naming the key to fix."""
    name = f"--published {path}"
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{name}: no such file — pass a TOML file of a published table (e.g. benchmarks/published/)") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{name}: cannot read it ({error}) — pass a readable TOML file") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{name}: not valid TOML ({error}) — fix the file") from None
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
