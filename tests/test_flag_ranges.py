"""Every numeric flag of every agent, nested remedy settings included, declares its valid range next to its definition
(cleanrl_plus/ranges.py), and a value outside it is refused before anything is created: one line naming the flag, the
value and the range, exit code 2. A range that depends on the network (--reset.layers) is checked once the network
exists, still before the run directory is written. A flag added without a range fails here."""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
import sys
import typing

import pytest
from conftest import cli_in_process, run_script

from cleanrl_plus.ranges import declared_ranges
from envs.ranges import SEED_MAX, Range

AGENTS = ("td3", "sac_simba", "ddqn", "ppo", "gtr")
ENV_OF = {"td3": "Pendulum-v1", "sac_simba": "Pendulum-v1", "ddqn": "CartPole-v1", "ppo": "CartPole-v1", "gtr": "CartPole-v1"}


def numeric_fields(settings: type, prefix: str = "") -> set[str]:
    """Dotted names of the fields whose default is a number or a tuple of numbers, nested settings included: found from
    the values, not the annotations, so a field whose annotation declares nothing is found too; a field whose default
    None stands for a number (`float | None`) is found from its type."""
    names = set()
    hints = typing.get_type_hints(settings)
    for field in dataclasses.fields(settings):
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            continue  # a required argument (a command's RUN_DIR): no number has none
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        if default is None and set(typing.get_args(hints[field.name])) & {int, float}:
            names.add(prefix + field.name)
        elif dataclasses.is_dataclass(default):
            names |= numeric_fields(type(default), f"{prefix}{field.name}.")
        elif (
            isinstance(default, tuple)
            and default
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in default)
        ):
            names.add(prefix + field.name)
        elif default == () and set(typing.get_args(hints[field.name])) & {int, float}:  # an empty tuple of numbers (--seeds)
            names.add(prefix + field.name)
        elif isinstance(default, (int, float)) and not isinstance(default, bool):
            names.add(prefix + field.name)
    return names


def outside(number: type, bounds: Range) -> list:
    """A value just beyond each bound of `bounds` (a range with no bound: a non-finite float)."""
    values = [
        bounds.ge - 1 if bounds.ge is not None else None,
        bounds.gt,
        bounds.le + 1 if bounds.le is not None else None,
        bounds.lt,
    ]
    values = [number(v) for v in values if v is not None]
    return values or [math.inf]


def refusals(settings: type, defaults: dict):
    """(flag, the values given, the one error line expected) for a value just beyond each bound of each numeric field of
    `settings`; a tuple field gets its default entries with the last one replaced."""
    for name, number, bounds, is_tuple in declared_ranges(settings):
        flag = "--" + name.replace("_", "-")
        default = defaults
        for part in name.split("."):
            default = default[part]
        for value in outside(number, bounds):
            given = [*map(str, default[:-1]), str(value)] if is_tuple else [str(value)]
            if math.isinf(value):
                yield flag, given, f"error: {flag} must be a finite number, got {value}"
            elif is_tuple:
                yield flag, given, f"error: {flag} entries must be {bounds}, got {' '.join(given)}"
            else:
                yield flag, given, f"error: {flag} must be {bounds}, got {value}"


@pytest.mark.parametrize("agent", AGENTS)
def test_every_numeric_flag_declares_a_range(agent):
    args_type = importlib.import_module(f"agents.{agent}").Args
    declared = {name: bounds for name, _, bounds, _ in declared_ranges(args_type)}
    assert set(declared) == numeric_fields(args_type)
    assert [name for name, bounds in declared.items() if bounds is None] == [], f"numeric flags of {agent} without a range"


@pytest.mark.parametrize("agent", AGENTS)
def test_every_value_outside_its_range_is_refused_with_one_line_before_anything_exists(agent, tmp_path, monkeypatch, capsys):
    module = importlib.import_module(f"agents.{agent}")
    monkeypatch.setattr(module, "main", lambda args: sys.exit("accepted: the run would start"))  # a value let through
    checked = 0
    for flag, given, expected in refusals(module.Args, dataclasses.asdict(module.Args())):
        result = cli_in_process(
            agent, [flag, *given, "--env-id", ENV_OF[agent], "--runs-dir", str(tmp_path)], monkeypatch, capsys
        )
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert (result.returncode, lines) == (2, [expected]), (flag, given)
        checked += 1
    assert checked >= 50 and not any(tmp_path.iterdir())


def test_range_texts_name_their_bounds():
    assert [str(r) for r in (Range(gt=0), Range(ge=1), Range(ge=0, le=1), Range(gt=0, le=1), Range(ge=0, lt=1), Range())] == [
        "> 0",
        "at least 1",
        "in [0, 1]",
        "in (0, 1]",
        "in [0, 1)",
        "a finite number",
    ]
    assert 0.0 not in Range(gt=0) and 1.0 in Range(gt=0, le=1) and 1.0 not in Range(ge=0, lt=1) and -5.0 in Range()


def test_help_still_shows_the_docstrings_of_ranged_flags():
    result = run_script("agents/ppo.py", "--help")
    assert result.returncode == 0
    for flag, text in (
        ("--learning-rate FLOAT", "Adam learning rate"),
        ("--reset.layers INT", "layer resetting"),
        ("--clip.kappa FLOAT", "weight clipping"),
        ("--hidden-sizes [INT [INT ...]]", "hidden widths"),
    ):
        assert flag in result.stdout and text in result.stdout, flag


TINY = {
    "td3": ["--batch-size", "32", "--hidden-sizes", "32", "32", "--buffer-size", "1000", "--learning-starts", "50"],
    "sac_simba": [
        "--batch-size",
        "32",
        "--actor-width",
        "16",
        "--critic-width",
        "16",
        "--buffer-size",
        "1000",
        "--learning-starts",
        "50",
    ],
    "ddqn": ["--batch-size", "32", "--hidden-sizes", "32", "32", "--buffer-size", "1000", "--learning-starts", "50"],
    "ppo": ["--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16", "16"],
    "gtr": ["--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16", "16"],
}


@pytest.mark.parametrize("agent", AGENTS)
def test_layers_to_reset_beyond_the_network_are_refused_before_the_run_directory_exists(agent, tmp_path, monkeypatch, capsys):
    relu = ["--net.activation", "relu"] if agent in ("ppo", "gtr") else []
    argv = [
        "--env-id",
        ENV_OF[agent],
        "--reset.method",
        "layers",
        "--reset.layers",
        "99",
        *relu,
        *TINY[agent],
        "--total-timesteps",
        "64",
        "--eval-episodes",
        "1",
        "--threads",
        "1",
        "--no-progress",
        "--runs-dir",
        str(tmp_path),
    ]
    result = cli_in_process(agent, argv, monkeypatch, capsys)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert re.fullmatch(
        r"error: --reset\.layers must be in \[1, \d\] for this \w+ \(its weight layers, the heads counting as one\), got 99",
        lines[0],
    ), lines[0]
    assert "logging to" not in result.stdout and not any(tmp_path.iterdir())


def test_the_largest_seed_runs_and_the_layers_of_a_whole_network_may_reset(tmp_path):
    """Seeds derived from the largest --seed (+ sub-env, + the evaluation offset) exceed what numpy's RandomState takes;
    they are folded into its range. --reset.layers equal to the depth is a valid, whole-network layer reset."""
    result = run_script(
        "agents/td3.py",
        "--env-id",
        "Pendulum-v1",
        "--seed",
        str(SEED_MAX),
        "--num-envs",
        "2",
        "--reset.method",
        "layers",
        "--reset.layers",
        "3",
        "--reset.every",
        "20",
        *TINY["td3"],
        "--total-timesteps",
        "120",
        "--eval-episodes",
        "2",
        "--threads",
        "1",
        "--no-progress",
        "--runs-dir",
        str(tmp_path),
        "--run-name",
        "run",
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "summary.json").exists()


# ---- the commands' own numbers: every numeric option of every command declares its range as the agents' flags do
def command_settings():
    from commands import bench, compare, report, sweep
    from commands import eval as eval_command

    return [  # (the command line before the flags, its settings type)
        (["sweep", "--agent", "ppo", "--env-id", "CartPole-v1"], sweep.SweepArgs),
        (["compare"], compare.CompareArgs),
        (["report", "runs"], report.ReportArgs),
        (["bench", "ppo"], bench.BenchArgs),
        (["bench", "groups"], bench.GroupBenchArgs),
        (["bench", "profile"], bench.ProfileArgs),
        (["eval", "runs/x"], eval_command.EvalArgs),
    ]


@pytest.mark.parametrize(("argv", "settings"), command_settings(), ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_numeric_option_of_every_command_is_refused_outside_its_range(argv, settings, tmp_path, monkeypatch, capsys):
    from commands import cli

    declared = {name: bounds for name, _, bounds, _ in declared_ranges(settings)}
    assert set(declared) == numeric_fields(settings)
    assert [name for name, bounds in declared.items() if bounds is None] == [], f"numeric options of {argv[0]} without a range"
    monkeypatch.chdir(tmp_path)
    defaults = {}
    for field in dataclasses.fields(settings):
        if field.default is not dataclasses.MISSING:
            defaults[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            defaults[field.name] = dataclasses.asdict(field.default_factory())
    checked = 0
    for flag, given, expected in refusals(settings, defaults):
        capsys.readouterr()
        with pytest.raises(SystemExit) as stop:
            cli.main([*argv, flag, *given])
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert (stop.value.code, lines) == (2, [expected]), (flag, given)
        checked += 1
    assert checked >= 1 and not any(tmp_path.iterdir())


def test_the_automatic_group_size_help_shows_numbers_not_constant_names():
    from commands import sweep

    result = run_script("-m", "commands.cli", "sweep", "--help")
    help_text = " ".join(result.stdout.replace("│", " ").split())
    assert "AUTO_MEMBERS" not in help_text
    assert f"up to {sweep.AUTO_MEMBERS} on a CPU, up to {sweep.AUTO_MEMBERS_GPU} on a GPU" in help_text, help_text
