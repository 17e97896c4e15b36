"""rliable-style statistics with numpy only (Agarwal et al., "Deep RL at the Edge of the Statistical Precipice",
NeurIPS 2021; definitions as in rliable's `metrics.py` and `library.py`, see
docs/experiments.md).

Input convention (rliable's): the scores of one group (agent + settings) form a matrix of shape (runs, tasks).
A task with fewer runs than the others pads its column with NaN; a 1-D array is the runs of a single task.

- IQM: the 25% trimmed mean of all runs × tasks pooled (= scipy.stats.trim_mean(x, 0.25, axis=None)).
- mean: the mean over tasks of each task's mean over runs; median: the median over tasks of those means.
- optimality gap: γ − mean(min(score, γ)), averaged per task like the mean (γ = 1; lower is better).
- probability of improvement P(X > Y): per task the Mann–Whitney U statistic of X's runs against Y's runs
  divided by n·m (a tie counts 1/2), averaged over tasks.
- CIs: stratified bootstrap — runs are resampled with replacement within each task (X and Y independently for
  P(X > Y)) — and the percentile interval of the statistic over `reps` resamples. The generator is seeded, so
  the same scores give the same interval.
- performance profile: the fraction of runs with score > τ (averaged per task) over a grid of τ, with the same
  bootstrap bands.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

import numpy as np

# A statistic maps one resampled set of scores — a list with one (resamples, runs_of_task) array per task —
# to one value per resample.
Statistic = Callable[[list[np.ndarray]], np.ndarray]

MAX_ELEMENTS_PER_CHUNK = 4_000_000  # resamples are drawn in chunks so memory stays bounded (~32 MB of float64)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A point estimate and its confidence interval."""

    value: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{format_number(self.value)} [{format_number(self.low)}, {format_number(self.high)}]"


@dataclasses.dataclass(frozen=True)
class Profile:
    """A performance profile: at each threshold τ the fraction of runs scoring above it, with its CI band."""

    taus: np.ndarray
    fraction: np.ndarray
    low: np.ndarray
    high: np.ndarray


def format_number(value: float) -> str:
    """Short table cells, never exponents: 1234.5 → '1234', 295.04 → '295.0', 12.345 → '12.35', and three decimals
    below 10 (normalised scores and probabilities: 1 → '1.000', 0.007189 → '0.007')."""
    if not np.isfinite(value):
        return "n/a"
    magnitude = abs(value)
    decimals = 0 if magnitude >= 1000 else 1 if magnitude >= 100 else 2 if magnitude >= 10 else 3
    return f"{value:.{decimals}f}"


def task_columns(scores: np.ndarray) -> list[np.ndarray]:
    """The runs of each task, NaN padding dropped: a (runs, tasks) matrix → one 1-D array per task."""
    matrix = np.asarray(scores, dtype=float)
    if matrix.ndim == 1:
        matrix = matrix[:, None]
    if matrix.ndim != 2:
        raise ValueError(f"scores must be a (runs, tasks) matrix or a 1-D array of runs, got shape {matrix.shape}")
    columns = [column[~np.isnan(column)] for column in matrix.T]
    if not columns or any(len(column) == 0 for column in columns):
        raise ValueError("every task needs at least one run with a score")
    return columns


def trimmed_mean(values: np.ndarray, proportion: float = 0.25) -> np.ndarray:
    """Mean along the last axis after dropping int(proportion·n) values at each end (scipy's trim_mean)."""
    count = values.shape[-1]
    cut = int(proportion * count)
    return np.sort(values, axis=-1)[..., cut : count - cut].mean(axis=-1)


def _iqm_of(samples: list[np.ndarray]) -> np.ndarray:
    return trimmed_mean(np.concatenate(samples, axis=-1))


def _task_means(samples: list[np.ndarray]) -> np.ndarray:
    return np.stack([sample.mean(axis=-1) for sample in samples])  # (tasks, resamples)


def _mean_of(samples: list[np.ndarray]) -> np.ndarray:
    return _task_means(samples).mean(axis=0)


def _median_of(samples: list[np.ndarray]) -> np.ndarray:
    return np.median(_task_means(samples), axis=0)


def _optimality_gap_of(samples: list[np.ndarray], gamma: float = 1.0) -> np.ndarray:
    return gamma - _task_means([np.minimum(sample, gamma) for sample in samples]).mean(axis=0)


STATISTICS: dict[str, Statistic] = {
    "iqm": _iqm_of,
    "mean": _mean_of,
    "median": _median_of,
    "optimality_gap": _optimality_gap_of,
}


def _point(statistic: Statistic, scores: np.ndarray) -> float:
    return float(statistic([column[None, :] for column in task_columns(scores)])[0])


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean: the mean of the middle 50% of all scores pooled over runs and tasks."""
    return _point(_iqm_of, scores)


def mean(scores: np.ndarray) -> float:
    """Mean over tasks of the mean score over runs."""
    return _point(_mean_of, scores)


def median(scores: np.ndarray) -> float:
    """Median over tasks of the mean score over runs (rliable's aggregate median)."""
    return _point(_median_of, scores)


def optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> float:
    """How far scores fall short of γ, with scores above γ counted as γ: γ − mean(min(score, γ))."""
    return _point(lambda samples: _optimality_gap_of(samples, gamma), scores)


def _chunk_sizes(reps: int, elements_per_resample: int) -> Iterator[int]:
    """Split `reps` resamples into chunks of at most MAX_ELEMENTS_PER_CHUNK elements each."""
    chunk = max(1, MAX_ELEMENTS_PER_CHUNK // max(1, elements_per_resample))
    for start in range(0, reps, chunk):
        yield min(chunk, reps - start)


def _resample(columns: list[np.ndarray], size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """`size` stratified resamples: each task's runs drawn with replacement from that task's runs only."""
    return [column[rng.integers(0, len(column), size=(size, len(column)))] for column in columns]


def _percentile_interval(distribution: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(distribution, [tail, 100 - tail], axis=0)
    return low, high


def _check_bootstrap(reps: int, confidence: float) -> None:
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def bootstrap_ci(
    scores: np.ndarray, statistic: str | Statistic = "iqm", reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> Estimate:
    """`statistic` of `scores` (runs, tasks) with a stratified-bootstrap percentile interval.

    `statistic` is a name in STATISTICS or a function of a list of (resamples, runs_of_task) arrays."""
    _check_bootstrap(reps, confidence)
    function = STATISTICS[statistic] if isinstance(statistic, str) else statistic
    columns = task_columns(scores)
    rng = np.random.default_rng(seed)
    elements = sum(len(column) for column in columns)
    distribution = np.concatenate([function(_resample(columns, size, rng)) for size in _chunk_sizes(reps, elements)])
    low, high = _percentile_interval(distribution, confidence)
    return Estimate(_point(function, scores), float(low), float(high))


def _improvement_of(x_samples: list[np.ndarray], y_samples: list[np.ndarray]) -> np.ndarray:
    """P(X > Y) per resample: per task the fraction of (x, y) pairs with x > y, ties ½, then the task average."""
    per_task = []
    for x, y in zip(x_samples, y_samples):
        difference = x[:, :, None] - y[:, None, :]  # (resamples, n, m): every pair of runs
        per_task.append((difference > 0).mean(axis=(1, 2)) + 0.5 * (difference == 0).mean(axis=(1, 2)))
    return np.mean(per_task, axis=0)


def _paired_columns(x: np.ndarray, y: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    x_columns, y_columns = task_columns(x), task_columns(y)
    if len(x_columns) != len(y_columns):
        raise ValueError(f"X has {len(x_columns)} tasks but Y has {len(y_columns)}; both need the same tasks")
    return x_columns, y_columns


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y): the chance that a run of X beats a run of Y on the same task (Mann–Whitney U / n·m), task-averaged."""
    x_columns, y_columns = _paired_columns(x, y)
    return float(_improvement_of([c[None, :] for c in x_columns], [c[None, :] for c in y_columns])[0])


def probability_of_improvement_ci(
    x: np.ndarray, y: np.ndarray, reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> Estimate:
    """P(X > Y) with a percentile interval; X's and Y's runs are resampled independently within each task."""
    _check_bootstrap(reps, confidence)
    x_columns, y_columns = _paired_columns(x, y)
    rng = np.random.default_rng(seed)
    pairs = sum(len(a) * len(b) for a, b in zip(x_columns, y_columns))
    distribution = np.concatenate(
        [
            _improvement_of(_resample(x_columns, size, rng), _resample(y_columns, size, rng))
            for size in _chunk_sizes(reps, pairs)
        ]
    )
    low, high = _percentile_interval(distribution, confidence)
    return Estimate(probability_of_improvement(x, y), float(low), float(high))


def _fraction_above(samples: list[np.ndarray], taus: np.ndarray) -> np.ndarray:
    """(resamples, taus): the fraction of each task's runs above τ, averaged over tasks."""
    return np.mean([(sample[:, :, None] > taus).mean(axis=1) for sample in samples], axis=0)


def performance_profile(
    scores: np.ndarray, taus: np.ndarray, reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> Profile:
    """The fraction of runs with score > τ at each τ of `taus`, with stratified-bootstrap percentile bands."""
    _check_bootstrap(reps, confidence)
    taus = np.asarray(taus, dtype=float)
    columns = task_columns(scores)
    fraction = _fraction_above([column[None, :] for column in columns], taus)[0]
    rng = np.random.default_rng(seed)
    elements = sum(len(column) for column in columns) * len(taus)
    distribution = np.concatenate(
        [_fraction_above(_resample(columns, size, rng), taus) for size in _chunk_sizes(reps, elements)]
    )
    low, high = _percentile_interval(distribution, confidence)
    return Profile(taus, fraction, low, high)


def bootstrap_iqm_curve(
    curves: np.ndarray, reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IQM over runs at every point of `curves` (runs, points) and its percentile band.

    A resample draws whole runs (each run's points stay together); the band is the uncertainty of the IQM at each point."""
    _check_bootstrap(reps, confidence)
    curves = np.asarray(curves, dtype=float)
    runs = curves.shape[0]
    rng = np.random.default_rng(seed)
    distribution = []
    for size in _chunk_sizes(reps, curves.size):
        resampled = curves[rng.integers(0, runs, size=(size, runs))]  # (resamples, runs, points)
        distribution.append(trimmed_mean(np.swapaxes(resampled, 1, 2)))
    low, high = _percentile_interval(np.concatenate(distribution), confidence)
    return trimmed_mean(curves.T), low, high
