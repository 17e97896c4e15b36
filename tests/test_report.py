"""`cleanrl-plus report` on small synthetic run directories: the numbers in report.csv against hand computation,
the figures, continual per-task tables with an oracle, and one-line errors."""

import csv
import json

import numpy as np
import pytest
from conftest import run_script
from matplotlib.backends.backend_agg import FigureCanvasAgg
from torch.utils.tensorboard import SummaryWriter

from commands import report
from envs.errors import UserError

REPS = 500  # enough for stable intervals, fast enough for CI
EVAL_STEPS = [1000, 2000, 3000]
SHAPE = np.array([0.0, 10.0, 20.0])  # eval curve / scale: final = 20·scale, AUC = 1000·(5 + 15) / 2000 = 10·scale


def write_run(
    runs_dir, agent, exp_name, seed, eval_points, env_id="Pendulum-v1", tasks=None, switches=(), train_points=(), finished=True
):
    """A run directory as the agents write it: TensorBoard events, args.json and summary.json."""
    directory = runs_dir / f"{env_id.replace(':', '-')}__{exp_name}__{seed}__1700000000"
    writer = SummaryWriter(str(directory))
    for step, value in eval_points:
        writer.add_scalar("eval/episodic_return", value, step)
    for step, value in train_points:
        writer.add_scalar("charts/episodic_return", value, step)
    for step, task in switches:
        writer.add_scalar("continual/task", task, step)
    writer.close()
    (directory / "args.json").write_text(
        json.dumps({"exp_name": exp_name, "seed": seed, "env_id": env_id, "reset": {"method": "none"}})
    )
    last_step, last_value = eval_points[-1] if eval_points else (0, None)
    summary = {
        "agent": agent,
        "env_id": env_id,
        "seed": seed,
        "global_step": last_step,
        "finished": finished,
        "sps": 100.0,
        "eval": {"step": last_step, "mean": last_value, "returns": []},
        "eval_history": [list(p) for p in eval_points],
    }
    if tasks is not None:
        summary["tasks"] = tasks
    (directory / "summary.json").write_text(json.dumps(summary))
    return directory


def write_scaled_runs(runs_dir, exp_name, scales, env_id="Pendulum-v1", agent="td3"):
    for seed, scale in enumerate(scales, start=1):
        write_run(runs_dir, agent, exp_name, seed, list(zip(EVAL_STEPS, scale * SHAPE)), env_id=env_id)


def read_rows(out_dir):
    with (out_dir / "report.csv").open() as file:
        return list(csv.DictReader(file))


def value(rows, **where):
    matches = [row for row in rows if all(row[key] == str(wanted) for key, wanted in where.items())]
    assert len(matches) == 1, (where, matches)
    return float(matches[0]["value"]), float(matches[0]["ci_low"] or "nan"), float(matches[0]["ci_high"] or "nan")


def test_final_return_and_time_averaged_return():
    steps, returns = np.array([1000, 2000, 3000]), np.array([0.0, 10.0, 20.0])
    assert report.final_return(returns, "eval") == 20.0
    assert report.final_return(np.arange(20.0), "train") == pytest.approx(18.5)  # the last 10% of 20 points: 18, 19
    assert report.time_averaged_return(steps, returns) == pytest.approx(10.0)
    # uneven spacing: the area counts, not the number of points (a plain mean of the points would give 10/3)
    assert report.time_averaged_return(np.array([0, 1, 10]), np.array([0.0, 0.0, 10.0])) == pytest.approx(4.5)
    assert report.time_averaged_return(np.array([500]), np.array([7.0])) == 7.0


def test_one_env_two_groups_match_hand_computation(tmp_path, capsys):
    runs_dir = tmp_path / "runs"
    write_scaled_runs(runs_dir, "td3", [1, 2, 3, 10])  # finals 20, 40, 60, 200; AUCs 10, 20, 30, 100
    write_scaled_runs(runs_dir, "td3-shrink-perturb", [5, 12, 13, 14])  # finals 100, 240, 260, 280
    write_run(runs_dir, "td3", "td3", 9, [], train_points=[(100, 1.0)])  # no evaluations yet
    write_run(runs_dir, "td3", "other", 1, [(500, 3.0)], finished=False)
    (runs_dir / "scratch").mkdir()

    path = report.main([str(runs_dir), "--reps", str(REPS)])
    out = runs_dir / "report"
    assert path == out / "report.md"
    rows = read_rows(out)

    final_iqm, low, high = value(rows, table="per_env", group="td3", statistic="final", estimator="iqm")
    assert final_iqm == pytest.approx(50.0)  # middle two of 20, 40, 60, 200
    assert 20.0 <= low <= final_iqm <= high <= 200.0
    assert value(rows, table="per_env", group="td3", statistic="final", estimator="mean")[0] == pytest.approx(80.0)
    assert value(rows, table="per_env", group="td3", statistic="auc", estimator="iqm")[0] == pytest.approx(25.0)
    assert value(rows, table="per_env", group="td3", statistic="auc", estimator="mean")[0] == pytest.approx(40.0)
    assert value(rows, table="per_env", group="td3-shrink-perturb", statistic="final", estimator="iqm")[0] == pytest.approx(
        250.0
    )
    assert value(rows, table="per_env", group="td3-shrink-perturb", statistic="final", estimator="mean")[0] == pytest.approx(
        220.0
    )
    assert {row["seeds"] for row in rows if row["table"] == "per_env" and row["group"] != "other"} == {"4"}

    # P(shrink-perturb > td3) on finals: 100 beats 3 of td3's 4 runs, the other three beat all 4 → 15/16
    improvement = value(rows, table="improvement", group="td3-shrink-perturb", statistic="final", env_id="Pendulum-v1")
    assert improvement[0] == pytest.approx(15 / 16)
    assert improvement[1] <= improvement[0] <= improvement[2] <= 1.0
    assert {row["reference"] for row in rows if row["table"] == "improvement"} == {"td3"}  # default baseline
    assert not any(row["table"] == "aggregate" for row in rows)  # one env: nothing to aggregate

    markdown = path.read_text()
    assert "| Pendulum-v1 | td3 | 4 | 50.00 [" in markdown
    assert "no evaluations" in markdown and "scratch: not a run directory" in markdown
    assert "other__1__1700000000 did not finish (last point at step 500); it is included, and its cells say so" in markdown
    assert "divided by that interval" in markdown  # the AUC definition is stated
    with (out / "points.csv").open() as file:
        points = list(csv.DictReader(file))
    # every evaluation of every reported run, each once: 2 groups × 4 seeds × 3 steps, and the unfinished run's one
    assert len(points) == 2 * 4 * 3 + 1
    seed_3 = [(int(p["step"]), float(p["return"])) for p in points if p["exp_name"] == "td3" and p["seed"] == "3"]
    assert seed_3 == [(1000, 0.0), (2000, 30.0), (3000, 60.0)]
    assert [p["finished"] for p in points if p["exp_name"] == "other"] == ["False"]
    for figure in ("curves.png", "profiles.png", "groups.png"):
        assert (out / figure).stat().st_size > 10_000
    assert not (out / "tasks.png").exists()
    runs = []
    for directory in sorted(runs_dir.glob("*__*__*")):
        try:
            runs.append(report.load_run(directory, "eval"))
        except report.SkippedRun:
            pass
    compared = report.Report(runs, "eval", 10, None, None).compared_groups()
    assert compared == [("Pendulum-v1", ("td3", "other")), ("Pendulum-v1", ("td3", "td3-shrink-perturb"))]  # not td3 itself
    assert "`groups.png` (each group's curve beside its baseline's)" in markdown
    printed = capsys.readouterr()
    assert "| Pendulum-v1 | td3-shrink-perturb | 4 |" in printed.out and "report.csv" in printed.out
    assert "note: skipped" in printed.err


def test_several_envs_are_aggregated_after_min_max_normalisation(tmp_path):
    runs_dir = tmp_path / "runs"
    write_scaled_runs(runs_dir, "td3", [1, 2, 3, 10], env_id="Hopper-v5")  # finals 20, 40, 60, 200
    write_scaled_runs(runs_dir, "td3-sp", [5, 12, 13, 14], env_id="Hopper-v5")  # finals 100, 240, 260, 280
    write_scaled_runs(runs_dir, "td3", [0, 0.5, 1, 1.5], env_id="Walker2d-v5")  # finals 0, 10, 20, 30
    write_scaled_runs(runs_dir, "td3-sp", [2, 2.5, 3, 5], env_id="Walker2d-v5")  # finals 40, 50, 60, 100
    out = tmp_path / "elsewhere"
    assert report.write_report([str(runs_dir / "*")], out, reps=REPS) == out / "report.md"
    rows = read_rows(out)

    # Hopper: min 20, max 280 → td3 0, 20/260, 40/260, 180/260; Walker2d: min 0, max 100 → 0, .1, .2, .3
    hopper, walker = np.array([0, 20, 40, 180]) / 260, np.array([0, 0.1, 0.2, 0.3])
    pooled = np.sort(np.concatenate([hopper, walker]))
    assert value(rows, table="aggregate", group="td3", statistic="final", estimator="iqm")[0] == pytest.approx(
        pooled[2:6].mean()
    )
    assert value(rows, table="aggregate", group="td3", statistic="final", estimator="mean")[0] == pytest.approx(
        (hopper.mean() + walker.mean()) / 2
    )
    # P over envs: 15/16 on Hopper, 1 on Walker2d, averaged
    assert value(rows, table="improvement", group="td3-sp", statistic="final", env_id="all")[0] == pytest.approx(
        (15 / 16 + 1) / 2
    )
    markdown = (out / "report.md").read_text()
    assert "min–max normalised" in markdown
    assert (out / "curves.png").stat().st_size > 10_000


def continual_run(runs_dir, exp_name, seed, task_records):
    """Three tasks of 1000 steps, evaluated every 250 steps (25, 50, 75, 100 in every task), switches logged."""
    eval_points = [(1000 * k + step, float(step / 10)) for k in range(3) for step in (250, 500, 750, 1000)]
    tasks = [
        {
            "task": k,
            "start_step": 1000 * k,
            "end_step": 1000 * (k + 1),
            "final_eval": final,
            "auc_eval": auc,
            "train_return_mean": None,
        }
        for k, (final, auc) in enumerate(task_records)
    ]
    return write_run(
        runs_dir,
        "ppo",
        exp_name,
        seed,
        eval_points,
        env_id="torch:CartPole-v1",
        tasks=tasks,
        switches=[(0, 0), (1000, 1), (2000, 2)],
    )


def test_continual_runs_get_per_task_tables_and_oracle_ratios(tmp_path):
    runs_dir = tmp_path / "runs"
    for seed in (1, 2, 3):
        # the oracle's summary has no per-task numbers: they come from its curve, end 100 and AUC 62.5 on every task
        continual_run(runs_dir, "ppo-oracle", seed, [(None, None)] * 3)
    finals = {1: [100, 50, 25], 2: [100, 60, 40], 3: [100, 80, 20]}
    aucs = {1: [60, 30, 10], 2: [60, 40, 20], 3: [60, 50, 15]}
    for seed in (1, 2, 3):
        continual_run(runs_dir, "ppo", seed, list(zip(finals[seed], aucs[seed])))
    out = tmp_path / "out"
    report.write_report([str(runs_dir)], out, oracle="ppo-oracle", reps=REPS)
    rows = read_rows(out)

    assert value(rows, table="per_task", group="ppo", task=2, statistic="end_of_task", estimator="iqm")[0] == pytest.approx(
        190 / 3
    )
    assert value(rows, table="per_task", group="ppo", task=3, statistic="task_auc", estimator="iqm")[0] == pytest.approx(15.0)
    assert value(rows, table="per_task", group="ppo-oracle", task=2, statistic="end_of_task", estimator="iqm")[
        0
    ] == pytest.approx(100.0)
    assert value(rows, table="per_task", group="ppo-oracle", task=2, statistic="task_auc", estimator="iqm")[
        0
    ] == pytest.approx(62.5)
    # per run, the mean over tasks 2..3 of value_k / oracle_k; 3 seeds → the IQM trims nothing
    end_ratios = [(50 + 25) / 200, (60 + 40) / 200, (80 + 20) / 200]
    auc_ratios = [(30 + 10) / 125, (40 + 20) / 125, (50 + 15) / 125]
    end = value(rows, table="oracle_ratio", group="ppo", statistic="end_of_task_ratio", estimator="iqm")
    assert end[0] == pytest.approx(np.mean(end_ratios)) and min(end_ratios) <= end[1] <= end[2] <= max(end_ratios)
    assert value(rows, table="oracle_ratio", group="ppo", statistic="task_auc_ratio", estimator="iqm")[0] == pytest.approx(
        np.mean(auc_ratios)
    )
    assert not any(row["table"] == "oracle_ratio" and row["group"] == "ppo-oracle" for row in rows)

    markdown = (out / "report.md").read_text()
    assert "| torch:CartPole-v1 | ppo | 2 (1) | 3 |" in markdown and "relative to the oracle `ppo-oracle`" in markdown
    assert (out / "tasks.png").stat().st_size > 10_000
    assert not (out / "groups.png").exists()  # the baseline and the oracle only: nothing to compare panel by panel
    run = report.load_run(next(runs_dir.glob("*ppo-oracle__1__*")), "eval")
    assert run.switch_steps == [1000, 2000]  # the step-0 entry is the first task, not a switch


def test_find_run_dirs_and_default_out_dir(tmp_path):
    runs_dir = tmp_path / "runs"
    first = write_run(runs_dir, "td3", "td3", 1, [(1000, 1.0)])
    second = write_run(runs_dir, "td3", "td3", 2, [(1000, 2.0)])
    (runs_dir / "report").mkdir()  # an earlier report is not a run and needs no note
    assert report.find_run_dirs([str(runs_dir)]) == ([first, second], [])
    assert report.find_run_dirs([str(first), str(runs_dir / "*__2__*")]) == ([first, second], [])
    assert report.find_run_dirs([str(tmp_path / "nope")])[1] == [f"skipped {tmp_path / 'nope'}: no such file or directory"]
    assert report.default_out_dir(str(runs_dir)) == runs_dir / "report"
    assert report.default_out_dir(str(first)) == runs_dir / "report"


def test_method_labels_and_baselines():
    def run(agent, exp_name):
        return report.RunRecord(None, agent, "Hopper-v5", exp_name, 1, np.array([1]), np.array([1.0]), [], [])

    runs = [run("td3", "td3"), run("td3", "td3-redo"), run("sac_simba", "mine"), run("ppo", "mine")]
    labels = report.method_labels(runs)
    assert labels == {
        ("ppo", "mine"): "ppo:mine",
        ("sac_simba", "mine"): "sac_simba:mine",
        ("td3", "td3"): "td3",
        ("td3", "td3-redo"): "td3-redo",
    }
    assert report.default_baselines(labels) == {
        "ppo": ("ppo", "mine"),
        "sac_simba": ("sac_simba", "mine"),
        "td3": ("td3", "td3"),
    }
    assert report.resolve_method("td3-redo", labels, "--baseline") == ("td3", "td3-redo")
    with pytest.raises(UserError, match="names several groups — use one of: ppo:mine, sac_simba:mine"):
        report.resolve_method("mine", labels, "--baseline")


def test_errors_are_one_line_user_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no runs with evaluations found in .* — pass runs/"):
        report.write_report([str(tmp_path / "empty")], tmp_path / "out", reps=REPS)
    write_scaled_runs(tmp_path / "runs", "td3", [1, 2])
    with pytest.raises(UserError, match="unknown --baseline 'td4' — did you mean 'td3'\\? — choose one of: td3"):
        report.write_report([str(tmp_path / "runs")], tmp_path / "out", baseline="td4", reps=REPS)
    with pytest.raises(UserError, match="--reps must be >= 1"):
        report.write_report([str(tmp_path / "runs")], tmp_path / "out", reps=0)

    result = run_script("-m", "commands.cli", "report", str(tmp_path / "empty"), timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        f"error: no runs with evaluations found in {tmp_path / 'empty'} — pass runs/ or run directories "
        "(runs/<env>__<exp_name>__<seed>__<time>)"
    ]


def test_a_legend_of_many_long_remedy_names_fits_inside_the_figure_and_no_colour_repeats():
    """22 remedies (the remedy benchmark): the legend below the curves must show every label inside the saved image."""
    labels = [f"ppo-layernorm-l2init-redo-{i}" for i in range(22)]
    colors = report._palette(len(labels))
    assert len(set(colors)) == len(labels)
    figure, (ax,) = report._subplots(1)
    height = figure.get_figheight()
    for label, color in zip(labels, colors):
        ax.plot([0, 1], [0, 1], color=color, label=label)
    report._figure_legend(figure, [ax])
    figure.canvas.draw()  # the Agg canvas of a bare Figure
    legend, whole = figure.legends[0].get_window_extent(), figure.bbox
    assert whole.x0 <= legend.x0 and legend.x1 <= whole.x1 and whole.y0 <= legend.y0, (legend, whole)
    assert ax.get_window_extent().height >= 0.5 * height * figure.dpi  # the curves keep their height


@pytest.mark.parametrize("remedies", [1, 22])
def test_every_figure_shows_all_its_text_inside_the_image_and_the_report_cites_nothing_a_reader_cannot_open(
    remedies, tmp_path, monkeypatch
):
    """A continual env (every figure is drawn) with the baseline, an oracle and 1 or 22 remedies of long names: every
    title, label, tick and legend entry of every figure lies inside the saved image (one panel used to cut its title)."""
    runs_dir = tmp_path / "runs"
    for name in ["ppo", "ppo-oracle", *(f"ppo-layernorm-l2init-shrink-perturb-every-1000-{i}" for i in range(remedies))]:
        for seed in (1, 2):
            continual_run(runs_dir, name, seed, [(None, None)] * 3)
    drawn = {}
    real_save = report._save
    monkeypatch.setattr(report, "_save", lambda figure, path: (real_save(figure, path), drawn.setdefault(path.name, figure)))
    markdown = report.write_report([str(runs_dir)], tmp_path / "out", oracle="ppo-oracle", reps=50).read_text()
    assert sorted(drawn) == ["curves.png", "groups.png", "profiles.png", "tasks.png"]
    for name, figure in drawn.items():
        FigureCanvasAgg(figure).draw()
        renderer, whole = figure.canvas.get_renderer(), figure.bbox
        axes = [ax for ax in figure.axes if ax.get_visible()]
        legends = [*figure.legends, *filter(None, (ax.get_legend() for ax in axes))]
        texts = [
            figure._suptitle,
            *(ax.title for ax in axes),
            *(ax.xaxis.label for ax in axes),
            *(ax.yaxis.label for ax in axes),
            *(text for legend in legends for text in legend.get_texts()),
        ]
        texts = [text for text in texts if text is not None and text.get_text().strip()]
        assert (figure._suptitle is not None) == (name != "profiles.png") and len(texts) > 3
        for text in texts:
            box = text.get_window_extent(renderer)
            assert whole.x0 - 1 <= box.x0 and box.x1 <= whole.x1 + 1 and whole.y0 - 1 <= box.y0 and box.y1 <= whole.y1 + 1, (
                name,
                text.get_text(),
                box,
                whole,
            )
    assert "spec" not in markdown and "../" not in markdown and "§" not in markdown


@pytest.mark.parametrize("metric", ["eval", "train"])
def test_a_point_logged_exactly_at_a_task_switch_belongs_to_the_task_that_ends_there(tmp_path, metric):
    """Two tasks, (0, 100] and (100, 200]; the point at step 100 is the end-of-task evaluation of task 1, which runs on
    the ending task before the switch. Each task's window is start_step < step ≤ end_step: task 1 ends at 20 with an
    AUC of (10 + 20) / 2 = 15; task 2 holds only 150 and 200: it ends at 40 with an AUC of (60 + 40) / 2 = 50. Counting
    the switch point in task 2 as well would make its AUC 45; leaving it out of task 1 would make task 1 end at 10."""
    points = [(50, 10.0), (100, 20.0), (150, 60.0), (200, 40.0)]
    tasks = [
        {"task": k, "start_step": 100 * k, "end_step": 100 * (k + 1), "final_eval": None, "auc_eval": None} for k in range(2)
    ]
    runs_dir = tmp_path / "runs"
    write_run(
        runs_dir,
        "ppo",
        "ppo",
        1,
        points if metric == "eval" else [(200, 0.0)],
        env_id="torch:CartPole-v1",
        tasks=tasks,
        switches=[(0, 0), (100, 1)],
        train_points=points if metric == "train" else (),
    )
    out = tmp_path / "out"
    report.write_report([str(runs_dir)], out, reps=REPS, metric=metric)
    rows = read_rows(out)
    end_of_task = [value(rows, table="per_task", task=k, statistic="end_of_task", estimator="mean")[0] for k in (1, 2)]
    task_auc = [value(rows, table="per_task", task=k, statistic="task_auc", estimator="mean")[0] for k in (1, 2)]
    # (the train metric's end of task is the mean of its last 10% of points, at least one: here the last, as eval's)
    assert end_of_task == [20.0, 40.0] and task_auc == [15.0, 50.0]


def test_a_cell_built_from_unfinished_runs_says_so_and_finished_only_leaves_them_out(tmp_path, capsys):
    """A killed run's partial curve entered the IQM with one note at the top of the report; the cell said nothing."""
    runs_dir = tmp_path / "runs"
    write_scaled_runs(runs_dir, "td3", [1, 2])
    for seed, scale in ((3, 3), (4, 4)):  # killed after their first evaluation
        write_run(runs_dir, "td3", "td3", seed, [(1000, 0.0)], finished=False)
    path = report.main([str(runs_dir), "--out", str(tmp_path / "all"), "--reps", "50"])
    assert "| Pendulum-v1 | td3 | 4 (2 unfinished) | " in path.read_text()
    assert {row["seeds"] for row in read_rows(tmp_path / "all") if row["table"] == "per_env"} == {"4"}

    path = report.main([str(runs_dir), "--out", str(tmp_path / "finished"), "--reps", "50", "--finished-only"])
    assert "| Pendulum-v1 | td3 | 2 | 30.00 [" in path.read_text()  # finals 20 and 40 (scales 1, 2 of SHAPE)
    assert "td3__3__1700000000 did not finish (last point at step 1000); left out (--finished-only)" in capsys.readouterr().err
    assert {row["seeds"] for row in read_rows(tmp_path / "finished") if row["table"] == "per_env"} == {"2"}
