"""`cleanrl-plus report --published FILE`: a paper's table read from one file and each of its cells set beside ours."""

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from test_report import read_rows, value, write_run

from commands import published, report

ROOT = Path(__file__).resolve().parents[1]
TABLE1 = ROOT / "benchmarks" / "published" / "cchain-table1.toml"
ENV_ID = "continual:cchain-cartpole"

SMALL_TABLE = """
source = "a paper, Table 9"
metric = "average-performance"
seeds = 6
[rows]
"C-CartPole" = "continual:cchain-cartpole"
[columns]
"Vanilla" = "ppo"
"Oracle" = "ppo-oracle"
[values."C-CartPole"]
"Vanilla" = [5.0, 0.2]
"Oracle" = [300.0, 6.0]
"""


def write_eq1_runs(runs_dir: Path, exp_name: str, episodes: dict[int, list[tuple[int, float]]]) -> None:
    """PPO runs of iterations of 10 steps whose training episodes end at the given (step, return) points."""
    for seed, points in episodes.items():
        directory = write_run(runs_dir, "ppo", exp_name, seed, [], env_id=ENV_ID, train_points=points)
        args = json.loads((directory / "args.json").read_text()) | {"num_steps": 10, "num_envs": 1}
        (directory / "args.json").write_text(json.dumps(args))


def test_each_published_cell_sits_beside_ours_with_the_difference(tmp_path):
    """Vanilla: runs scoring 5 and 6 → 5.5 ± 0.5 beside 5.0 ± 0.2: 0.5 apart, within 0.7 combined. The oracle was not
    run: the cell says so and keeps the paper's value."""
    runs_dir, table = tmp_path / "runs", tmp_path / "table.toml"
    write_eq1_runs(runs_dir, "ppo", {1: [(10, 5.0), (20, 5.0)], 2: [(10, 6.0), (20, 6.0)]})
    table.write_text(SMALL_TABLE)
    report.main([str(runs_dir), "--metric", "average-performance", "--reps", "20", "--published", str(table)])
    text = (runs_dir / "report" / "report.md").read_text()
    assert "## Beside the published table: a paper, Table 9" in text
    assert (
        "| C-CartPole (`continual:cchain-cartpole`) | Vanilla (`ppo`) | 2 / 6 | 5.500 ± 0.500 | 5.000 ± 0.200 | 0.500 | no |"
        in text
    )
    assert "| C-CartPole (`continual:cchain-cartpole`) | Oracle (`ppo-oracle`) | 0 / 6 | not run | 300.0 ± 6.000 | | |" in text
    assert text.index("Vanilla (`ppo`) | 2") < text.index("Oracle (`ppo-oracle`)")  # the paper's order, not sorted
    rows = read_rows(runs_dir / "report")
    where = dict(table="published", group="ppo", env_id=ENV_ID)
    assert value(rows, estimator="mean", **where)[0] == pytest.approx(5.5)
    assert value(rows, estimator="standard_error", **where)[0] == pytest.approx(0.5)
    assert value(rows, estimator="published_mean", **where)[0] == pytest.approx(5.0)
    assert value(rows, estimator="published_standard_error", **where)[0] == pytest.approx(0.2)


def test_a_cell_further_apart_than_both_standard_errors_is_marked(tmp_path):
    runs_dir, table = tmp_path / "runs", tmp_path / "table.toml"
    write_eq1_runs(runs_dir, "ppo", {1: [(10, 9.0)], 2: [(10, 9.0)]})  # 9 ± 0 against 5 ± 0.2
    table.write_text(SMALL_TABLE)
    report.write_report([runs_dir], metric="average-performance", reps=20, published=table)
    assert "| 2 / 6 | 9.000 ± 0.000 | 5.000 ± 0.200 | 4.000 | **yes** |" in (runs_dir / "report" / "report.md").read_text()


def test_differs_is_strictly_beyond_the_combined_standard_errors():
    assert not published.differs((10.0, 1.0), (12.0, 1.0))  # 2 apart, 2 combined: on the edge, not beyond
    assert published.differs((10.0, 1.0), (12.5, 1.0))
    assert published.differs((12.5, 1.0), (10.0, 1.0))  # either side
    assert published.differs((10.0, math.nan), (10.5, 0.4))  # one seed: its s.e. counts as 0
    assert not published.differs((10.0, math.nan), (10.3, 0.4))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda text: text.replace('metric = "average-performance"\n', ""), "needs `metric`"),
        (lambda text: text.replace("seeds = 6", 'seeds = "six"'), "needs `seeds`"),
        (lambda text: text.replace('metric = "average-performance"', 'metric = "eval"'), "not one the report scores"),
        (lambda text: text.replace('[values."C-CartPole"]', '[values."C-Acrobot"]'), 'values."C-Acrobot"'),
        (lambda text: text.replace('"Vanilla" = [5.0, 0.2]', '"Vanila" = [5.0, 0.2]'), "is not a column"),
        (lambda text: text.replace("[5.0, 0.2]", "[5.0, -0.2]"), "must be \\[mean, standard error"),
        (lambda text: text.replace("[5.0, 0.2]", "[5.0]"), "must be \\[mean, standard error"),
        (lambda text: text.replace("[5.0, 0.2]", "[5.0, nan]"), "must be \\[mean, standard error"),
        (lambda text: text.replace('"Oracle" = "ppo-oracle"', '"Oracle" = ""'), "\\[columns\\] must map"),
        (lambda text: text + "\n[[", "not valid TOML"),
    ],
)
def test_a_broken_table_file_is_refused_naming_what_to_fix(tmp_path, edit, message):
    path = tmp_path / "table.toml"
    path.write_text(edit(SMALL_TABLE))
    with pytest.raises(published.UserError, match=message):
        published.load_published(path)


def test_a_missing_file_and_another_metric_are_refused_before_any_run_is_read(tmp_path):
    with pytest.raises(published.UserError, match="no such file"):
        report.write_report([tmp_path / "nowhere"], metric="average-performance", published=tmp_path / "none.toml")
    table = tmp_path / "table.toml"
    table.write_text(SMALL_TABLE)
    with pytest.raises(report.UserError, match="add --metric average-performance"):
        report.write_report([tmp_path / "nowhere"], metric="train", published=table)


def test_the_c_chain_table_file_is_the_papers_table_1():
    """Every cell of the file against the paper's Table 1 as printed (also bluecontra/C-CHAIN
    assets/results_for_crl_gym_control.png), and its groups are the plan's columns."""
    table = published.load_published(TABLE1)
    assert table.seeds == 6 and table.metric == "average-performance"
    assert list(table.columns) == ["Oracle", "Vanilla", "TRAC", "Weight Clipping", "L2 Init", "C-CHAIN"]
    sums = {"Oracle": -147.302, "Vanilla": -1156.958, "TRAC": -407.256, "Weight Clipping": -290.99}
    sums |= {"L2 Init": -243.985, "C-CHAIN": -221.22}
    for column, total in sums.items():  # the table's own "Agg." row: the sum of the four rows
        assert sum(table.values[row, column][0] for row in table.rows) == pytest.approx(total, abs=2e-3)
    assert table.values["C-CartPole", "C-CHAIN"] == (160.396, 14.643)
    assert table.values["C-Acrobot", "Vanilla"] == (-372.725, 3.268)
    plan = tomllib.loads((ROOT / "benchmarks" / "cchain-gym-control.toml").read_text())
    assert {f"ppo-{name}" if name != "baseline" else "ppo" for name in plan["config"]} == set(table.columns.values())
    assert set(plan["env_id"]) <= set(table.rows.values())
    assert np.all([error >= 0 for _, error in table.values.values()])
