"""Env steps per second of a finished run, read from its TensorBoard events: the same measure for CleanRL's, LeanRL's
(through tools/gpu/stubs/wandb.py) and our runs. Runs on the GPU machine (side_by_side.sh), or anywhere.

Every scalar event carries the wall-clock time at which it was logged. Taking, for each logged step, the time of
its last event, the rate is (last step − first step) / (their time apart) over the steps ≥ --from-step: the burn-in
before it (random actions, torch.compile, graph capture) is not measured.

Usage: python3 tools/gpu/rate.py RUNS_DIR --from-step 7000    → one JSON line
       … --csv FILE --updates-per-step 1 --field task=td3 --field implementation=cleanrl …  → also appends a CSV row
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from csv_rows import append_row  # tools/gpu/csv_rows.py, beside this script
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

FIELDS = [
    "task",
    "implementation",
    "flags",
    "env_steps_per_s",
    "updates_per_s",
    "window_steps",
    "window_s",
    "status",
    "device",
    "torch",
    "command",
]


def step_times(runs_dir: Path) -> dict[int, float]:
    times: dict[int, float] = {}
    for path in runs_dir.rglob("events.out.tfevents.*"):
        for event in EventFileLoader(str(path)).Load():
            if event.HasField("summary") and event.summary.value:
                times[event.step] = max(times.get(event.step, 0.0), event.wall_time)
    return times


def rate(runs_dir: Path, from_step: int) -> dict:
    points = sorted((step, time) for step, time in step_times(runs_dir).items() if step >= from_step)
    if len(points) < 2:
        return {"env_steps_per_s": None, "points": len(points)}
    (first_step, first_time), (last_step, last_time) = points[0], points[-1]
    seconds = last_time - first_time
    return {
        "env_steps_per_s": round((last_step - first_step) / seconds, 1),
        "first_step": first_step,
        "last_step": last_step,
        "seconds": round(seconds, 2),
        "points": len(points),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", type=Path)
    parser.add_argument("--from-step", type=int, default=0)
    parser.add_argument("--csv", type=Path, help="append a row to this CSV file (header if new)")
    parser.add_argument("--updates-per-step", type=float, default=0.0, help="gradient steps per env step (derived rate)")
    parser.add_argument("--field", action="append", default=[], help="NAME=VALUE of the CSV row")
    args = parser.parse_args()
    result = rate(args.runs_dir, args.from_step)
    print(json.dumps(result))
    if args.csv:
        row = dict(field.split("=", 1) for field in args.field)
        sps = result["env_steps_per_s"]
        row.update(
            env_steps_per_s=sps,
            updates_per_s=round(sps * args.updates_per_step, 1) if sps else None,
            window_steps=result.get("last_step", 0) - result.get("first_step", 0),
            window_s=result.get("seconds"),
        )
        append_row(args.csv, FIELDS, row)
