"""What a run guarantees (docs/reliability.md): a refused resume changes nothing, a kill -9 loses no logged point,
a diverged run stops, a bad or full disk is one line, and one run directory has one writer at a time."""

import errno
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, cli_in_process, run_script

from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.errors import RunFailure
from envs.errors import UserError

TINY = [
    "--batch-size",
    "32",
    "--hidden-sizes",
    "32",
    "32",
    "--eval-episodes",
    "2",
    "--buffer-size",
    "10000",
    "--threads",
    "1",
    "--no-progress",
    "--learning-starts",
    "100",
]


def _one_line_error(result, expected_start: str, code: int = 2) -> str:
    assert result.returncode == code, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {expected_start}"), result.stderr
    return lines[0]


def _hashes(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _td3_run(tmp_path, *flags: str, name: str = "run") -> Path:
    result = run_script(
        "agents/td3.py",
        "--env-id",
        "Pendulum-v1",
        "--eval-every",
        "0",
        "--runs-dir",
        str(tmp_path),
        "--run-name",
        name,
        *TINY,
        *flags,
    )
    assert result.returncode == 0, result.stderr
    return tmp_path / name


# ---------------------------------------------------------------- 1. a refused resume changes nothing


def test_refused_resumes_leave_every_file_byte_identical_and_the_run_resumable(tmp_path, monkeypatch, capsys):
    run_dir = _td3_run(tmp_path, "--total-timesteps", "150")
    assert json.loads((run_dir / "args.json").read_text())["agent"] == "td3"
    before = _hashes(run_dir)
    for flags, expected in [
        (
            ["--env-id", "MountainCarContinuous-v0"],
            "--env-id MountainCarContinuous-v0 differs from the run's Pendulum-v1 — only --total-timesteps",
        ),
        (["--hidden-sizes", "64", "64"], "--hidden-sizes [64, 64] differs from the run's [32, 32]"),
        (["--learning-rate", "0.1"], "--learning-rate 0.1 differs from the run's 0.0003"),
        (["--swd.enabled"], "--swd.enabled True differs from the run's False"),
    ]:
        result = cli_in_process("td3", ["--resume", str(run_dir), *flags], monkeypatch, capsys)
        _one_line_error(result, f"--resume {run_dir}: {expected}")
        assert _hashes(run_dir) == before, flags
    result = cli_in_process("sac_simba", ["--resume", str(run_dir)], monkeypatch, capsys)
    _one_line_error(result, f"--resume {run_dir}: that run was written by agents/td3.py, not agents/sac_simba.py")
    assert _hashes(run_dir) == before

    result = run_script("agents/td3.py", "--resume", str(run_dir), "--total-timesteps", "200", "--log-every", "50")
    assert result.returncode == 0, result.stderr
    assert load_checkpoint(run_dir / "checkpoint.pt")["global_step"] == 200
    recorded = json.loads((run_dir / "args.json").read_text())
    assert recorded["total_timesteps"] == 200 and recorded["log_every"] == 50 and recorded["resume"] == ""


def test_gtr_refuses_to_resume_a_ppo_run(tmp_path):
    flags = [
        "--env-id",
        "CartPole-v1",
        "--num-steps",
        "64",
        "--num-minibatches",
        "2",
        "--update-epochs",
        "1",
        "--eval-every",
        "0",
        "--eval-episodes",
        "2",
        "--total-timesteps",
        "64",
        "--threads",
        "1",
        "--no-progress",
        "--runs-dir",
        str(tmp_path),
        "--run-name",
        "ppo",
    ]
    assert run_script("agents/ppo.py", *flags).returncode == 0
    run_dir = tmp_path / "ppo"
    before = _hashes(run_dir)
    result = run_script("agents/gtr.py", "--resume", str(run_dir))
    _one_line_error(
        result,
        f"--resume {run_dir}: that run was written by agents/ppo.py, not agents/gtr.py — resume it with python agents/ppo.py",
    )
    assert _hashes(run_dir) == before


def test_runs_whose_args_name_no_agent_or_another_are_refused_in_one_line(tmp_path):
    from agents import gtr
    from cleanrl_plus.config import check_resume

    (tmp_path / "args.json").write_text(
        json.dumps({"seed": 1, "env_id": "CartPole-v1"})
    )  # an older cleanrl_plus wrote no agent
    with pytest.raises(UserError, match="names no agent"):
        check_resume(gtr.Args(env_id="CartPole-v1"), tmp_path)
    (tmp_path / "args.json").write_text(json.dumps({"agent": "ppo", "seed": 1, "env_id": "CartPole-v1"}))
    with pytest.raises(UserError, match="written by agents/ppo.py, not agents/gtr.py"):
        check_resume(gtr.Args(env_id="CartPole-v1"), tmp_path)


def test_a_checkpoint_that_does_not_fit_the_networks_is_one_line_and_changes_no_file(tmp_path):
    """args.json is rewritten with the first checkpoint of the resumed run and the events file opened on first use,
    so even a failure the up-front checks cannot foresee (here: another run's checkpoint.pt, for an env with other
    observations, copied in) changes no file but run.lock (which names the process that last held the run)."""
    run_dir = _td3_run(tmp_path, "--total-timesteps", "150")
    other = _td3_run(tmp_path, "--total-timesteps", "150", "--env-id", "MountainCarContinuous-v0", name="other")
    (run_dir / "checkpoint.pt").write_bytes((other / "checkpoint.pt").read_bytes())
    before = _hashes(run_dir)
    for command in (
        ["agents/td3.py", "--resume", str(run_dir), "--total-timesteps", "300"],
        ["-m", "commands.cli", "eval", str(run_dir)],
    ):
        line = _one_line_error(run_script(*command), "")
        assert re.search(r"(actor\.)?normalize\.mean has shape \[(1, )?2\] in the checkpoint but \[(1, )?3\] here", line), line
        assert str(run_dir) in line
        after = _hashes(run_dir)
        assert after.keys() == before.keys()
        assert {k: v for k, v in after.items() if k != "run.lock"} == {k: v for k, v in before.items() if k != "run.lock"}


# ---------------------------------------------------------------- 2. kill -9 and resume: every logged point survives


def _scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _kill_after_a_checkpoint(command: list[str], run_dir: Path, after_step: int, delay: float) -> int:
    """Start `command`, SIGKILL it `delay` seconds after it wrote a checkpoint past `after_step`; return that step."""
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, checkpoint_step = time.time() + 120, 0
    while checkpoint_step <= after_step and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
        try:
            checkpoint_step = load_checkpoint(run_dir / "checkpoint.pt")["global_step"]
        except UserError:
            pass
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed; lengthen it"
    return load_checkpoint(run_dir / "checkpoint.pt")["global_step"]


def test_a_killed_and_resumed_run_logs_the_same_series_as_a_straight_run(tmp_path):
    # checkpoints (and evaluations) every 100 steps, losses every 60, episodes end every 200: a checkpoint step holds an
    # evaluation point, and an episode can end before a checkpoint but be logged after it
    flags = [
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "800",
        "--log-every",
        "60",
        "--checkpoint-every",
        "100",
        "--eval-every",
        "100",
        "--runs-dir",
        str(tmp_path),
        *TINY,
    ]
    killed = tmp_path / "killed"
    command = [sys.executable, "agents/td3.py", *flags, "--run-name", "killed"]
    checkpoint_step = 0
    # kill at once after a checkpoint (its step's points must have reached the disk), then a while after one
    # (points logged past it must be purged and logged again)
    for delay in (0.0, 0.3):
        checkpoint_step = _kill_after_a_checkpoint(command, killed, after_step=max(checkpoint_step, 100), delay=delay)
        assert any(
            step == checkpoint_step for step, _ in _scalars(killed)["eval/episodic_return"]
        )  # a point at the checkpoint step
        command = [sys.executable, "agents/td3.py", "--resume", str(killed)]

    result = run_script("agents/td3.py", "--resume", str(killed))
    assert result.returncode == 0, result.stderr
    from agents import td3
    from cleanrl_plus.config import parse_args

    straight = Path(td3.main(parse_args(td3.Args, [*flags, "--run-name", "straight"]))["run_dir"])  # in-process: same numbers
    expected, got = _scalars(straight), _scalars(killed)
    assert sorted(got) == sorted(expected)
    for tag in expected:
        assert [s for s, _ in got[tag]] == [s for s, _ in expected[tag]], tag
        if tag != "charts/SPS":  # wall-clock; everything else is deterministic on CPU
            assert got[tag] == expected[tag], tag


# ---------------------------------------------------------------- 3. divergence stops the run


def test_a_diverging_run_stops_with_one_line_and_keeps_its_last_good_checkpoint(tmp_path):
    result = run_script(
        "agents/td3.py",
        "--env-id",
        "Pendulum-v1",
        "--learning-rate",
        "1e6",
        "--total-timesteps",
        "3000",
        "--log-every",
        "100",
        "--checkpoint-every",
        "100",
        "--eval-every",
        "500",
        "--runs-dir",
        str(tmp_path),
        "--run-name",
        "run",
        *TINY,
    )
    line = _one_line_error(result, "training diverged at step ", code=1)
    run_dir = tmp_path / "run"
    summary = json.loads(
        (run_dir / "summary.json").read_text(), parse_constant=lambda name: pytest.fail(f"bare {name} in summary.json")
    )
    step = summary["diverged"]["step"]
    assert summary["diverged"]["quantity"].startswith("losses/")  # the losses, read at the logging cadence, see it first
    assert f"at step {step}: {summary['diverged']['quantity']} is " in line and step < 3000
    state = load_checkpoint(run_dir / "checkpoint.pt")
    assert f"the last good checkpoint (step {state['global_step']}) is kept" in line and state["global_step"] < step
    for name in ("actor", "critic", "actor_target", "critic_target"):
        assert all(torch.isfinite(t).all() for t in state[name].values()), name

    from commands.report import write_report

    healthy = _td3_run(tmp_path, "--total-timesteps", "150", "--eval-every", "100", name="healthy")
    report_md = write_report([str(run_dir), str(healthy)], out_dir=tmp_path / "report", reps=50).read_text()
    assert f"skipped {run_dir}: it diverged ({summary['diverged']['quantity']} not finite at step {step})" in report_md


def test_a_sweep_keeps_a_diverged_run_and_does_not_rerun_it(tmp_path):
    """Rerunning a sweep resumed a diverged run from its last good checkpoint, which diverged again (same flags)."""
    runs_dir = tmp_path / "runs"
    flags = (
        " ".join(TINY) + " --learning-rate 1e6 --total-timesteps 3000 --log-every 100 --checkpoint-every 100 --eval-every 500"
    )
    command = [
        sys.executable,
        "-m",
        "commands.cli",
        "sweep",
        "--agent",
        "td3",
        "--env-id",
        "Pendulum-v1",
        "--seeds",
        "1",
        "--flags",
        flags,
        "--runs-dir",
        str(runs_dir),
        "--workers",
        "1",
    ]
    first = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    name = "Pendulum-v1__td3__1"
    summary = json.loads((runs_dir / name / "summary.json").read_text())
    assert first.returncode == 2 and f"{name}: diverged at step {summary['diverged']['step']}" in first.stderr, first.stderr
    files = {p.name: p.read_bytes() for p in (runs_dir / name).iterdir() if p.is_file()}
    log = (runs_dir / "logs" / f"{name}.log").read_text()

    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "0 finished already, 0 to resume, 0 to start, 1 diverged and not rerun" in again.stderr
    assert f"{name}: diverged at step" in again.stderr and "move a diverged run's directory aside" in again.stderr
    assert {p.name: p.read_bytes() for p in (runs_dir / name).iterdir() if p.is_file()} == files
    assert (runs_dir / "logs" / f"{name}.log").read_text() == log  # no agent process ran


def test_a_non_finite_state_is_never_written_over_the_last_checkpoint(tmp_path):
    from cleanrl_plus.checkpoint import first_non_finite, save_checkpoint
    from cleanrl_plus.logger import Logger
    from cleanrl_plus.run import MemberRun, Run

    good = {"global_step": 100, "critic": {"weight": torch.ones(3)}, "replay": {"obs": torch.full((2,), float("nan"))}}
    assert first_non_finite(good) is None  # replay data is not a learned value
    save_checkpoint(tmp_path / "checkpoint.pt", good)
    member = MemberRun(
        args=None, dir=tmp_path, logger=Logger(str(tmp_path), None, purge_step=0), resumed=good, checkpoint_step=100
    )
    run = Run(args=None, device=torch.device("cpu"), members=[member])
    bad = {"global_step": 200, "critic": {"weight": torch.tensor([1.0, float("inf"), 0.0])}}
    assert first_non_finite(bad) == "critic.weight"
    assert not member.save(bad, {"global_step": 200, "eval": {"mean": float("nan")}})  # marked diverged, not written
    with pytest.raises(
        RunFailure, match=r"diverged at step 200: critic.weight is not finite — the last good checkpoint \(step 100\) is kept"
    ):
        run.stop_if_all_diverged(200)
    assert load_checkpoint(tmp_path / "checkpoint.pt")["global_step"] == 100
    summary = json.loads((tmp_path / "summary.json").read_text(), parse_constant=lambda name: pytest.fail(name))
    assert summary["eval"]["mean"] is None and summary["diverged"] == {"step": 200, "quantity": "critic.weight"}


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_non_finite_flag_values_are_refused(tmp_path, value):
    result = run_script(
        "agents/td3.py",
        "--learning-rate",
        value,
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "10",
        "--runs-dir",
        str(tmp_path),
    )
    _one_line_error(result, f"--learning-rate must be a finite number, got {float(value)}")
    assert not any(tmp_path.iterdir())


def test_report_skips_a_run_with_non_finite_evaluations_with_a_note(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from commands.report import write_report

    runs = tmp_path / "runs"
    for seed, values in [(1, [1.0, 2.0]), (2, [1.0, float("nan")])]:
        name = f"Pendulum-v1__td3__{seed}__1"
        writer = SummaryWriter(str(runs / name))
        for step, value in zip((100, 200), values):
            writer.add_scalar("eval/episodic_return", value, step)
        writer.close()
        # a summary written before summaries were strict JSON: bare NaN
        (runs / name / "summary.json").write_text(
            '{"agent": "td3", "env_id": "Pendulum-v1", "seed": %d, "eval": {"mean": NaN}}' % seed
        )
    report_md = write_report([str(runs)], reps=50).read_text()
    assert (
        f"skipped {runs / 'Pendulum-v1__td3__2__1'}: non-finite eval/episodic_return at step 200 (the run diverged)"
        in report_md
    )
    assert "| Pendulum-v1 | td3 | 1 |" in report_md


# ---------------------------------------------------------------- 4. file-system failures


def test_unusable_runs_dirs_are_one_line_errors(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    for runs_dir, cause in [(a_file, "Not a directory"), (a_file / "under", "Not a directory")]:
        result = run_script("agents/td3.py", "--env-id", "Pendulum-v1", "--runs-dir", str(runs_dir), "--run-name", "x", *TINY)
        _one_line_error(result, f"--runs-dir {runs_dir}: cannot create {runs_dir / 'x'} ({cause}) — pass a writable folder")
    assert a_file.read_text() == "not a folder"


def _read_only_folder(tmp_path: Path):
    """A folder this user cannot write: chmod 555, or for root (whom permissions do not stop) a read-only tmpfs
    where mounting is allowed; None where neither works."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").mkdir()
    except PermissionError:
        return folder, lambda: folder.chmod(0o755)
    folder.chmod(0o755)
    (folder / "probe").rmdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(folder)], capture_output=True).returncode == 0:
        return folder, lambda: subprocess.run(["umount", str(folder)], check=True)
    return None, None


def test_a_read_only_runs_dir_is_a_one_line_error(tmp_path):
    folder, restore = _read_only_folder(tmp_path)
    if folder is None:
        pytest.skip("no read-only folder on this machine: root ignores permissions and may not mount")
    try:
        result = run_script("agents/td3.py", "--env-id", "Pendulum-v1", "--runs-dir", str(folder), "--run-name", "x", *TINY)
        _one_line_error(result, f"--runs-dir {folder}: cannot create {folder / 'x'} (")
        assert "(Permission denied)" in result.stderr or "(Read-only file system)" in result.stderr
    finally:
        restore()


@pytest.mark.parametrize("reported_as", ["OSError", "RuntimeError"])
def test_a_full_disk_while_checkpointing_keeps_the_previous_checkpoint_and_no_temporary_file(
    tmp_path, monkeypatch, capsys, reported_as
):
    import cleanrl_plus.checkpoint
    from agents import td3
    from cleanrl_plus.run import cli_main

    real_save, saves = torch.save, []

    def save_until_the_disk_fills(state, file):
        saves.append(state["global_step"])
        if len(saves) == 1:
            return real_save(state, file)
        file.write(b"x" * 4096)  # a partial write, then the disk is full
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            if reported_as == "OSError":
                raise
            raise RuntimeError(
                "[enforce fail at inline_container.cc:672] . unexpected pos 104256 vs 104144"
            )  # torch's zip writer

    monkeypatch.setattr(cleanrl_plus.checkpoint.torch, "save", save_until_the_disk_fills)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "td3.py",
            "--env-id",
            "Pendulum-v1",
            "--total-timesteps",
            "400",
            "--checkpoint-every",
            "150",
            "--eval-every",
            "0",
            "--runs-dir",
            str(tmp_path),
            "--run-name",
            "run",
            *TINY,
        ],
    )
    with pytest.raises(SystemExit) as exit_info:
        cli_main(td3.main, td3.Args)
    assert exit_info.value.code == 1
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [
        f"error: cannot write {checkpoint}: No space left on device — the previous checkpoint, if any, is intact; "
        "free space and --resume the run"
    ]
    monkeypatch.undo()
    assert saves == [150, 300] and load_checkpoint(checkpoint)["global_step"] == 150
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if p.suffix == ".tmp") == []


def _fill(path: Path) -> None:
    """Write zeros to `path` until the disk holding it is full."""
    with open(path, "wb", buffering=0) as file:
        try:
            while file.write(b"\0" * 512):
                pass
        except OSError:
            pass


def test_a_real_full_disk_where_this_machine_can_mount_a_small_tmpfs(tmp_path):
    """The real thing: torch.save on a full disk raises its zip writer's RuntimeError, the TensorBoard thread an
    OSError; both must end in the same one line, with the first checkpoint intact and nothing half-written left."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(disk)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root); the fault-injection test above covers the logic")
    try:
        run_dir = disk / "run"
        flags = ["--env-id", "Pendulum-v1", "--total-timesteps", "1000", "--checkpoint-every", "100", "--eval-every", "0"]
        for command in (
            ["agents/td3.py", *flags, "--runs-dir", str(disk), "--run-name", "run", *TINY],
            ["agents/td3.py", "--resume", str(run_dir)],
        ):  # the resume meets a disk with no byte left
            if command[1] == "--resume":
                _fill(disk / "filler")
            result = run_script(*command)
            _one_line_error(result, f"cannot write {run_dir}", code=1)
            assert "No space left on device" in result.stderr
            assert load_checkpoint(run_dir / "checkpoint.pt")["global_step"] == 100
            assert not list(run_dir.glob("*.tmp")) and all(p.stat().st_size > 0 for p in run_dir.glob("events.out.tfevents.*"))
    finally:
        subprocess.run(["umount", str(disk)], check=True)


# ---------------------------------------------------------------- 5. one writer per run directory


def test_a_second_writer_is_refused_and_a_kill_minus_9_releases_the_run(tmp_path):
    from commands.sweep import command_for, manifest, parse

    sweep_argv = [
        "--agent",
        "td3",
        "--env-id",
        "Pendulum-v1",
        "--seeds",
        "1",
        "--runs-dir",
        str(tmp_path),
        "--workers",
        "1",
        "--flags",
        "--total-timesteps 1000000 --checkpoint-every 200 --eval-every 0 " + " ".join(TINY),
    ]
    spec = manifest(parse(sweep_argv))[0]
    writer = subprocess.Popen(command_for(spec), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (spec.dir / "checkpoint.pt").exists() and time.time() < deadline:
            time.sleep(0.05)
        assert (spec.dir / "checkpoint.pt").exists()

        result = run_script("agents/td3.py", "--resume", str(spec.dir), timeout=60)  # a second writer would run on
        _one_line_error(result, f"{spec.dir} is being written by process {writer.pid} (another --resume or sweep?)")

        before = sorted(p.name for p in tmp_path.iterdir())
        sweep = run_script("-m", "commands.cli", "sweep", *sweep_argv)
        assert sweep.returncode == 2 and f"{spec.name}: held by process {writer.pid}" in sweep.stderr, sweep.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing moved aside or started
        assert writer.poll() is None  # the live run was not disturbed
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
    stopped_at = load_checkpoint(spec.dir / "checkpoint.pt")["global_step"]
    result = run_script("agents/td3.py", "--resume", str(spec.dir), "--total-timesteps", str(stopped_at + 100))
    assert result.returncode == 0, result.stderr


def test_the_lock_is_per_process_and_read_without_taking_it(tmp_path):
    from cleanrl_plus.runlock import lock_run_dir, run_dir_holder

    assert run_dir_holder(tmp_path) is None and not (tmp_path / "run.lock").exists()  # asking creates nothing
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from cleanrl_plus.runlock import lock_run_dir; "
            f"lock_run_dir(Path({str(tmp_path)!r})); print('locked', flush=True); time.sleep(60)",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert run_dir_holder(tmp_path) == holder.pid
        with pytest.raises(UserError, match=f"is being written by process {holder.pid}"):
            lock_run_dir(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert run_dir_holder(tmp_path) is None
    os.close(lock_run_dir(tmp_path))


# ---------------------------------------------------------------- 6. smaller ones


@pytest.mark.parametrize("name", ["../outside", "a/b", ".."])
def test_run_names_with_path_separators_are_refused(tmp_path, name):
    runs = tmp_path / "runs"
    result = run_script(
        "agents/td3.py",
        "--env-id",
        "Pendulum-v1",
        "--runs-dir",
        str(runs),
        "--run-name",
        name,
        "--total-timesteps",
        "10",
        *TINY,
    )
    _one_line_error(
        result, f"--run-name '{name}' must be a plain folder name (no '/' and not '..') — choose the folder with --runs-dir"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_start_up_error_closes_the_writer_before_removing_the_run_dir(tmp_path, monkeypatch, capsys):
    """TD3 on a discrete env fails after its run directory exists: the directory is removed, and the TensorBoard
    writer was closed first (its thread would otherwise flush into a removed directory: a FileNotFoundError)."""
    import cleanrl_plus.run
    from agents import td3
    from cleanrl_plus.run import cli_main

    threads_before = set(threading.enumerate())
    monkeypatch.setattr(sys, "argv", ["td3.py", "--env-id", "CartPole-v1", "--runs-dir", str(tmp_path), *TINY])
    with pytest.raises(SystemExit) as exit_info:
        cli_main(td3.main, td3.Args)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: TD3 needs continuous (Box) actions")
    assert not any(tmp_path.iterdir()) and not cleanrl_plus.run._open_runs
    assert [t for t in threading.enumerate() if t not in threads_before and t.is_alive()] == []


@pytest.mark.parametrize("agent", ["td3", "sac_simba", "ddqn"])
def test_wrong_action_space_is_exactly_one_line_and_leaves_nothing(tmp_path, agent):
    env_id = "Pendulum-v1" if agent == "ddqn" else "CartPole-v1"
    result = run_script(
        f"agents/{agent}.py", "--env-id", env_id, "--runs-dir", str(tmp_path), "--no-progress", "--threads", "1"
    )
    _one_line_error(
        result,
        "Double DQN needs discrete actions"
        if agent == "ddqn"
        else f"{'TD3' if agent == 'td3' else 'SAC'} needs continuous (Box) actions",
    )
    assert "Traceback" not in result.stderr + result.stdout
    assert not any(tmp_path.iterdir())


def test_sweep_plan_values_of_the_wrong_type_are_refused(tmp_path):
    from commands.sweep import load_plan

    for body, expected in [
        ('seeds = "one"', "seeds must be a list of int values, got 'one'"),
        ("seeds = [1, true]", "seeds must be a list of int values, got True"),
        ("workers = 2.5", "workers must be int, got 2.5"),
        ('executor = "slurmm"', "executor must be one of ['local', 'submitit', 'ray'], got 'slurmm'"),
        ('[slurm]\ntimeout_min = "4h"', "slurm.timeout_min must be int, got '4h'"),
    ]:
        plan = tmp_path / "plan.toml"
        plan.write_text(body + "\n")
        with pytest.raises(UserError, match="^" + __import__("re").escape(f"plan file {plan}: {expected}")):
            load_plan(str(plan), [])


def test_sweep_dry_run_parses_each_configuration_with_its_agents_parser(tmp_path):
    result = run_script(
        "-m",
        "commands.cli",
        "sweep",
        "--agent",
        "td3",
        "--env-id",
        "Pendulum-v1",
        "--seeds",
        "1",
        "--config",
        "baseline=",
        "bad=--reset.metod shrink-perturb",
        "--runs-dir",
        str(tmp_path),
        "--dry-run",
    )
    _one_line_error(
        result,
        "configuration 'bad' of td3: unknown flag --reset.metod — did you mean '--reset.method'?",
    )
    result = run_script(
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
        "fast=--learning-rate -1",
        "--runs-dir",
        str(tmp_path),
        "--dry-run",
    )
    _one_line_error(result, "configuration 'fast' of ppo: --learning-rate must be > 0, got -1.0")
    assert not any(tmp_path.iterdir())


def test_dm_control_starts_without_a_display_warning():
    pytest.importorskip("dm_control")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MUJOCO_GL")}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import envs; envs.make('dmc:cartpole-balance', num_envs=1, seed=0, device='cpu').reset(seed=0)",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "DISPLAY" not in result.stderr and "GLFW" not in result.stderr, result.stderr


# ---------------------------------------------------------------- 7. what a resume continues, what a restart replaces

PPO_TINY = [
    "--env-id",
    "CartPole-v1",
    "--num-envs",
    "2",
    "--num-steps",
    "32",
    "--num-minibatches",
    "2",
    "--update-epochs",
    "1",
    "--eval-episodes",
    "2",
    "--threads",
    "1",
    "--no-progress",
]


def _ppo(runs_dir: Path, *flags: str) -> dict:
    """A tiny PPO run (64 env steps per iteration), in this process."""
    from agents import ppo
    from cleanrl_plus.config import parse_args

    return ppo.main(parse_args(ppo.Args, [*PPO_TINY, "--runs-dir", str(runs_dir), *flags]))


def _resume(run_dir: Path, *flags: str) -> dict:
    from agents import ppo
    from cleanrl_plus.config import parse_args

    return ppo.main(parse_args(ppo.Args, ["--resume", str(run_dir), *flags]))


def _all_hashes(folder: Path) -> dict[str, str]:
    """Every file under `folder` but run.lock (which names the process that last held a run)."""
    return {name: digest for name, digest in _hashes(folder).items() if Path(name).name != "run.lock"}


def test_a_resume_refuses_seeds_that_differ_from_the_runs(tmp_path, monkeypatch, capsys):
    """A member's seed (and the schedule seed it defaulted) come from its own args.json on resume: given seeds that
    differ from the run's were dropped without a word, and the whole group resumed."""
    _ppo(tmp_path, "--total-timesteps", "64", "--seeds", "1", "2", "3", "--run-name", "group")
    _ppo(tmp_path, "--total-timesteps", "64", "--seed", "1", "--run-name", "alone")
    continual = ["--env-id", "continual:obs-offset:torch:CartPole-v1", "--continual.steps-per-task", "64"]
    _ppo(tmp_path, *continual, "--total-timesteps", "128", "--seed", "4", "--run-name", "schedule")
    before = _all_hashes(tmp_path)
    for run_name, flags, expected in [
        ("group__1", ["--seeds", "1", "2"], "--seeds 1 2 differs from the run's seeds 1 2 3 — a resume continues every seed"),
        ("group__2", ["--seeds", "1", "2", "3", "4"], "--seeds 1 2 3 4 differs from the run's seeds 1 2 3"),
        ("group__3", ["--seeds", "3", "2", "1"], "--seeds 3 2 1 differs from the run's seeds 1 2 3"),
        ("group__1", ["--seed", "2"], "--seed 2 differs from the run's 1 — a resume continues the run's seeds 1 2 3"),
        ("alone", ["--seeds", "1", "2"], "--seeds 1 2 differs from the run's seed 1 — "),
        ("alone", ["--seed", "5"], "--seed 5 differs from the run's 1 — a resume continues the run's seed 1; drop --seed"),
        ("schedule", ["--continual.schedule-seed", "9"], "--continual.schedule-seed 9 differs from the run's 4 — "),
        ("alone", ["--run-name", "other"], "--run-name other differs from the run's alone — only --total-timesteps"),
    ]:
        run_dir = tmp_path / run_name
        result = cli_in_process("ppo", ["--resume", str(run_dir), *flags], monkeypatch, capsys)
        _one_line_error(result, f"--resume {run_dir}: {expected}")
        assert _all_hashes(tmp_path) == before, flags
    # the run's own seeds, given again, are no change
    assert [
        m["seed"] for m in _resume(tmp_path / "group__2", "--seeds", "1", "2", "3", "--total-timesteps", "128")["members"]
    ] == [
        1,
        2,
        3,
    ]
    assert _resume(tmp_path / "alone", "--seed", "1", "--total-timesteps", "128")["global_step"] == 128


def _killed_before_its_first_checkpoint(run_dir: Path, only_args_tmp: bool = False) -> None:
    """What a kill before the first checkpoint leaves of a finished run's directory: its flags (or, killed while they
    were being written, args.json.tmp alone), run.lock, an events file and a half-written first checkpoint."""
    for path in run_dir.iterdir():
        if path.name not in ("args.json", "run.lock") and not path.name.startswith("events.out.tfevents."):
            path.unlink()
    (run_dir / "checkpoint.pt.pending.tmp").write_bytes(b"PK\x03\x04 half a checkpoint")
    if only_args_tmp:
        for path in run_dir.iterdir():
            path.unlink()
        (run_dir / "args.json.tmp").write_text('{"seed": 2, "env_id": "Cart')


def test_a_run_killed_before_its_first_checkpoint_starts_again_with_the_same_command(tmp_path, monkeypatch, capsys):
    """--resume has nothing to continue and says so; the command that started the run starts it again, in place of
    what the killed run left (a group's members, a one-seed run). A directory holding a checkpoint, a file
    cleanrl_plus does not write, or a live writer is never replaced."""
    group = ["--total-timesteps", "64", "--seeds", "1", "2", "--run-name", "group"]
    alone = ["--total-timesteps", "64", "--seed", "1", "--run-name", "alone"]
    _ppo(tmp_path, *group), _ppo(tmp_path, *alone)
    _killed_before_its_first_checkpoint(tmp_path / "group__1")
    _killed_before_its_first_checkpoint(tmp_path / "group__2", only_args_tmp=True)
    _killed_before_its_first_checkpoint(tmp_path / "alone")
    left = _all_hashes(tmp_path)

    for run_name, expected in [
        ("group__2", "that run was killed before it recorded its flags, so before its first checkpoint: nothing to resume"),
        ("group__1", "that run was killed before it recorded its flags"),  # its member group__2 was
        ("alone", f"no checkpoint at {tmp_path / 'alone' / 'checkpoint.pt'} — the run was killed before its first"),
    ]:
        line = _one_line_error(cli_in_process("ppo", ["--resume", str(tmp_path / run_name)], monkeypatch, capsys), "")
        assert expected in line and "start it again without --resume" in line and "not a run started" not in line
        assert _all_hashes(tmp_path) == left

    for flags, members in ((group, ("group__1", "group__2")), (alone, ("alone",))):
        _ppo(tmp_path, *flags)  # the same command again
        for name in members:
            files = sorted(p.name for p in (tmp_path / name).iterdir())
            assert load_checkpoint(tmp_path / name / "checkpoint.pt")["global_step"] == 64, name
            assert sum(f.startswith("events.out.tfevents.") for f in files) == 1, files  # the killed run's went
            assert not any(f.endswith(".tmp") for f in files), files
            assert json.loads((tmp_path / name / "summary.json").read_text())["finished"], name

    # never replaced: a run with a checkpoint, a folder holding a file cleanrl_plus does not write, a live one
    from cleanrl_plus.runlock import lock_run_dir

    (tmp_path / "checkpointed").mkdir()  # killed between its first checkpoint and its first summary
    for name in ("args.json", "checkpoint.pt"):
        (tmp_path / "checkpointed" / name).write_bytes((tmp_path / "alone" / name).read_bytes())
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "args.json").write_text("{}")
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    (tmp_path / "starting").mkdir()
    (tmp_path / "starting" / "args.json.tmp").write_text("{")
    held = lock_run_dir(tmp_path / "starting")
    try:
        before = _all_hashes(tmp_path)
        for name in ("alone", "checkpointed", "notes", "starting"):
            result = cli_in_process("ppo", [*alone[:-1], name, *PPO_TINY, "--runs-dir", str(tmp_path)], monkeypatch, capsys)
            _one_line_error(result, f"run directory {tmp_path / name} already holds ")
            assert _all_hashes(tmp_path) == before, name
    finally:
        os.close(held)


def test_resuming_a_finished_run_adds_no_evaluation_and_no_point(tmp_path, capsys):
    """A finished run resumed (alone or a group's member) says so and changes no file; one killed between its final
    checkpoint and its final summary finishes that summary from the checkpoint, without evaluating again."""
    flags = ["--total-timesteps", "128", "--eval-every", "64", "--log-every", "64"]
    _ppo(tmp_path, *flags, "--seed", "1", "--run-name", "fin")
    _ppo(tmp_path, *flags, "--seeds", "1", "2", "--run-name", "group")
    finished = {name: json.loads((tmp_path / name / "summary.json").read_text()) for name in ("fin", "group__1", "group__2")}
    assert [step for step, _ in finished["fin"]["eval_history"]] == [64, 128]
    series = {name: _scalars(tmp_path / name) for name in finished}
    before = _all_hashes(tmp_path)

    for run_name, says in (("fin", tmp_path / "fin"), ("group__2", f"{tmp_path / 'group__1'}, {tmp_path / 'group__2'}")):
        capsys.readouterr()
        _resume(tmp_path / run_name)
        assert capsys.readouterr().out.splitlines() == [
            f"ppo: {says} finished at step 128 already — nothing to do; a larger --total-timesteps trains it on"
        ]
        assert _all_hashes(tmp_path) == before

    # killed just after the end: the final checkpoint is written, the summary still the one of step 64
    first_eval = finished["fin"]["eval_history"][:1]
    summary = finished["fin"] | {"finished": False, "global_step": 64, "eval_history": first_eval}
    (tmp_path / "fin" / "summary.json").write_text(json.dumps(summary | {"eval": {"step": 64, "mean": first_eval[0][1]}}))
    _resume(tmp_path / "fin")
    resumed = json.loads((tmp_path / "fin" / "summary.json").read_text())
    assert resumed["finished"] and resumed["eval_history"] == finished["fin"]["eval_history"]
    assert resumed["eval"] == finished["fin"]["eval"]
    assert _scalars(tmp_path / "fin") == series["fin"]
    assert len(list((tmp_path / "fin").glob("events.out.tfevents.*"))) == 1


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--run-name", "r" * 256], "--run-name: the run directory's name would be 256 bytes, over the file system's limit"),
        (["--run-name", "r" * 253, "--seeds", "1", "2"], "--run-name: the run directory's name with a member's __<seed> "),
        (["--exp-name", "e" * 240], "--exp-name: the run directory's name would be "),
    ],
)
def test_a_run_name_too_long_for_the_file_system_is_one_line(tmp_path, monkeypatch, capsys, flags, says):
    result = cli_in_process("ppo", [*PPO_TINY, "--runs-dir", str(tmp_path / "runs"), *flags], monkeypatch, capsys)
    _one_line_error(result, says)
    assert "limit of 255 — choose a shorter" in result.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--run-name", "a\nb"], "--run-name 'a\\nb' holds the control character \\n — a name that becomes a folder's"),
        (["--run-name", "g\x1b[31m", "--seeds", "1", "2"], "--run-name 'g\\x1b[31m' holds the control character \\x1b — "),
        (["--exp-name", "a\tb"], "--exp-name 'a\\tb' holds the control character \\t — "),
        (["--env-id", "CartPole\n-v1"], "unknown env id 'CartPole\\n-v1' — did you mean 'CartPole-v1'?"),  # quoted as given
    ],
)
def test_a_name_with_a_control_character_is_one_line_and_makes_no_folder(tmp_path, monkeypatch, capsys, flags, says):
    """A folder named with a newline splits every one-line message that names it and every shell loop over runs."""
    argv = [*PPO_TINY, "--total-timesteps", "64", "--runs-dir", str(tmp_path / "runs"), *flags]
    result = cli_in_process("ppo", argv, monkeypatch, capsys)
    _one_line_error(result, says)
    assert not any(tmp_path.iterdir())


def test_resuming_a_finished_run_whose_checkpoint_is_missing_names_what_it_found_and_a_fix_that_works(
    tmp_path, monkeypatch, capsys
):
    """It said the run was killed before its first checkpoint and to start it again, which the finished run refuses."""
    _ppo(tmp_path, "--total-timesteps", "64", "--run-name", "fin")
    (tmp_path / "fin" / "checkpoint.pt").unlink()
    before = _all_hashes(tmp_path)
    result = cli_in_process("ppo", ["--resume", str(tmp_path / "fin")], monkeypatch, capsys)
    _one_line_error(
        result,
        f"{tmp_path / 'fin'} holds a finished run (step 64), but its checkpoint.pt is missing — its summary.json and "
        "curves still report (cleanrl-plus report); to resume or evaluate it, put its checkpoint.pt back, or start the "
        f"run again under another --run-name (or once {tmp_path / 'fin'} is moved aside)",
    )
    assert _all_hashes(tmp_path) == before
    # the fixes it names work: the same flags under another name, or under its own once it is moved aside
    (tmp_path / "fin").rename(tmp_path / "fin.old")
    assert _ppo(tmp_path, "--total-timesteps", "64", "--run-name", "fin")["finished"]


def test_a_report_over_a_folder_that_does_not_exist_is_one_error_line(tmp_path):
    result = run_script("-m", "commands.cli", "report", str(tmp_path / "nope"), timeout=120)
    _one_line_error(
        result,
        f"no runs with evaluations found in {tmp_path / 'nope'} (skipped {tmp_path / 'nope'}: no such file or directory) "
        "— pass runs/ or run directories",
    )
    assert not any(tmp_path.iterdir())


def test_a_resume_whose_events_file_was_deleted_says_so_in_one_line_at_its_start(tmp_path, capsys):
    """It went on silently, and TensorBoard showed a curve that starts at the resume, as if the run had started there."""
    _ppo(tmp_path, "--total-timesteps", "64", "--run-name", "r")
    for events in (tmp_path / "r").glob("events.out.tfevents.*"):
        events.unlink()
    capsys.readouterr()
    assert _resume(tmp_path / "r", "--total-timesteps", "128")["finished"]
    printed = capsys.readouterr()
    assert printed.err.splitlines()[0] == (
        f"note: {tmp_path / 'r'} held no TensorBoard events file (deleted?): the curve up to step 64 is gone; the "
        "resumed run logs from there on"
    )
    assert printed.out.splitlines()[0].startswith(f"resuming from step 64 in {tmp_path / 'r'}")
    _resume(tmp_path / "r", "--total-timesteps", "192")  # with its events file: nothing of the kind
    assert "note:" not in capsys.readouterr().err


def test_a_mujoco_warning_is_shown_once_per_process_however_many_envs_are_built():
    """MuJoCo 3.17 warned about gymnasium's half_cheetah.xml once per env built: 55 times for a TD3 group of five."""
    code = (
        "import envs\n"
        "for count, training in ((3, True), (2, False)):\n"
        "    envs.make('HalfCheetah-v5', num_envs=count, seed=count, training=training).close()\n"
    )
    result = run_script("-c", code, timeout=120)
    assert result.returncode == 0, result.stderr
    shown = [line for line in result.stderr.splitlines() if "settotalmass" in line]
    assert len(shown) == 1 and "WARNING: compiler" not in result.stderr, result.stderr
    assert shown[0].startswith("warning: MuJoCo: compiler attribute 'settotalmass' is deprecated and will be removed")
    assert shown[0].endswith("(MuJoCo's warning, shown once per process)")
