"""Recompute the published curves of offpolicy-curves.toml from the authors' own per-seed files, and say where they
differ from the numbers in the file.

    git clone https://github.com/sfujim/TD3 sources/TD3   # and SonyResearch/simba, dmksjfl/CIR,
    git -C sources/TD3 checkout <commit>                  # evgenii-nikishin/rl_with_resets: each at the file's commit
    python benchmarks/published/offpolicy_curves.py sources/ [--curves benchmarks/published/offpolicy-curves.toml]

SOURCES holds one checkout per repository, named as `git clone` names it (TD3, simba, CIR, rl_with_resets). Each
curve's `files` are read by its `format`:

- npy: one array per seed (sfujim/TD3 learning_curves/, README "Results"): element k is the mean return of 10
  deterministic episodes after k × evaluation_interval steps, element 0 the untrained policy.
- csv: one long table (SonyResearch/simba results/*.csv, dmksjfl/CIR results/cir.csv; columns exp_name, env_name,
  seed, metric, env_step, value): the rows whose columns equal `select`, env_step → value per seed.
- txt: one file per seed of "step return" lines (evgenii-nikishin/rl_with_resets curves/, written by train_dense.py).

At each step, the mean and standard error over the seeds that have it (commands.published.mean_and_standard_error,
the statistic the report gives our runs). Exit status 1 when a recomputed number differs from the file's.
"""

from __future__ import annotations

import argparse
import csv
import glob
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from commands.published import PublishedCurve, load_curves, mean_and_standard_error  # noqa: E402

DECIMALS = 3  # the file's numbers are rounded to this many decimals


def read_npy(paths: list[Path], evaluation_interval: int) -> dict[str, dict[int, float]]:
    return {path.stem: {k * evaluation_interval: float(v) for k, v in enumerate(np.load(path))} for path in paths}


def read_csv(path: Path, select: dict[str, str]) -> dict[str, dict[int, float]]:
    returns: dict[str, dict[int, float]] = {}
    with path.open(newline="") as file:
        for row in csv.DictReader(file):
            if all(row.get(column) == wanted for column, wanted in select.items()):
                returns.setdefault(row["seed"], {})[int(float(row["env_step"]))] = float(row["value"])
    return returns


def read_txt(paths: list[Path]) -> dict[str, dict[int, float]]:
    return {path.stem: {int(step): float(value) for step, value in np.loadtxt(path, ndmin=2)} for path in paths}


def per_seed_returns(curve: PublishedCurve, checkout: Path) -> dict[str, dict[int, float]]:
    """seed → step → evaluation return, from the curve's files in `checkout` (the authors' repository)."""
    paths = sorted(Path(p) for p in glob.glob(str(checkout / curve.files)))
    if not paths:
        raise FileNotFoundError(f"{checkout / curve.files}: no such file — clone {curve.repository} at {curve.commit}")
    if curve.format == "npy":
        return read_npy(paths, curve.evaluation_interval)
    if curve.format == "csv":
        return read_csv(paths[0], curve.select)
    return read_txt(paths)


def recompute(curve: PublishedCurve, checkout: Path) -> dict[int, tuple[float, float, int]]:
    """step → (mean, standard error, seeds) at each of the curve's steps."""
    returns = per_seed_returns(curve, checkout)
    points = {}
    for step in curve.points:
        values = [by_step[step] for by_step in returns.values() if step in by_step]
        points[step] = (*mean_and_standard_error(values), len(values)) if values else (math.nan, math.nan, 0)
    return points


def check(curves_path: Path, sources: Path) -> list[str]:
    """One line per curve and step, recomputed beside the file's; lines that differ start with 'DIFFERS'."""
    lines = []
    for curve in load_curves(curves_path).curves:
        checkout = sources / curve.repository.split("/")[1]
        for step, (mean, error, seeds) in recompute(curve, checkout).items():
            stored_mean, stored_error = curve.points[step]
            agrees = (
                seeds == curve.seeds
                and round(mean, DECIMALS) == stored_mean
                and round(error if seeds > 1 else 0.0, DECIMALS) == stored_error
            )
            lines.append(
                f"{'agrees ' if agrees else 'DIFFERS'} {curve.name} at {step} {curve.step_unit}: recomputed "
                f"{mean:.{DECIMALS}f} ± {error:.{DECIMALS}f} over {seeds} seeds, file {stored_mean} ± {stored_error} "
                f"over {curve.seeds}"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", type=Path, help="folder of the authors' checkouts (TD3, simba, CIR, rl_with_resets)")
    parser.add_argument("--curves", type=Path, default=Path(__file__).with_name("offpolicy-curves.toml"))
    args = parser.parse_args(argv)
    lines = check(args.curves, args.sources)
    print("\n".join(lines))
    return 1 if any(line.startswith("DIFFERS") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
