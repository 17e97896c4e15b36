"""The cheapest real plasticity signal (docs/experiments.md): PPO on continual CartPole with
observation offsets. One persistent agent collapses after switches; a fresh agent per level (the oracle) does not.

The full-size claim (5 levels × 60k steps, 3 seeds) is slow: 6 runs of 300k steps, two at a time through
`cleanrl-plus sweep` (6 min on 2 cores). The default suite runs the same claim small (about a minute of one core):
see `test_persistent_relu_ppo_collapses_and_the_oracle_does_not_in_the_default_suite`; its margins are in
docs/testing.md."""

from __future__ import annotations

import json

import pytest

from agents import ppo
from cleanrl_plus.config import parse_args
from commands import sweep
from commands.compare import PPO_CONTINUAL_CARTPOLE_RECIPE

COLLAPSED = 20.0  # CartPole's pole drops at once: ≈ 9 steps


@pytest.mark.slow
def test_persistent_ppo_collapses_after_switches_and_the_oracle_does_not(tmp_path):
    flags = PPO_CONTINUAL_CARTPOLE_RECIPE + " --eval-every 20000"  # the preset's full schedule: 5 levels × 60k
    plan = sweep.SweepArgs(
        agent=("ppo",),
        env_id=("continual:cartpole-offset-small",),
        seeds=(1, 2, 3),
        config=("baseline=", "oracle=--continual.oracle"),
        flags=flags,
        runs_dir=str(tmp_path),
        workers=2,
    )
    assert all(r["state"] == "finished" for r in sweep.run_sweep(plan))
    collapsed = {}
    for spec in sweep.manifest(plan):
        tasks = json.loads((spec.dir / "summary.json").read_text())["tasks"]
        ends = [task["final_eval"] for task in tasks]
        print(spec.name, [round(e, 1) for e in ends])
        assert len(ends) == 5 and ends[0] >= 475  # level 0 (no offset) is learnt by both
        collapsed[spec.exp_name] = collapsed.get(spec.exp_name, 0) + sum(end < COLLAPSED for end in ends[1:])
    print("post-switch levels ending collapsed (of 12):", collapsed)
    assert collapsed["ppo"] >= 6 and collapsed["ppo-oracle"] <= 1, collapsed


# The small setting: the recipe with ReLU units at lr 3e-3 on torch-native CartPole, 6 tasks × 10,240 steps. A
# persistent agent ends about 2 of its 5 post-switch tasks collapsed, though 0 to 5 by seed (tanh units at this size:
# about 1); the oracle none in 100 measured, though it can end as low as ≈ 20, hence the slack. docs/testing.md.
SMALL_ENV, SMALL_TASKS = "continual:obs-offset:torch:CartPole-v1", 6
SMALL_FLAGS = PPO_CONTINUAL_CARTPOLE_RECIPE + (
    " --net.activation relu --learning-rate 3e-3 --eval-every 0 --checkpoint-every 0"
    f" --continual.steps-per-task 10240 --continual.num-tasks {SMALL_TASKS} --no-progress"
)
PERSISTENT_COLLAPSES = 4  # seeds are run until the persistent agent has ended this many post-switch tasks collapsed …
MAX_SEEDS = 8  # … within this many seeds (a seed gives ≈ 2: one or two seeds usually suffice)
ORACLE_COLLAPSES = 2  # and the oracle at most this many on the same seeds (an oracle that keeps its agent has ≥ 4)


def end_of_task_returns(seed: int, oracle: bool, runs_dir) -> list[float]:
    flags = [*SMALL_FLAGS.split(), "--env-id", SMALL_ENV, "--seed", str(seed), "--runs-dir", str(runs_dir)]
    args = parse_args(ppo.Args, flags + (["--continual.oracle", "--exp-name", "ppo-oracle"] if oracle else []))
    ends = [task["final_eval"] for task in ppo.main(args)["tasks"]]
    print("oracle" if oracle else "persistent", "seed", seed, [round(end, 1) for end in ends])
    assert len(ends) == SMALL_TASKS, f"{len(ends)} tasks ran, not {SMALL_TASKS}"
    return ends


def test_persistent_relu_ppo_collapses_and_the_oracle_does_not_in_the_default_suite(tmp_path):
    seeds, collapsed = [], 0
    while collapsed < PERSISTENT_COLLAPSES and len(seeds) < MAX_SEEDS:
        seeds.append(len(seeds) + 1)
        collapsed += sum(end < COLLAPSED for end in end_of_task_returns(seeds[-1], oracle=False, runs_dir=tmp_path)[1:])
    assert collapsed >= PERSISTENT_COLLAPSES, (
        f"the persistent agent ended {collapsed} of {len(seeds) * (SMALL_TASKS - 1)} post-switch tasks collapsed"
    )
    oracle_collapsed = 0
    for seed in seeds:  # the same seeds: the same schedules, and the same run up to the first switch
        oracle_collapsed += sum(end < COLLAPSED for end in end_of_task_returns(seed, oracle=True, runs_dir=tmp_path)[1:])
        assert oracle_collapsed <= ORACLE_COLLAPSES, (
            f"the oracle ended {oracle_collapsed} post-switch tasks collapsed (seeds {seeds})"
        )
