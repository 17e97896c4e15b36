"""Mutation harness: plant each one-line bug of `mutations.toml` in a temporary copy of the repository, run the
tests that should catch it, and print a killed / survived table.

    python tools/mutation/run.py                      # every mutation
    python tools/mutation/run.py ddqn-terminal-or-truncated swd-off-by-one   # some, by id
    python tools/mutation/run.py --list               # ids and files only
    python tools/mutation/run.py --baseline           # first check that the named tests pass unmutated

A mutation is killed when its tests fail (pytest exit status 1) on the mutated copy; any other status (a
collection error, a timeout) is reported as such so that a broken mutation is not mistaken for a caught bug.
Not part of the test suite: it runs the named tests once per mutation (minutes). See docs/testing.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MUTATIONS = Path(__file__).with_name("mutations.toml")


def load_mutations(path: Path = MUTATIONS) -> list[dict]:
    mutations = tomllib.loads(path.read_text())["mutation"]
    seen = set()
    for m in mutations:
        missing = {"id", "file", "find", "replace", "tests"} - m.keys()
        if missing:
            raise SystemExit(f"mutation {m.get('id', '?')}: missing {sorted(missing)} in {path}")
        if m["id"] in seen:
            raise SystemExit(f"mutation id {m['id']} appears twice in {path}")
        seen.add(m["id"])
    return mutations


def copy_repository(destination: Path) -> None:
    """The tracked and untracked-but-not-ignored files, as the working tree has them (no runs/, no caches)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def apply(mutation: dict, root: Path) -> None:
    path = root / mutation["file"]
    text = path.read_text()
    count = text.count(mutation["find"])
    if count != 1:
        raise SystemExit(
            f"mutation {mutation['id']}: `find` occurs {count} times in {mutation['file']} (must be exactly once)"
        )
    path.write_text(text.replace(mutation["find"], mutation["replace"]))


def run_tests(root: Path, tests: list[str], timeout: float) -> tuple[int, float]:
    env = os.environ | {"PYTHONPATH": str(root)}
    started = time.monotonic()
    try:
        status = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=root,
            env=env,
            capture_output=True,
            timeout=timeout,
        ).returncode
    except subprocess.TimeoutExpired:
        status = -1
    return status, time.monotonic() - started


def verdict(status: int) -> str:
    return {0: "SURVIVED", 1: "killed", -1: "timeout"}.get(status, f"error (pytest exit {status})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*", help="mutation ids to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--baseline", action="store_true", help="first run every named test on the unmutated copy")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per mutation's test run")
    options = parser.parse_args()
    mutations = load_mutations()
    if options.ids:
        unknown = set(options.ids) - {m["id"] for m in mutations}
        if unknown:
            raise SystemExit(f"unknown mutation ids {sorted(unknown)} — see --list")
        mutations = [m for m in mutations if m["id"] in options.ids]
    if options.list:
        for m in mutations:
            print(f"{m['id']:40s} {m['file']}")
        return 0
    with tempfile.TemporaryDirectory(prefix="mutation-") as scratch:
        pristine = Path(scratch) / "pristine"
        copy_repository(pristine)
        if options.baseline:
            tests = sorted({t for m in mutations for t in m["tests"]})
            status, seconds = run_tests(pristine, tests, options.timeout * len(mutations))
            print(f"baseline: pytest exit {status} in {seconds:.0f} s")
            if status != 0:
                return 1
        rows = []
        for m in mutations:
            work = Path(scratch) / "work"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(pristine, work)
            apply(m, work)
            status, seconds = run_tests(work, m["tests"], options.timeout)
            rows.append((m["id"], m["file"], verdict(status), seconds))
            print(f"{m['id']:40s} {verdict(status):10s} {seconds:6.1f} s", flush=True)
    width = max(len(r[0]) for r in rows)
    print(f"\n| {'mutation':{width}s} | file | result | seconds |\n|{'-' * (width + 2)}|---|---|---|")
    for mutation_id, file, result, seconds in rows:
        print(f"| {mutation_id:{width}s} | {file} | {result} | {seconds:.0f} |")
    killed = sum(r[2] == "killed" for r in rows)
    print(f"\n{killed}/{len(rows)} killed")
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
