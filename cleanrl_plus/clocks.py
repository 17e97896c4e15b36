"""A training loop's clocks: env steps per second since the loop started (a resumed run: since it resumed), and the
learning clock, from the step updates begin, that `cleanrl-plus bench` reads as env steps and updates per second.

`cleanrl-plus bench --burnin N` keeps the first N learning steps off the learning clock (where --compile compiles and
--cudagraphs captures, LeanRL's measure_burnin): it trains inside `burn_in(N)`, and the clocks a session starts there
restart their learning clock N env steps after learning began."""

from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Iterator

# env steps of learning before the learning clock starts over; set for the runs inside `burn_in`, 0 elsewhere
_burnin_steps: contextvars.ContextVar[int] = contextvars.ContextVar("burnin_steps", default=0)


@contextlib.contextmanager
def burn_in(steps: int) -> Iterator[None]:
    """The runs started inside restart their learning clock `steps` env steps after learning begins."""
    token = _burnin_steps.set(steps)
    try:
        yield
    finally:
        _burnin_steps.reset(token)


class Clocks:
    """Started at `start_step`; every step count is a member's env steps."""

    def __init__(self, start_step: int) -> None:
        self.start_time, self.start_step = time.perf_counter(), start_step
        self.learning: tuple[float, int, int] | None = None  # (time, step, updates) when updates began
        self.burnin_steps = _burnin_steps.get()
        self.burnt_in = self.burnin_steps == 0  # the learning clock restarted after the burn-in

    def learning_started(self, global_step: int, num_updates: int) -> None:
        """Start the learning clock (once; later calls change nothing)."""
        if self.learning is None:
            self.learning = (time.perf_counter(), global_step, num_updates)

    def tick(self, global_step: int, num_updates: int) -> None:
        """After every step: the learning clock starts over once the burn-in's steps have passed."""
        if not self.burnt_in and self.learning is not None and global_step >= self.learning[1] + self.burnin_steps:
            self.learning, self.burnt_in = (time.perf_counter(), global_step, num_updates), True

    def sps(self, now: float, global_step: int) -> float:
        """Env steps per second of one member (every member steps as many)."""
        return (global_step - self.start_step) / max(now - self.start_time, 1e-9)

    def learning_rates(self, now: float, global_step: int, num_updates: int) -> dict[str, float]:
        """Env steps and updates per second on the learning clock; nothing before learning began."""
        if self.learning is None:
            return {}
        started, step, updates = self.learning
        elapsed = max(now - started, 1e-9)
        return {"sps_learning": (global_step - step) / elapsed, "updates_per_second": (num_updates - updates) / elapsed}
