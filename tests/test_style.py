"""The tree stays formatted and lint-free: `ruff format --check` and `ruff check` with the settings in pyproject.toml
(127 columns, pyflakes, pycodestyle, import order). Run `ruff format . && ruff check --fix .` to fix what this finds."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["format", "--check", "--diff"], ["check"]], ids=["format", "lint"])
def test_ruff_finds_nothing_to_change(command):
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
