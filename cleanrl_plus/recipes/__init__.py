"""Recipes: the defaults an agent takes for an env id, as data. Each `<agent>-<setting>.toml` here opens with comments
naming its sources (repository and file, paper), then says where it applies and what it sets:

    [applies]
    agents = ["ppo", "gtr"]                   the agents (agents/<name>.py) that take it
    base_id_prefix = "ALE/"                   the id starts with this; a continual id's env does (envs.continual)
    id_prefix = "continual:cchain-"           the id itself starts with this
    base_id_not_prefix = ["ALE/", "MinAtar/"] neither the id nor a continual id's env starts with any of these

    [values]                                  flag = value, as the Args field is named; a nested settings
    hidden_sizes = [256, 256]                 group (--net.*) as a sub-table [values.net]

At most one recipe matches an (agent, env id); none leaves the Args field defaults. Flags given on the command line
override a recipe's values (cleanrl_plus/config.py, `RunArgs.defaults_for`).
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from envs.continual import base_env_id

FOLDER = Path(__file__).resolve().parent
MATCHERS = ("base_id_prefix", "id_prefix", "base_id_not_prefix")


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    """the file's name without .toml (ppo-atari)"""
    path: Path
    values: dict[str, Any]
    """flag → value, of the Args field's type (tuples, nested settings dataclasses)"""
    flags: tuple[str, ...]
    """the fields the file sets, a nested one dotted (net.activation): what --help marks as the recipe's"""

    @property
    def shown(self) -> str:
        """The file as the repository names it, wherever the package is installed."""
        return f"cleanrl_plus/recipes/{self.path.name}"


def applies(applies_to: dict[str, Any], agent: str, env_id: str) -> bool:
    """Whether a recipe's [applies] table takes in `agent` on `env_id` (every matcher it names must hold)."""
    base = base_env_id(env_id)  # a continual id takes the recipe of the env it is built on
    return (
        agent in applies_to["agents"]
        and base.startswith(applies_to.get("base_id_prefix", ""))
        and env_id.startswith(applies_to.get("id_prefix", ""))
        and not base.startswith(tuple(applies_to.get("base_id_not_prefix", ())))
    )


def find(agent: str, env_id: str, args_type: type, folder: Path = FOLDER) -> Recipe | None:
    """The recipe of `agent` for `env_id` with its values as `args_type`'s fields take them, or None."""
    matching = []
    for path in sorted(folder.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        if applies(data["applies"], agent, env_id):
            matching.append((path, data))
    if len(matching) > 1:  # two files claiming one id would make the defaults depend on file order
        raise ValueError(f"recipes {[path.name for path, _ in matching]} all apply to {agent} on {env_id}")
    if not matching:
        return None
    path, data = matching[0]
    return Recipe(path.stem, path, as_fields(args_type, data["values"], path), tuple(dotted(data["values"])))


def dotted(values: dict[str, Any], prefix: str = "") -> list[str]:
    """The names a table of values sets, a sub-table's dotted (net.activation)."""
    names = []
    for name, value in values.items():
        names += dotted(value, f"{prefix}{name}.") if isinstance(value, dict) else [prefix + name]
    return names


def as_fields(settings_type: type, values: dict[str, Any], path: Path) -> dict[str, Any]:
    """TOML values as the fields of `settings_type` hold them: lists become tuples, a float field's integer a float,
    a sub-table the field's default settings dataclass with those values replaced."""
    fields = {field.name: field for field in dataclasses.fields(settings_type)}
    hints = typing.get_type_hints(settings_type)
    converted = {}
    for name, value in values.items():
        if name not in fields:
            raise ValueError(f"{path.name}: {settings_type.__name__} has no field {name!r}")
        hint = _plain(hints[name])
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            default = fields[name].default_factory()
            value = dataclasses.replace(default, **as_fields(hint, value, path))
        elif isinstance(value, list):
            value = tuple(value)
        elif hint is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        converted[name] = value
    return converted


def _plain(hint: Any) -> Any:
    """The type under `| None` (typing.get_type_hints has taken Annotated's off)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint
