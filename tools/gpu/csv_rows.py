"""One CSV row appended to a file that the device scripts fill across calls (the header written with the first row)."""

from __future__ import annotations

import csv
from pathlib import Path


def append_row(path: Path, fields: list[str], row: dict) -> None:
    new_file = not path.exists()
    with path.open("a", newline="") as file:
        writer = csv.DictWriter(file, fields)
        if new_file:
            writer.writeheader()
        writer.writerow(row)
