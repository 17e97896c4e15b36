"""A run's state (cleanrl_plus/run_state.py): what each member's checkpoint holds of a group's objects, a resume that
loads them back with the RNG, the refusal of a checkpoint that does not fit, and a finished run recognised on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from cleanrl_plus.records import MemberRecord
from cleanrl_plus.run_state import RunState, finished_already, load_members, member_part
from envs.errors import UserError


class Net(nn.Module):
    """Two members' weights, member-major, and a scale both share (as `Members.build` marks it)."""

    def __init__(self, weights: list[float]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(weights))
        self.register_buffer("scale", torch.tensor([2.0, 3.0]))
        self._shared_keys = {"scale"}


class Counter:
    """An object with its own per-member state (as a group's env or replay has)."""

    def __init__(self, counts: list[int]) -> None:
        self.counts, self.loaded = counts, None

    def state_dict(self) -> dict:
        return {"counts": list(self.counts)}

    def member_state_dict(self, k: int) -> dict:
        return {"count": self.counts[k]}

    def load_state_dict(self, state: dict) -> None:
        self.counts = list(state["counts"])

    def load_member_state_dicts(self, states: list[dict]) -> None:
        self.counts = [state["count"] for state in states]


def _records() -> list[MemberRecord]:
    records = [MemberRecord(), MemberRecord()]
    records[1].add_evaluation(10, 7.0, [7.0], task=None)
    return records


def test_the_env_loads_after_the_objects_and_the_members_generators_last():
    state = RunState({"members": Counter([0, 0]), "actor": Net([0.0] * 4), "replay": Counter([0, 0])}, Counter([0, 0]), 2)
    assert list(state.objects) == ["actor", "replay", "env", "members"]


def test_each_member_checkpoint_holds_its_part_of_every_object_the_counters_and_its_records():
    state = RunState({"actor": Net([1.0, 2.0, 3.0, 4.0])}, Counter([5, 6]), 2)
    obs = torch.tensor([[0.0], [1.0], [2.0], [3.0]])  # two sub-envs per member
    first, second = state.checkpoints(global_step=40, num_updates=9, obs=obs, records=_records())
    assert (second["global_step"], second["num_updates"], set(second["rng"])) == (40, 9, set(first["rng"]))
    assert second["actor"]["weight"].tolist() == [3.0, 4.0] and second["actor"]["scale"].tolist() == [2.0, 3.0]
    assert second["env"] == {"count": 6} and first["env"] == {"count": 5}
    assert second["obs"].tolist() == [[2.0], [3.0]]
    assert second["evaluations"]["eval_history"] == [(10, 7.0)] and first["evaluations"]["eval_history"] == []


def test_a_resume_loads_every_object_the_observations_the_counters_and_the_rng(tmp_path):
    saved = RunState({"actor": Net([1.0, 2.0, 3.0, 4.0])}, Counter([5, 6]), 2)
    checkpoints = saved.checkpoints(40, 9, torch.arange(4.0).unsqueeze(1), _records())
    expected_draw = torch.rand(3)
    torch.rand(5)  # the RNG moves on after the checkpoint
    resumed = RunState({"actor": Net([0.0] * 4)}, Counter([0, 0]), 2)
    obs, global_step, num_updates = resumed.resume(checkpoints, torch.device("cpu"), f"--resume {tmp_path}")
    assert torch.equal(torch.rand(3), expected_draw)
    assert (global_step, num_updates, obs.flatten().tolist()) == (40, 9, [0.0, 1.0, 2.0, 3.0])
    assert resumed.objects["actor"].weight.tolist() == [1.0, 2.0, 3.0, 4.0] and resumed.objects["env"].counts == [5, 6]


def test_a_checkpoint_of_other_networks_is_refused_in_one_line_naming_the_run(tmp_path):
    checkpoints = RunState({"actor": Net([1.0, 2.0])}, Counter([5]), 1).checkpoints(1, 1, torch.zeros(1, 1), [MemberRecord()])
    with pytest.raises(UserError) as refused:
        RunState({"actor": Net([0.0] * 3)}, Counter([0]), 1).resume(checkpoints, torch.device("cpu"), f"--resume {tmp_path}")
    message = str(refused.value)
    assert (
        message.startswith(f"--resume {tmp_path}: its checkpoint does not fit this run: actor.weight") and "\n" not in message
    )


def test_a_member_part_is_the_state_alone_its_own_member_state_or_its_member_major_slice():
    net = Net([1.0, 2.0, 3.0, 4.0])
    assert member_part(net, "the state", 0, 1) == "the state"
    assert member_part(Counter([5, 6]), {"counts": [5, 6]}, 1, 2) == {"count": 6}
    part = member_part(net, net.state_dict(), 0, 2)
    assert part["weight"].tolist() == [1.0, 2.0] and part["scale"].tolist() == [2.0, 3.0]  # the shared scale whole


def test_loading_members_inverts_the_parts():
    alone = Net([0.0, 0.0])
    load_members(alone, [Net([7.0, 8.0]).state_dict()])
    assert alone.weight.tolist() == [7.0, 8.0]
    counter = Counter([0, 0])
    load_members(counter, [{"count": 5}, {"count": 6}])
    assert counter.counts == [5, 6]
    group, source = Net([0.0] * 4), Net([1.0, 2.0, 3.0, 4.0])
    load_members(group, [member_part(source, source.state_dict(), k, 2) for k in range(2)])
    assert group.weight.tolist() == [1.0, 2.0, 3.0, 4.0] and group.scale.tolist() == [2.0, 3.0]


def _summary(run_dir: Path, finished: bool, global_step: int) -> Path:
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps({"finished": finished, "global_step": global_step}))
    return run_dir


def test_a_run_finished_already_when_every_member_finished_at_the_step(tmp_path):
    done = [_summary(tmp_path / "a", True, 100), _summary(tmp_path / "b", True, 100)]
    assert finished_already(done, 100)
    assert not finished_already(done, 50)  # the summaries say they finished at another step
    assert not finished_already([*done, _summary(tmp_path / "c", False, 100)], 100)
    assert not finished_already([*done, tmp_path / "no-summary"], 100)
