"""What a training session keeps of each member between checkpoints, for its summary: the evaluations and, in a
continual run, one record per task (docs/continual.md), with the training episodes that ended in it."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from envs.base import EpisodeStats


class MemberRecord:
    """One member's evaluations (the latest, and every (step, mean return)) and its tasks by number."""

    def __init__(self) -> None:
        self.last_eval: dict[str, Any] = {}
        self.eval_history: list[tuple[int, float]] = []
        self.tasks: dict[int, dict[str, Any]] = {}

    def state_dict(self) -> dict[str, Any]:
        """Kept in the checkpoint, so that a resume knows which evaluations ran, the final one included, whatever
        summary.json a kill left."""
        return copy.deepcopy({"last_eval": self.last_eval, "eval_history": self.eval_history, "tasks": self.tasks})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = copy.deepcopy(state)
        self.last_eval, self.eval_history, self.tasks = state["last_eval"], state["eval_history"], state["tasks"]

    def restore(self, path: Path, start_step: int) -> None:
        """A resumed run whose checkpoint holds no records (an older cleanrl_plus wrote it) continues the evaluation
        and per-task records of its summary (up to its checkpoint)."""
        try:
            previous = json.loads((path / "summary.json").read_text())
        except (OSError, json.JSONDecodeError):
            return
        if previous.get("eval", {}).get("step", math.inf) <= start_step:
            self.last_eval = previous["eval"]
        self.eval_history = [tuple(entry) for entry in previous.get("eval_history", []) if entry[0] <= start_step]
        for record in previous.get("tasks", []):
            self.tasks[record["task"]] = record | {"evals": [tuple(e) for e in record.get("evals", []) if e[0] <= start_step]}

    def add_evaluation(self, global_step: int, mean: float, returns: list[float], task: int | None) -> None:
        """Record an evaluation: its episodic returns and their mean, also in the task it ran in (if any)."""
        self.last_eval = {"step": global_step, "mean": mean, "returns": returns}
        self.eval_history.append((global_step, mean))
        if task is not None:
            self.tasks[task]["evals"].append((global_step, mean))

    def open_task(self, task: int, global_step: int) -> None:
        self.tasks[task] = {
            "task": task,
            "start_step": global_step,
            "end_step": None,
            "evals": [],
            "train_return_sum": 0.0,
            "train_episodes": 0,
        }

    def add_episodes(self, stats: EpisodeStats) -> None:
        """The training returns of this member's finished episodes, each to the task it ran in."""
        for episodic_return, task in zip(stats.returns, stats.task_ids):
            if task in self.tasks:
                self.tasks[task]["train_return_sum"] += episodic_return
                self.tasks[task]["train_episodes"] += 1

    def task_summaries(self, global_step: int) -> list[dict[str, Any]]:
        """Per-task metrics, by task (docs/continual.md): the end-of-task evaluation, the AUC as the mean evaluation
        over the task, and the mean training return of the episodes that ran in it; an open task ends at `global_step`."""
        summaries = []
        for _, record in sorted(self.tasks.items()):
            evals = [mean for _, mean in record["evals"]]
            episodes = record["train_episodes"]
            summaries.append(
                record
                | {
                    "end_step": record["end_step"] if record["end_step"] is not None else global_step,
                    "final_eval": evals[-1] if evals else None,
                    "auc_eval": sum(evals) / len(evals) if evals else None,
                    "train_return_mean": record["train_return_sum"] / episodes if episodes else None,
                }
            )
        return summaries


def split_episodes(stats: EpisodeStats, count: int, per_member: int) -> list[EpisodeStats]:
    """Each member's finished episodes, by the sub-env they ran in (member k's envs are k·N … (k + 1)·N − 1)."""
    if count == 1:
        return [stats]
    members = [EpisodeStats() for _ in range(count)]
    tasks = stats.task_ids or [None] * len(stats)
    for env, episodic_return, length, end_step, task in zip(stats.envs, stats.returns, stats.lengths, stats.end_steps, tasks):
        member = members[env // per_member]
        member.returns.append(episodic_return)
        member.lengths.append(length)
        member.end_steps.append(end_step)  # the member's own env steps
        if task is not None:
            member.task_ids.append(task)
    return members
