"""Published learning curves beside ours: the data file (benchmarks/published/offpolicy-curves.toml), the script that
recomputes it from the authors' per-seed files, and `cleanrl-plus report --published` comparing at published steps."""

import importlib.util
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from test_report import read_rows, value, write_run

import envs
from commands import published, report

ROOT = Path(__file__).resolve().parents[1]
CURVES = ROOT / "benchmarks" / "published" / "offpolicy-curves.toml"
spec = importlib.util.spec_from_file_location("offpolicy_curves", ROOT / "benchmarks" / "published" / "offpolicy_curves.py")
curves_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(curves_script)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SMALL_CURVES = f"""
source = "two small curves"
metric = "eval"

[[curves]]
name = "TD3, Hopper"
env_id = "Hopper-v5"
group = "td3"
source = "a paper"
repository = "someone/TD3"
commit = "{COMMIT}"
files = "curves/Hopper_*.npy"
format = "npy"
evaluation_interval = 5000
step_unit = "agent steps"
action_repeat = 1
seeds = 10
steps = [50000, 100000]
mean = [5.0, 20.0]
standard_error = [0.5, 1.0]

[[curves]]
name = "SAC, walker-walk"
env_id = "dmc:walker-walk"
group = "sac_simba-sac"
source = "another paper"
repository = "someone/simba"
commit = "{COMMIT}"
files = "results/sac.csv"
format = "csv"
select = {{ exp_name = "sac", env_name = "walker_walk", metric = "avg_return" }}
step_unit = "env frames"
action_repeat = 2
seeds = 10
steps = [100000]
mean = [300.0]
standard_error = [10.0]
"""


# ---------------------------------------------------------------- the data file


def test_the_curves_file_holds_the_authors_numbers_at_the_compared_steps():
    """Readings recomputed from the authors' files at the commits named (sfujim/TD3 learning_curves/, SonyResearch/simba
    results/, dmksjfl/CIR results/cir.csv, evgenii-nikishin/rl_with_resets curves/sac/), as the issue first read them."""
    curves = {curve.name: curve for curve in published.load_curves(CURVES).curves}
    assert curves["TD3, HalfCheetah"].points[100000] == (5513.518, 184.564)
    assert curves["TD3, HalfCheetah"].points[300000] == (7697.13, 242.483)
    assert curves["TD3, Hopper"].points[150000] == (1211.122, 285.2)
    assert curves["TD3, Hopper"].points[200000] == (2441.101, 248.705)
    assert curves["TD3, Walker2d"].points[300000] == (3335.474, 318.918)
    assert curves["SAC, walker-walk"].points[50000] == (340.885, 29.264)
    assert curves["SAC+SimBa, walker-walk"].points[100000] == (951.438, 10.588)
    assert curves["SAC+SimBa, cheetah-run"].points[50000] == (428.969, 18.386)
    assert curves["CIR, walker-walk"].points[100000] == (962.272, 2.006)
    assert curves["CIR, walker-walk"].points[25000] == (373.955, 50.701)
    assert curves["SAC at 1 update per step, no reset, cheetah-run"].points[300000] == (731.43, 14.941)
    assert curves["SAC at 1 update per step, full reset every 200k, cheetah-run"].points[300000] == (617.3, 23.609)
    assert all(curve.seeds == 10 for curve in curves.values())
    for curve in curves.values():  # the step unit follows each repository's logging
        dmc_frames = curve.repository in ("SonyResearch/simba", "dmksjfl/CIR")
        assert (curve.step_unit, curve.action_repeat) == (("env frames", 2) if dmc_frames else ("agent steps", 1))
        envs.validate_env_id(curve.env_id)  # each maps onto an env id of ours
        assert curve.env_id.startswith("dmc:") == curve.repository.endswith(("simba", "CIR", "rl_with_resets"))
    pairs = [(curve.env_id, curve.group) for curve in curves.values()]
    assert len(set(pairs)) == len(pairs)  # one published curve per env and group of ours


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda text: text.replace('metric = "eval"', 'metric = "train"'), 'set metric = "eval"'),
        (lambda text: text.replace(f'commit = "{COMMIT}"', 'commit = "34770cc"', 1), "full 40-character hash"),
        (lambda text: text.replace('format = "npy"', 'format = "npz"'), "format 'npz' is unknown"),
        (lambda text: text.replace('step_unit = "env frames"', 'step_unit = "frames"'), "step_unit 'frames'"),
        (lambda text: text.replace("evaluation_interval = 5000\n", ""), "needs `evaluation_interval`"),
        (lambda text: re.sub(r"select = .*\n", "", text), "needs `select`"),
        (lambda text: text.replace("mean = [5.0, 20.0]", "mean = [5.0]"), "lists of the same length"),
        (lambda text: text.replace("steps = [50000, 100000]", "steps = [100000, 50000]"), "ascending distinct"),
        (lambda text: text.replace("standard_error = [0.5, 1.0]", "standard_error = [0.5, -1.0]"), "finite numbers ≥ 0"),
        (lambda text: text.replace("seeds = 10", "seeds = 0", 1), "needs `seeds`"),
        (lambda text: text.replace('group = "td3"\n', ""), "needs `group`"),
        (lambda text: text.replace('"SAC, walker-walk"', '"TD3, Hopper"'), "two curves are named 'TD3, Hopper'"),
    ],
)
def test_a_broken_curves_file_is_refused_naming_what_to_fix(tmp_path, edit, message):
    path = tmp_path / "curves.toml"
    path.write_text(edit(SMALL_CURVES))
    with pytest.raises(published.UserError, match=message):
        published.load_published(path)


def test_a_published_step_in_agent_steps_is_that_many_times_the_action_repeat_in_frames(tmp_path):
    path = tmp_path / "curves.toml"
    path.write_text(SMALL_CURVES.replace("action_repeat = 1", "action_repeat = 4"))
    hopper, walker = published.load_curves(path).curves
    assert hopper.frames(50000) == 200000  # agent steps of 4 frames each
    assert walker.frames(100000) == 100000  # counted in frames already


def test_mean_and_standard_error_uses_the_sample_standard_deviation():
    assert published.mean_and_standard_error([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1 / math.sqrt(3)))  # s.d. 1 (ddof 1)
    mean, error = published.mean_and_standard_error([7.0])
    assert mean == 7.0 and math.isnan(error)


# ---------------------------------------------------------------- recomputing from the authors' files


def write_authors_files(sources):
    """The two SMALL_CURVES sources as their authors lay them out, with numbers whose statistics are easy by hand."""
    td3 = sources / "TD3" / "curves"
    td3.mkdir(parents=True)
    for seed, offset in enumerate([0.0, 2.0]):  # at 50k (element 10): 4 and 6 → 5 ± 1; at 100k (element 20): 19, 21
        np.save(td3 / f"Hopper_{seed}.npy", np.arange(21, dtype=float) - 6.0 + offset + np.eye(21)[20] * 5.0)
    simba = sources / "simba" / "results"
    simba.mkdir(parents=True)
    lines = [",exp_name,env_name,seed,metric,env_step,value"]
    for seed, value_at_100k in ((0, 290.0), (1000, 310.0)):  # 300 ± 10
        lines += [
            f"0,sac,walker_walk,{seed},avg_return,0.0,1.0",
            f"1,sac,walker_walk,{seed},avg_return,100000.0,{value_at_100k}",
            f"2,sac,walker_walk,{seed},avg_success,100000.0,0.0",  # another metric, same rows otherwise
            f"3,sac,cheetah_run,{seed},avg_return,100000.0,999.0",  # another env
        ]
    (simba / "sac.csv").write_text("\n".join(lines) + "\n")


def test_the_script_recomputes_each_curve_from_the_authors_files(tmp_path):
    sources, curves_path = tmp_path / "sources", tmp_path / "curves.toml"
    write_authors_files(sources)
    curves_path.write_text(SMALL_CURVES.replace("seeds = 10", "seeds = 2").replace("[0.5, 1.0]", "[1.0, 1.0]"))
    hopper, walker = published.load_curves(curves_path).curves
    assert curves_script.recompute(hopper, sources / "TD3") == {
        50000: (5.0, pytest.approx(1.0), 2),
        100000: (20.0, pytest.approx(1.0), 2),
    }
    assert curves_script.recompute(walker, sources / "simba") == {100000: (300.0, pytest.approx(10.0), 2)}
    assert curves_script.main([str(sources), "--curves", str(curves_path)]) == 0


def test_the_script_reads_one_text_file_per_seed(tmp_path):
    folder = tmp_path / "curves" / "cheetah-run"
    folder.mkdir(parents=True)
    (folder / "0.txt").write_text("5000 1.0\n10000 3.5\n")
    (folder / "1.txt").write_text("5000 2.0\n10000 4.5\n")
    assert curves_script.read_txt(sorted(folder.glob("*.txt"))) == {"0": {5000: 1.0, 10000: 3.5}, "1": {5000: 2.0, 10000: 4.5}}


def test_the_script_says_which_number_differs_from_the_file(tmp_path, capsys):
    sources, curves_path = tmp_path / "sources", tmp_path / "curves.toml"
    write_authors_files(sources)
    wrong = SMALL_CURVES.replace("seeds = 10", "seeds = 2").replace("[0.5, 1.0]", "[1.0, 1.0]").replace("[300.0]", "[300.1]")
    curves_path.write_text(wrong)
    assert curves_script.main([str(sources), "--curves", str(curves_path)]) == 1
    differing = [line for line in capsys.readouterr().out.splitlines() if line.startswith("DIFFERS")]
    assert differing == [
        "DIFFERS SAC, walker-walk at 100000 env frames: recomputed 300.000 ± 10.000 over 2 seeds, file 300.1 ± 10.0 over 2"
    ]


# ---------------------------------------------------------------- the report at published steps


def write_eval_runs(runs_dir, agent, exp_name, env_id, curves, action_repeat=None):
    """One run per seed with the given evaluation (step, return) points; action_repeat into args.json when given."""
    for seed, points in enumerate(curves, start=1):
        directory = write_run(runs_dir, agent, exp_name, seed, points, env_id=env_id)
        if action_repeat is not None:
            args = json.loads((directory / "args.json").read_text()) | {"action_repeat": action_repeat}
            (directory / "args.json").write_text(json.dumps(args))


def test_each_published_step_sits_beside_our_evaluations_there(tmp_path):
    """TD3 on Hopper, 3 seeds evaluated every 50k steps but the third every 40k: at 50k the first two read 4 and 6 and
    the third its 40k evaluation, 5 → 5 ± 0.577 beside 5.0 ± 0.5, within. At 100k the first two read 22 and 24, and
    the third, stopped at 80k, has not reached it → 23 ± 1 beside 20 ± 1: 3 apart, beyond 2 combined. SAC on
    walker-walk at action repeat 2: 100k frames = our 50k agent steps (1 and 3 → 2 ± 1; their 100k agent steps,
    written 500, is not read), far below 300 ± 10."""
    runs_dir, curves_path = tmp_path / "runs", tmp_path / "curves.toml"
    curves_path.write_text(SMALL_CURVES)
    hopper = [[(50000, 4.0), (100000, 22.0)], [(50000, 6.0), (100000, 24.0)], [(40000, 5.0), (80000, 50.0)]]
    write_eval_runs(runs_dir, "td3", "td3", "Hopper-v5", hopper)
    walker = [[(50000, 1.0), (100000, 500.0)], [(50000, 3.0), (100000, 500.0)]]
    write_eval_runs(runs_dir, "sac_simba", "sac_simba-sac", "dmc:walker-walk", walker, action_repeat=2)
    report.main([str(runs_dir), "--reps", "20", "--published", str(curves_path)])
    text = (runs_dir / "report" / "report.md").read_text()
    assert "## Beside published curves: two small curves" in text
    hopper_rows = "| TD3, Hopper | `Hopper-v5`, `td3` | "
    assert f"{hopper_rows}50,000 agent steps = 50,000 | 3 / 10 | 5.000 ± 0.577 | 5.000 ± 0.500 | 0.000 | no |" in text
    assert f"{hopper_rows}100,000 agent steps = 100,000 | 2 (1 not reached) / 10 | 23.00 ± 1.000 | 20.00 ± 1.000 " in text
    assert "| 3.000 | **yes** |" in text
    walker_row = "| SAC, walker-walk | `dmc:walker-walk`, `sac_simba-sac` | 100,000 env frames = 50,000 | 2 / 10 |"
    assert f"{walker_row} 2.000 ± 1.000 | 300.0 ± 10.00 | -298.0 | **yes** |" in text
    rows = read_rows(runs_dir / "report")
    where = dict(table="published", env_id="dmc:walker-walk", group="sac_simba-sac", statistic="eval@50000")
    assert value(rows, estimator="mean", **where)[0] == pytest.approx(2.0)
    assert value(rows, estimator="standard_error", **where)[0] == pytest.approx(1.0)
    assert value(rows, estimator="published_mean", **where)[0] == pytest.approx(300.0)
    assert value(rows, estimator="published_standard_error", **where)[0] == pytest.approx(10.0)


def test_a_curve_without_runs_or_with_runs_short_of_its_steps_says_so(tmp_path):
    runs_dir, curves_path = tmp_path / "runs", tmp_path / "curves.toml"
    curves_path.write_text(SMALL_CURVES)
    write_eval_runs(runs_dir, "td3", "td3", "Hopper-v5", [[(10000, 1.0), (20000, 2.0)]])
    report.write_report([runs_dir], reps=20, published=curves_path)
    text = (runs_dir / "report" / "report.md").read_text()
    assert "| 50,000 agent steps = 50,000 | 0 (1 not reached) / 10 | not reached | 5.000 ± 0.500 | | |" in text
    assert "| 100,000 env frames = 50,000 | 0 / 10 | not run | 300.0 ± 10.00 | | |" in text  # at their action repeat


def test_our_action_repeat_other_than_the_authors_is_compared_at_equal_frames_and_noted(tmp_path):
    runs_dir, curves_path = tmp_path / "runs", tmp_path / "curves.toml"
    curves_path.write_text(SMALL_CURVES)
    write_eval_runs(runs_dir, "sac_simba", "sac_simba-sac", "dmc:walker-walk", [[(100000, 7.0)]], action_repeat=1)
    write_eval_runs(runs_dir, "td3", "td3", "Hopper-v5", [[(25000, 1.0), (50000, 9.0)]], action_repeat=2)
    report.write_report([runs_dir], reps=20, published=curves_path)
    text = (runs_dir / "report" / "report.md").read_text()
    assert "| 100,000 env frames = 100,000 | 1 / 10 | 7.000 ± n/a |" in text
    assert "| 50,000 agent steps = 50,000 | 1 / 10 | 9.000 ± n/a |" in text  # --action-repeat is for dm-control only
    assert "SAC, walker-walk: our runs' action repeat is 1, the authors' 2; compared at equal env frames" in text


def test_evaluation_at_takes_the_last_evaluation_at_or_before_a_step_the_run_reached():
    steps, returns = np.array([0, 40000, 60000]), np.array([0.0, 4.0, 6.0])
    assert report.evaluation_at(steps, returns, 40000) == 4.0
    assert report.evaluation_at(steps, returns, 50000) == 4.0  # not the nearer-after 60k
    assert report.evaluation_at(steps, returns, 60000) == 6.0
    assert report.evaluation_at(steps, returns, 70000) is None  # not reached
    assert report.evaluation_at(steps[1:], returns[1:], 10000) is None  # first evaluated after it


def test_curves_with_another_metric_are_refused_before_any_run_is_read(tmp_path):
    curves_path = tmp_path / "curves.toml"
    curves_path.write_text(SMALL_CURVES)
    with pytest.raises(report.UserError, match="add --metric eval"):
        report.write_report([tmp_path / "nowhere"], metric="train", published=curves_path)
