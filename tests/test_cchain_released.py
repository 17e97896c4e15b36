"""benchmarks/cchain_released.py: the patch of the authors' released C-CHAIN scripts (bluecontra/C-CHAIN at 2f8bedf,
crl_gym_classic_control/control_train_aligned_*.py) on stand-in texts that hold the lines it replaces, the CSV of one
of our real runs against its TensorBoard events by hand, and the page's statistic (per-level means, Eq. 1) by hand."""

import dataclasses
import importlib.util
import json
import subprocess
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agents import ppo
from commands import report
from envs import continual

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("cchain_released", ROOT / "benchmarks" / "cchain_released.py")
released = importlib.util.module_from_spec(spec)
spec.loader.exec_module(released)

# The lines the patch replaces, where control_train_aligned_c_chain.py has them (lines 6, 14 and 76), among others.
SCRIPT = "\n".join(
    ["import os, time", "import argparse", "import gym", "import random"]
    + ["from trac_optimizer import start_trac", "", "if __name__ == '__main__':", "    import wandb", "    wandb.init()", ""]
)


def test_the_patch_replaces_each_line_where_it_stands_and_lists_it():
    text, patched = released.patch_lines(SCRIPT, released.replacements(trac=False), "script.py")
    lines = text.split("\n")
    assert len(lines) == len(SCRIPT.split("\n"))  # line for line: the numbers on the page stay the authors'
    assert (lines[2], lines[4], lines[7]) == (
        "import gymnasium as gym",
        "start_trac = None",
        "    import wandb_to_csv as wandb",
    )
    assert patched == [
        (3, "import gym", "import gymnasium as gym"),
        (5, "from trac_optimizer import start_trac", "start_trac = None"),
        (8, "    import wandb", "    import wandb_to_csv as wandb"),
    ]
    kept, _ = released.patch_lines(SCRIPT, released.replacements(trac=True), "script.py")
    assert "from trac_optimizer import start_trac" in kept.split("\n")


@pytest.mark.parametrize(
    "text, words",
    [
        (SCRIPT.replace("    import wandb\n", ""), "has no line 'import wandb'"),
        (SCRIPT.replace("import gym\n", "import gym\nimport gym\n"), "has 2 lines 'import gym'"),
    ],
)
def test_the_patch_refuses_a_line_missing_or_twice(text, words):
    with pytest.raises(released.UserError, match=words):
        released.patch_lines(text, released.replacements(trac=False), "script.py")


def fake_checkout(path: Path, script_text: str) -> Path:
    """A git repository with the five released files' names (the scripts' text given, the helpers one line each)."""
    folder = path / released.UPSTREAM_DIR
    folder.mkdir(parents=True)
    for script in released.SCRIPTS:
        (folder / f"control_train_aligned_{script}.py").write_text(script_text)
    for helper in released.HELPERS:
        (folder / helper).write_text(f"# {helper}\n")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "released"], check=True)
    return path


def test_prepare_copies_the_files_patched_with_a_manifest(tmp_path):
    checkout = fake_checkout(tmp_path / "C-CHAIN", SCRIPT)
    manifest = released.prepare(checkout, tmp_path / "scripts")
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert manifest["commit"] == head and not manifest["trac_import_kept"]
    assert json.loads((tmp_path / "scripts" / released.MANIFEST).read_text()) == json.loads(json.dumps(manifest))
    script = (tmp_path / "scripts" / "control_train_aligned_c_chain.py").read_text()
    assert script == released.patch_lines(SCRIPT, released.replacements(trac=False), "")[0]
    assert (tmp_path / "scripts" / "networks.py").read_text() == "# networks.py\n"


def test_prepare_refuses_in_one_line_and_writes_nothing(tmp_path, capsys):
    checkout = fake_checkout(tmp_path / "C-CHAIN", SCRIPT.replace("import gym\n", ""))
    with pytest.raises(SystemExit) as exit_info:
        released.main(["prepare", str(checkout), "--into", str(tmp_path / "scripts")])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("error: control_train_aligned_vanilla.py has no line 'import gym'") and error.count("\n") == 1
    assert not (tmp_path / "scripts").exists()
    with pytest.raises(released.UserError, match="inside this repository"):
        released.prepare(fake_checkout(tmp_path / "good", SCRIPT), ROOT / "scratch")
    assert not (ROOT / "scratch").exists()


def test_the_wandb_stand_in_and_the_printed_lines_make_the_rows(tmp_path, monkeypatch):
    """The stand-in records wandb.log as the script calls it; rows must agree with what the script printed."""
    (tmp_path / "wandb_to_csv.py").write_text(released.WANDB_STAND_IN_SOURCE)
    monkeypatch.setenv(released.LOG_VARIABLE, str(tmp_path / "log.jsonl"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import wandb_to_csv as wandb

    wandb.init(name="run", config={})
    for iteration, (mean_return, coef) in enumerate([(np.float64(-400.0), 1), (np.float64(-88.11111111111111), 2.5)], 1):
        logged = {"global_timestep": 800 * iteration, "itr_mean_return": mean_return, "itr_mean_step": -mean_return}
        wandb.log(logged | {released.COEFFICIENT: coef, "stats/value_loss": 0.1}, step=iteration)
    printed_text = [
        "- Iteration num: 1, Avg Return: -400.0, Avg Step: 400.0, P Loss: 0.00",
        "- Iteration num: 2, Avg Return: -88.11111111111111, Avg Step: 88.11111111111111, P Loss: 0.00",
    ]
    printed = [(int(m[1]), float(m[2]), float(m[3])) for m in map(released.PRINTED.match, printed_text)]
    rows = released.released_rows(tmp_path / "log.jsonl", printed, coefficient=True)
    assert rows == [[1, 800, -400.0, 400.0, 1.0], [2, 1600, -88.11111111111111, 88.11111111111111, 2.5]]
    assert released.released_rows(tmp_path / "log.jsonl", printed, coefficient=False)[1] == rows[1][:4]
    with pytest.raises(released.RunFailure, match="differ"):
        released.released_rows(tmp_path / "log.jsonl", printed[:1], coefficient=False)
    with pytest.raises(released.RunFailure, match="differ"):
        released.released_rows(tmp_path / "log.jsonl", [printed[0], (2, -88.1, 88.1)], coefficient=False)


# A stand-in with the released scripts' shape where it matters here: it makes its env on the line SEEDED_ENV replaces,
# then resets it without a seed as theirs does, and logs and prints each iteration as theirs do (its "return" is the
# first observation's first coordinate, so two runs agree only if they drew the same initial states).
STAND_IN_RUN = """import argparse
import gym
import numpy as np
from trac_optimizer import start_trac
parser = argparse.ArgumentParser()
for name in ("--env_name", "--opt"):
    parser.add_argument(name)
parser.add_argument("--lr", type=float, default=0.001)
for name in ("--seed", "--level_num", "--level_switch"):
    parser.add_argument(name, type=int)
parser.add_argument("--obs_perturb_range", type=float)
args = parser.parse_args()
if __name__ == '__main__':
    import wandb
    env = gym.make(args.env_name, render_mode="rgb_array")
    for iteration in range(1, args.level_num * args.level_switch + 1):
        first = float(env.reset()[0][0]) + args.lr
        logged = {"global_timestep": 800 * iteration, "itr_mean_return": first, "itr_mean_step": 1.0}
        wandb.log(logged | {"stats/auto_p_reg_coef": 1.0}, step=iteration)
        print(f"- Iteration num: {iteration}, Avg Return: {first}, Avg Step: 1.0, P Loss: 0.0")
"""


@pytest.mark.parametrize("seed_env", [False, True])
def test_a_run_replays_exactly_only_with_the_env_seeded(tmp_path, seed_env):
    """gymnasium seeds an env that is never seeded from the OS, so the released scripts' reruns draw other initial
    states; `prepare --seed-env` seeds it once with --seed where it is made, and a rerun replays the CSV."""
    checkout = fake_checkout(tmp_path / "C-CHAIN", STAND_IN_RUN)
    manifest = released.prepare(checkout, tmp_path / "scripts", seed_env=seed_env)
    assert manifest["env_seeded"] is seed_env
    assert (released.SEEDED_ENV[1] in (tmp_path / "scripts" / "control_train_aligned_c_chain.py").read_text()) is seed_env
    runs = []
    for name in ("first.csv", "second.csv"):
        path = released.run(tmp_path / "scripts", "c_chain", "Acrobot-v1", 3, 2, 2, out=tmp_path / name)
        header, columns = released.read_csv(path)
        runs.append(columns["itr_mean_return"])
        assert ("replays this file" in header["note"][0]) is seed_env
        assert (f"{released.SEEDED_ENV[1]!r}" in " ".join(header["patched"])) is seed_env
    assert len(runs[0]) == 4 and len(set(runs[0])) == 4  # each iteration resets: four draws
    assert np.array_equal(runs[0], runs[1]) is seed_env
    env = gym.make("Acrobot-v1")  # what the patch relies on: a seed given once carries on into later unseeded resets
    env.reset(seed=3)
    assert runs[0][0] == float(env.reset()[0][0]) + 0.001 if seed_env else True  # the stand-in adds its --lr


def test_a_run_passes_its_learning_rate_to_the_script_and_names_it(tmp_path, monkeypatch):
    """--lr reaches the script (the page's 1e-2 rows); its file name and both commands say so; no --lr: the default."""
    monkeypatch.setattr(released, "RELEASED_DIR", tmp_path / "released")  # the default file lands here, not in the repo
    checkout = fake_checkout(tmp_path / "C-CHAIN", STAND_IN_RUN)
    released.prepare(checkout, tmp_path / "scripts", seed_env=True)
    default = released.run(tmp_path / "scripts", "vanilla", "Acrobot-v1", 3, 1, 2, out=tmp_path / "default.csv")
    with_rate = released.run(tmp_path / "scripts", "vanilla", "Acrobot-v1", 3, 1, 2, lr=0.01)
    assert with_rate == tmp_path / "released" / "vanilla__Acrobot-v1__seed3__levels1x2__lr0.01__env-seeded.csv"
    (header, columns), (default_header, default_columns) = released.read_csv(with_rate), released.read_csv(default)
    assert header["command"][0].endswith("--opt base --lr 0.01") and header["made_by"][0].endswith("--lr 0.01")
    assert "--lr" not in default_header["command"][0] + default_header["made_by"][0]
    assert np.allclose(columns["itr_mean_return"] - default_columns["itr_mean_return"], 0.01 - 0.001)


def test_run_refuses_bad_input_in_one_line(tmp_path, capsys):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    base = ["run", "--scripts", str(scripts), "--seed", "0"]
    cases = [
        ([], "is not a prepared folder"),
        (["--env_name", "LunarLander-v2"], "gymnasium's LunarLander-v2 is v3"),
        (["--env_name", "Acrobot-v2"], "did you mean 'Acrobot-v1'"),
        (["--script", "cchain"], "did you mean 'c_chain'"),
        (["--opt", "TRAC"], "--opt TRAC needs TRAC's import"),
        (["--lr", "0"], "--lr 0.0 must be > 0"),
    ]
    for extra, words in cases:
        if extra:  # the first case has no manifest
            (scripts / released.MANIFEST).write_text(json.dumps({"trac_import_kept": False, "patched": {}, "commit": "0"}))
        with pytest.raises(SystemExit) as exit_info:
            released.main(base + extra)
        error = capsys.readouterr().err
        assert exit_info.value.code == 2 and error.startswith("error: ") and words in error and error.count("\n") == 1, error
    assert sorted(p.name for p in scripts.iterdir()) == [released.MANIFEST]  # nothing run, nothing written


def write_released_csv(path: Path, returns: list[float], per_level: int, planned: int, cpu_seconds: str | None = "12"):
    header = {"seed": "1", "iterations_per_level": str(per_level), "planned_iterations": str(planned)}
    if cpu_seconds is not None:
        header["cpu_seconds"] = cpu_seconds
    rows = [[i, 800 * i, value, -value] for i, value in enumerate(returns, 1)]
    released.write_csv(path, header, list(released.COLUMNS), rows)
    return path


def test_level_means_and_score_by_hand(tmp_path):
    """Levels of 3 iterations: each level's mean of itr_mean_return; Eq. 1 is the mean over all iterations, which
    whole levels average to; a run stopped early has a shorter last level."""
    returns = [-400.0, -100.0, -91.0, -88.0, -400.0, -400.0, -85.5]
    levels, score = released.level_means_and_score(write_released_csv(tmp_path / "a.csv", returns, 3, 9))
    assert levels == pytest.approx([-197.0, -296.0, -85.5])
    assert score == pytest.approx(sum(returns) / 7)
    whole, score = released.level_means_and_score(write_released_csv(tmp_path / "b.csv", returns[:6], 3, 6))
    assert np.mean(whole) == pytest.approx(score) == pytest.approx(sum(returns[:6]) / 6)
    gap = tmp_path / "gap.csv"
    gap.write_text(write_released_csv(tmp_path / "c.csv", returns, 3, 9).read_text().replace("\n3,2400,", "\n4,2400,", 1))
    with pytest.raises(released.UserError, match="does not hold iterations 1, 2"):
        released.level_means_and_score(gap)


def test_the_table_prints_both_columns_from_the_same_statistic(tmp_path):
    theirs = write_released_csv(tmp_path / "theirs.csv", [-93.0, -401.0, -90.0, -84.0], 2, 4, cpu_seconds="1649")
    ours = write_released_csv(tmp_path / "ours.csv", [-88.0, -400.0, -90.25], 2, 4, cpu_seconds=None)
    assert released.table([theirs, ours]) == [
        "| run | level means, levels 0–1 | Eq. 1 |",
        "|-|-|-|",
        "| theirs, `--seed 1` (4 iterations, 1,649 CPU-s) | −247, −87 | −167.0 |",
        "| ours, seed 1 (the first 3 of 4 iterations) | −244, −90 | −192.8 |",
    ]


def test_the_table_ends_with_each_sides_mean_and_standard_error_over_finished_runs(tmp_path):
    """Eq. 1 of theirs −167.0 and −100.0 (by hand: mean −133.5, s.d. 47.376, s.e. 33.5); one run of ours gets no
    summary, and a run not finished is not in it."""
    theirs = [
        write_released_csv(tmp_path / "t1.csv", [-93.0, -401.0, -90.0, -84.0], 2, 4),
        write_released_csv(tmp_path / "t2.csv", [-100.0, -100.0, -100.0, -100.0], 2, 4),
        write_released_csv(tmp_path / "t3.csv", [-400.0], 2, 4),
    ]
    ours = write_released_csv(tmp_path / "o.csv", [-88.0, -400.0, -90.25, -90.0], 2, 4, cpu_seconds=None)
    rows = released.table([*theirs, ours])
    assert rows[-1] == "| theirs, 2 finished runs, mean ± s.e. | | −133.5 ± 33.5 |"
    assert sum("mean ± s.e." in row for row in rows) == 1


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A real PPO run of continual:cchain-cartpole: 5 iterations of 64 steps, levels of 2 iterations."""
    args = ppo.Args.defaults_for(
        "continual:cchain-cartpole",
        total_timesteps=5 * 64,
        num_steps=64,
        num_minibatches=2,
        update_epochs=1,
        hidden_sizes=(16,),
        runs_dir=str(tmp_path_factory.mktemp("runs")),
        progress=False,
        log_every=64,
        continual=continual.ContinualArgs(steps_per_task=128),
    )
    return Path(ppo.main(args)["run_dir"])


def test_export_is_the_runs_iteration_means_by_hand(tiny_run, tmp_path):
    """Per iteration of 64 steps, the mean return and length of the episodes that ended in it (one ending at step 64
    is iteration 1's), from the events; Eq. 1 from the CSV is report's --metric average-performance."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path = released.export(tiny_run, tmp_path / "ours.csv")
    events = EventAccumulator(str(tiny_run), size_guidance={"scalars": 0}).Reload()
    returns = [(e.step, e.value) for e in events.Scalars("charts/episodic_return")]
    lengths = [e.value for e in events.Scalars("charts/episodic_length")]
    expected = []
    for iteration in range(1, 6):
        inside = [k for k, (step, _) in enumerate(returns) if (iteration - 1) * 64 < step <= iteration * 64]
        mean_return = sum(returns[k][1] for k in inside) / len(inside)
        expected.append((iteration, 64 * iteration, mean_return, sum(lengths[k] for k in inside) / len(inside)))
    header, columns = released.read_csv(path)
    got = list(zip(*(columns[name] for name in released.COLUMNS)))
    assert np.allclose(np.array(got), np.array(expected), rtol=1e-12, atol=0)
    assert header["iterations_per_level"] == ["2"] and header["planned_iterations"] == ["5"]
    assert header["exported_at"][0].startswith(f"commit {released.repository_commit()} ") and header["machine"]
    assert header["command"] == [
        "python agents/ppo.py --env-id continual:cchain-cartpole --seeds 1 --continual.steps-per-task 128 --num-steps 64 "
        "--num-minibatches 2 --update-epochs 1 --hidden-sizes 16 --total-timesteps 320"
    ]
    levels, score = released.level_means_and_score(path)
    assert levels == pytest.approx([np.mean([e[2] for e in expected[a:b]]) for a, b in ((0, 2), (2, 4), (4, 5))])
    steps, values = map(np.array, zip(*returns))
    assert score == pytest.approx(report.average_performance(steps, values, 64), rel=1e-12)


def test_the_command_keeps_the_run_flags_that_change_numbers():
    """--compile and --flush-denormal are resumable, not settings, yet change the numbers: the command names them."""
    recorded = json.loads(json.dumps(dataclasses.asdict(ppo.Args.defaults_for("continual:cchain-acrobot")), default=list))
    assert released.reproducing_flags(recorded) == []
    recorded |= {"compile": True, "flush_denormal": True, "threads": 1}
    assert released.reproducing_flags(recorded) == ["--threads 1", "--compile", "--flush-denormal"]


def test_export_refuses_another_runs_folder(tmp_path, capsys):
    (tmp_path / "args.json").write_text(json.dumps({"agent": "sac", "env_id": "continual:cchain-cartpole"}))
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        released.main(["export", str(tmp_path)])
    error = capsys.readouterr().err
    assert (
        exit_info.value.code == 2 and "pass a run of agents/ppo.py on continual:cchain-*" in error and error.count("\n") == 1
    )


def test_the_command_names_the_group_and_the_flags_as_the_command_line_takes_them(tmp_path):
    """A member's args.json names its group's folders; the seeds are theirs. Booleans are tyro's --x / --no-x."""
    names = ["continual-cchain-acrobot__ppo-c-chain__3", "continual-cchain-acrobot__ppo-c-chain__0"]
    for seed, name in zip((3, 0), names):
        (tmp_path / name).mkdir()
        (tmp_path / name / "args.json").write_text(json.dumps({"seed": seed, "group": names}))
    assert released.group_seeds(tmp_path / names[1], {"group": names}) == [3, 0]
    assert released.group_seeds(tmp_path / names[0], {}) == [3]
    with pytest.raises(released.UserError, match="group member x is not beside it"):
        released.group_seeds(tmp_path / names[0], {"group": [names[0], "x"]})
    flags = [("cchain.enabled", True), ("cchain.enabled", False), ("compile", False), ("hidden_sizes", [16, 16])]
    assert [released.command_line_flag(*flag) for flag in flags] == [
        "--cchain.enabled",
        "--cchain.no-enabled",
        "--no-compile",
        "--hidden-sizes 16 16",
    ]


def write_our_csv(path: Path, env_id: str, exp_name: str, seed: int, score: float, done: int = 4, planned: int = 4):
    """One of our runs' CSV as `export` heads it: levels of 2 iterations, every iteration's mean return `score`."""
    header = {
        "source": f"cleanrl_plus agents/ppo.py, run {env_id.replace(':', '-')}__{exp_name}__{seed} (finished)",
        "env_name": env_id,
        "seed": str(seed),
        "iterations_per_level": "2",
        "planned_iterations": str(planned),
    }
    rows = [[i, 800 * i, score, 100.0] for i in range(1, done + 1)]
    released.write_csv(path, header, list(released.COLUMNS), rows)
    return path


PAPERS_TABLE = """source = "a paper"
metric = "average-performance"
seeds = 3
[rows]
"C-Acrobot" = "continual:cchain-acrobot"
"C-CartPole" = "continual:cchain-cartpole"
[columns]
"Oracle" = "ppo-oracle"
"Vanilla" = "ppo"
[values."C-Acrobot"]
"Oracle" = [-100.0, 1.0]
"Vanilla" = [-100.0, 10.0]
[values."C-CartPole"]
"Vanilla" = [50.0, 2.0]
"""


def test_the_cells_are_the_papers_table_with_ours_by_hand(tmp_path):
    """Vanilla: Eq. 1 of −100, −200, −300 → −200.0 ± 57.7 (s.d. 100 / √3), 100 from the paper's −100 ± 10, beyond
    67.7: bold. Oracle: −100, −110 → −105.0 ± 5.0 over 2 seeds, 5 from −100 ± 1, within 6; its third seed stopped
    halfway is left out and counted. C-CartPole: not run, and the paper's empty cell is a dash."""
    published = tmp_path / "table.toml"
    published.write_text(PAPERS_TABLE)
    paths = [
        write_our_csv(tmp_path / f"v{seed}.csv", "continual:cchain-acrobot", "ppo", seed, score)
        for seed, score in enumerate((-100.0, -200.0, -300.0))
    ]
    paths += [
        write_our_csv(tmp_path / f"o{seed}.csv", "continual:cchain-acrobot", "ppo-oracle", seed, score)
        for seed, score in enumerate((-100.0, -110.0))
    ]
    paths.append(write_our_csv(tmp_path / "o2.csv", "continual:cchain-acrobot", "ppo-oracle", 2, -900.0, done=2))
    assert released.cells(paths, published) == [
        "| env | | Oracle | Vanilla |",
        "|-|-|-|-|",
        "| C-Acrobot | ours | −105.0 ± 5.0 (2 seeds) | **−200.0 ± 57.7** |",
        "| | the paper | −100.0 ± 1.0 | −100.0 ± 10.0 |",
        "| C-CartPole | ours | not run | not run |",
        "| | the paper | — | 50.0 ± 2.0 |",
        "",
        "1 of 2 cells run agree within the standard errors combined (bold: beyond them); 2 not run; 1 unfinished runs "
        "left out",
    ]


def test_a_table_run_whole_says_nothing_is_left_and_a_cell_the_paper_lacks_is_run_not_compared(tmp_path):
    """Every cell run: no "not run" in the count line. C-CartPole's oracle has no published value (a dash): it is run,
    so it is neither "not run" nor among the cells compared (3 compared: Acrobot's two within, CartPole vanilla's 60
    against 50 ± 2 beyond)."""
    published = tmp_path / "table.toml"
    published.write_text(PAPERS_TABLE)
    runs = [
        ("continual:cchain-acrobot", "ppo-oracle", -100.0),
        ("continual:cchain-acrobot", "ppo", -100.0),
        ("continual:cchain-cartpole", "ppo-oracle", 70.0),
        ("continual:cchain-cartpole", "ppo", 60.0),
    ]
    paths = [
        write_our_csv(tmp_path / f"{i}-{seed}.csv", env_id, exp_name, seed, score)
        for i, (env_id, exp_name, score) in enumerate(runs)
        for seed in range(3)
    ]
    lines = released.cells(paths, published)
    assert lines[4] == "| C-CartPole | ours | 70.0 ± 0.0 | **60.0 ± 0.0** |"
    assert lines[-1] == "2 of 3 cells run agree within the standard errors combined (bold: beyond them)"


def test_a_cell_is_the_group_of_its_env_and_exp_name_read_from_what_export_writes(tiny_run, tmp_path, capsys):
    """export writes the exp name (the run folder's name need not hold it: this one ends in a timestamp); files
    exported before it did name a sweep's folder; the released script's files are refused in one line."""
    path = released.export(tiny_run, tmp_path / "ours.csv")
    header, _ = released.read_csv(path)
    assert released.group_of(path, header) == ("continual:cchain-cartpole", "ppo")
    older = write_our_csv(tmp_path / "older.csv", "continual:cchain-acrobot", "ppo-l2-init", 4, -90.0)
    assert released.group_of(older, released.read_csv(older)[0]) == ("continual:cchain-acrobot", "ppo-l2-init")
    theirs = write_released_csv(tmp_path / "theirs.csv", [-93.0, -401.0], 2, 2)
    with pytest.raises(SystemExit) as exit_info:
        released.main(["cells", str(theirs)])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "is not a CSV of one of our runs" in error and error.count("\n") == 1


def assert_the_page_holds(printed: list[str]):
    """docs/benchmarks.md holds `printed` as consecutive lines, from the line equal to its first."""
    page = (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
    start = page.index(printed[0])
    assert page[start : start + len(printed)] == printed


def test_the_pages_table_1_is_the_cells_of_the_committed_csvs():
    """docs/benchmarks.md's Table 1 after round 2 is `cells` on benchmarks/released/ours/, line for line."""
    printed = released.cells(sorted(released.OURS_DIR.glob("*.csv")))
    assert_the_page_holds(printed)


def test_the_pages_released_c_acrobot_table_is_the_table_of_the_committed_csvs():
    """docs/benchmarks.md's C-CHAIN on C-Acrobot, the released script's seeds beside ours, is `table` on the committed
    CSVs line for line (its first cell renamed), so neither column can drift from the data."""
    theirs = sorted(released.RELEASED_DIR.glob("c_chain__Acrobot-v1__seed*__env-seeded.csv"))
    ours = sorted(released.OURS_DIR.glob("ppo-c-chain__cchain-acrobot__seed*.csv"))
    assert len(theirs) == 6 and len(ours) == 6
    printed = released.table([*theirs, *ours])
    printed[0] = printed[0].replace("| run |", "| C-CHAIN, C-Acrobot |")
    assert_the_page_holds(printed)
