"""`cleanrl-plus sweep` and `compare`: manifest expansion, plans, idempotent reruns, kill-and-resume, executors."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from commands import sweep
from envs.errors import UserError

TINY_PPO = (
    "--total-timesteps 512 --num-envs 2 --num-steps 64 --num-minibatches 2 --update-epochs 1 --hidden-sizes 16 16 "
    "--eval-every 256 --eval-episodes 2"
)


def test_manifest_expands_agents_envs_configs_and_seeds_with_deterministic_names(tmp_path):
    args = sweep.parse(
        [
            "--agent",
            "ppo",
            "gtr",
            "--env-id",
            "CartPole-v1",
            "--seeds",
            "1",
            "2",
            "--config",
            "baseline=",
            "--config",
            "sp=--reset.method shrink-perturb",
            "--flags",
            "--num-envs 8",
            "--runs-dir",
            str(tmp_path),
        ]
    )
    runs = sweep.manifest(args)
    assert len(runs) == 2 * 1 * 2 * 2
    assert [r.name for r in runs[:4]] == [
        "CartPole-v1__ppo__1",
        "CartPole-v1__ppo__2",
        "CartPole-v1__ppo-sp__1",
        "CartPole-v1__ppo-sp__2",
    ]
    assert runs[2].flags == ("--num-envs", "8", "--reset.method", "shrink-perturb")
    command = sweep.command_for(runs[2])
    assert command[1] == str(REPO / "agents" / "ppo.py") and "--threads" in command and "--resume" not in command
    assert command[command.index("--run-name") + 1] == "CartPole-v1__ppo-sp__1"
    assert sweep.manifest(args) == runs  # expansion is deterministic


@pytest.mark.parametrize(
    "argv, fix",
    [
        (["--agent", "td4"], "did you mean 'td3'"),
        (["--env-id", "CartPol-v1"], "did you mean 'CartPole-v1'"),
        (["--flags", "--seed 3"], "--seed is set by the sweep"),
        (["--config", "bad name=--x"], "NAME=FLAGS"),
        (["--config", "a=", "--config", "a=--x"], "given twice"),
    ],
)
def test_bad_sweeps_get_one_line_errors(argv, fix):
    with pytest.raises(UserError, match=fix):
        sweep.manifest(sweep.parse(argv))


def test_a_toml_plan_gives_defaults_that_flags_override(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'agent = "ppo"\nenv_id = ["CartPole-v1", "Acrobot-v1"]\nseeds = [1, 2, 3]\nflags = "--num-envs 4"\n'
        '[config]\nbaseline = ""\nsp = "--reset.method shrink-perturb"\n[slurm]\npartition = "gpu"\n'
    )
    args = sweep.parse([str(plan), "--seeds", "7"])
    assert args.agent == ("ppo",) and args.env_id == ("CartPole-v1", "Acrobot-v1") and args.seeds == (7,)
    assert args.config == ("baseline=", "sp=--reset.method shrink-perturb") and args.slurm.partition == "gpu"
    assert len(sweep.manifest(args)) == 2 * 2
    (tmp_path / "bad.toml").write_text("agents = ['ppo']\n")
    with pytest.raises(UserError, match="unknown keys \\['agents'\\] — did you mean 'agent'"):
        sweep.parse([str(tmp_path / "bad.toml")])


def test_env_flags_reach_only_their_environments_runs_between_the_common_and_the_configurations_flags(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'agent = "td3"\nenv_id = ["HalfCheetah-v5", "Hopper-v5"]\nseeds = [1]\nflags = "--batch-size 100"\n'
        '[flags_per_env]\nHalfCheetah-v5 = "--random-steps 10000"\n[config]\nbaseline = "--tau 0.01"\n'
    )
    runs = {run.env_id: run for run in sweep.manifest(sweep.parse([str(plan)]))}
    assert runs["HalfCheetah-v5"].flags == ("--batch-size", "100", "--random-steps", "10000", "--tau", "0.01")
    assert runs["Hopper-v5"].flags == ("--batch-size", "100", "--tau", "0.01")
    given = sweep.parse(["--agent", "td3", "--env-id", "Hopper-v5", "--flags-per-env", "Hopper-v5=--random-steps 7"])
    assert sweep.manifest(given)[0].flags == ("--random-steps", "7")


@pytest.mark.parametrize(
    "entry, fix",
    [
        ("Hopper-v5 --random-steps 7", "ENV=FLAGS"),
        ("Hoper-v5=--random-steps 7", "did you mean 'Hopper-v5'"),
        ("Hopper-v5=--seed 3", "remove it from --flags-per-env Hopper-v5"),
    ],
)
def test_bad_env_flags_get_one_line_errors(entry, fix):
    with pytest.raises(UserError, match=fix):
        sweep.manifest(sweep.parse(["--agent", "td3", "--env-id", "Hopper-v5", "--flags-per-env", entry]))


def _sweep_command(runs_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "commands.cli",
        "sweep",
        "--agent",
        "ppo",
        "--env-id",
        "CartPole-v1",
        "--seeds",
        "1",
        "2",
        "--flags",
        TINY_PPO + " --checkpoint-every 256",
        "--runs-dir",
        str(runs_dir),
        "--workers",
        "2",
        *extra,
    ]


def test_the_status_line_counts_a_stopped_run_apart_from_failed_ones(capsys):
    board = sweep.Board(total=4, finished=1)
    board.finished({"run": "a", "state": "stopped", "returncode": 0, "eval": None})
    board.finished({"run": "b", "state": "failed", "returncode": 1, "eval": None})
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "sweep: 1/4 done, 0 running, 0 failed, 1 stopped, 2 pending | last: a: stopped (checkpointed)",
        "sweep: 1/4 done, 0 running, 1 failed, 1 stopped, 1 pending | last: b: failed (exit 1)",
    ]


def test_the_cluster_executors_count_a_groups_members_out_of_running_one_by_one(capsys):
    # submitit's and Ray's wait loop: a job of two members returns both outcomes at once; while the first is counted
    # the second is still running, never pending (the line said "1 pending" when the group left "running" at once)
    jobs = [SimpleNamespace(runs=(f"{group}1", f"{group}2"), log="log") for group in "ab"]
    outcomes = {id(job): [{"run": run, "state": "finished", "returncode": 0, "eval": 1.0} for run in job.runs] for job in jobs}
    board = sweep.Board(total=4, finished=0)
    results = sweep._wait_all([(None, job) for job in jobs], lambda h: True, lambda h: outcomes[id(h[1])], board)
    lines = capsys.readouterr().err.splitlines()
    assert [r["run"] for r in results] == ["a1", "a2", "b1", "b2"]
    assert lines[:4] == [
        "sweep: 1/4 done, 3 running, 0 failed, 0 pending | last: a1: eval 1.0",
        "sweep: 2/4 done, 2 running, 0 failed, 0 pending | last: a2: eval 1.0",
        "sweep: 3/4 done, 1 running, 0 failed, 0 pending | last: b1: eval 1.0",
        "sweep: 4/4 done, 0 running, 0 failed, 0 pending | last: b2: eval 1.0",
    ]


def test_a_rerun_skips_finished_runs_and_a_killed_sweep_resumes_its_runs(tmp_path):
    runs_dir = tmp_path / "runs"
    long_flags = TINY_PPO.replace("--total-timesteps 512", "--total-timesteps 200000") + " --checkpoint-every 256"
    command = _sweep_command(runs_dir)
    command[command.index("--flags") + 1] = long_flags
    sweeping = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while not all((runs_dir / f"CartPole-v1__ppo__{seed}" / "checkpoint.pt").exists() for seed in (1, 2)):
        assert time.time() < deadline and sweeping.poll() is None, "runs never checkpointed"
        time.sleep(0.5)
    sweeping.send_signal(signal.SIGTERM)
    output, _ = sweeping.communicate(timeout=120)
    assert sweeping.returncode == 2 and "rerun the same command to resume" in output, output
    # both runs checkpointed on the signal: the status line counts them stopped, not failed
    assert "0 failed, 2 stopped, 0 pending" in output and "1 failed" not in output, output
    assert "1 pending" not in output, output  # the group's first member counted did not send its partner to pending
    stopped = {seed: json.loads((runs_dir / f"CartPole-v1__ppo__{seed}" / "summary.json").read_text()) for seed in (1, 2)}
    assert not any(s["finished"] for s in stopped.values())

    # the same sweep, now with a budget the stopped runs have partly spent: both resume (no duplicate directory)
    command[command.index("--flags") + 1] = long_flags.replace("--total-timesteps 200000", "--total-timesteps 1024")
    resumed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "2 to resume, 0 to start" in resumed.stderr
    for seed in (1, 2):
        summary = json.loads((runs_dir / f"CartPole-v1__ppo__{seed}" / "summary.json").read_text())
        assert summary["finished"] and summary["global_step"] >= max(1024, stopped[seed]["global_step"])
    # the two seeds trained as one group (cleanrl-plus sweep packs a configuration's seeds), which resumed as a group
    assert "resuming from step" in (runs_dir / "logs" / "CartPole-v1__ppo__seeds-1-2.log").read_text()
    assert sorted(p.name for p in runs_dir.iterdir()) == ["CartPole-v1__ppo__1", "CartPole-v1__ppo__2", "logs"]

    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "2 finished already, 0 to resume, 0 to start" in again.stderr


def test_a_run_that_died_before_its_first_checkpoint_is_set_aside_not_deleted(tmp_path):
    spec = sweep.manifest(sweep.parse(["--seeds", "1", "--runs-dir", str(tmp_path)]))[0]
    spec.dir.mkdir(parents=True)
    (spec.dir / "events.out.tfevents.0").write_text("partial")
    assert sweep.status_of(spec) == "fresh"
    sweep.prepare(spec)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(spec.name + ".abandoned-")]
    assert len(aside) == 1 and (aside[0] / "events.out.tfevents.0").exists() and not spec.dir.exists()


def test_submitit_executor_runs_the_sweep_in_its_local_mode(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    monkeypatch.chdir(tmp_path)  # a relative --runs-dir is the folder the sweep starts in, for a job too
    args = sweep.parse(
        [
            "--seeds",
            "1",
            "--flags",
            TINY_PPO,
            "--runs-dir",
            "rel",
            "--executor",
            "submitit",
            "--slurm.cluster",
            "local",
            "--slurm.timeout-min",
            "10",
        ]
    )
    results = sweep.run_sweep(args)
    assert [r["state"] for r in results] == ["finished"]
    assert json.loads((tmp_path / "rel" / "CartPole-v1__ppo__1" / "summary.json").read_text())["finished"]


def test_ray_executor_runs_a_group_of_seeds_on_a_local_ray_instance(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.chdir(tmp_path)
    args = sweep.parse(["--seeds", "1", "2", "--flags", TINY_PPO, "--runs-dir", "rel", "--executor", "ray"])
    assert [len(job.runs) for job in _jobs(args)] == [2]
    results = sweep.run_sweep(args)
    assert sorted(r["state"] for r in results) == ["finished", "finished"]
    for seed in (1, 2):
        run_dir = tmp_path / "rel" / f"CartPole-v1__ppo__{seed}"
        assert json.loads((run_dir / "summary.json").read_text())["finished"]
        assert json.loads((run_dir / "args.json").read_text())["seed"] == seed


def _jobs(args: sweep.SweepArgs) -> list[sweep.Job]:
    specs = sweep.manifest(args)
    return sweep.plan_jobs(specs, {spec.name: sweep.status_of(spec) for spec in specs}, args)


def test_a_configurations_seeds_are_packed_into_groups_and_kron_and_atari_run_one_seed_per_process(tmp_path):
    base = ["--seeds", "1", "2", "3", "4", "5", "--runs-dir", str(tmp_path), "--flags", "--device cpu"]
    args = sweep.parse([*base, "--members-per-process", "2", "--config", "baseline=", "kron=--optim.name kron"])
    jobs = _jobs(args)
    assert [[run.seed for run in job.runs] for job in jobs] == [[1, 2], [3, 4], [5], [1], [2], [3], [4], [5]]
    command = sweep.command_for(jobs[0])
    assert command[command.index("--seeds") :][:3] == ["--seeds", "1", "2"] and "--seed" not in command
    # each member's directory is run name + __seed: the name the one-seed run of that seed has
    assert command[command.index("--run-name") + 1] + "__1" == jobs[0].runs[0].name == "CartPole-v1__ppo__1"
    assert sweep.command_for(jobs[2])[-4:] == ["--seed", "5", "--run-name", "CartPole-v1__ppo__5"]
    assert [len(job.runs) for job in _jobs(sweep.parse([*base, "--members-per-process", "1"]))] == [1] * 5
    assert [len(job.runs) for job in _jobs(sweep.parse(base))] == [5]  # automatic: up to AUTO_MEMBERS on CPU
    atari = sweep.parse([*base, "--agent", "ddqn", "--env-id", "ALE/Pong-v5"])
    assert [len(job.runs) for job in _jobs(atari)] == [1] * 5


def test_a_killed_group_resumes_as_the_group_it_was_and_new_seeds_form_new_groups(tmp_path):
    args = sweep.parse(["--seeds", "1", "2", "3", "--runs-dir", str(tmp_path), "--members-per-process", "3"])
    specs = sweep.manifest(args)
    for spec in specs[:2]:  # seeds 1 and 2 trained as a group of two and were killed after a checkpoint
        spec.dir.mkdir(parents=True)
        (spec.dir / "args.json").write_text(json.dumps({"seed": spec.seed, "group": [s.name for s in specs[:2]]}))
        (spec.dir / "checkpoint.pt").write_bytes(b"")
    jobs = _jobs(args)
    assert [([run.seed for run in job.runs], job.resume) for job in jobs] == [([1, 2], True), ([3], False)]
    command = sweep.command_for(jobs[0])
    assert command[-2:] == ["--resume", str(specs[0].dir)] and "--seeds" not in command and "--seed" not in command


def _project_files() -> set[str]:
    """Every file of the project's folder but Python's bytecode caches."""
    return {
        str(path.relative_to(REPO))
        for path in REPO.rglob("*")
        if path.is_file() and not {"__pycache__", ".git", ".pytest_cache"} & set(path.relative_to(REPO).parts)
    }


def _in_folder(folder: Path, *command: str, timeout: float = 300, **variables: str) -> subprocess.CompletedProcess:
    """A command started in `folder` as the installed `cleanrl-plus` script runs it: importing this checkout, as an
    installed package is found from anywhere, and not the folder's own modules (-P: the folder is not on sys.path)."""
    env = os.environ | variables | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-P", *command], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_sweep_report_eval_and_an_agent_started_in_another_folder_write_there_and_never_into_the_project(tmp_path):
    """A researcher's experiment folder, which even holds an agents/ package of its own: relative paths are that
    folder's, for the sweep, its plan file, W&B's folder, report, eval and an agent started by hand."""
    work = tmp_path / "experiment"
    (work / "agents").mkdir(parents=True)
    (work / "agents" / "__init__.py").write_text("")
    (work / "agents" / "ppo.py").write_text("raise SystemExit('not the agent of cleanrl_plus')\n")
    (work / "plan.toml").write_text(
        f'agent = "ppo"\nenv_id = "CartPole-v1"\nseeds = [2]\nruns_dir = "planned"\nflags = "{TINY_PPO} --track"\n'
    )
    before = _project_files()
    sweep_command = [
        "-m",
        "commands.cli",
        "sweep",
        "--agent",
        "ppo",
        "--env-id",
        "CartPole-v1",
        "--seeds",
        "1",
        "--config",
        "baseline=",
        "--runs-dir",
        "rel",
        "--flags",
        TINY_PPO,
        "--workers",
        "1",
    ]
    first = _in_folder(work, *sweep_command)
    assert first.returncode == 0, first.stderr
    assert json.loads((work / "rel" / "CartPole-v1__ppo__1" / "summary.json").read_text())["finished"]
    again = _in_folder(work, *sweep_command)
    assert again.returncode == 0 and "1 finished already, 0 to resume, 0 to start" in again.stderr, again.stderr
    planned = _in_folder(
        work,
        "-m",
        "commands.cli",
        "sweep",
        "plan.toml",
        "--workers",
        "1",
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_DIR="wandb-files",
    )  # a relative W&B folder is the experiment folder's too
    assert planned.returncode == 0, planned.stderr
    assert json.loads((work / "planned" / "CartPole-v1__ppo__2" / "summary.json").read_text())["finished"]
    assert list((work / "wandb-files").rglob("*.wandb")), "the W&B run's files are not in the experiment folder"

    reported = _in_folder(work, "-m", "commands.cli", "report", "rel", "planned", "--reps", "50")
    assert reported.returncode == 0 and (work / "rel" / "report" / "report.md").exists(), reported.stderr
    evaluated = _in_folder(work, "-m", "commands.cli", "eval", "rel/CartPole-v1__ppo__1", "--episodes", "2")
    assert evaluated.returncode == 0 and "ppo on CartPole-v1" in evaluated.stdout, evaluated.stderr
    by_hand = _in_folder(
        work,
        str(REPO / "agents" / "ppo.py"),
        *TINY_PPO.split(),
        "--env-id",
        "CartPole-v1",
        "--runs-dir",
        "mine",
        "--run-name",
        "by-hand",
        "--no-progress",
        "--threads",
        "1",
    )
    assert by_hand.returncode == 0 and (work / "mine" / "by-hand" / "summary.json").exists(), by_hand.stderr
    assert _project_files() == before


def test_a_run_executed_in_another_folder_as_on_a_cluster_node_writes_where_the_sweep_started(tmp_path, monkeypatch):
    """submitit and Ray call `execute` in a job or task whose folder is the node's: the run, its log and a relative W&B
    folder still land where the sweep was started, and nothing in the node's folder."""
    experiment, node = tmp_path / "experiment", tmp_path / "node"
    experiment.mkdir()
    node.mkdir()
    monkeypatch.chdir(experiment)
    spec = sweep.manifest(sweep.parse(["--seeds", "1", "--flags", TINY_PPO + " --track", "--runs-dir", "rel"]))[0]
    monkeypatch.chdir(node)
    for name, value in (("WANDB_MODE", "offline"), ("WANDB_SILENT", "true"), ("WANDB_DIR", "wandb-files")):
        monkeypatch.setenv(name, value)
    assert sweep.execute(spec)["state"] == "finished", (experiment / "rel" / "logs" / f"{spec.name}.log").read_text()
    assert json.loads((experiment / "rel" / spec.name / "summary.json").read_text())["finished"]
    assert list((experiment / "wandb-files").rglob("*.wandb")) and not any(node.iterdir())


def test_a_sweep_killed_with_sigkill_stops_its_runs_and_a_rerun_resumes_them(tmp_path):
    from cleanrl_plus.runlock import run_dir_holder

    long_flags = TINY_PPO.replace("--total-timesteps 512", "--total-timesteps 500000") + " --checkpoint-every 256"
    command = [
        "-m",
        "commands.cli",
        "sweep",
        "--agent",
        "ppo",
        "--env-id",
        "CartPole-v1",
        "--seeds",
        "1",
        "2",
        "--runs-dir",
        "rel",
        "--workers",
        "2",
        "--flags",
        long_flags,
    ]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    sweeping = subprocess.Popen(
        [sys.executable, *command], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    run_dirs = [tmp_path / "rel" / f"CartPole-v1__ppo__{seed}" for seed in (1, 2)]
    workers: list = []
    try:
        deadline = time.time() + 240
        while not all((run_dir / "checkpoint.pt").exists() for run_dir in run_dirs):
            assert time.time() < deadline and sweeping.poll() is None, "runs never checkpointed"
            time.sleep(0.5)
        workers = [run_dir_holder(run_dir) for run_dir in run_dirs]
        assert all(workers)
        sweeping.kill()
        sweeping.wait(timeout=60)
        deadline = time.time() + 120
        while any(
            run_dir_holder(run_dir) for run_dir in run_dirs
        ):  # the workers checkpoint and stop: the OS drops their locks
            assert time.time() < deadline, f"runs {workers} outlived their sweep"
            time.sleep(0.5)
    finally:
        sweeping.kill()
        for holder in filter(None, map(run_dir_holder, run_dirs)):  # an orphan that a failing check would leave running
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder, signal.SIGKILL)
    stopped = [json.loads((run_dir / "summary.json").read_text())["global_step"] for run_dir in run_dirs]

    command[command.index("--flags") + 1] = long_flags.replace(
        "--total-timesteps 500000", f"--total-timesteps {max(stopped) + 256}"
    )
    resumed = subprocess.run([sys.executable, *command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0 and "2 to resume, 0 to start" in resumed.stderr, resumed.stderr
    assert all(json.loads((run_dir / "summary.json").read_text())["finished"] for run_dir in run_dirs)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--config", "bad=--least.enabled"], "configuration 'bad' of ppo: LEAST (--least.enabled) does not apply to ppo"),
        (["--flags", "--clip.kappa -1"], "configuration 'baseline' of ppo: --clip.kappa must be at least 0, got -1.0"),
        (
            ["--config", "redo=--net.activation crelu --reset.method redo"],
            "configuration 'redo' of ppo: ReDo recycles dormant units one-to-one",
        ),
        (["--seeds", "1", "-1"], "--seeds entries must be in [0, 4294967295], got 1 -1"),
        (["--runs-dir", "/sys/runs"], "--runs-dir /sys/runs: cannot create runs in /sys/runs ("),
        (
            ["--config", "x" * 250 + "="],  # was an OSError (File name too long) on the run's log once runs started
            "--config 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…xxxxxxxxx': the file names of its runs (CartPole-v1__ppo-xxxxxxxxxxxxx…"
            "xxxxxx__1.abandoned-<time> the longest) would be 291 bytes, over the file system's limit of 255 — choose a "
            "shorter configuration name",
        ),
        (
            ["--config", "x" * 200 + "=", "--seeds", *map(str, range(100, 132)), "--members-per-process", "32"],
            "--members-per-process: the log file of the 32 seeds of 'ppo-xxxxxxxxxxxxxxxxxxxxxxxxxx…xxxxxxxxx' trained "
            "together would be 356 bytes, over the file system's limit of 255 — choose fewer --members-per-process",
        ),
        (["--config", "a\nb="], "--config 'a\\nb=' must look like NAME=FLAGS"),  # one line, the newline written \\n
    ],
)
def test_dry_run_refuses_what_every_run_would_refuse_at_start_up(argv, expected, tmp_path):
    result = _in_folder(
        tmp_path,
        "-m",
        "commands.cli",
        "sweep",
        "--agent",
        "ppo",
        "--env-id",
        "CartPole-v1",
        "--seeds",
        "1",
        "--runs-dir",
        "rel",
        *argv,
        "--dry-run",
        timeout=120,
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {expected}"), result.stderr
    assert not any(tmp_path.iterdir())


def test_compare_by_default_runs_enough_seeds_for_a_claim_each_configuration_as_one_group(tmp_path):
    from commands import compare
    from commands.report import MIN_SEEDS_FOR_COMPARISONS

    args = compare.parse(["--runs-dir", str(tmp_path)])
    assert args.seeds == MIN_SEEDS_FOR_COMPARISONS == 10
    jobs = _jobs(compare.plan(args))
    assert [(job.first.exp_name, [run.seed for run in job.runs]) for job in jobs] == [
        ("ppo", list(range(1, 11))),
        ("ppo-shrink-perturb", list(range(1, 11))),
    ]


def test_compare_runs_baseline_and_remedy_and_writes_the_report(tmp_path):
    from commands import compare

    runs_dir = tmp_path / "compare"
    report = compare.main(
        [
            "--env-id",
            "CartPole-v1",
            "--seeds",
            "2",
            "--flags",
            TINY_PPO,
            "--runs-dir",
            str(runs_dir),
            "--remedy",
            "--reset.method shrink-perturb --reset.every 10",
            "--remedy-name",
            "sp",
            "--reps",
            "200",
        ]
    )
    text = report.read_text()
    assert "ppo-sp" in text and "| ppo " in text.replace("|ppo ", "| ppo ")
    assert (runs_dir / "report" / "curves.png").stat().st_size > 10_000
    assert len(list(runs_dir.glob("CartPole-v1__*"))) == 4

    # what the agents wrote, field by field, and the report's numbers recomputed from it by hand
    finals, aucs = {}, {}
    for seed in (1, 2):
        run_dir = runs_dir / f"CartPole-v1__ppo__{seed}"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert {key: summary[key] for key in ("agent", "env_id", "seed", "global_step", "num_updates", "finished")} == {
            "agent": "ppo",
            "env_id": "CartPole-v1",
            "seed": seed,
            "global_step": 512,
            "num_updates": 8,
            "finished": True,
        }
        assert summary["run_dir"] == str(run_dir) and summary["sps"] > 0
        returns = summary["eval"]["returns"]
        assert (
            summary["eval"]["step"] == 512 and len(returns) == 2 and summary["eval"]["mean"] == pytest.approx(sum(returns) / 2)
        )
        assert all(r == int(r) and 1 <= r <= 500 for r in returns)  # CartPole returns are episode lengths
        history = summary["eval_history"]
        assert [step for step, _ in history] == [256, 512] and history[-1][1] == summary["eval"]["mean"]
        events = EventAccumulator(str(run_dir)).Reload().Scalars("eval/episodic_return")
        assert [(e.step, e.value) for e in events] == [(step, pytest.approx(mean)) for step, mean in history]
        finals[seed] = history[-1][1]
        aucs[seed] = (history[0][1] + history[1][1]) / 2  # trapezoid over [256, 512] divided by its length
    with (runs_dir / "report" / "report.csv").open() as file:
        rows = {(r["group"], r["statistic"], r["estimator"]): r for r in csv.DictReader(file) if r["table"] == "per_env"}
    # two seeds: the interquartile mean trims nothing, so IQM = mean
    for statistic, per_seed in (("final", finals), ("auc", aucs)):
        for estimator in ("iqm", "mean"):
            row = rows[("ppo", statistic, estimator)]
            assert row["seeds"] == "2" and float(row["value"]) == pytest.approx(sum(per_seed.values()) / 2), (
                statistic,
                estimator,
            )
    low, high = float(rows[("ppo", "final", "iqm")]["ci_low"]), float(rows[("ppo", "final", "iqm")]["ci_high"])
    assert (low, high) == pytest.approx((min(finals.values()), max(finals.values())))  # resampling 2 runs: their min and max


# ---------------------------------------------------------------- two sweeps on one runs folder


def test_a_claim_is_all_or_none_names_its_holder_and_dies_with_it(tmp_path):
    import socket

    from cleanrl_plus.runlock import RunClaimed, claim_holder, claim_runs

    folder = tmp_path / "claims"
    first = claim_runs(folder, ["b", "a"])
    assert claim_holder(folder, "a") == f"sweep process {os.getpid()} on {socket.gethostname()}"
    with pytest.raises(RunClaimed, match=f"^a is claimed by sweep process {os.getpid()} on "):
        claim_runs(folder, ["a"])  # a second claim on the same file: refused, even from the same process
    with pytest.raises(RunClaimed, match="^b is claimed"):
        claim_runs(folder, ["b", "ab"])  # in name order: ab is taken first
    assert claim_holder(folder, "ab") is None  # all or none: ab was given back
    first.release()
    assert not any(folder.iterdir()) and claim_holder(folder, "a") is None

    # a holder killed with SIGKILL leaves its claim file, never its claim
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import pathlib, sys, time; from cleanrl_plus.runlock import claim_runs; "
            f"claim = claim_runs(pathlib.Path({str(folder)!r}), ['a']); print(1, flush=True); time.sleep(600)",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "1\n"
        assert claim_holder(folder, "a") == f"sweep process {holder.pid} on {socket.gethostname()}"
    finally:
        holder.kill()
        holder.wait(timeout=60)
    assert (folder / "a.claim").exists()
    claim_runs(folder, ["a"]).release()


def test_a_runs_process_keeps_its_claim_when_the_sweep_that_started_it_is_gone(tmp_path):
    """A sweep killed with kill -9: its run checkpoints and stops on SIGTERM, and until it has, no other sweep may take
    the run (it would find it held by a process no sweep started, and give up on it)."""
    from cleanrl_plus.runlock import claim_holder, claim_runs

    spec = sweep.manifest(sweep.parse(["--seeds", "1", "--runs-dir", str(tmp_path)]))[0]
    folder = sweep.claims_folder(spec.runs_dir)
    claim = claim_runs(folder, [spec.name])
    with open(tmp_path / "run.log", "w") as log:
        run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], **sweep.agent_process(spec, log, claim))
    for _, fd in claim.files:  # the sweep's own hold on the claim goes, as when it dies
        os.close(fd)
    try:
        assert claim_holder(folder, spec.name) == f"sweep process {os.getpid()} on {__import__('socket').gethostname()}"
    finally:
        run.kill()
        run.wait(timeout=60)
    assert claim_holder(folder, spec.name) is None


def _finished_run(spec: sweep.RunSpec) -> None:
    spec.dir.mkdir(parents=True)
    (spec.dir / "args.json").write_text(json.dumps({"agent": spec.agent, "seed": spec.seed}))
    (spec.dir / "summary.json").write_text(json.dumps({"finished": True, "eval": {"mean": 9.0}}))


def test_a_sweep_waits_for_a_run_another_sweep_claimed_and_counts_it_once_that_sweep_finished_it(tmp_path):
    """What `settle` makes of a job planned fresh: claimed by another sweep (wait), finished by it meanwhile (not
    started again), one of a group finished meanwhile (the rest planned again), free (start it, holding the claim)."""
    from cleanrl_plus.runlock import claim_runs

    args = sweep.parse(["--seeds", "1", "2", "3", "--runs-dir", str(tmp_path), "--members-per-process", "3"])
    specs = sweep.manifest(args)
    (job,) = _jobs(args)
    folder = sweep.claims_folder(str(tmp_path))
    other = claim_runs(folder, [specs[1].name])  # another sweep's claim (a second claim of this process is refused too)
    settled = sweep.settle(job, args)
    assert settled.claim is None and not settled.outcomes and not settled.replanned
    assert (
        settled.holder == f"{specs[1].name} is claimed by sweep process {os.getpid()} on {__import__('socket').gethostname()}"
    )
    assert sorted(p.name for p in folder.iterdir()) == [f"{specs[1].name}.claim"]  # none of the others kept

    _finished_run(specs[1])  # ... which the other sweep finished before letting go
    other.release()
    settled = sweep.settle(job, args)
    assert settled.claim is None and [(o["run"], o["state"], o["by"]) for o in settled.outcomes] == [
        (specs[1].name, "finished", "another sweep")
    ]
    assert [[run.seed for run in j.runs] for j in settled.replanned] == [[1, 3]]
    assert not any(folder.iterdir())

    settled = sweep.settle(settled.replanned[0], args)
    assert settled.claim is not None and not settled.outcomes and not settled.replanned
    assert sweep.settle(sweep.Job((specs[2],)), args).holder.startswith(f"{specs[2].name} is claimed")
    settled.claim.release()
    from commands.report import is_sweep_log_dir

    assert is_sweep_log_dir(tmp_path / "logs")  # logs/claims is the sweep's: a report over the runs folder skips it


def _logged_lines(runs_dir: Path, start: str) -> list[str]:
    """Lines starting with `start` in every log of the sweep, run by run."""
    return sorted(
        line for log in (runs_dir / "logs").glob("*.log") for line in log.read_text().splitlines() if line.startswith(start)
    )


def _assert_every_run_trained_once_by_one_writer(runs_dir: Path, seeds: tuple[int, ...]) -> None:
    names = [f"CartPole-v1__ppo__{seed}" for seed in seeds]
    for name in names:
        assert json.loads((runs_dir / name / "summary.json").read_text())["finished"], name
    # one process per run, and each log written by the one process its header names
    assert _logged_lines(runs_dir, "logging to ") == [
        f"logging to {runs_dir / name} (device cpu, 1 threads)" for name in names
    ]
    for log in (runs_dir / "logs").glob("*.log"):
        text = log.read_text()
        assert text.count("--- ") == 1 and "error:" not in text and "resuming" not in text, text
    assert sorted(p.name for p in runs_dir.iterdir()) == [*names, "logs"]  # nothing moved aside


@pytest.mark.slow
def test_two_sweeps_started_together_and_a_third_while_they_run_train_every_run_once(tmp_path):
    """Two terminals (or a Slurm job requeued while the first still runs) on one runs folder: each run is claimed by
    one sweep before its process starts, the others wait for it and count it finished; every sweep exits 0."""
    runs_dir = tmp_path / "runs"
    command = _sweep_command(runs_dir, "--members-per-process", "1", "--seeds", "1", "2", "3")  # the last --seeds counts
    sweeps = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in "ab"]
    deadline = time.time() + 240
    while not list((runs_dir / "logs").glob("*.log")) and time.time() < deadline:
        time.sleep(0.2)  # the third starts once a run's process has started (or later: the outcome is the same)
    sweeps.append(subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [one.communicate(timeout=600)[0] for one in sweeps]
    assert [one.returncode for one in sweeps] == [0, 0, 0], outputs
    _assert_every_run_trained_once_by_one_writer(runs_dir, (1, 2, 3))
    for output in outputs:
        assert "failed" not in output.replace("0 failed", ""), output
    from commands.report import find_run_dirs

    assert find_run_dirs([str(runs_dir)]) == ([runs_dir / f"CartPole-v1__ppo__{seed}" for seed in (1, 2, 3)], [])


def _sweep_writing(run_dir: Path) -> int | None:
    """The sweep whose agent process writes `run_dir` (the parent of the process holding its lock), or None."""
    from cleanrl_plus.runlock import run_dir_holder

    writer = run_dir_holder(run_dir)
    with contextlib.suppress(OSError, ValueError, TypeError):
        return int(Path(f"/proc/{writer}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return None


@pytest.mark.slow
def test_a_sweep_killed_while_another_runs_the_same_sweep_leaves_its_runs_to_the_other(tmp_path):
    """Two sweeps on one folder and one of them killed (kill -9) once a run it started has checkpointed: its run
    checkpoints and stops (SIGTERM from the kernel), keeping the run claimed until it has; the other sweep then resumes
    it and exits 0; the killed sweep's command, run again, finds everything finished."""
    runs_dir = tmp_path / "runs"
    command = _sweep_command(runs_dir, "--members-per-process", "1", "--workers", "1")
    command[command.index("--flags") + 1] = TINY_PPO.replace("512", "1024") + " --checkpoint-every 128"
    sweeps = {}
    for _ in "ab":
        one = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sweeps[one.pid] = one
    try:
        deadline = time.time() + 240
        victim = None
        while victim is None:
            assert time.time() < deadline, "no run checkpointed"
            for run_dir in runs_dir.glob("CartPole-v1__ppo__*"):
                writing = _sweep_writing(run_dir)
                if (run_dir / "checkpoint.pt").exists() and writing in sweeps:
                    victim = sweeps.pop(writing)
                    break
            time.sleep(0.1)
        victim.kill()
        victim.communicate(timeout=60)
        (survivor,) = sweeps.values()
        output = survivor.communicate(timeout=600)[0]
    finally:
        for one in sweeps.values():
            one.kill()
    assert survivor.returncode == 0, output
    for seed in (1, 2):
        assert json.loads((runs_dir / f"CartPole-v1__ppo__{seed}" / "summary.json").read_text())["finished"]
    for log in (runs_dir / "logs").glob("*.log"):
        assert "error:" not in log.read_text(), log.read_text()
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "2 finished already, 0 to resume, 0 to start" in again.stderr, again.stderr
