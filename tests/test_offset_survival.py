"""benchmarks/cchain_offset_survival.py on a real (briefly trained) C-CartPole run."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from agents import ppo

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("cchain_offset_survival", ROOT / "benchmarks" / "cchain_offset_survival.py")
survival_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(survival_script)


@pytest.fixture(scope="module")
def level0_runs(tmp_path_factory):
    runs = tmp_path_factory.mktemp("level0")
    args = ppo.Args.defaults_for("continual:cchain-cartpole", total_timesteps=800, seeds=(1,), runs_dir=str(runs))
    ppo.main(args)
    return runs


def test_no_offset_survives_as_well_as_the_unperturbed_policy_and_a_huge_one_saturates(level0_runs):
    """After one iteration the policy is near uniform: unperturbed, it is not saturated; a +1000 offset on every
    input saturates its softmax at the first state, and then the pole falls within a few steps."""
    run = next(level0_runs.glob("continual-cchain-cartpole__*"))
    _, saturated_clean = survival_script.survival(run, np.zeros((4, 4), np.float32), env_seed=0)
    survived_huge, saturated_huge = survival_script.survival(run, np.full((4, 4), 1000.0, np.float32), env_seed=0)
    assert saturated_clean == 0.0
    assert saturated_huge == 1.0 and survived_huge == 0.0


def test_the_command_reports_each_run_and_its_group(level0_runs, capsys):
    groups = survival_script.main([str(level0_runs), "--offsets", "3"])
    assert list(groups) == ["ppo"] and len(groups["ppo"]) == 1
    _, survived, saturated = groups["ppo"][0]
    assert 0.0 <= survived <= 1.0 and 0.0 <= saturated <= 1.0
    assert "ppo: 1 runs, mean share survived" in capsys.readouterr().out


def test_a_folder_without_runs_is_one_error_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        survival_script.main([str(tmp_path)])
    assert exit_info.value.code == 2 and capsys.readouterr().err.startswith("error: no runs with a checkpoint")
