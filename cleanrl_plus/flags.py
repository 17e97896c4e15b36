"""Command lines parsed into settings dataclasses (tyro), every mistake refused in one line that names the fix.

tyro reports a flag it cannot parse in a box of many lines (the message, the flag's help, a pointer to --help).
`parse_flags` keeps tyro as the parser and turns its box into one UserError (exit code 2, `error: …` on stderr):

    error: --seeds 1 2.5 is not a valid value — --seeds takes [INT [INT ...]] (agents/ppo.py --help)
    error: unknown flag --learning-rat — did you mean '--learning-rate'?
    error: agents/gtr.py has no --swd.* flags — `cleanrl-plus remedies` lists the remedies each agent takes

and, for the commands' own settings, refuses a number outside its declared range (cleanrl_plus/ranges.py) or a
non-finite one, as the agents' flags are (cleanrl_plus/config.py's validate_args).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import math
import os
import re
import sys
import typing
from functools import partial
from typing import Any, Iterator, TypeVar

from cleanrl_plus.ranges import check_ranges
from envs.errors import UserError, did_you_mean

SettingsT = TypeVar("SettingsT")
_RULE = re.compile(r"^[─━\-\s]+$")  # tyro draws its rules with ─, or with - when output is not UTF-8


def parse_flags(
    settings_type: type[SettingsT],
    argv: list[str],
    *,
    prog: str | None = None,
    default: SettingsT | None = None,
    description: str | None = None,
    check_numbers: bool = True,
    unknown_group_hint: str = "",
    sources: dict[str, str] | None = None,
) -> SettingsT:
    """tyro.cli with its errors as one-line UserErrors; `--help` prints tyro's help as usual, with `(default: 2.5e-4,
    from FILE)` for each flag `sources` names (flag as dotted field name → FILE). With `check_numbers`, a number
    outside its declared range, or not finite, is refused too. `unknown_group_hint` follows the message for a flag of a
    settings group the type does not have (`--swd.enabled` for an agent without SWD)."""
    import tyro

    argv = list(argv)
    prog = prog or sys.argv[0] or "cleanrl-plus"
    options = dict(args=argv, prog=prog, default=default, description=description)
    if "-h" in argv or "--help" in argv:
        if sources and default is not None:
            settings_type, options["default"] = with_sources(settings_type, default, sources)
        return tyro.cli(settings_type, **options)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed), _wide_terminal():
            settings = tyro.cli(settings_type, **options)
    except SystemExit as stop:
        if not stop.code:
            sys.stdout.write(printed.getvalue())
            raise
        raise UserError(one_line(printed.getvalue(), argv, settings_type, prog, unknown_group_hint)) from None
    if check_numbers:
        check_finite(settings)
        check_ranges(settings)
    return settings


def with_sources(settings_type: type, default: Any, sources: dict[str, str]) -> tuple[type, Any]:
    """For --help only: a subclass of `settings_type` whose fields named in `sources` (nested ones dotted) print where
    their default comes from after it, and `default` as an instance of it. The field docstrings stay the base class's
    (tyro reads them along the class's bases)."""
    import tyro

    hints = typing.get_type_hints(settings_type, include_extras=True)
    redefined, values = [], {}
    for field in dataclasses.fields(settings_type):
        value = getattr(default, field.name)
        inner = {name.split(".", 1)[1]: where for name, where in sources.items() if name.startswith(field.name + ".")}
        if inner and dataclasses.is_dataclass(value):
            hint, value = with_sources(type(value), value, inner)
        elif field.name in sources:
            hint = typing.Annotated[hints[field.name], tyro.conf.arg(help_behavior_hint=partial(_from, sources[field.name]))]
        else:
            values[field.name] = value
            continue
        redefined.append((field.name, hint, dataclasses.field(default_factory=partial(_same, value))))
        values[field.name] = value
    help_type = dataclasses.make_dataclass(settings_type.__name__, redefined, bases=(settings_type,))
    return help_type, help_type(**values)


def _from(source: str, default_label: str) -> str:
    return f"(default: {default_label}, from {source})"


def _same(value: Any) -> Any:
    return value


@contextlib.contextmanager
def _wide_terminal() -> Iterator[None]:
    """tyro wraps its messages at the terminal's width; wide lines keep a message whole."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "1000"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def check_finite(settings: Any, prefix: str = "") -> None:
    """One-line UserError for a float flag that is NaN or infinite (every range assumes a finite number)."""
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if dataclasses.is_dataclass(value):
            check_finite(value, f"{prefix}{field.name}.")
            continue
        for number in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(number, float) and not math.isfinite(number):
                raise UserError(f"--{(prefix + field.name).replace('_', '-')} must be a finite number, got {number}")


def flag_names(settings_type: type, prefix: str = "") -> Iterator[str]:
    """Every flag of a settings dataclass as tyro spells it (`--net.activation`, `--no-progress`), nested ones included."""
    hints = typing.get_type_hints(settings_type)
    for field in dataclasses.fields(settings_type):
        hint, name = hints[field.name], prefix + field.name.replace("_", "-")
        if dataclasses.is_dataclass(hint):
            yield from flag_names(hint, name + ".")
            continue
        yield "--" + name
        if hint is bool:
            dot = name.rfind(".") + 1
            yield f"--{name[:dot]}no-{name[dot:]}"


def groups_of(settings_type: type) -> set[str]:
    """The names of a settings dataclass's nested groups (`net`, `reset`, `swd`), as its dotted flags start."""
    return {flag[2:].split(".")[0] for flag in flag_names(settings_type) if "." in flag}


def one_line(box: str, argv: list[str], settings_type: type, prog: str, unknown_group_hint: str = "") -> str:
    """The message of tyro's error box, as one line naming the fix."""
    title, paragraphs = _read_box(box)
    text = " ".join(paragraphs[0]) if paragraphs else title
    see = f"({prog} --help)"
    if title.startswith("Unrecognized") or text.startswith("Unrecognized"):
        given = text.split(":", 1)[1] if ":" in text else text
        unknown = [token.strip() for token in given.split(",") if token.strip().startswith("-")]
        return _unknown(unknown or [given.strip()], settings_type, prog, unknown_group_hint)
    parsing = re.match(r"Error parsing (\S+?):", text)
    if parsing:
        flag = parsing.group(1)
        usage = next((p[1] for p in paragraphs[1:] if len(p) > 1 and p[0] == "Argument helptext:"), "")
        takes = usage.removeprefix(flag).strip() if usage.startswith(flag) else ""
        values = _values_of(flag, argv)
        got = f"{flag} {' '.join(values)}" if values else flag
        return f"{got} is not a valid value" + (f" — {flag} takes {takes}" if takes else "") + f" {see}"
    choice = re.match(r"invalid choice '(.*)' for argument '(.*?)'\. Expected one of \((.*)\)\.", text)
    if choice:
        value, argument, choices = choice.groups()
        names = [c.strip().strip("'\"") for c in choices.split(",") if c.strip()]
        return f"{argument} '{value}' is not one of {', '.join(names)}{did_you_mean(value, names)}"
    missing = re.match(r"Missing value for argument '(.*?)'", text)
    if missing:
        return f"{missing.group(1)} needs a value {see}"
    if title.startswith("Required") or text.startswith("Missing from"):
        names = [line.strip() for line in (paragraphs[0] if paragraphs else [])[1:2]]
        return f"{prog} needs {' '.join(names) or 'more arguments'} {see}"
    return f"{text.rstrip('.')} {see}"


def _read_box(box: str) -> tuple[str, list[list[str]]]:
    """tyro's box → its title and the paragraphs between its rules (each a list of stripped lines)."""
    lines = [line.strip().strip("│|╭╮╰╯├┤").strip() for line in box.splitlines()]
    lines = [line for line in lines if line]
    title = lines[0].strip("─ ").strip() if lines else "error"
    paragraphs: list[list[str]] = [[]]
    for line in lines[1:]:
        if _RULE.match(line):
            paragraphs.append([])
        else:
            paragraphs[-1].append(line)
    return title, [p for p in paragraphs if p]


def _values_of(flag: str, argv: list[str]) -> list[str]:
    """The values given to `flag` on the command line (`--seeds 1 2.5` → ['1', '2.5']; `--x=y` → ['y'])."""
    for i, token in enumerate(argv):
        if token.startswith(flag + "="):
            return [token.split("=", 1)[1]]
        if token == flag:
            values = []
            for value in argv[i + 1 :]:
                if value.startswith("--"):
                    break
                values.append(value)
            return values
    return []


def _unknown(unknown: list[str], settings_type: type, prog: str, unknown_group_hint: str) -> str:
    flags = sorted(flag_names(settings_type))
    first = unknown[0].split("=", 1)[0]
    if not first.startswith("-"):
        return f"unexpected argument '{first}' — {prog} --help lists the flags and what each takes"
    if first.startswith("--") and "." in first:
        group = first[2:].split(".")[0]
        groups = groups_of(settings_type)
        # a misspelt group (rset) is close to one of the type's; a remedy the agent does not take (least) need not be
        if group not in groups:
            close = difflib.get_close_matches(group, sorted(groups), n=1, cutoff=0.8)
            hint = f" — did you mean --{close[0]}.*?" if close else unknown_group_hint or f" ({prog} --help)"
            return f"{prog} has no --{group}.* flags{hint}"
    suggestion = did_you_mean(first, flags)
    what = f"unknown flag {first}" if len(unknown) == 1 else f"unknown flags {', '.join(unknown)}"
    return f"{what}{suggestion or f' — {prog} --help lists the flags'}"
