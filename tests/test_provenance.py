"""benchmarks/provenance.py: the commit, machine and CSV header every data file under benchmarks/ carries."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import commit_of, cpu_model, file_at, machine, write_csv  # noqa: E402


def a_repository(path: Path) -> str:
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "a").write_text("a")
    subprocess.run([*git, "add", "a"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def test_commit_of_names_the_checkouts_head_and_none_elsewhere(tmp_path):
    head = a_repository(tmp_path / "repo")
    assert commit_of(tmp_path / "repo") == head and len(head) == 40
    assert head.startswith(commit_of(tmp_path / "repo", short=True)) and len(commit_of(tmp_path / "repo", short=True)) < 40
    (tmp_path / "plain").mkdir()
    assert commit_of(tmp_path / "plain") is None and commit_of(tmp_path / "missing") is None
    assert file_at(tmp_path / "repo", head, "a") == "a" and file_at(tmp_path / "repo", head, "b") is None


def test_machine_names_the_cpu_and_the_versions_that_change_numbers():
    import torch

    assert machine().startswith(cpu_model()) and f"torch {torch.__version__}" in machine() and "gymnasium" in machine()


def test_write_csv_puts_the_header_above_the_columns_and_floats_exactly(tmp_path):
    path = tmp_path / "sub" / "data.csv"
    write_csv(path, {"command": "x --y", "patched": ["line 1", "line 2"]}, ["step", "value"], [[1, 0.1 + 0.2]])
    assert path.read_text() == "# command: x --y\n# patched: line 1\n# patched: line 2\nstep,value\n1,0.30000000000000004\n"


def test_write_csv_that_fails_leaves_the_old_file_and_no_scratch(tmp_path):
    class Unwritable:
        def __str__(self):
            raise RuntimeError("no text")

    path = tmp_path / "data.csv"
    path.write_text("old\n")
    with pytest.raises(RuntimeError):
        write_csv(path, {}, ["a"], [[Unwritable()]])
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["data.csv"]
