"""--fork-from: a new run that starts from a finished run's last checkpoint with its own flags. A fork at step S with
a remedy that first acts after S equals a straight run with that remedy, so two arms can share their common prefix
(benchmarks/resets-dmc.toml runs its no-reset and reset arms from one 199,999-step prefix)."""

import csv
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
import torch

from agents.sac_simba import Args, main
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.config import parse_args
from envs.errors import UserError
from plasticity.resets import ResetArgs

TINY = dict(
    actor_width=16, critic_width=16, critic_blocks=1, batch_size=32, eval_episodes=2, progress=False, buffer_size=10_000
)
RESET_AT_400 = ResetArgs(method="full", networks="both", every=400)


def _common(runs_dir: str) -> dict:
    return dict(env_id="Pendulum-v1", seeds=(1, 2), learning_starts=100, eval_every=100, runs_dir=runs_dir, **TINY)


def _members(result: dict) -> list[dict]:
    return result["members"]


def _checkpoint(summary: dict) -> dict:
    return load_checkpoint(Path(summary["run_dir"]) / "checkpoint.pt")


def _digest(run_dir: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(run_dir.iterdir())}


def _eval_points(run_dir: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0}).Reload()
    return {point.step: point.value for point in events.Scalars("eval/episodic_return")}


def test_a_fork_with_a_reset_after_its_step_equals_the_straight_run_and_resumes(runs_dir):
    """A group of two: the straight run resets both networks at step 400; the fork starts from a 399-step prefix
    without resets and resets at 400 too. From step 400 on every evaluation, and at the end every network, Adam
    moment, temperature and replay entry, equal the straight run's; a fork stopped at 500 and resumed lands there too."""
    common = _common(runs_dir)
    straight = _members(main(Args(total_timesteps=600, exp_name="straight", reset=RESET_AT_400, **common)))
    prefix = _members(main(Args(total_timesteps=399, exp_name="prefix", **common)))
    before = {summary["run_dir"]: _digest(Path(summary["run_dir"])) for summary in prefix}
    fork_args = dict(exp_name="fork", reset=RESET_AT_400, fork_from=prefix[0]["run_dir"], **common)
    stopped = _members(main(Args(total_timesteps=500, **fork_args)))
    forked = _members(main(Args(total_timesteps=600, **fork_args | {"resume": stopped[0]["run_dir"]})))
    assert {summary["run_dir"]: _digest(Path(summary["run_dir"])) for summary in prefix} == before  # source untouched
    for ours, theirs, source in zip(forked, straight, prefix):
        assert ours["seed"] == theirs["seed"] == source["seed"]
        recorded = json.loads((Path(ours["run_dir"]) / "args.json").read_text())
        assert recorded["forked"] == {"from": source["run_dir"], "step": 399}
        assert recorded["reset"]["every"] == 400 and recorded["fork_from"] == prefix[0]["run_dir"]
        a, b = _checkpoint(ours), _checkpoint(theirs)
        assert a["global_step"] == b["global_step"] == 600 and a["num_updates"] == b["num_updates"]
        for name in ("actor", "critic", "critic_target", "temperature", "replay"):
            for key in b[name]:
                mine, straights = a[name][key], b[name][key]
                same = torch.equal(mine, straights) if torch.is_tensor(straights) else mine == straights
                assert same, f"{name}.{key} differs from the straight run's"
        mine, straights = dict(map(tuple, ours["eval_history"])), dict(map(tuple, theirs["eval_history"]))
        assert [step for step in mine if step not in straights] == [399]  # the source's final evaluation
        assert {step: mine[step] for step in straights} == straights
        # TensorBoard shows one curve: the source's points up to 399, the fork's after, none twice
        assert _eval_points(ours["run_dir"]) == mine
        assert mine[500] != mine[300]  # the networks did change


def test_a_fork_refuses_in_one_line_and_writes_nothing(runs_dir):
    common = _common(runs_dir)
    source = _members(main(Args(total_timesteps=150, exp_name="source", **common)))
    source_dir = Path(source[0]["run_dir"])
    base = dict(exp_name="fork", fork_from=str(source_dir), **common)
    cases = {
        "not beyond the run's last step 150": dict(total_timesteps=150),
        "differ from the run's 1 2": dict(total_timesteps=300, seeds=(1, 3)),
        "does not fit this run": dict(total_timesteps=300, actor_width=32),
    }
    for expected, flags in cases.items():
        with pytest.raises(UserError, match=expected) as caught:
            main(Args(**base | flags))
        assert "\n" not in str(caught.value)
        assert sorted(path.name for path in Path(runs_dir).iterdir()) == sorted(
            Path(summary["run_dir"]).name for summary in source
        ), f"a refused fork ({expected}) left a directory behind"
    summary = json.loads((source_dir / "summary.json").read_text())
    (source_dir / "summary.json").write_text(json.dumps(summary | {"finished": False}))
    with pytest.raises(UserError, match="has not finished — resume it to its end first"):
        main(Args(**base | dict(total_timesteps=300)))
    with pytest.raises(UserError, match="--fork-from .*: no args.json there"):
        main(Args(**base | dict(total_timesteps=300, fork_from=str(Path(runs_dir) / "nothing"))))


def test_fork_flags_default_to_the_source_seeds_and_parse_before_the_source_exists(runs_dir):
    source = _members(main(Args(total_timesteps=120, exp_name="source", **_common(runs_dir))))
    args = parse_args(Args, ["--env-id", "Pendulum-v1", "--fork-from", source[1]["run_dir"]])
    assert (args.seed, args.seeds) == (1, (1, 2))  # the group's, whichever member is named
    planned = parse_args(Args, ["--env-id", "Pendulum-v1", "--fork-from", str(Path(runs_dir) / "later"), "--seed", "4"])
    assert (planned.seed, planned.seeds, planned.fork_from) == (4, (), str(Path(runs_dir) / "later"))
    assert dataclasses.asdict(planned)["fork_from"].endswith("later")


def test_a_plan_runs_its_prefix_then_forks_both_arms_from_it_and_a_rerun_skips_them(tmp_path):
    """benchmarks/resets-dmc.toml's shape, small: with --workers 1 the sweep runs the prefix configuration first, then
    the two forks from it; both arms carry the prefix's evaluations and agree at the reset step's."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    (tmp_path / "plan.toml").write_text(
        """agent = ["td3"]
env_id = ["Pendulum-v1"]
seeds = [1, 2]
runs_dir = "runs"
members_per_process = 2
flags = "--total-timesteps 300 --learning-starts 100 --hidden-sizes 16 16 --batch-size 32 --eval-every 100 --eval-episodes 2"
[config]
prefix = "--total-timesteps 199"
kept = "--fork-from runs/Pendulum-v1__td3-prefix__1"
reset = "--fork-from runs/Pendulum-v1__td3-prefix__1 --reset.method full --reset.networks both --reset.every 200"
"""
    )
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-P", "-m", "commands.cli", "sweep", "plan.toml", "--workers", "1"]
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    summaries = {path.parent.name: json.loads(path.read_text()) for path in sorted((tmp_path / "runs").glob("*/summary.json"))}
    assert sorted(summaries) == [
        f"Pendulum-v1__td3-{config}__{seed}" for config in ("kept", "prefix", "reset") for seed in (1, 2)
    ]
    for seed in (1, 2):
        history = {
            config: dict(map(tuple, summaries[f"Pendulum-v1__td3-{config}__{seed}"]["eval_history"]))
            for config in ("prefix", "kept", "reset")
        }
        assert all(summaries[f"Pendulum-v1__td3-{config}__{seed}"]["finished"] for config in history)
        assert list(history["kept"]) == list(history["reset"]) == [100, 199, 200, 300]
        assert (
            {step: history["kept"][step] for step in (100, 199)}
            == history["prefix"]
            == {step: history["reset"][step] for step in (100, 199)}
        )
        assert history["kept"][200] == history["reset"][200] and history["kept"][300] != history["reset"][300]
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "6 finished already" in again.stdout + again.stderr, again.stdout + again.stderr
    # each seed of an arm forked from its own prefix directory (args.json's forked.from): the report still pools them
    from commands.report import write_report

    write_report([tmp_path / "runs"], tmp_path / "report", reps=50)
    with (tmp_path / "report" / "report.csv").open() as file:
        seeds = {row["group"]: row["seeds"] for row in csv.DictReader(file) if row["table"] == "per_env"}
    assert seeds == {"td3-kept": "2", "td3-prefix": "2", "td3-reset": "2"}, seeds
