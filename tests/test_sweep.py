"""`cleanrl-plus sweep` and `compare`: manifest expansion, plans, idempotent reruns, kill-and-resume, executors."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from commands import sweep
from cleanrl_plus.errors import UserError
from conftest import REPO

TINY_PPO = "--total-timesteps 512 --num-envs 2 --num-steps 64 --num-minibatches 2 --update-epochs 1 --hidden-sizes 16 16 --eval-every 256 --eval-episodes 2"


def test_manifest_expands_agents_envs_configs_and_seeds_with_deterministic_names(tmp_path):
    args = sweep.parse(["--agent", "ppo", "gtr", "--env-id", "CartPole-v1", "--seeds", "1", "2", "--config", "baseline=",
                        "--config", "sp=--reset.method shrink-perturb", "--flags", "--num-envs 8", "--runs-dir", str(tmp_path)])
    runs = sweep.manifest(args)
    assert len(runs) == 2 * 1 * 2 * 2
    assert [r.name for r in runs[:4]] == ["CartPole-v1__ppo__1", "CartPole-v1__ppo__2", "CartPole-v1__ppo-sp__1", "CartPole-v1__ppo-sp__2"]
    assert runs[2].flags == ("--num-envs", "8", "--reset.method", "shrink-perturb")
    command = sweep.command_for(runs[2])
    assert command[1:3] == ["-m", "agents.ppo"] and "--threads" in command and "--resume" not in command
    assert command[command.index("--run-name") + 1] == "CartPole-v1__ppo-sp__1"
    assert sweep.manifest(args) == runs  # expansion is deterministic


@pytest.mark.parametrize("argv, fix", [
    (["--agent", "td4"], "did you mean 'td3'"),
    (["--env-id", "CartPol-v1"], "did you mean 'CartPole-v1'"),
    (["--flags", "--seed 3"], "--seed is set by the sweep"),
    (["--config", "bad name=--x"], "NAME=FLAGS"),
    (["--config", "a=", "--config", "a=--x"], "given twice"),
])
def test_bad_sweeps_get_one_line_errors(argv, fix):
    with pytest.raises(UserError, match=fix):
        sweep.manifest(sweep.parse(argv))


def test_a_toml_plan_gives_defaults_that_flags_override(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text('agent = "ppo"\nenv_id = ["CartPole-v1", "Acrobot-v1"]\nseeds = [1, 2, 3]\nflags = "--num-envs 4"\n'
                    '[config]\nbaseline = ""\nsp = "--reset.method shrink-perturb"\n[slurm]\npartition = "gpu"\n')
    args = sweep.parse([str(plan), "--seeds", "7"])
    assert args.agent == ("ppo",) and args.env_id == ("CartPole-v1", "Acrobot-v1") and args.seeds == (7,)
    assert args.config == ("baseline=", "sp=--reset.method shrink-perturb") and args.slurm.partition == "gpu"
    assert len(sweep.manifest(args)) == 2 * 2
    (tmp_path / "bad.toml").write_text("agents = ['ppo']\n")
    with pytest.raises(UserError, match="unknown keys \\['agents'\\] — did you mean 'agent'"):
        sweep.parse([str(tmp_path / "bad.toml")])


def _sweep_command(runs_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "commands.cli", "sweep", "--agent", "ppo", "--env-id", "CartPole-v1", "--seeds", "1", "2",
            "--flags", TINY_PPO + " --checkpoint-every 256", "--runs-dir", str(runs_dir), "--workers", "2", *extra]


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
        assert "resuming from step" in (runs_dir / "logs" / f"CartPole-v1__ppo__{seed}.log").read_text()
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


def test_submitit_executor_runs_the_sweep_in_its_local_mode(tmp_path):
    pytest.importorskip("submitit")
    args = sweep.parse(["--seeds", "1", "--flags", TINY_PPO, "--runs-dir", str(tmp_path), "--executor", "submitit",
                        "--slurm.cluster", "local", "--slurm.timeout-min", "10"])
    results = sweep.run_sweep(args)
    assert [r["state"] for r in results] == ["finished"]
    assert json.loads((tmp_path / "CartPole-v1__ppo__1" / "summary.json").read_text())["finished"]


@pytest.mark.slow
def test_ray_executor_runs_the_sweep_on_a_local_ray_instance(tmp_path):
    pytest.importorskip("ray")
    args = sweep.parse(["--seeds", "1", "2", "--flags", TINY_PPO, "--runs-dir", str(tmp_path), "--executor", "ray"])
    results = sweep.run_sweep(args)
    assert sorted(r["state"] for r in results) == ["finished", "finished"]


def test_compare_runs_baseline_and_remedy_and_writes_the_report(tmp_path):
    from commands import compare

    runs_dir = tmp_path / "compare"
    report = compare.main(["--env-id", "CartPole-v1", "--seeds", "2", "--flags", TINY_PPO, "--runs-dir", str(runs_dir),
                           "--remedy", "--reset.method shrink-perturb --reset.every 10", "--remedy-name", "sp", "--reps", "200"])
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
            "agent": "ppo", "env_id": "CartPole-v1", "seed": seed, "global_step": 512, "num_updates": 8, "finished": True}
        assert summary["run_dir"] == str(run_dir) and summary["sps"] > 0
        returns = summary["eval"]["returns"]
        assert summary["eval"]["step"] == 512 and len(returns) == 2 and summary["eval"]["mean"] == pytest.approx(sum(returns) / 2)
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
            assert row["seeds"] == "2" and float(row["value"]) == pytest.approx(sum(per_seed.values()) / 2), (statistic, estimator)
    low, high = float(rows[("ppo", "final", "iqm")]["ci_low"]), float(rows[("ppo", "final", "iqm")]["ci_high"])
    assert (low, high) == pytest.approx((min(finals.values()), max(finals.values())))  # resampling 2 runs: their min and max
