"""Where a data file under benchmarks/ came from: the machine, the time, a repository's commit, and the CSV writer
that puts them in a `# key: value` header above the columns. Standard library at import (torch, numpy and gymnasium
are read only when `machine()` names their versions), so benchmarks/peers/run.py can use it from any environment."""

from __future__ import annotations

import csv
import datetime
import io
import os
import platform
import subprocess
import tempfile
from pathlib import Path


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    return next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), platform.processor())


def machine() -> str:
    """The CPU, its core count, the OS and the versions that change numbers."""
    import gymnasium
    import numpy as np
    import torch

    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {platform.system()}; Python {platform.python_version()}, "
        f"torch {torch.__version__}, numpy {np.__version__}, gymnasium {gymnasium.__version__}"
    )


def commit_of(folder: Path | str, short: bool = False) -> str | None:
    """The HEAD commit of the git checkout (or bare mirror) at folder; None where it is none."""
    found = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", *(["--short"] if short else []), "HEAD"], capture_output=True, text=True
    )
    return found.stdout.strip() or None if found.returncode == 0 else None


def file_at(folder: Path | str, commit: str, name: str) -> str | None:
    """The text of name at commit in the git checkout (or bare mirror) at folder; None where it has none."""
    shown = subprocess.run(["git", "-C", str(folder), "show", f"{commit}:{name}"], capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def write_csv(path: Path, header: dict[str, str | list[str]], columns: list[str], rows: list[list]) -> None:
    """`# key: value` lines (a list: one line per item), then the columns; written whole or not at all."""
    text = io.StringIO()
    for key, value in header.items():
        for item in value if isinstance(value, list) else [value]:
            text.write(f"# {key}: {item}\n")
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([[repr(v) if isinstance(v, float) else v for v in row] for row in rows])
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as file:
        file.write(text.getvalue())
    os.replace(file.name, path)
