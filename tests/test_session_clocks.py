"""The session's clocks (cleanrl_plus/clocks.py) on a hand-driven time: SPS since the start, the learning clock and the
bench's burn-in, after which the learning clock starts over."""

from __future__ import annotations

import types

import pytest

from cleanrl_plus import clocks
from cleanrl_plus.clocks import Clocks, burn_in


@pytest.fixture
def now(monkeypatch):
    """The clocks' time, set by the test: `now.t = 10.0`."""
    clock = types.SimpleNamespace(t=0.0)
    monkeypatch.setattr(clocks, "time", types.SimpleNamespace(perf_counter=lambda: clock.t))
    return clock


def test_sps_counts_the_steps_since_the_start_step(now):
    now.t = 100.0
    started = Clocks(start_step=1_000)  # a resumed run: its steps before the resume are not this process's
    assert started.sps(now=104.0, global_step=1_200) == 50.0


def test_the_learning_clock_starts_once_and_reports_nothing_before(now):
    timer = Clocks(start_step=0)
    assert timer.learning_rates(now=5.0, global_step=100, num_updates=0) == {}
    now.t = 2.0
    timer.learning_started(global_step=100, num_updates=10)
    now.t = 3.0
    timer.learning_started(global_step=150, num_updates=20)  # later calls change nothing
    assert timer.learning_rates(now=6.0, global_step=500, num_updates=410) == {
        "sps_learning": 100.0,
        "updates_per_second": 100.0,
    }


def test_without_a_burn_in_ticks_never_restart_the_learning_clock(now):
    timer = Clocks(start_step=0)
    timer.learning_started(global_step=0, num_updates=0)
    now.t = 50.0
    timer.tick(global_step=10_000, num_updates=10_000)
    assert timer.learning == (0.0, 0, 0)


def test_inside_burn_in_the_learning_clock_starts_over_once_the_burn_in_steps_passed(now):
    with burn_in(300):
        timer = Clocks(start_step=0)
    assert Clocks(start_step=0).burnin_steps == 0  # only the sessions started inside burn in
    timer.tick(global_step=500, num_updates=0)  # learning has not begun: nothing to restart
    now.t = 1.0
    timer.learning_started(global_step=1_000, num_updates=0)
    now.t = 2.0
    timer.tick(global_step=1_299, num_updates=299)
    assert timer.learning == (1.0, 1_000, 0)
    now.t = 3.0
    timer.tick(global_step=1_300, num_updates=300)
    assert timer.learning == (3.0, 1_300, 300)
    now.t = 4.0
    timer.tick(global_step=1_600, num_updates=600)  # once
    assert timer.learning == (3.0, 1_300, 300)
    assert timer.learning_rates(now=5.0, global_step=1_700, num_updates=800) == {
        "sps_learning": 200.0,
        "updates_per_second": 250.0,
    }


def test_burn_in_ends_with_its_block_even_when_the_run_raises():
    with pytest.raises(RuntimeError), burn_in(50):
        assert Clocks(start_step=0).burnin_steps == 50
        raise RuntimeError
    assert Clocks(start_step=0).burnin_steps == 0


def test_bench_starts_the_sessions_of_its_run_inside_its_burn_in(monkeypatch):
    from cleanrl_plus import session
    from commands.bench import BenchArgs, bench

    burn_ins = []

    class SeenClocks(Clocks):
        def __init__(self, start_step: int) -> None:
            super().__init__(start_step)
            burn_ins.append(self.burnin_steps)

    monkeypatch.setattr(session, "Clocks", SeenClocks)
    flags = "--num-steps 50 --num-minibatches 1 --update-epochs 1"
    report = bench(BenchArgs(agent="ppo", env_id="torch:CartPole-v1", steps=100, burnin=50, device="cpu", agent_flags=flags))
    assert burn_ins == [50] and report["burnin_steps"] == 50
    assert Clocks(start_step=0).burnin_steps == 0  # and ends with it
