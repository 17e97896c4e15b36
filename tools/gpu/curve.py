"""A run's learning curve against wall-clock, from its TensorBoard events: one CSV row per logged value of the chosen
tags, with the seconds since --start (the epoch time the command began; default: the run's first event). Runs on the
GPU machine (ppo_scale.sh), or anywhere; `time_to_solve.py` reads evaluations through it.

Usage: python3 tools/gpu/curve.py RUN_DIR --start 1795500000.0 --csv curve.csv       (default tags: eval/episodic_return,
       charts/SPS, charts/episodic_return)  → also prints the last value of each tag as one JSON line
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

TAGS = ("eval/episodic_return", "charts/SPS", "charts/episodic_return")


def scalars(run_dir: Path, tags: tuple[str, ...] = TAGS) -> tuple[float, list[tuple[float, int, str, float]]]:
    """(wall time of the run's first event, sorted (wall time, step, tag, value) of every scalar of `tags`)."""
    first, found = float("inf"), []
    for path in run_dir.rglob("events.out.tfevents.*"):
        for event in EventFileLoader(str(path)).Load():
            first = min(first, event.wall_time)
            for value in event.summary.value if event.HasField("summary") else ():
                if value.tag in tags:
                    number = value.simple_value if value.HasField("simple_value") else value.tensor.float_val[0]
                    found.append((event.wall_time, event.step, value.tag, float(number)))
    return first, sorted(found)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--start", type=float, default=0.0, help="epoch seconds the command began (0: the run's first event)")
    parser.add_argument("--tags", nargs="+", default=list(TAGS))
    parser.add_argument("--csv", type=Path, help="write the curve here (seconds, step, tag, value)")
    args = parser.parse_args()
    first, rows = scalars(args.run_dir, tuple(args.tags))
    start = args.start or first
    if args.csv:
        with args.csv.open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["seconds", "step", "tag", "value"])
            writer.writerows((round(wall - start, 2), step, tag, value) for wall, step, tag, value in rows)
    last = {tag: (step, round(wall - start, 1), value) for wall, step, tag, value in rows}
    print(json.dumps({"run_dir": str(args.run_dir), "rows": len(rows), "last (step, seconds, value)": last}))
