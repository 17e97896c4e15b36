"""The layers (docs/design.md): agents and commands → plasticity → core (cleanrl_plus/) → envs. No import runs upward:
each layer's files, read with `ast`, import nothing from a layer above it, at module level or inside a function, and
load nothing above by name (importlib.import_module, __import__): the commands load the agents by name."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from cleanrl_plus.names import AGENTS
from commands.agent_modules import agent_module

REPO = Path(__file__).resolve().parents[1]
ABOVE = {  # layer → the packages it must not import
    "envs": {"cleanrl_plus", "plasticity", "agents", "commands"},
    "cleanrl_plus": {"plasticity", "agents", "commands"},
    "plasticity": {"agents", "commands"},
    "agents": {"commands"},  # the commands run the agents, never the other way round
}


def imported_packages(source: str) -> list[tuple[int, str]]:
    """(line, top-level package) of every import in `source`, and of every module loaded by a literal name (a string or
    an f-string's leading text) through importlib.import_module or __import__; relative imports stay in their package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
        elif isinstance(node, ast.Call) and node.args and _loader(node.func):
            name = node.args[0]
            if isinstance(name, ast.JoinedStr) and name.values:
                name = name.values[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found.append((node.lineno, name.value.split(".")[0]))
    return found


def _loader(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__")
    )


def test_imported_packages_sees_imports_anywhere_and_modules_loaded_by_name():
    source = (
        "import os.path\nfrom agents.td3 import Args\nfrom . import sibling\n"
        "def f(name):\n    import commands.cli\n    importlib.import_module(f'plasticity.{name}')\n    __import__('envs')\n"
    )
    assert imported_packages(source) == [(1, "os"), (2, "agents"), (5, "commands"), (6, "plasticity"), (7, "envs")]


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_no_import_runs_upward(layer):
    upward = [
        f"{path.relative_to(REPO)}:{line} imports {package}"
        for path in sorted((REPO / layer).rglob("*.py"))
        for line, package in imported_packages(path.read_text())
        if package in ABOVE[layer]
    ]
    assert not upward, f"{layer}/ sits below {sorted(ABOVE[layer])}: " + "; ".join(upward)


def test_the_errors_every_layer_raises_import_without_torch():
    """envs/errors.py lies in the envs package, whose __init__ imports torch and the backends only where used: the
    commands that need no torch (cli, report) still start without it."""
    check = "import sys, cleanrl_plus.errors, cleanrl_plus.ranges; print(sorted({'torch', 'gymnasium'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_the_commands_load_each_agent_by_its_name_and_nothing_else():
    assert [agent_module(name).__name__ for name in AGENTS] == [f"agents.{name}" for name in AGENTS]
    with pytest.raises(KeyError):
        agent_module("__init__")


def test_every_name_has_one_import_path():
    """One module per name (issue 49): UserError, did_you_mean and the named ranges are imported from the envs/ module
    that defines them, in every file of the repository; no module re-exports them."""
    ranges = ("SEED_MAX", "AnyFinite", "AtLeastOne", "Count", "Fraction", "NonNegative", "Positive", "Range", "Seed")
    homes = {"UserError": "envs.errors", "did_you_mean": "envs.errors"} | {name: "envs.ranges" for name in ranges}
    elsewhere = []
    for path in sorted(REPO.rglob("*.py")):
        if ".venv" in path.parts or "runs" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                elsewhere += [
                    f"{path.relative_to(REPO)}:{node.lineno} imports {alias.name} from {node.module}"
                    for alias in node.names
                    if alias.name in homes
                    and node.module != homes[alias.name]
                    and node.module.split(".")[0] in ("cleanrl_plus", "plasticity", "agents", "commands", "envs")
                ]
    assert not elsewhere, f"{elsewhere[:5]} — import each from {sorted(set(homes.values()))}"
