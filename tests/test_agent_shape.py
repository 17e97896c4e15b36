"""Every agent file has the shape docs/design.md shows ("The shape of an agent file"): `check`, `build` and `train`
at module level, `main` the two calls, no lambda defined while building or training, the loop short enough to read
as the paper's algorithm box, and storage given one named Transition per step."""

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

from cleanrl_plus.names import AGENTS

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = {"main": 15, "train": 60}


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


def _gradient_steps(agent: str) -> dict[str, list[str]]:
    """Each function of the agent file (methods too) that backpropagates: the gradient-step calls it makes, in order."""
    tree = ast.parse((ROOT / "agents" / f"{agent}.py").read_text())
    wanted = {"zero_grad", "backward", "clip_each_members_gradient", "step"}
    steps = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
        named = sorted(
            ((n.lineno, n.col_offset), n.func.id if isinstance(n.func, ast.Name) else n.func.attr)
            for n in calls
            if isinstance(n.func, (ast.Name, ast.Attribute))
        )
        order = [name for _, name in named if name in wanted]
        if "backward" in order:
            steps[node.name] = order
    return steps


# the networks each agent trains, one gradient step each (SAC: actor, temperature, critic)
TRAINED = {"ppo": 1, "ddqn": 1, "td3": 2, "sac_simba": 3}


@pytest.mark.parametrize("agent", [agent for agent in AGENTS if agent != "gtr"])  # GTR steps through PPO's update
def test_each_gradient_step_shows_zero_grad_backward_clip_and_step_in_the_agent_file(agent):
    """docs/design.md: an update reads zero_grad → backward → (per-member clip) → step in its agent's file, the remedies
    as named calls around it; an agent with --max-grad-norm clips between backward and step."""
    steps = _gradient_steps(agent)
    backwards = sum(order.count("backward") for order in steps.values())
    assert backwards == TRAINED[agent], f"agents/{agent}.py backpropagates {backwards} times, not once per network"
    source = (ROOT / "agents" / f"{agent}.py").read_text()
    clips = "max_grad_norm:" in source
    for name, order in steps.items():
        expected = (
            ["zero_grad", "backward", "clip_each_members_gradient", "step"] if clips else ["zero_grad", "backward", "step"]
        )
        repeats = len(order) // len(expected)  # SAC's update steps the actor, then the critic
        assert repeats and order == expected * repeats, f"agents/{agent}.py {name}: {order}, not {expected} repeated"


def test_no_module_below_the_agents_backpropagates():
    """The gradient step lives in the agent files: no module of the library or the remedies calls .backward()."""
    for folder in ("cleanrl_plus", "plasticity", "envs"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "backward"]
            assert not calls, f"{path.relative_to(ROOT)} calls backward() at lines {calls}"


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


MAX_FILE_LINES = 520
# issue 49 asks for every agent at most MAX_FILE_LINES long; these are not yet, and may only shrink
NOT_YET: dict[str, int] = {}  # every agent file is within MAX_FILE_LINES now


@pytest.mark.parametrize("agent", AGENTS)
def test_an_agent_file_is_short_enough_to_read_in_one_sitting(agent):
    lines = len((ROOT / "agents" / f"{agent}.py").read_text().splitlines())
    limit = NOT_YET.get(agent, MAX_FILE_LINES)
    assert lines <= limit, f"agents/{agent}.py is {lines} lines (at most {limit})"


def dict_keys(node: ast.AST) -> set[str]:
    """The keys a module-level value spells out: a {...} literal's string keys, dict(...)'s keywords, through `|`."""
    keys = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Dict):
            keys |= {key.value for key in inner.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)}
        elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "dict":
            keys |= {keyword.arg for keyword in inner.keywords if keyword.arg}
    return keys


@pytest.mark.parametrize("agent", AGENTS)
def test_no_agent_file_holds_a_recipe_dict(agent):
    """Per-environment defaults are data in cleanrl_plus/recipes/*.toml, not module-level dicts of flags."""
    module = importlib.import_module(f"agents.{agent}")
    fields = {field.name for field in dataclasses.fields(module.Args)}
    tree = ast.parse((ROOT / "agents" / f"{agent}.py").read_text())
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            flags = dict_keys(node.value) & fields
            assert len(flags) < 2, f"agents/{agent}.py line {node.lineno} holds a dict of flags {sorted(flags)}"


@pytest.mark.parametrize("agent", AGENTS)
def test_an_agents_parts_are_named_alike_and_built_by_keyword(agent):
    """issue 49: every agent's parts class is `<Agent>Parts`, and `build` constructs it with keywords only (positional
    construction across inherited dataclasses ties each value to a field by its position in three classes)."""
    tree = ast.parse((ROOT / "agents" / f"{agent}.py").read_text())
    classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef) and node.name.endswith("Parts")]
    assert agent == "gtr" or len(classes) == 1, f"agents/{agent}.py defines {classes or 'no'} parts class"
    built = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.endswith("Parts")
    ]
    positional = [node.lineno for node in built if node.args]
    assert not positional, f"agents/{agent}.py builds its parts positionally at lines {positional}"
