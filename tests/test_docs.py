"""Docs cannot rot silently: the site builds with --strict (broken links and anchors fail), and every agent or
`cleanrl-plus` command in README.md and docs/ parses with the real parser (without running)."""

from __future__ import annotations

import contextlib
import importlib
import io
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cleanrl_plus.config import parse_args
from commands import cli, sweep
from envs.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE_COMMAND = re.compile(r"`((?:cleanrl-plus|python agents/|python -m agents\.)[^`]*)`")
AGENT_SCRIPT = re.compile(r"^agents/(\w+)\.py$")


def shell_commands(text: str) -> list[list[str]]:
    """Every command of the bash blocks of a markdown text, as argv lists (continuation lines joined, comments
    dropped, `a && b` split), then the commands quoted inline."""
    commands = []
    for language, body in FENCE.findall(text):
        if language not in ("bash", "sh", "shell", ""):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            try:
                words = shlex.split(line, comments=True)
            except ValueError as error:
                raise AssertionError(f"unparsable shell line {line!r}: {error}") from None
            command: list[str] = []
            for word in [*words, "&&"]:
                if word in ("&&", "||", ";", "|"):
                    if command:
                        commands.append(command)
                    command = []
                else:
                    command.append(word)
    for span in INLINE_COMMAND.findall(FENCE.sub("", text)):  # commands quoted in prose and tables
        commands.append(shlex.split(span))
    return commands


def agent_argv(command: list[str]) -> tuple[str, list[str]] | None:
    """('td3', flags) for `python agents/td3.py ...` or `python -m agents.td3 ...`."""
    if len(command) < 2 or command[0] not in ("python", "python3"):
        return None
    match = AGENT_SCRIPT.match(command[1])
    if match:
        return match.group(1), command[2:]
    if command[1] == "-m" and len(command) > 2 and command[2].startswith("agents."):
        return command[2].split(".", 1)[1], command[3:]
    return None


def collected_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOC_FILES:
        for command in shell_commands(path.read_text()):
            if agent_argv(command) or command[0] == "cleanrl-plus":
                found.append((f"{path.relative_to(ROOT)}: {shlex.join(command)}", command))
    return found


def parse_agent_flags(agent: str, flags: list[str]) -> None:
    """Parse with the agent's real parser; `--resume DIR` would read the run's args.json, so it is parsed apart."""
    module = importlib.import_module(f"agents.{agent}")
    if "--resume" in flags:
        at = flags.index("--resume")
        flags = flags[:at] + flags[at + 2 :]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as errors:
        try:
            parse_args(module.Args, flags)
        except SystemExit as exit:
            assert exit.code == 0, f"agents/{agent}.py {shlex.join(flags)}:\n{errors.getvalue()}"
        except UserError as error:
            raise AssertionError(f"agents/{agent}.py {shlex.join(flags)}: {error}") from None


def check_command(command: list[str]) -> None:
    agent = agent_argv(command)
    if agent:
        parse_agent_flags(*agent)
        return
    argv = command[1:]
    if not argv or argv[0] in ("-h", "--help"):
        return
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as errors:
        try:
            parsed = cli.parse_only(argv)
        except SystemExit as exit:
            assert exit.code == 0, f"{shlex.join(command)}:\n{errors.getvalue()}"
            return
        except UserError as error:
            raise AssertionError(f"{shlex.join(command)}: {error}") from None
    # the agent flags a sweep, compare or bench passes on must parse (and pass the range checks) with that agent's
    # parser too, on the env they are given with
    if isinstance(parsed, sweep.SweepArgs):
        for agent_name, env_id in itertools.product(parsed.agent, parsed.env_id):
            for config in parsed.config or ("baseline=",):
                parse_agent_flags(
                    agent_name, [*shlex.split(parsed.flags), *shlex.split(config.split("=", 1)[1]), "--env-id", env_id]
                )
    elif argv[0] == "compare":
        parse_agent_flags(parsed.agent, [*shlex.split(parsed.flags), *shlex.split(parsed.remedy), "--env-id", parsed.env_id])
    elif argv[0] == "bench" and argv[1:2] in (["groups"], ["profile"]):
        from commands.bench import default_flags

        parse_agent_flags(parsed.agent, [*shlex.split(parsed.flags or default_flags(parsed.agent)), "--env-id", parsed.env_id])
    elif argv[0] == "bench" and parsed.agent != "env":
        parse_agent_flags(parsed.agent, [*shlex.split(parsed.agent_flags), "--env-id", parsed.env_id])


COMMANDS = collected_commands()


def test_the_docs_show_commands_of_every_kind():
    texts = [label for label, _ in COMMANDS]
    for needle in (
        "agents/td3.py",
        "agents/sac_simba.py",
        "agents/ddqn.py",
        "agents/ppo.py",
        "agents/gtr.py",
        "cleanrl-plus compare",
        "cleanrl-plus sweep",
        "cleanrl-plus report",
        "cleanrl-plus bench",
        "cleanrl-plus eval",
    ):
        assert any(needle in text for text in texts), needle


@pytest.mark.parametrize("command", [c for _, c in COMMANDS], ids=[label for label, _ in COMMANDS])
def test_documented_command_parses(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.toml").write_text(plan_from_docs())  # the plan file the experiments page shows
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")  # the benchmark plans the remedies page runs
    check_command(command)


def plan_from_docs() -> str:
    text = (ROOT / "docs" / "experiments.md").read_text()
    return next(body for language, body in FENCE.findall(text) if language == "toml")


def test_a_misspelt_flag_in_a_documented_command_fails_the_check():
    with pytest.raises(AssertionError):
        check_command(["python", "agents/td3.py", "--env-id", "Hopper-v5", "--learning-rat", "3e-4"])
    with pytest.raises(AssertionError):
        check_command(["cleanrl-plus", "sweep", "--agent", "ppo", "--flags", "--num-env 8"])
    with pytest.raises(AssertionError):
        check_command(["cleanrl-plus", "compare", "--seed", "3"])


def test_shell_commands_joins_continuations_and_splits_chains():
    text = (
        "```bash\npip install -e . && cleanrl-plus compare   # note\npython agents/td3.py --seed 1 \\\n    --tau 0.01\n```\n"
    )
    assert shell_commands(text) == [
        ["pip", "install", "-e", "."],
        ["cleanrl-plus", "compare"],
        ["python", "agents/td3.py", "--seed", "1", "--tau", "0.01"],
    ]


@pytest.mark.skipif(
    shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None,
    reason='mkdocs is not installed: pip install -e ".[test]"',
)
def test_the_site_builds_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "benchmarks" / "index.html").is_file()
