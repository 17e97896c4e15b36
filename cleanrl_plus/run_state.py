"""A run's state: the objects every checkpoint holds, what each member's checkpoint keeps of them, and how a resume
loads them back.

Each object has state_dict()/load_state_dict(); in a group of K members (cleanrl_plus.members) a member's part is its
`member_state_dict(k)` where the object has one, else the member-major slices of the group's state. A member's
checkpoint is what a one-seed run of its seed would save: its part of every object, under the object's name, with the
counters, the observations to act on next, its records (cleanrl_plus.records) and the RNG states."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import torch

from cleanrl_plus.checkpoint import capture_rng_state, load_error_detail, restore_rng_state
from cleanrl_plus.members import group_state, member_state, shared_keys
from cleanrl_plus.records import MemberRecord
from envs.errors import UserError


class RunState:
    """name → object: the `objects` given (a group's member generators, under "members", load last: loading a state
    may draw from them, e.g. re-injected heads) and the env."""

    def __init__(self, objects: dict[str, Any], env: Any, count: int) -> None:
        members = {"members": objects.pop("members")} if "members" in objects else {}
        self.objects = objects | {"env": env} | members
        self.count = count

    def resume(self, checkpoints: list[dict[str, Any]], device: torch.device, source: str) -> tuple[torch.Tensor, int, int]:
        """Load every object from the members' `checkpoints`, in order, then the RNG states; returns (obs, global_step,
        num_updates) to go on from. A checkpoint that does not fit (another run's networks) is a UserError naming
        `source`, the flag and directory it came from (`--resume runs/x`, or `--fork-from runs/x`)."""
        for name, thing in self.objects.items():
            try:
                load_members(thing, [checkpoint[name] for checkpoint in checkpoints])
            except (RuntimeError, KeyError, ValueError, IndexError) as error:
                fix = (
                    "a fork keeps every network, buffer and env as the source has them; change only flags that do not "
                    "reshape them"
                    if source.startswith("--fork-from")
                    else "was checkpoint.pt copied from another run? Resume each run with its own checkpoint"
                )
                raise UserError(
                    f"{source}: its checkpoint does not fit this run: {load_error_detail(error, name)} — {fix}"
                ) from None
        restore_rng_state(checkpoints[0]["rng"])
        obs = group_state([checkpoint["obs"] for checkpoint in checkpoints]).to(device)
        return obs, checkpoints[0]["global_step"], checkpoints[0]["num_updates"]

    def checkpoints(
        self, global_step: int, num_updates: int, obs: torch.Tensor, records: Sequence[MemberRecord]
    ) -> list[dict[str, Any]]:
        """Each member's checkpoint (module docstring); `obs` are the observations the loop acts on next."""
        group = {name: thing.state_dict() for name, thing in self.objects.items()}
        counters = {"global_step": global_step, "num_updates": num_updates, "rng": capture_rng_state()}
        return [
            counters
            | {"obs": member_state(obs, k, self.count), "evaluations": records[k].state_dict()}
            | {name: member_part(thing, group[name], k, self.count) for name, thing in self.objects.items()}
            for k in range(self.count)
        ]


def member_part(thing: Any, state: Any, k: int, count: int) -> Any:
    """Member k's part of `thing`'s state (`state`, the group's): its own `member_state_dict(k)` where it has one, else
    the member-major slices (a network's shared buffers, e.g. an action scale, kept whole)."""
    if count == 1:
        return state
    if hasattr(thing, "member_state_dict"):
        return thing.member_state_dict(k)
    return member_state(state, k, count, shared_keys(thing))


def load_members(thing: Any, states: list[Any]) -> None:
    """Load a group's `thing` from its members' states (the inverse of `member_part`)."""
    if len(states) == 1:
        thing.load_state_dict(states[0])
    elif hasattr(thing, "load_member_state_dicts"):
        thing.load_member_state_dicts(states)
    else:
        thing.load_state_dict(group_state(states, shared_keys(thing)))


def finished_already(run_dirs: Sequence[Path], global_step: int) -> bool:
    """Whether every member's summary says it finished at `global_step`: a finished run that was resumed."""
    for run_dir in run_dirs:
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except (OSError, json.JSONDecodeError):
            return False
        if not (summary.get("finished") and summary.get("global_step") == global_step):
            return False
    return True
