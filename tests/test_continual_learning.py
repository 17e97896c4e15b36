"""The cheapest real plasticity signal (spec continual-and-evaluation.md §4.1, §4.3): PPO on continual CartPole
(5 observation-offset levels × 60k steps). One persistent agent collapses after switches; a fresh agent per level
(the oracle) does not. Slow: 6 runs of 300k steps, two at a time through `cleanrl-plus sweep` (6 min on 2 cores)."""

from __future__ import annotations

import json

import pytest

from cleanrl_plus import sweep
from cleanrl_plus.compare import PPO_CONTINUAL_CARTPOLE_RECIPE

COLLAPSED = 20.0  # CartPole's pole drops at once: ≈ 9 steps


@pytest.mark.slow
def test_persistent_ppo_collapses_after_switches_and_the_oracle_does_not(tmp_path):
    flags = PPO_CONTINUAL_CARTPOLE_RECIPE + " --eval-every 20000"  # the preset's full schedule: 5 levels × 60k
    plan = sweep.SweepArgs(agent=("ppo",), env_id=("continual:cartpole-offset-small",), seeds=(1, 2, 3),
                           config=("baseline=", "oracle=--continual.oracle"), flags=flags, runs_dir=str(tmp_path), workers=2)
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
