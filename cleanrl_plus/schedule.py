"""A continual env's task schedule as the training loop follows it (docs/continual.md): the task every member is in and
the step it began, the random warm-up at each task's start, the step count exploration schedules run on, and, at each
switch, the records and outputs of the task that ends and the one that begins. A stationary env has no task (None)."""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from cleanrl_plus.records import MemberRecord
from envs.errors import UserError


class TaskSchedule:
    """`env`'s schedule (its `scheduled_task`, absent for a stationary env) for a run's members, each with its record;
    `restarts_exploration`: exploration schedules start over with each task (--continual.reset-exploration)."""

    def __init__(self, env: Any, restarts_exploration: bool, records: Sequence[MemberRecord], run: Any) -> None:
        self.env, self.records, self.run = env, records, run
        self.task: int | None = getattr(env, "scheduled_task", None)
        self.start_step = 0  # where the task began
        self.switched = False  # True right after the step at which the schedule moved to a new task
        self.restarts_exploration = restarts_exploration  # a stationary env's one "task" begins at step 0

    def open(self, task: int, global_step: int, resumed: bool = False) -> None:
        """`task` begins at `global_step`: a record per member and the switch marker in TensorBoard; task 0 of a fresh
        run writes each member's schedule.json. A resumed run goes on with its task's record where there is one."""
        if resumed and task in self.records[0].tasks:
            self.start_step = self.records[0].tasks[task]["start_step"]
            return
        self.start_step = global_step
        for record in self.records:
            record.open_task(task, global_step)
        self.run.logger.scalar("continual/task", task, global_step)
        if not resumed and task == 0:
            for k, member in enumerate(self.run.members):
                schedule = self.env.describe(member=k)
                (member.dir / "schedule.json").write_text(json.dumps(schedule, indent=2))
                text = "\n".join(f"    {entry}" for entry in schedule)
                member.logger.writer.add_text("continual/schedule", text, global_step)

    def follow(self, global_step: int, before_switch: Callable[[], None]) -> None:
        """After every step: where the env's schedule moved to another task, `before_switch()` (the end-of-task
        evaluation, on the task that ends), then the ended task's records close and the new task opens."""
        self.switched = False
        if self.task is None or self.env.scheduled_task == self.task:
            return
        before_switch()
        for record in self.records:
            record.tasks[self.task]["end_step"] = global_step
        self.task = self.env.scheduled_task
        self.open(self.task, global_step)
        self.switched = True

    def schedule_step(self, global_step: int) -> int:
        """The step count exploration schedules run on: steps since the task began when they restart per task."""
        return global_step - self.start_step if self.restarts_exploration else global_step

    def in_warmup(self, global_step: int) -> bool:
        """--continual.random-steps-per-task N: the first N steps of every task act at random and learn nothing."""
        return self.task is not None and global_step - self.start_step < self.env.setting.random_steps_per_task

    def off_policy_phase(self, global_step: int, learning_starts: int, random_steps: int | None = None) -> tuple[bool, bool]:
        """(act uniformly at random, learn after this step) for an off-policy agent: the first `random_steps` steps
        (None: `learning_starts`) act at random (from each task's start when exploration restarts per task), as do
        each task's warm-up steps, which learn nothing; learning starts with the step that reaches `learning_starts`.
        Steps count per member."""
        schedule_step, warmup = self.schedule_step(global_step), self.in_warmup(global_step)
        learn = schedule_step + self.env.envs_per_member > learning_starts and not warmup
        random_steps = learning_starts if random_steps is None else random_steps
        return schedule_step < random_steps or warmup, learn


def check_resumed_schedules(env: Any, members: Sequence[Any]) -> None:
    """Refuse a resume whose env would give a member another task schedule than the schedule.json its run began with,
    before anything is written: that member would train on tasks its record does not show (as a resumed group did
    until 2026-12-01, when every member drew the named member's offsets). A stationary env has no schedule."""
    if getattr(env, "scheduled_task", None) is None:
        return
    for k, member in enumerate(members):
        recorded = member.dir / "schedule.json"
        if not recorded.exists():  # stopped before its first task opened
            continue
        drawn, saved = json.loads(json.dumps(env.describe(member=k))), json.loads(recorded.read_text())
        if drawn != saved:
            task = next((i for i, (ours, theirs) in enumerate(zip(drawn, saved)) if ours != theirs), len(saved))
            raise UserError(
                f"--resume {member.dir}: its env would draw task {task} unlike the run's schedule.json — resume with "
                "the cleanrl_plus version and flags that started it, or start a new run"
            )
