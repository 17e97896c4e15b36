"""Every agent file has the shape docs/design.md shows ("The shape of an agent file"): `check`, `build` and `train`
at module level, `main` the two calls, no lambda defined while building or training, the loop short enough to read
as the paper's algorithm box, and storage given one named Transition per step."""

import ast
from pathlib import Path

import pytest

from cleanrl_plus.registry import AGENTS

ROOT = Path(__file__).resolve().parents[1]
# train: 60 lines, and 6 more for PPO's rollout Transition, spelled out one named field a line (issue 49)
MAX_LINES = {"main": 15, "train": 66}


def functions(agent: str) -> dict[str, ast.FunctionDef]:
    tree = ast.parse((ROOT / "agents" / f"{agent}.py").read_text())
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("agent", AGENTS)
def test_an_agent_is_check_build_train_and_main_the_two_calls(agent):
    found = functions(agent)
    assert {"check", "build", "main"} <= set(found), f"agents/{agent}.py lacks { ({'check', 'build', 'main'} - set(found)) }"
    trains = "train" in found or agent == "gtr"  # GTR is PPO's loop with its own policy-loss term
    assert trains, f"agents/{agent}.py has no train"
    for name, limit in MAX_LINES.items():
        if name in found:
            node = found[name]
            body_lines = node.end_lineno - node.body[0].lineno + 1
            assert body_lines <= limit, f"agents/{agent}.py {name} is {body_lines} lines (at most {limit})"
    for name in ("build", "train"):
        if name in found:
            lambdas = [n.lineno for n in ast.walk(found[name]) if isinstance(n, ast.Lambda)]
            assert not lambdas, f"agents/{agent}.py defines lambdas in {name} at lines {lambdas}"
    calls = {
        n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in ast.walk(found["main"]) if isinstance(n, ast.Call)
    }
    assert "build" in calls and "train" in calls, f"agents/{agent}.py main does not call build and train: {sorted(calls)}"


def test_storage_is_given_one_named_transition_not_positional_tensors():
    """`storage.add(t, transition)` and `replay.add(transition)`: a call of `.add` with more positional arguments (or a
    `*` that hides how many) could pass terminated for truncated, or s' for s, and no shape check would notice."""
    positional = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for folder in ("agents", "cleanrl_plus", "plasticity")
        for path in sorted((ROOT / folder).glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add"
        if len(node.args) > 2 or any(isinstance(arg, ast.Starred) for arg in node.args)
    ]
    assert not positional, f"an add( call passes the step's fields positionally: {positional}"
