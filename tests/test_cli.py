"""The command line as a user meets it: help, one-line errors, kill and resume, the bench command."""

import json
import signal
import time

import pytest
import torch
from conftest import run_script

from cleanrl_plus.checkpoint import load_checkpoint

TINY_FLAGS = [
    "--batch-size",
    "32",
    "--hidden-sizes",
    "32",
    "32",
    "--eval-episodes",
    "2",
    "--buffer-size",
    "100000",
    "--threads",
    "1",
]


def _assert_one_line_error(result, expected: str):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"error: {expected}"], result.stderr


def test_help_lists_every_flag_with_its_docstring():
    result = run_script("agents/td3.py", "--help")
    assert result.returncode == 0
    for flag in ("--learning-starts", "--policy-frequency", "--resume", "--eval-every", "--checkpoint-every", "--no-progress"):
        assert flag in result.stdout
    assert "target smoothing coefficient" in result.stdout


def test_unknown_env_id_is_one_line_and_leaves_no_run_dir(tmp_path):
    result = run_script("agents/td3.py", "--env-id", "Hoper-v5", "--runs-dir", str(tmp_path))
    _assert_one_line_error(result, "unknown env id 'Hoper-v5' — did you mean 'Hopper-v5'?")
    assert not any(tmp_path.iterdir())


def test_misspelt_flag_exits_non_zero_and_suggests_the_flag():
    result = run_script("agents/td3.py", "--learning-rat", "0.1")
    assert result.returncode == 2 and "--learning-rate" in result.stderr + result.stdout


def test_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    result = run_script("agents/td3.py", "--device", "cuda", "--runs-dir", str(tmp_path))
    _assert_one_line_error(result, "--device cuda but no CUDA device is visible — use --device auto or --device cpu")


def test_sigterm_checkpoints_then_resume_finishes(tmp_path):
    import subprocess
    import sys

    from conftest import REPO

    flags = [
        "--env-id",
        "Pendulum-v1",
        "--learning-starts",
        "300",
        "--eval-every",
        "0",
        "--checkpoint-every",
        "400",
        "--runs-dir",
        str(tmp_path),
        "--no-progress",
        *TINY_FLAGS,
    ]
    process = subprocess.Popen(
        [sys.executable, "agents/td3.py", "--total-timesteps", "1000000", *flags],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not list(tmp_path.glob("*/checkpoint.pt")) and time.time() < deadline:
        time.sleep(0.2)  # the first periodic checkpoint proves the loop is learning (past step 300)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    run_dir = next(tmp_path.iterdir())
    assert "stopped at step" in stdout and f"--resume {run_dir}" in stdout
    stopped_at = load_checkpoint(run_dir / "checkpoint.pt")["global_step"]
    assert 0 < stopped_at < 1_000_000
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is False and summary["global_step"] == stopped_at

    result = run_script("agents/td3.py", "--resume", str(run_dir), "--total-timesteps", str(stopped_at + 300))
    assert result.returncode == 0, result.stderr
    assert load_checkpoint(run_dir / "checkpoint.pt")["global_step"] == stopped_at + 300
    assert json.loads((run_dir / "summary.json").read_text())["finished"] is True


def test_corrupt_checkpoint_is_a_clear_error_and_is_kept(tmp_path):
    result = run_script(
        "agents/td3.py",
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "120",
        "--learning-starts",
        "100",
        "--eval-every",
        "0",
        "--runs-dir",
        str(tmp_path),
        "--no-progress",
        *TINY_FLAGS,
    )
    assert result.returncode == 0, result.stderr
    run_dir = next(tmp_path.iterdir())
    checkpoint = run_dir / "checkpoint.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:1000])  # a truncated write, as after a crash of some other tool
    result = run_script("agents/td3.py", "--resume", str(run_dir))
    _assert_one_line_error(
        result,
        f"checkpoint {checkpoint} is corrupt or unreadable (RuntimeError) — delete it to restart the run, or resume another "
        "run",
    )
    assert checkpoint.stat().st_size == 1000


def test_a_checkpoint_from_an_older_format_is_refused_in_one_line_and_kept(tmp_path):
    import torch

    result = run_script(
        "agents/td3.py",
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "120",
        "--learning-starts",
        "100",
        "--eval-every",
        "0",
        "--runs-dir",
        str(tmp_path),
        "--no-progress",
        *TINY_FLAGS,
    )
    assert result.returncode == 0, result.stderr
    checkpoint = next(tmp_path.iterdir()) / "checkpoint.pt"
    state = torch.load(checkpoint, weights_only=False)
    del state["format"]  # as written before the format was recorded (issue #26's new wiring)
    torch.save(state, checkpoint)
    before = checkpoint.read_bytes()
    result = run_script("agents/td3.py", "--resume", str(checkpoint.parent))
    _assert_one_line_error(
        result,
        f"checkpoint {checkpoint} was written by an older cleanrl_plus (checkpoint format 1, this version "
        "reads 2) — start a new run, or use the version that wrote it",
    )
    assert checkpoint.read_bytes() == before


def test_resume_of_a_directory_that_is_not_a_run(tmp_path):
    result = run_script("agents/td3.py", "--resume", str(tmp_path))
    _assert_one_line_error(
        result, f"--resume {tmp_path}: no args.json there — pass the directory of a run started by cleanrl_plus"
    )


@pytest.mark.parametrize(
    "agent, extra",
    [
        ("td3", []),
        ("td3", ["--burnin", "100"]),
        ("sac_simba", ["--agent-flags=--critic-width 32 --critic-blocks 1"]),
        ("ppo", ["--agent-flags=--num-steps 100 --num-minibatches 2 --update-epochs 1"]),
    ],
)
def test_bench_reports_steps_and_updates_per_second(agent, extra):
    result = run_script(
        "-m",
        "commands.cli",
        "bench",
        agent,
        "--env-id",
        "Pendulum-v1",
        "--steps",
        "200",
        "--warmup",
        "100",
        "--threads",
        "1",
        "--json-out",
        *extra,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["env_steps_per_second"] > 0 and report["updates_per_second"] > 0
    assert report["threads"] == 1 and report["device"] == "cpu" and report["timed_steps"] == 200
    assert report["warmup_steps"] == (0 if agent == "ppo" else 100)
    assert report["burnin_steps"] == (100 if "--burnin" in extra else 0)  # untimed learning steps (compilation, capture)
    # both rates come from the same clock, so their ratio is the agent's updates per env step: TD3 1, SAC+SimBa 2
    # (its default), PPO 2 minibatches per 100-step rollout
    updates_per_step = {"td3": 1.0, "sac_simba": 2.0, "ppo": 0.02}[agent]
    assert report["updates_per_second"] / report["env_steps_per_second"] == pytest.approx(updates_per_step, rel=0.05)


def test_sac_rejects_discrete_action_envs(tmp_path):
    result = run_script("agents/sac_simba.py", "--env-id", "CartPole-v1", "--runs-dir", str(tmp_path))
    assert result.returncode == 2 and "SAC needs continuous (Box) actions" in result.stderr
    assert "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir())  # found after the run directory was made: it is removed again


def test_unknown_cli_command():
    result = run_script("-m", "commands.cli", "nope")
    _assert_one_line_error(result, "unknown command 'nope' — run `cleanrl-plus --help` for the list")


def test_bench_env_times_the_environment_alone():
    result = run_script(
        "-m",
        "commands.cli",
        "bench",
        "env",
        "--env-id",
        "torch:CartPole-v1",
        "--num-envs",
        "64",
        "--steps",
        "6400",
        "--threads",
        "1",
        "--json-out",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["agent"] == "env" and report["timed_steps"] == 6400 and report["env_steps_per_second"] > 0


def test_bench_groups_times_the_same_seeds_one_per_process_and_as_a_group(tmp_path):
    flags = "--total-timesteps 1024 --num-envs 4 --num-steps 32 --num-minibatches 2 --update-epochs 1 --eval-every 512"
    result = run_script(
        "-m", "commands.cli", "bench", "groups", "--env-id", "torch:CartPole-v1", "--seeds", "2",
        "--members-per-process", "2", "--flags", flags, "--runs-dir", str(tmp_path), "--json-out",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert [row["members_per_process"] for row in report["rows"]] == [1, 2] and report["rows"][0]["ratio"] == 1.0
    assert all(row["wall_s"] > 0 and row["runs_per_hour"] > 0 for row in report["rows"])
    for size in (1, 2):  # both ways trained every seed to the end, with these flags
        for seed in (1, 2):
            summary = json.loads(
                (tmp_path / f"members-{size}" / f"torch-CartPole-v1__ppo__{seed}" / "summary.json").read_text()
            )
            assert summary["finished"] and summary["global_step"] == 1024 and summary["seed"] == seed
    assert (tmp_path / "members-2" / "logs" / "torch-CartPole-v1__ppo__seeds-1-2.log").is_file()  # one process


def test_bench_profile_lists_a_groups_costliest_operators_first():
    flags = "--num-envs 4 --num-steps 32 --num-minibatches 2 --update-epochs 2 --eval-every 0"
    result = run_script(
        "-m", "commands.cli", "bench", "profile", "--env-id", "torch:CartPole-v1", "--seeds", "3",
        "--total-timesteps", "256", "--rows", "1000", "--flags", flags, "--json-out",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["trained_seeds"] == [1, 2, 3]  # one group of three, each run to its end
    # every operator (not a top few, whose order a loaded machine changes): the members' batched layers among them
    operators = report["operators"]
    assert 8 < len(operators) < 1000 and "aten::baddbmm" in [row["name"] for row in operators]
    times = [row["self_cpu_s"] for row in operators]
    assert times == sorted(times, reverse=True) and times[0] > 0
    assert sum(row["share"] for row in operators) == pytest.approx(1, abs=0.01)  # every operator, shares rounded to 1e-4
    assert operators[0]["share"] == pytest.approx(times[0] / report["profiled_cpu_s"], abs=1e-4)
    # the profiler times an operator from its start to its end: on a loaded machine that may exceed the process's CPU
    # time, so only both being measured is checked
    assert report["profiled_cpu_s"] > 0 and report["cpu_s"] > 0


def test_output_cut_short_by_the_reader_is_not_a_traceback(tmp_path):
    """`cleanrl-plus sweep … --dry-run | head -1`: the reader closes the pipe early; the command stops quietly (141).
    The reader's end is closed before the command starts, so its first write fails whatever the pipe's buffer size or
    the machine's load; with output small enough to wait in Python's buffer until the exit, the command still stops
    quietly (it flushes before it returns)."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "commands.cli", "sweep", "--seeds", "1", "2", "--dry-run", "--runs-dir", str(tmp_path)]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line is written
    try:
        buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}  # as in a shell
        result = subprocess.run(command, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, env=buffered)
    finally:
        os.close(write_end)
    assert result.returncode == 141 and "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, (
        result.stderr
    )
