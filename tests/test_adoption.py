"""What `cleanrl-plus sweep` adopts and `cleanrl-plus report` groups: only runs made with the configuration's flags.
A run started by hand under a member's name (`--run-name CartPole-v1__ppo__2`) with other flags is refused by name,
in one line, before anything starts; and an agent asked to start a run whose directory another run holds names that
run instead of telling the user to resume it (docs/reliability.md, "What a sweep adopts")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import cli_in_process

from commands import report, sweep
from envs.errors import UserError

TINY_PPO = [
    "--total-timesteps",
    "256",
    "--num-envs",
    "2",
    "--num-steps",
    "64",
    "--num-minibatches",
    "2",
    "--update-epochs",
    "1",
    "--hidden-sizes",
    "16",
    "16",
    "--eval-every",
    "128",
    "--eval-episodes",
    "2",
]


def train(runs_dir: Path, seed: int, *extra: str, monkeypatch, capsys, sweep_flags: bool = True) -> Path:
    """A finished PPO run named as the sweep names its seed: made as the sweep makes it (`sweep_flags`: the exp name
    the sweep passes), or by hand with `extra` flags."""
    name = f"CartPole-v1__ppo__{seed}"
    argv = [*TINY_PPO, *extra, "--env-id", "CartPole-v1", "--seed", str(seed), "--run-name", name]
    argv += ["--runs-dir", str(runs_dir), "--threads", "1", "--no-progress"]
    if sweep_flags:
        argv += ["--exp-name", "ppo"]
    import agents.ppo as ppo
    from cleanrl_plus.config import parse_args

    capsys.readouterr()
    ppo.main(parse_args(ppo.Args, argv))
    assert json.loads((runs_dir / name / "summary.json").read_text())["finished"]
    return runs_dir / name


def sweep_args(runs_dir: Path, *extra: str) -> sweep.SweepArgs:
    flags = " ".join(TINY_PPO)
    return sweep.parse(["--agent", "ppo", "--env-id", "CartPole-v1", "--seeds", "1", "2", "3", "--flags", flags, *extra])


@pytest.fixture
def runs(tmp_path, monkeypatch, capsys):
    """Seed 1 made as the sweep makes it; seed 2 made by hand with another learning rate under the sweep's name."""
    runs_dir = tmp_path / "sweep"
    ours = train(runs_dir, 1, monkeypatch=monkeypatch, capsys=capsys)
    stranger = train(runs_dir, 2, "--learning-rate", "1e-3", monkeypatch=monkeypatch, capsys=capsys, sweep_flags=False)
    return runs_dir, ours, stranger


def test_a_sweep_refuses_a_run_made_with_other_flags_under_a_members_name(runs, capsys):
    runs_dir, ours, stranger = runs
    args = sweep_args(runs_dir, "--runs-dir", str(runs_dir), "--dry-run")
    with pytest.raises(UserError) as refused:
        sweep.run_sweep(args)
    assert str(refused.value) == (
        f"{stranger} is not a run of configuration 'baseline' of ppo: it was made with --learning-rate 0.001 (not "
        f"0.0003) — move it out of {runs_dir} (the sweep adopts only runs made with its flags), or sweep into another "
        "--runs-dir"
    )
    # once the stranger is moved out, the sweep's own run is adopted as finished, and the other seeds would start
    stranger.rename(runs_dir.parent / stranger.name)
    capsys.readouterr()
    sweep.run_sweep(args)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"finished  {ours.name}" and len(printed) == 2 and "--seeds 2 3" in printed[1], printed


def test_a_sweep_names_a_run_of_another_agent_or_seed_or_without_flags(tmp_path):
    runs_dir = tmp_path / "sweep"
    spec = sweep.manifest(sweep_args(runs_dir, "--runs-dir", str(runs_dir)))[1]
    expected = {"agent": "ppo", "seed": 2, "learning_rate": 0.00025, "total_timesteps": 256}
    spec.dir.mkdir(parents=True)
    assert sweep.adoption_conflict(spec, expected) == "has no readable args.json, so its flags are unknown"
    for saved, conflict in [
        (expected | {"agent": "gtr"}, "was written by agents/gtr.py, not agents/ppo.py"),
        (expected | {"seed": 7}, "trains seed 7, not 2"),
        (expected | {"total_timesteps": 999, "threads": 4, "runs_dir": "x"}, None),  # what a --resume may change
        (expected | {"learning_rate": 0.1}, "was made with --learning-rate 0.1 (not 0.00025)"),
    ]:
        (spec.dir / "args.json").write_text(json.dumps(saved))
        assert sweep.adoption_conflict(spec, expected) == conflict


def test_a_report_refuses_a_group_that_mixes_runs_made_with_other_flags(runs):
    runs_dir, ours, stranger = runs
    with pytest.raises(UserError) as refused:
        report.write_report([runs_dir], runs_dir / "report")
    assert str(refused.value) == (
        f"{stranger} was made with --learning-rate 0.001 (not 0.0003), unlike the other runs of group ppo (ppo) on "
        f"CartPole-v1 such as {ours} — report it apart, or give runs made with other flags their own --exp-name"
    )
    assert not (runs_dir / "report").exists()
    assert report.write_report([ours], runs_dir / "report").exists()  # each run alone is a group of its own


def test_starting_a_run_under_a_name_another_run_holds_names_that_run(runs, monkeypatch, capsys):
    runs_dir, ours, _ = runs
    result = cli_in_process(
        "ppo",
        [*TINY_PPO, "--learning-rate", "1e-3", "--seed", "1", "--run-name", ours.name, "--runs-dir", str(runs_dir)],
        monkeypatch,
        capsys,
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and lines == [
        f"error: run directory {ours} already holds a run of agents/ppo.py, seed 1, finished — pick another --run-name "
        f"or --runs-dir (--resume {ours} continues that run with its own flags; it never starts yours)"
    ]


def test_a_report_names_the_run_that_differs_from_most_of_its_group(tmp_path):
    """The stranger sorts first; the group's settings are those most of its runs share, so it is the one named."""

    def run(seed: int, learning_rate: float) -> report.RunRecord:
        flags = {"agent": "ppo", "seed": seed, "exp_name": "ppo", "learning_rate": learning_rate, "threads": seed}
        steps, returns = np.array([256]), np.array([1.0])
        return report.RunRecord(
            tmp_path / f"run{seed}", "ppo", "CartPole-v1", "ppo", seed, steps, returns, [], [], flags=flags
        )

    with pytest.raises(UserError, match=f"^{tmp_path / 'run1'} was made with --learning-rate 0.1 \\(not 0.0003\\), unlike"):
        report.check_groups_agree([run(1, 0.1), run(2, 3e-4), run(3, 3e-4)])
    report.check_groups_agree([run(1, 3e-4), run(2, 3e-4)])  # the seed and --threads are not settings
