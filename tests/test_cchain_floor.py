"""benchmarks/cchain_floor.py: which products and optimiser steps it counts, and how many updates a run has."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("cchain_floor", ROOT / "benchmarks" / "cchain_floor.py")
floor_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(floor_script)


def test_the_floor_counts_every_product_of_both_networks_and_one_adam_step_per_update(monkeypatch):
    """Each timed call costs 1 s: a 3 × 256 MLP has 4 layers, so 4 forward + 4 ∂W + 3 ∂X products (the first layer's
    input needs no gradient), 22 for policy and value; plus one Adam step. 2,000 iterations × 5 epochs × 25
    minibatches = 250,000 updates."""
    monkeypatch.setattr(floor_script, "cpu_seconds_per_call", lambda function, calls: (function(), 1.0)[1])
    result = floor_script.floor("continual:cchain-cartpole", members=2, calls=1)
    assert result["products"] == 22.0
    assert result["adam"] == 1.0
    assert result["updates"] == 250_000
    assert result["minutes"] == pytest.approx(250_000 * 23 / 60)


def test_a_real_run_prints_the_floor_in_one_line(capsys):
    floor_script.main(["--env-id", "continual:cchain-cartpole", "--members", "1", "--calls", "1"])
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "250,000 updates" in out and out.rstrip().endswith("CPU-minutes at the least")


def test_a_setting_that_is_not_c_chains_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stopped:
        floor_script.main(["--env-id", "CartPole-v1"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
