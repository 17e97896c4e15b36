"""The remedy catalogue: every remedy, its paper and flags, and which agents it applies to (and why
not elsewhere).

`REMEDIES` is the one place applicability is declared: `cleanrl-plus remedies`
(commands/remedies.py) prints the agent × remedy matrix from it, docs/remedies/index.md is checked
against it by a test, and `check(agent, args)` turns an inapplicable or conflicting choice into a
one-line UserError at start-up, before any run directory exists.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from cleanrl_plus.names import AGENTS
from envs.errors import UserError

ON_POLICY = ("ppo", "gtr")
SPEED_FLAGS = ("compile", "cudagraphs")  # cleanrl_plus/speed.py


@dataclasses.dataclass(frozen=True)
class Remedy:
    name: str
    family: str  # resets, regularisers, architecture, optimisers, replay/other
    paper: str
    flags: str  # how to switch it on
    is_on: Callable[[Any], bool]
    # agent → why it does not apply
    not_for: dict[str, str] = dataclasses.field(default_factory=dict)
    # speed flag (compile, cudagraphs) → why it cannot run with it
    not_with: dict[str, str] = dataclasses.field(default_factory=dict)
    # why it cannot act on each member of a group on its own (--seeds; cleanrl_plus.members)
    not_in_groups: str = ""

    def applies_to(self, agent: str) -> bool:
        return agent not in self.not_for


def _get(args: Any, path: str, default: Any = None) -> Any:
    for part in path.split("."):
        args = getattr(args, part, default)
        if args is default:
            return default
    return args


def _reset(method: str) -> Callable[[Any], bool]:
    return lambda args: _get(args, "reset.method") == method


def _flag(path: str) -> Callable[[Any], bool]:
    return lambda args: bool(_get(args, path, False))


_NO_REPLAY = {agent: "on-policy: there is no replay buffer to sample from" for agent in ON_POLICY}
_CIR_ONLY = {
    "ddqn": "CIR's torso and convex min/max target are defined for twin-critic actor-critics",
    **{
        agent: "CIR's torso and convex min/max target are defined for twin-critic actor-critics"
        for agent in ON_POLICY
    },
}

REMEDIES: tuple[Remedy, ...] = (
    Remedy(
        "full reset",
        "resets",
        "Nikishin et al. 2022, The Primacy Bias in Deep RL",
        "--reset.method full",
        _reset("full"),
    ),
    Remedy(
        "shrink & perturb",
        "resets",
        "Ash & Adams 2020, Warm-starting neural network training",
        "--reset.method shrink-perturb",
        _reset("shrink-perturb"),
    ),
    Remedy(
        "layer resetting",
        "resets",
        "Nikishin et al. 2022, The Primacy Bias in Deep RL",
        "--reset.method layers --reset.layers K",
        _reset("layers"),
    ),
    Remedy(
        "ReDo",
        "resets",
        "Sokar et al. 2023, The Dormant Neuron Phenomenon in Deep RL",
        "--reset.method redo",
        _reset("redo"),
    ),
    Remedy(
        "ReGraMa",
        "resets",
        "Liu et al. 2025, Measure gradients not activations!",
        "--reset.method regrama",
        _reset("regrama"),
    ),
    Remedy(
        "plasticity injection",
        "resets",
        "Nikishin et al. 2023, Deep RL with plasticity injection",
        "--reset.method inject",
        _reset("inject"),
        {"gtr": "GTR's anchor snapshots cannot follow the policy's change of structure"},
    ),
    Remedy(
        "continual backprop (CBP)",
        "resets",
        "Dohare et al. 2024, Loss of plasticity in deep continual learning",
        "--reset.method cbp",
        _reset("cbp"),
        not_with={
            "cudagraphs": (
                "CBP's unit statistics are summed by forward hooks that count samples on the host, "
                "and a replayed graph runs no Python"
            )
        },
    ),
    Remedy(
        "LayerNorm",
        "architecture",
        "Lyle et al. 2024, Disentangling the causes of plasticity loss",
        "--net.norm layer",
        lambda args: _get(args, "net.norm") == "layer",
    ),
    Remedy(
        "Normalize-and-Project (NaP)",
        "architecture",
        "Lyle et al. 2024, Normalization and effective learning rates in RL",
        "--nap.enabled",
        _flag("nap.enabled"),
    ),
    Remedy(
        "CReLU",
        "architecture",
        "Abbas et al. 2023, Loss of plasticity in continual deep RL",
        "--net.activation crelu",
        lambda args: _get(args, "net.activation") == "crelu",
    ),
    Remedy(
        "deep Fourier features",
        "architecture",
        "Lewandowski et al. 2024, Plastic learning with deep Fourier features",
        "--net.activation fourier",
        lambda args: _get(args, "net.activation") == "fourier",
    ),
    Remedy(
        "CIR",
        "architecture",
        "Lyu et al. 2026, TD learning with constrained initial representations",
        "--cir.critic",
        _flag("cir.critic"),
        _CIR_ONLY,
    ),
    Remedy("L2", "regularisers", "studied in Lyle et al. 2024", "--reg.l2 λ", _flag("reg.l2")),
    Remedy(
        "regenerative L2-init",
        "regularisers",
        "Kumar, Marklund, Van Roy 2024, Regenerative regularization",
        "--reg.l2-init λ",
        _flag("reg.l2_init"),
    ),
    Remedy(
        "Parseval",
        "regularisers",
        "Chung et al. 2024, Parseval regularization for continual RL",
        "--reg.parseval λ --reg.parseval-scale s",
        _flag("reg.parseval"),
    ),
    Remedy(
        "weight clipping",
        "regularisers",
        "Elsayed et al. 2024, Weight clipping for deep continual and RL",
        "--clip.kappa κ",
        _flag("clip.kappa"),
    ),
    Remedy(
        "C-CHAIN",
        "regularisers",
        "Tang et al. 2025, Mitigating plasticity loss in continual RL by reducing churn",
        "--cchain.enabled",
        _flag("cchain.enabled"),
    ),
    Remedy(
        "TRAC",
        "optimisers",
        "Muppidi, Zhang, Yang 2024, Fast TRAC",
        "--optim.trac",
        _flag("optim.trac"),
    ),
    Remedy(
        "Kron (PSGD)",
        "optimisers",
        "Li 2018, Preconditioned SGD (heavyball.PSGDKron)",
        "--optim.name kron",
        lambda args: _get(args, "optim.name") == "kron",
        not_with={
            flag: (
                "heavyball's PSGD-Kron step keeps Python-side state and compiles itself its own way"
            )
            for flag in SPEED_FLAGS
        },
        not_in_groups=(
            "heavyball's preconditioner treats each parameter tensor as one matrix, so it would "
            "mix the members stacked in it"
        ),
    ),
    Remedy(
        "SWD",
        "replay/other",
        "Wu et al. 2026, Sample Weight Decay for mitigating plasticity loss",
        "--swd.enabled",
        _flag("swd.enabled"),
        _NO_REPLAY,
    ),
    Remedy(
        "LEAST",
        "replay/other",
        "Liu et al. 2025, The courage to stop (early episode stops)",
        "--least.enabled",
        _flag("least.enabled"),
        {
            "ddqn": "not wired: LEAST's stopping rule is implemented for the actor-critics only",
            **{agent: "LEAST needs a Q function to judge episodes" for agent in ON_POLICY},
        },
    ),
)

# pairs that cannot be on together, with the reason (checked for every agent)
_UNIT_RECYCLERS = {
    "ReDo": "recycles dormant units",
    "continual backprop (CBP)": "replaces units",
    "ReGraMa": "recycles units",
}
_DOUBLING = ("CReLU", "deep Fourier features")


def conflicts(on: set[str], oracle: bool = False) -> list[str]:
    problems = []
    for recycler, what in _UNIT_RECYCLERS.items():
        for activation in _DOUBLING:
            if recycler in on and activation in on:
                problems.append(
                    f"{recycler} {what} one-to-one, but {activation} gives each unit two features "
                    "(CReLU units are never dormant; Fourier units never silent) — drop "
                    "--net.activation or pick another --reset.method"
                )
    if "CIR" in on and on & {"LayerNorm", *_DOUBLING}:
        problems.append(
            "CIR's critic torso is fixed by its paper (its own LayerNorms, ReLU) — drop "
            "--net.norm/--net.activation or --cir.critic"
        )
    if "plasticity injection" in on and oracle:
        problems.append(
            "--continual.oracle gives a fresh agent at every switch, but plasticity injection "
            "changes the network's structure once — drop one of them (the oracle is the "
            "reference to compare injection against)"
        )
    if "Kron (PSGD)" in on and any(r.family == "resets" and r.name in on for r in REMEDIES):
        problems.append(
            "the reset family edits Adam's per-parameter state, which Kron does not keep — use "
            "--optim.name adam with --reset.method"
        )
    return problems


def active(args: Any) -> set[str]:
    return {remedy.name for remedy in REMEDIES if remedy.is_on(args)}


# reset methods that need something of the network's units: ReLU units that can be dormant, one
# layer reading them
_NEEDS_RELU = {"redo": "ReDo recycles dormant", "cbp": "CBP replaces"}
_NEEDS_ONE_READER = {
    "inject": "replaces one output layer",
    "cbp": "tracks each unit's one reading layer",
}


def check(agent: str, args: Any, activation: str = "relu", shared_torso: bool = False) -> None:
    """One-line UserError for a remedy that does not apply to `agent`, to its networks (their hidden
    `activation`; a `shared_torso` whose units feed several heads, as PPO's Nature CNN), for a
    conflicting pair, or for a speed flag a remedy cannot run with."""
    for remedy in REMEDIES:
        if remedy.is_on(args) and not remedy.applies_to(agent):
            raise UserError(
                f"{remedy.name} ({remedy.flags}) does not apply to {agent}: {remedy.not_for[agent]}"
            )
    for problem in conflicts(active(args), oracle=bool(_get(args, "continual.oracle"))):
        raise UserError(problem)
    if agent in ON_POLICY and _get(args, "continual.random_steps_per_task", -1) > 0:
        raise UserError(
            f"--continual.random-steps-per-task fills a replay buffer; {agent} is on-policy — "
            "drop the flag"
        )
    method = _get(args, "reset.method", "off")
    if method in _NEEDS_RELU and activation == "tanh":
        raise UserError(
            f"{_NEEDS_RELU[method]} ReLU units; {agent} with tanh units has none — add "
            "--net.activation relu"
        )
    if shared_torso and method != "off" and _get(args, "reset.networks") not in ("both", "auto"):
        raise UserError(
            f"on Atari, {agent}'s policy and value heads share one torso, so a reset touches both "
            "— drop --reset.networks"
        )
    if shared_torso and method in _NEEDS_ONE_READER:
        raise UserError(
            f"--reset.method {method} {_NEEDS_ONE_READER[method]}, but {agent}'s Nature-CNN units "
            "feed two heads on Atari — use redo, regrama, full, shrink-perturb or layers"
        )
    for flag in (flag for flag in SPEED_FLAGS if _get(args, flag, False)):
        for remedy in REMEDIES:
            if remedy.is_on(args) and flag in remedy.not_with:
                raise UserError(
                    f"{remedy.name} ({remedy.flags}) cannot run with --{flag}: "
                    f"{remedy.not_with[flag]} — drop one of them"
                )
    if len(_get(args, "seeds", ())) > 1:
        for remedy in REMEDIES:
            if remedy.is_on(args) and remedy.not_in_groups:
                raise UserError(
                    f"{remedy.name} ({remedy.flags}) cannot train several seeds in one process: "
                    f"{remedy.not_in_groups} — run one seed per process (--seed)"
                )


def matrix() -> str:
    """The agent × remedy table as Markdown: ✓ applies, – does not (the reasons follow the
    table)."""
    lines = [
        "| remedy | family | flags | " + " | ".join(AGENTS) + " | paper |",
        "|---|---|---|" + "---|" * len(AGENTS) + "---|",
    ]
    for remedy in REMEDIES:
        marks = " | ".join("✓" if remedy.applies_to(agent) else "–" for agent in AGENTS)
        lines.append(
            f"| {remedy.name} | {remedy.family} | `{remedy.flags}` | {marks} | {remedy.paper} |"
        )
    notes = [
        f"- {remedy.name} × {agent}: {why}"
        for remedy in REMEDIES
        for agent, why in remedy.not_for.items()
    ]
    speed = [
        f"- {remedy.name} × --{flag}: {why}"
        for remedy in REMEDIES
        for flag, why in remedy.not_with.items()
    ]
    groups = [
        f"- {remedy.name}: {remedy.not_in_groups}" for remedy in REMEDIES if remedy.not_in_groups
    ]
    return (
        "\n".join(lines)
        + "\n\nNot applicable:\n"
        + "\n".join(notes)
        + "\n\nNot with the speed flags (docs/speed.md):\n"
        + "\n".join(speed)
        + (
            "\n\nOne seed per process only (every other remedy acts on each member of a --seeds "
            "group on its own; "
        )
        + "docs/experiments.md):\n"
        + "\n".join(groups)
        + "\n"
    )
