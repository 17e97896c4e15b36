"""The continual schedule as the loop follows it (cleanrl_plus/schedule.py), on a stand-in env whose task the test
moves: opening and resuming tasks, a switch with its end-of-task evaluation, the warm-up, the exploration step count
and the off-policy phases."""

from __future__ import annotations

import json
import types

import pytest

from cleanrl_plus.records import MemberRecord
from cleanrl_plus.schedule import TaskSchedule


class ScheduledEnv:
    """A continual env stand-in: its `scheduled_task` is what the test sets."""

    def __init__(self, random_steps_per_task: int = 0, envs_per_member: int = 1) -> None:
        self.scheduled_task = 0
        self.setting = types.SimpleNamespace(random_steps_per_task=random_steps_per_task)
        self.envs_per_member = envs_per_member

    def describe(self, member: int = 0) -> list[dict]:
        return [{"task": 0, "member": member}, {"task": 1, "member": member}]


class Writer:
    def __init__(self) -> None:
        self.texts: list[tuple[str, str, int]] = []

    def add_text(self, tag: str, text: str, step: int) -> None:
        self.texts.append((tag, text, step))


class Logger:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, int, int]] = []

    def scalar(self, tag: str, value: int, step: int) -> None:
        self.scalars.append((tag, value, step))


def _schedule(tmp_path, env=None, members: int = 1, restarts_exploration: bool = False) -> TaskSchedule:
    member_runs = []
    for k in range(members):
        (tmp_path / f"m{k}").mkdir()
        member_runs.append(types.SimpleNamespace(dir=tmp_path / f"m{k}", logger=types.SimpleNamespace(writer=Writer())))
    run = types.SimpleNamespace(logger=Logger(), members=member_runs)
    records = [MemberRecord() for _ in range(members)]
    return TaskSchedule(env or ScheduledEnv(), restarts_exploration, records, run)


def test_task_zero_of_a_fresh_run_opens_a_record_per_member_the_marker_and_each_schedule(tmp_path):
    schedule = _schedule(tmp_path, members=2)
    schedule.open(0, 0)
    assert [record.tasks[0]["start_step"] for record in schedule.records] == [0, 0]
    assert schedule.run.logger.scalars == [("continual/task", 0, 0)]
    assert json.loads((tmp_path / "m1" / "schedule.json").read_text()) == ScheduledEnv().describe(member=1)
    tag, text, step = schedule.run.members[1].logger.writer.texts[0]
    assert (tag, text.splitlines(), step) == (
        "continual/schedule",
        ["    {'task': 0, 'member': 1}", "    {'task': 1, 'member': 1}"],
        0,
    )


def test_a_resumed_run_goes_on_with_its_task_record_and_writes_no_schedule(tmp_path):
    schedule = _schedule(tmp_path)
    schedule.records[0].open_task(1, 700)
    schedule.open(1, 900, resumed=True)
    assert schedule.start_step == 700 and schedule.run.logger.scalars == []
    schedule.open(0, 900, resumed=True)  # a task without a record (an older checkpoint) opens where the run resumed
    assert schedule.start_step == 900 and schedule.records[0].tasks[0]["start_step"] == 900
    assert not (tmp_path / "m0" / "schedule.json").exists()
    schedule.open(1, 1_500)  # not a resume: the task starts over
    assert schedule.start_step == 1_500 and schedule.records[0].tasks[1]["start_step"] == 1_500


def test_a_switch_evaluates_the_ending_task_first_then_closes_it_and_opens_the_next(tmp_path):
    env = ScheduledEnv()
    schedule = _schedule(tmp_path, env)
    schedule.open(0, 0)
    seen = []

    def evaluate_ending_task() -> None:
        seen.append((schedule.task, schedule.records[0].tasks[0]["end_step"]))

    schedule.follow(500, evaluate_ending_task)
    assert seen == [] and not schedule.switched
    env.scheduled_task = 1
    schedule.follow(1_000, evaluate_ending_task)
    assert seen == [(0, None)] and schedule.switched  # evaluated on task 0, before its record closed
    assert schedule.records[0].tasks[0]["end_step"] == 1_000 and schedule.records[0].tasks[1]["start_step"] == 1_000
    assert (schedule.task, schedule.start_step) == (1, 1_000)
    schedule.follow(1_001, evaluate_ending_task)
    assert not schedule.switched and len(seen) == 1


def test_a_switch_to_a_task_with_a_record_left_from_a_summary_starts_it_over(tmp_path):
    env = ScheduledEnv()
    schedule = _schedule(tmp_path, env)
    schedule.open(0, 0)
    schedule.records[0].open_task(1, 1_200)  # restored from the summary of a run killed after its checkpoint
    env.scheduled_task = 1
    schedule.follow(1_000, lambda: None)
    assert schedule.start_step == 1_000 and schedule.records[0].tasks[1]["start_step"] == 1_000


def test_a_stationary_env_has_no_task_and_never_switches(tmp_path):
    schedule = _schedule(tmp_path, types.SimpleNamespace(envs_per_member=1), restarts_exploration=True)
    schedule.follow(100, lambda: None)
    assert schedule.task is None and not schedule.switched
    assert schedule.schedule_step(5_000) == 5_000 and not schedule.in_warmup(0)


@pytest.mark.parametrize("restarts_exploration, expected", [(True, 200), (False, 1_200)])
def test_exploration_steps_count_from_the_task_start_only_when_they_restart_per_task(tmp_path, restarts_exploration, expected):
    schedule = _schedule(tmp_path, restarts_exploration=restarts_exploration)
    schedule.open(1, 1_000)
    assert schedule.schedule_step(1_200) == expected


def test_the_first_random_steps_of_every_task_are_its_warm_up(tmp_path):
    schedule = _schedule(tmp_path, ScheduledEnv(random_steps_per_task=100))
    schedule.open(1, 1_000)
    assert schedule.in_warmup(1_099) and not schedule.in_warmup(1_100)


def test_off_policy_phases_act_randomly_before_learning_starts_and_in_each_warm_up(tmp_path):
    schedule = _schedule(tmp_path, ScheduledEnv(random_steps_per_task=50, envs_per_member=4))
    schedule.open(0, 0)
    assert schedule.off_policy_phase(10, learning_starts=100) == (True, False)  # inside the task's warm-up
    assert schedule.off_policy_phase(96, learning_starts=100) == (True, False)  # its 4 steps reach 100 only
    assert schedule.off_policy_phase(97, learning_starts=100) == (True, True)  # the step that passes learning_starts
    assert schedule.off_policy_phase(100, learning_starts=100) == (False, True)
    # TD3's --random-steps: random actions past learning_starts, learning already
    assert schedule.off_policy_phase(150, learning_starts=100, random_steps=200) == (True, True)
    assert schedule.off_policy_phase(200, learning_starts=100, random_steps=200) == (False, True)
    schedule.open(1, 2_000)
    assert schedule.off_policy_phase(2_010, learning_starts=100) == (True, False)
    assert schedule.off_policy_phase(2_050, learning_starts=100) == (False, True)
