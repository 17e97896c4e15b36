"""Every agent and every command refuses a mistake on its command line in one line on stderr that starts with
`error:` and names the fix, exit code 2, never tyro's multi-line box nor a traceback (docs/reliability.md): a value
of the wrong type, an unknown flag (with the closest flag), a remedy's flag on an agent that does not take it, a
number outside its range."""

from __future__ import annotations

import re

import pytest
from conftest import cli_in_process, run_script

from cleanrl_plus.names import AGENTS
from commands import cli

NAMES_A_FIX = re.compile(r"--help|did you mean|one of|must be|remedies|pip install")


def assert_one_line(result, expected: str | None = None) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr and "╭" not in result.stderr
    assert NAMES_A_FIX.search(lines[0]), lines[0]
    if expected is not None:
        assert lines[0] == f"error: {expected}"
    return lines[0]


def command_in_process(argv: list[str], capsys):
    import types

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    output = capsys.readouterr()
    return types.SimpleNamespace(returncode=exit_info.value.code, stdout=output.out, stderr=output.err)


BAD_VALUES = [
    ["--seeds", "1", "2.5"],
    ["--num-envs", "abc"],
    ["--total-timesteps=1.5"],
    ["--device", "gpu"],
    ["--num-envs"],
    ["--continual.num-tasks", "x"],  # read early (the continual defaults) by a parser of its own
]


@pytest.mark.parametrize("agent", AGENTS)
def test_every_agent_refuses_a_bad_value_in_one_line(agent, tmp_path, monkeypatch, capsys):
    for bad in BAD_VALUES:
        result = cli_in_process(agent, [*bad, "--runs-dir", str(tmp_path)], monkeypatch, capsys)
        line = assert_one_line(result)
        assert bad[0].split("=")[0] in line, line
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("agent", AGENTS)
def test_every_agent_refuses_an_unknown_flag_in_one_line_with_the_closest_flag(agent, tmp_path, monkeypatch, capsys):
    result = cli_in_process(agent, ["--learning-rat", "0.1", "--runs-dir", str(tmp_path)], monkeypatch, capsys)
    assert_one_line(result, "unknown flag --learning-rat — did you mean '--learning-rate'?")
    result = cli_in_process(agent, ["--no-such-flag", "--runs-dir", str(tmp_path)], monkeypatch, capsys)
    assert_one_line(result, f"unknown flag --no-such-flag — {agent}.py --help lists the flags")
    result = cli_in_process(agent, ["--reset.metod", "shrink-perturb"], monkeypatch, capsys)
    assert_one_line(result, "unknown flag --reset.metod — did you mean '--reset.method'?")
    result = cli_in_process(agent, ["--eval-every", "5", "7"], monkeypatch, capsys)
    assert_one_line(result, f"unexpected argument '7' — {agent}.py --help lists the flags and what each takes")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("agent", "flag"), [("gtr", "--swd.enabled"), ("ddqn", "--least.enabled")])
def test_a_remedy_flag_an_agent_does_not_take_is_one_line_pointing_at_the_remedies(agent, flag, monkeypatch, capsys):
    result = cli_in_process(agent, [flag], monkeypatch, capsys)
    group = flag[2:].split(".")[0]
    line = assert_one_line(result)
    assert line.startswith(f"error: {agent}.py has no --{group}.* flags — `cleanrl-plus remedies`"), line


def test_a_misspelt_remedy_group_gets_the_closest_group(monkeypatch, capsys):
    result = cli_in_process("ppo", ["--rset.method", "layers"], monkeypatch, capsys)
    assert_one_line(result, "ppo.py has no --rset.* flags — did you mean --reset.*?")


# each command: (its argv before the flags, a numeric flag, whose value is then "abc")
COMMANDS = [
    (["sweep", "--agent", "ppo", "--env-id", "CartPole-v1"], "--members-per-process"),
    (["compare"], "--seeds"),
    (["report", "runs"], "--reps"),
    (["bench", "ppo"], "--steps"),
    (["bench", "groups"], "--workers"),
    (["bench", "profile"], "--rows"),
    (["eval", "runs/x"], "--episodes"),
]


def test_the_walk_covers_every_command():
    assert {argv[0] for argv, _ in COMMANDS} | {"remedies"} == set(cli.COMMANDS)


@pytest.mark.parametrize(("argv", "flag"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_every_command_refuses_a_bad_value_and_an_unknown_flag_in_one_line(argv, flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    prog = "cleanrl-plus " + " ".join(argv[:2] if argv[:2] in (["bench", "groups"], ["bench", "profile"]) else argv[:1])
    result = command_in_process([*argv, flag, "abc"], capsys)
    assert_one_line(result)
    assert f"{flag} abc is not a valid value — {flag} takes INT ({prog} --help)" in result.stderr
    result = command_in_process([*argv, "--no-such-flag"], capsys)
    assert_one_line(result, f"unknown flag --no-such-flag — {prog} --help lists the flags")
    result = command_in_process([*argv, "--wokers", "2"], capsys)
    assert_one_line(result)
    assert "unknown flag --wokers" in result.stderr
    assert not any(tmp_path.iterdir())


def test_remedies_takes_no_flags_and_says_so_in_one_line(capsys):
    assert_one_line(command_in_process(["remedies", "--all"], capsys))


@pytest.mark.parametrize("command", ["profile", "groups"])
def test_bench_profile_and_groups_name_an_unknown_agent_in_one_line(command, capsys):
    result = command_in_process(["bench", command, "--agent", "foo"], capsys)
    assert_one_line(result, "unknown agent 'foo' — choose one of td3, sac_simba, ddqn, ppo, gtr")
    result = command_in_process(["bench", command, "--agent", "sac-simba"], capsys)
    assert_one_line(result, "unknown agent 'sac-simba' — did you mean 'sac_simba'?")


def test_a_misspelt_choice_is_one_line_with_the_closest_choice(capsys):
    result = command_in_process(["report", "runs", "--metric", "evals"], capsys)
    assert_one_line(result, "--metric 'evals' is not one of eval, train, average-performance — did you mean 'eval'?")
    result = command_in_process(["bench", "ppp"], capsys)
    assert_one_line(result, "agent 'ppp' is not one of td3, sac_simba, ddqn, ppo, gtr, env — did you mean 'ppo'?")


@pytest.mark.parametrize(
    "argv",
    [
        ["agents/ppo.py", "--seeds", "1", "2.5"],
        ["agents/gtr.py", "--swd.enabled"],
        ["agents/ddqn.py", "--least.enabled"],
        ["-m", "commands.cli", "sweep", "--agent", "ppo", "--env-id", "CartPole-v1", "--members-per-process", "abc"],
    ],
    ids=["ppo seeds", "gtr swd", "ddqn least", "sweep members"],
)
def test_the_reported_commands_print_one_line(argv, tmp_path):
    """The commands of issue #38, as a user types them (a real process, its real stderr)."""
    result = run_script(*argv, "--runs-dir", str(tmp_path), timeout=120)
    assert_one_line(result)


def test_an_env_whose_package_is_missing_is_one_line_naming_the_extra(tmp_path):
    """LunarLander without Box2D (hidden from the import system, as on a machine without the box2d extra): gymnasium's
    DependencyNotInstalled becomes one line naming `.[box2d]`, and no run directory is left."""
    code = (
        "import sys; sys.modules['Box2D'] = None; sys.argv = ['ppo.py', *sys.argv[1:]]; "
        "from agents import ppo; from cleanrl_plus.run import cli_main; cli_main(ppo.main, ppo.Args)"
    )
    runs = tmp_path / "runs"
    result = run_script(
        "-c", code, "--env-id", "continual:cchain-lunarlander", "--total-timesteps", "800", "--runs-dir", str(runs)
    )
    line = assert_one_line(result)
    assert "LunarLander-v3 needs Box2D" in line and 'pip install -e ".[box2d]"' in line, line
    assert not runs.exists() or not any(runs.iterdir())
