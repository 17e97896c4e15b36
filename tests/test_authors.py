"""The "As the authors run it" lines of the docs are the table of plasticity/authors.py, and each documented command
parses, with its agent's own parser, to the authors' values the table records (no training)."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import shlex
import textwrap
from pathlib import Path
from typing import Any

import pytest

from cleanrl_plus.config import parse_args
from plasticity import catalogue
from plasticity.authors import RUNS, AuthorsRun, markdown

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
HEAD = "As the authors run it ("


def flat(text: str) -> str:
    return " ".join(text.split())


def docs_text() -> str:
    return "\n".join(path.read_text() for path in DOC_FILES)


def documented_argv(run: AuthorsRun) -> list[str]:
    """What the docs show for the entry, as the agent's argv: the command of the bash block after the entry's line, or
    the flags quoted after 'Their values in our flags:' where the suite has no task like the authors'."""
    text = flat(docs_text())
    start = text.index(f"{HEAD}{run.setting};")
    if not run.env_id:
        flags = re.search(r"Their values in our flags: `([^`]*)`", text[start:])
        assert flags, run.setting
        return shlex.split(flags.group(1))
    block = re.search(r"```bash (.*?) ```", text[start:])
    assert block, run.setting
    command = shlex.split(block.group(1))
    assert command[:2] == ["python", f"agents/{run.agent}.py"], command[:2]
    return command[2:]


def parse(run: AuthorsRun, argv: list[str]) -> Any:
    module = importlib.import_module(f"agents.{run.agent}")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as errors:
        try:
            return parse_args(module.Args, argv)
        except SystemExit:
            raise AssertionError(f"agents/{run.agent}.py {shlex.join(argv)}:\n{errors.getvalue()}") from None


def value_at(args: Any, path: str) -> Any:
    for name in path.split("."):
        args = getattr(args, name)
    return args


def mismatches(run: AuthorsRun, args: Any) -> dict[str, tuple[Any, Any]]:
    """{path: (parsed, the authors')} for every value of the entry that the parsed flags do not hold."""
    return {path: (value_at(args, path), value) for path, value in run.settings.items() if value_at(args, path) != value}


def test_every_entry_is_in_the_docs_verbatim_and_every_such_line_is_an_entry():
    text = flat(docs_text())
    for run in RUNS:
        expected = markdown(run)
        assert flat(expected) in text, f"docs/remedies should hold, for {run.remedy} ({run.setting}):\n\n" + "\n".join(
            line if line.startswith(("```", "python ")) else textwrap.fill(line, 120, break_on_hyphens=False)
            for line in expected.split("\n")
        )
    assert text.count(HEAD) == len(RUNS), "an 'As the authors run it' line that plasticity/authors.py does not hold"


@pytest.mark.parametrize("run", RUNS, ids=[f"{run.remedy}: {run.setting}" for run in RUNS])
def test_the_documented_command_parses_to_the_authors_values(run):
    remedy = next((remedy for remedy in catalogue.REMEDIES if remedy.name == run.remedy), None)
    assert remedy is not None and remedy.applies_to(run.agent), run.remedy
    argv = documented_argv(run)
    if run.env_id:
        assert argv[:2] == ["--env-id", run.env_id]
    args = parse(run, argv)
    assert mismatches(run, args) == {}
    assert run.remedy in catalogue.active(args)


def test_a_documented_value_that_is_not_the_authors_fails_the_check():
    run = next(run for run in RUNS if run.remedy == "full reset")
    argv = documented_argv(run)
    at = argv.index("--target-entropy-scale")
    argv[at + 1] = "1.0"  # the error issue #36 found in this line
    assert mismatches(run, parse(run, argv)) == {"target_entropy_scale": (1.0, 0.5)}
    dropped = [flag for flag in documented_argv(run) if flag != "--no-normalize-obs"]
    assert mismatches(run, parse(run, dropped)) == {"normalize_obs": (True, False)}
