"""What the session keeps of each member (cleanrl_plus/records.py): evaluations, per-task records and their summaries,
the records' round trip through a checkpoint or an older run's summary.json, and each member's share of the episodes."""

from __future__ import annotations

import json

from cleanrl_plus.records import MemberRecord, split_episodes
from envs.base import EpisodeStats


def _two_tasks() -> MemberRecord:
    record = MemberRecord()
    record.open_task(0, 0)
    record.add_evaluation(500, 10.0, [9.0, 11.0], task=0)
    record.add_evaluation(1_000, 20.0, [20.0, 20.0], task=0)
    record.tasks[0]["end_step"] = 1_000
    record.open_task(1, 1_000)
    return record


def test_an_evaluation_is_the_latest_joins_the_history_and_its_task():
    record = _two_tasks()
    record.add_evaluation(1_500, 5.0, [4.0, 6.0], task=1)
    assert record.last_eval == {"step": 1_500, "mean": 5.0, "returns": [4.0, 6.0]}
    assert record.eval_history == [(500, 10.0), (1_000, 20.0), (1_500, 5.0)]
    assert record.tasks[1]["evals"] == [(1_500, 5.0)] and len(record.tasks[0]["evals"]) == 2
    stationary = MemberRecord()
    stationary.add_evaluation(100, 1.0, [1.0], task=None)
    assert stationary.tasks == {} and stationary.eval_history == [(100, 1.0)]


def test_a_task_opens_empty_at_its_step():
    record = MemberRecord()
    record.open_task(3, 2_000)
    assert record.tasks == {
        3: {"task": 3, "start_step": 2_000, "end_step": None, "evals": [], "train_return_sum": 0.0, "train_episodes": 0}
    }


def test_training_episodes_count_in_the_task_they_ran_in():
    record = _two_tasks()
    record.add_episodes(EpisodeStats(returns=[1.0, 2.0, 4.0, 8.0], lengths=[1] * 4, end_steps=[1] * 4, task_ids=[0, 1, 1, 7]))
    assert (record.tasks[0]["train_return_sum"], record.tasks[0]["train_episodes"]) == (1.0, 1)
    assert (record.tasks[1]["train_return_sum"], record.tasks[1]["train_episodes"]) == (6.0, 2)
    assert 7 not in record.tasks  # a task without a record (not opened by this run) is not counted


def test_task_summaries_give_the_final_evaluation_the_auc_and_the_mean_training_return_in_task_order():
    record = _two_tasks()
    record.add_episodes(EpisodeStats(returns=[3.0, 5.0], lengths=[1, 1], end_steps=[1, 1], task_ids=[0, 0]))
    record.tasks = {1: record.tasks[1], 0: record.tasks[0]}  # opened out of order: summaries still go by task
    first, second = record.task_summaries(global_step=1_200)
    assert (first["task"], first["end_step"], first["final_eval"], first["auc_eval"], first["train_return_mean"]) == (
        0,
        1_000,
        20.0,
        15.0,
        4.0,
    )
    assert (second["task"], second["end_step"], second["final_eval"], second["auc_eval"], second["train_return_mean"]) == (
        1,
        1_200,  # still open: it ends where the summary is written
        None,
        None,
        None,
    )


def test_the_state_round_trips_as_a_copy():
    record = _two_tasks()
    state = record.state_dict()
    record.tasks[0]["evals"].append((9, 9.0))  # what the checkpoint holds does not follow the record
    copy = MemberRecord()
    copy.load_state_dict(state)
    state["eval_history"].append((9, 9.0))  # nor the loaded record the state
    assert copy.eval_history == [(500, 10.0), (1_000, 20.0)] and copy.tasks[0]["evals"] == [(500, 10.0), (1_000, 20.0)]
    assert copy.last_eval["step"] == 1_000 and set(copy.tasks) == {0, 1}


def test_an_older_checkpoint_continues_the_records_of_its_summary_up_to_its_step(tmp_path):
    summary = {
        "eval": {"step": 1_500, "mean": 5.0, "returns": [5.0]},
        "eval_history": [[500, 10.0], [1_000, 20.0], [1_500, 5.0]],
        "tasks": [{"task": 0, "start_step": 0, "evals": [[500, 10.0], [1_000, 20.0], [1_500, 5.0]]}],
    }
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    record = MemberRecord()
    record.restore(tmp_path, start_step=1_000)  # killed after the evaluation at 1500, checkpointed at 1000
    assert record.last_eval == {} and record.eval_history == [(500, 10.0), (1_000, 20.0)]
    assert record.tasks[0]["evals"] == [(500, 10.0), (1_000, 20.0)]
    record.restore(tmp_path, start_step=1_500)
    assert record.last_eval["step"] == 1_500
    untouched = MemberRecord()
    untouched.restore(tmp_path / "missing", start_step=0)
    assert (untouched.last_eval, untouched.eval_history, untouched.tasks) == ({}, [], {})


def test_each_member_gets_the_episodes_of_its_own_sub_envs():
    stats = EpisodeStats(
        returns=[1.0, 2.0, 3.0], lengths=[10, 20, 30], end_steps=[5, 6, 7], task_ids=[0, 1, 0], envs=[3, 0, 2]
    )
    first, second = split_episodes(stats, count=2, per_member=2)  # member 0: sub-envs 0 and 1; member 1: 2 and 3
    assert (first.returns, first.lengths, first.end_steps, first.task_ids) == ([2.0], [20], [6], [1])
    assert (second.returns, second.lengths, second.end_steps, second.task_ids) == ([1.0, 3.0], [10, 30], [5, 7], [0, 0])
    assert split_episodes(stats, count=1, per_member=4) == [stats]
    stationary = split_episodes(EpisodeStats(returns=[1.0], lengths=[1], end_steps=[1], envs=[1]), count=2, per_member=1)
    assert stationary[1].returns == [1.0] and stationary[1].task_ids == []
