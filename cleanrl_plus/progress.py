"""A console progress line with SPS and ETA that never touches the device (wall-clock checks only)."""

from __future__ import annotations

import sys
import time


def _human(n: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """`update(step)` costs one clock read; the line is redrawn at most every `interval` seconds.

    On a terminal the line is rewritten in place; otherwise (CI, log files) a line is printed every 30 s.
    """

    def __init__(self, total: int, start: int = 0, description: str = "", enabled: bool = True, stream=None) -> None:
        self.total, self.description, self.enabled = total, description, enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = 0.5 if self.tty else 30.0
        self.start_step, self.start_time = start, time.perf_counter()
        self.last_draw = self.start_time
        self.fields: dict[str, str] = {}

    def set(self, **fields: float | str) -> None:
        self.fields.update({k: (f"{v:.1f}" if isinstance(v, float) else str(v)) for k, v in fields.items()})

    def sps(self, step: int) -> float:
        elapsed = time.perf_counter() - self.start_time
        return (step - self.start_step) / elapsed if elapsed > 0 else 0.0

    def update(self, step: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last_draw >= self.interval:
            self.last_draw = now
            self._draw(step, end="\r" if self.tty else "\n")

    def _draw(self, step: int, end: str) -> None:
        sps = self.sps(step)
        total = max(self.total, step)  # PPO spends whole rollouts, so a run may end past a budget it rounds up
        eta = (total - step) / sps if sps > 0 else 0.0
        extra = "  ".join(f"{k} {v}" for k, v in self.fields.items())
        done = f"{_human(step)}/{_human(total)} [{100 * step / max(total, 1):3.0f}%]"
        line = f"{self.description} {done} {sps:,.0f} SPS  ETA {_clock(eta)}  {extra}"
        print(line.ljust(100), end=end, file=self.stream, flush=True)

    def close(self, step: int) -> None:
        if self.enabled:
            self._draw(step, end="\n")
