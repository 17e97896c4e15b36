"""rliable-style statistics (commands/stats.py) against hand-computed values, and the bootstrap's coverage."""

import numpy as np
import pytest

from commands import stats


def test_iqm_is_the_mean_of_the_middle_half_of_all_scores_pooled():
    assert stats.iqm(np.arange(1, 9)) == pytest.approx(4.5)  # middle half of 1..8: 3, 4, 5, 6
    assert stats.iqm([1, 2, 3, 4, 5, 6, 7, 1000]) == pytest.approx(4.5)  # the outlier is trimmed
    assert stats.iqm(np.arange(1, 10)) == pytest.approx(5.0)  # 9 values: int(0.25·9) = 2 cut at each end → 3..7
    assert stats.iqm([[1, 8], [7, 2], [3, 6], [5, 4]]) == pytest.approx(4.5)  # (runs, tasks) pooled, as axis=None
    assert stats.iqm([[1, 5], [2, np.nan]]) == pytest.approx(8 / 3)  # NaN pads a task with fewer runs; 3 values, none cut


def test_trimmed_mean_works_along_the_last_axis():
    values = np.array([[1.0, 2, 3, 100], [4, 4, 0, -50]])
    np.testing.assert_allclose(stats.trimmed_mean(values), [2.5, 2.0])  # int(0.25·4) = 1 cut at each end
    np.testing.assert_allclose(stats.trimmed_mean(values, proportion=0.0), values.mean(axis=1))


def test_mean_and_median_average_each_task_first_like_rliable():
    scores = np.array([[1.0, 10, 0], [3, np.nan, 4]])  # task means 2, 10, 2 (task 2 has one run)
    assert stats.mean(scores) == pytest.approx(14 / 3)  # a pooled mean would give 18/5
    assert stats.median(scores) == pytest.approx(2.0)


def test_optimality_gap_counts_scores_above_gamma_as_gamma():
    assert stats.optimality_gap([0.5, 1.5, 0.2]) == pytest.approx(1 - (0.5 + 1.0 + 0.2) / 3)
    assert stats.optimality_gap([0.5, 1.5, 0.2], gamma=2.0) == pytest.approx(2 - (0.5 + 1.5 + 0.2) / 3)
    assert stats.optimality_gap([3.0, 4.0]) == 0.0


def test_probability_of_improvement_on_hand_cases_with_ties():
    assert stats.probability_of_improvement([3, 4], [1, 2]) == 1.0
    assert stats.probability_of_improvement([1, 2], [3, 4]) == 0.0
    # pairs (1,1) tie ½, (1,0) 1, (2,1) 1, (2,0) 1 → 3.5 / 4
    assert stats.probability_of_improvement([1, 2], [1, 0]) == pytest.approx(0.875)
    assert stats.probability_of_improvement([5, 5, 5], [5, 5]) == 0.5
    # two tasks: X always wins on the first, always loses on the second → averaged over tasks
    assert stats.probability_of_improvement([[9, 0], [8, 1]], [[1, 5], [2, 6]]) == pytest.approx(0.5)
    # 3 runs against 2 on one task: pairs won 1 + 2 + 2 = 5 of 6
    assert stats.probability_of_improvement([1.5, 3, 4], [1, 2]) == pytest.approx(5 / 6)
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(7, 3)), rng.normal(size=(5, 3))
    assert stats.probability_of_improvement(x, y) + stats.probability_of_improvement(y, x) == pytest.approx(1.0)


def test_bootstrap_ci_resamples_within_each_task():
    # Task 1 always scores 0 and task 2 always 10, with different run counts: resampling within each task keeps
    # the task means, so the mean is exactly 5 in every resample; resampling pooled runs would move it.
    scores = np.array([[0.0, 10], [0, 10], [0, 10], [0, np.nan]])
    estimate = stats.bootstrap_ci(scores, "mean", reps=500)
    assert (estimate.value, estimate.low, estimate.high) == (5.0, 5.0, 5.0)


def test_bootstrap_ci_is_seeded_and_brackets_the_point_estimate():
    scores = np.random.default_rng(0).normal(size=(10, 4))
    first, again = stats.bootstrap_ci(scores, reps=300, seed=3), stats.bootstrap_ci(scores, reps=300, seed=3)
    assert first == again
    assert stats.bootstrap_ci(scores, reps=300, seed=4) != first
    for statistic in ("iqm", "mean", "median", "optimality_gap"):
        estimate = stats.bootstrap_ci(scores, statistic, reps=300)
        assert estimate.low <= estimate.value <= estimate.high
    assert stats.bootstrap_ci(scores, "iqm", reps=300).value == pytest.approx(stats.iqm(scores))


def test_bootstrap_ci_of_the_mean_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    covered = 0
    for experiment in range(200):
        estimate = stats.bootstrap_ci(rng.normal(size=30), "mean", reps=1000, seed=experiment)
        covered += estimate.low <= 0.0 <= estimate.high
    # percentile intervals run slightly narrow at n = 30 (≈ 93%); 200 experiments give ±2% of noise
    assert 0.88 <= covered / 200 <= 0.99, covered


def test_probability_of_improvement_ci():
    clear_win = stats.probability_of_improvement_ci([10, 11, 12], [1, 2, 3], reps=300)
    assert (clear_win.value, clear_win.low, clear_win.high) == (1.0, 1.0, 1.0)
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(10, 2)), rng.normal(size=(8, 2))
    estimate = stats.probability_of_improvement_ci(x, y, reps=500, seed=1)
    assert estimate.value == pytest.approx(stats.probability_of_improvement(x, y))
    assert 0.0 <= estimate.low < estimate.value < estimate.high <= 1.0
    assert estimate == stats.probability_of_improvement_ci(x, y, reps=500, seed=1)


def test_performance_profile_counts_runs_strictly_above_each_threshold():
    profile = stats.performance_profile([0.1, 0.5, 0.9], [0.0, 0.5, 1.0], reps=200)
    np.testing.assert_allclose(profile.fraction, [1.0, 1 / 3, 0.0])
    # per task, then averaged: task 1 has 1 of 2 runs above 0.5, task 2 has 1 of 1
    two_tasks = stats.performance_profile([[0.2, 0.8], [0.7, np.nan]], [0.5], reps=200)
    np.testing.assert_allclose(two_tasks.fraction, [0.75])
    assert np.all(profile.low <= profile.fraction) and np.all(profile.fraction <= profile.high)
    assert profile.low[0] == profile.high[0] == 1.0  # every resample is above τ = 0


def test_bootstrap_iqm_curve():
    curves = np.array([[0.0, 1, 2], [1, 2, 3], [2, 3, 4], [30, 40, 50]])
    middle, low, high = stats.bootstrap_iqm_curve(curves, reps=300)
    np.testing.assert_allclose(middle, [1.5, 2.5, 3.5])  # 4 runs: the two middle ones at each point
    assert np.all(low <= middle) and np.all(middle <= high) and np.all(high > low)
    flat = stats.bootstrap_iqm_curve(np.ones((3, 5)), reps=100)
    np.testing.assert_allclose(np.stack(flat), 1.0)


def test_bad_input_is_a_clear_value_error():
    with pytest.raises(ValueError, match="matrix"):
        stats.iqm(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="at least one run"):
        stats.iqm([[1.0, np.nan], [2.0, np.nan]])
    with pytest.raises(ValueError, match="same tasks"):
        stats.probability_of_improvement(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="reps"):
        stats.bootstrap_ci([1.0, 2.0], reps=0)


def test_format_number():
    assert [stats.format_number(v) for v in (12345.6, 295.04, 12.346, 1.0, 0.007189, -0.5, float("nan"))] == [
        "12346",
        "295.0",
        "12.35",
        "1.000",
        "0.007",
        "-0.500",
        "n/a",
    ]
    assert str(stats.Estimate(0.5, 0.25, 0.75)) == "0.500 [0.250, 0.750]"
