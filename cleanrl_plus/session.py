"""The plumbing around an agent's loop, shared by every agent: resume, periodic logging, evaluation, checkpoints,
the progress line, SPS clocks and the run summary. The agent file keeps only the algorithm.

    session = TrainingSession(run, "td3", env, evaluator, plasticity=plasticity, actor=actor, replay=replay, …)
    obs, global_step, num_updates = session.start(env.reset(seed=args.seed))   # a resumed run continues here
    while global_step < args.total_timesteps and not run.stop_requested:
        …
        session.after_step(previous_step, global_step, num_updates, losses, policy, obs)
    return session.finish(global_step, num_updates, policy, obs)

The objects given as keywords, and the env, are the run's state: each `state_dict()` goes into every checkpoint under its
keyword, with the counters, the observations to act on next and the RNG states, and `start` loads them back in that
order."""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any, Callable

import torch

from cleanrl_plus.checkpoint import capture_rng_state, load_error_detail, restore_rng_state
from cleanrl_plus.errors import UserError
from cleanrl_plus.evaluator import Evaluator
from cleanrl_plus.members import group_state, member_state, shared_keys
from cleanrl_plus.progress import Progress
from cleanrl_plus.run import Run
from cleanrl_plus.video import VideoRecorder, log_video
from envs.base import EpisodeStats, TorchVecEnv


def crossed(previous_step: int, global_step: int, every: int) -> bool:
    """Whether a step counter that moved from `previous_step` to `global_step` passed a multiple of `every` (> 0)."""
    return every > 0 and global_step // every > previous_step // every


class MemberRecord:
    """What the session keeps of one member between checkpoints: its evaluations and, in a continual run, its tasks."""

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


class TrainingSession:
    burnin_steps = 0  # `cleanrl-plus bench --burnin`: env steps of learning before the learning clock starts over

    def __init__(self, run: Run, agent: str, env: TorchVecEnv, evaluator: Evaluator, /, **state: Any) -> None:
        self.run, self.agent, self.env, self.evaluator, self.args = run, agent, env, evaluator, run.args
        # name → object with state_dict()/load_state_dict(): what a checkpoint holds and a resume loads, the env included
        # the members' generators load last: loading a state may draw from them (re-injected heads on resume)
        members = {"members": state.pop("members")} if "members" in state else {}
        self.state = state | {"env": env} | members
        self.count = len(run.members)

    # ---- start and resume -------------------------------------------------------------------------------------
    def start(self, obs: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        """(obs, global_step, num_updates) to start the loop from: the given observations and zeros, or, for a resumed
        group, its checkpoints', with every registered state and the RNG restored. Starts the clocks and the records."""
        run, counters = self.run, (obs, 0, 0)
        if run.resumed:
            checkpoints = run.resumed
            for name, thing in self.state.items():
                try:
                    load_members(thing, [checkpoint[name] for checkpoint in checkpoints])
                except (RuntimeError, KeyError, ValueError, IndexError) as error:  # another run's checkpoint, other networks
                    where = run.members[0].dir if self.count == 1 else run.members[0].dir.parent
                    raise UserError(
                        f"--resume {where}: its checkpoint does not fit this run: {load_error_detail(error, name)} — "
                        "was checkpoint.pt copied from another run? Resume each run with its own checkpoint"
                    ) from None
            restore_rng_state(checkpoints[0]["rng"])
            obs = group_state([checkpoint["obs"] for checkpoint in checkpoints]).to(run.device)
            counters = (obs, checkpoints[0]["global_step"], checkpoints[0]["num_updates"])
        start_step = counters[1]
        # a finished run resumed: nothing to train, evaluate or write (finish says so)
        self.finished_before = (
            run.resumed is not None and start_step >= self.args.total_timesteps and self._finished_already(start_step)
        )
        run.open(announce=not self.finished_before)  # everything is built and checked: the runs start writing
        self.progress = Progress(self.args.total_timesteps, start_step, f"{self.agent} {self.args.env_id}", self.args.progress)
        self.start_time, self.start_step = time.perf_counter(), start_step
        self.learning_clock: tuple[float, int, int] | None = None  # (time, step, updates) when updates began
        self.burnt_in = self.burnin_steps == 0  # the clock restarted after the burn-in (compilation, graph capture)
        self.records = [MemberRecord() for _ in run.members]
        # continual envs: the scheduled task (the same for every member) and where it began (None: a stationary env)
        self.task: int | None = getattr(self.env, "scheduled_task", None)
        self.task_start_step = 0
        self.task_switched = False  # True right after the step at which the schedule moved to a new task
        self.num_updates = counters[2]  # as of the latest after_step, for a summary written when the run stops early
        self.recorder = None  # --capture-video: built now, so a missing renderer stops the run before training
        if self.args.capture_video:
            self.recorder = VideoRecorder(self.evaluator.env_id, self.evaluator.seed, run.device, **self.evaluator.env_kwargs)
        if run.resumed:
            for member, record, checkpoint in zip(run.members, self.records, run.resumed):
                if "evaluations" in checkpoint:
                    record.load_state_dict(checkpoint["evaluations"])
                else:
                    record.restore(member.dir, start_step)
        if self.task is not None:
            self._open_task(self.task, start_step, resumed=run.resumed is not None)
        return counters

    def checkpoint_state(self, global_step: int, num_updates: int, obs: torch.Tensor) -> list[dict[str, Any]]:
        """Each member's checkpoint: its part of every registered state, what a one-seed run of its seed would save."""
        group = {name: thing.state_dict() for name, thing in self.state.items()}
        counters = {"global_step": global_step, "num_updates": num_updates, "rng": capture_rng_state()}
        return [
            counters
            | {"obs": member_state(obs, k, self.count), "evaluations": self.records[k].state_dict()}
            | {name: member_part(thing, group[name], k, self.count) for name, thing in self.state.items()}
            for k in range(self.count)
        ]

    # ---- the continual schedule -----------------------------------------------------------------------------------
    def _open_task(self, task: int, step: int, resumed: bool = False) -> None:
        if resumed and task in self.records[0].tasks:
            self.task_start_step = self.records[0].tasks[task]["start_step"]
            return
        self.task_start_step = step
        for record in self.records:
            record.tasks[task] = {
                "task": task,
                "start_step": step,
                "end_step": None,
                "evals": [],
                "train_return_sum": 0.0,
                "train_episodes": 0,
            }
        self.run.logger.scalar("continual/task", task, step)  # the switch marker in TensorBoard
        if not resumed and task == 0:
            for k, member in enumerate(self.run.members):
                schedule = self.env.describe(member=k) if self.count > 1 else self.env.describe()
                (member.dir / "schedule.json").write_text(json.dumps(schedule, indent=2))
                member.logger.writer.add_text("continual/schedule", "\n".join(f"    {entry}" for entry in schedule), step)

    def schedule_step(self, global_step: int) -> int:
        """The step count exploration schedules run on: steps since the task began when they restart per task
        (--continual.reset-exploration, the oracle)."""
        restart_per_task = self.args.continual.restarts_exploration and self.task is not None
        return global_step - self.task_start_step if restart_per_task else global_step

    def off_policy_phase(self, global_step: int, num_updates: int, learning_starts: int) -> tuple[bool, bool]:
        """(act uniformly at random, learn after this step) for an off-policy agent at `global_step`: the first
        `learning_starts` steps act at random (from each task's start with --continual.reset-exploration), as do the
        --continual.random-steps-per-task of each task, which learn nothing; learning starts with the step that
        reaches `learning_starts`. Starts the learning clock. Steps count per member."""
        schedule_step, task_warmup = self.schedule_step(global_step), self.in_task_warmup(global_step)
        steps = self.env.envs_per_member
        learn = schedule_step + steps > learning_starts and not task_warmup
        if learn:
            self.learning_started(global_step + steps, num_updates)
        return schedule_step < learning_starts or task_warmup, learn

    def in_task_warmup(self, global_step: int) -> bool:
        """Continual ids with --continual.random-steps-per-task N: the first N steps of every task act at random and
        learn nothing (C-CHAIN starts each MinAtar game so)."""
        setting = getattr(self.env, "setting", None)
        return self.task is not None and global_step - self.task_start_step < setting.random_steps_per_task

    def learning_started(self, global_step: int, num_updates: int) -> None:
        if self.learning_clock is None:
            self.learning_clock = (time.perf_counter(), global_step, num_updates)

    # ---- evaluation, logging, divergence ----------------------------------------------------------------------
    def evaluate(self, policy: Callable[[torch.Tensor], torch.Tensor], global_step: int) -> None:
        """Deterministic evaluation of every member; in a continual run, on the task the agent is in."""
        if self.task is not None:
            self.evaluator.env.set_task(self.task)
        returns = self.evaluator(policy).reshape(self.count, -1)
        means = [float(member_returns.mean()) for member_returns in returns]
        for record, mean, member_returns in zip(self.records, means, returns):
            record.last_eval = {"step": global_step, "mean": mean, "returns": member_returns.tolist()}
            record.eval_history.append((global_step, mean))
            if self.task is not None:
                record.tasks[self.task]["evals"].append((global_step, mean))
        self.run.logger.scalar("eval/episodic_return", means, global_step)
        self.progress.set(eval=_mean([mean for k, mean in enumerate(means) if not self.run.members[k].diverged]))
        self._stop_diverged([{"eval/episodic_return": mean} for mean in means], global_step)

    def _stop_diverged(self, values: list[dict[str, float]], global_step: int) -> None:
        """Values already on the host, per member (read at the logging cadence): a member with a NaN/inf stops — its
        summary says where, its checkpoint stays the last good one, it logs no more — and the others go on; once every
        member diverged, the run stops with one line."""
        for k, (member, member_values) in enumerate(zip(self.run.members, values)):
            bad = next((q for q, v in member_values.items() if isinstance(v, float) and not math.isfinite(v)), None)
            if bad is None or member.diverged:
                continue
            member.mark_diverged(
                global_step,
                bad,
                self.summary(k, global_step, self.num_updates, False, time.perf_counter()),
                member_values[bad],
            )
            self.run.logger.muted.add(k)
            print(
                f"{self.agent}: {member.dir.name} diverged at step {global_step} ({bad} is {member_values[bad]})", flush=True
            )
        if all(member.diverged for member in self.run.members):
            self.progress.close(global_step)
            self.run.stop_if_all_diverged(global_step)

    def _log_episodes(self) -> None:
        stats = split_episodes(self.env.drain_episode_stats(), self.count, self.env.envs_per_member)
        self.run.logger.episodes(stats)
        for record, member_stats in zip(self.records, stats):
            for episodic_return, task in zip(member_stats.returns, member_stats.task_ids):
                if task in record.tasks:
                    record.tasks[task]["train_return_sum"] += episodic_return
                    record.tasks[task]["train_episodes"] += 1

    def _follow_schedule(self, policy: Callable[[torch.Tensor], torch.Tensor], global_step: int) -> None:
        """At a switch: the end-of-task evaluation (on the task that ends), then the new task's record."""
        self.task_switched = False
        if self.task is None or self.env.scheduled_task == self.task:
            return
        if self.records[0].last_eval.get("step") != global_step:
            self.evaluate(policy, global_step)
        for record in self.records:
            record.tasks[self.task]["end_step"] = global_step
        self.task = self.env.scheduled_task
        self._open_task(self.task, global_step)
        self.task_switched = True

    def after_step(
        self,
        previous_step: int,
        global_step: int,
        num_updates: int,
        losses: dict[str, torch.Tensor],
        policy: Callable[[torch.Tensor], torch.Tensor],
        obs: torch.Tensor,
    ) -> None:
        """Log, evaluate and checkpoint when `global_step` (env steps per member) crosses a multiple of the respective
        interval; `obs` are the observations the loop acts on next (a checkpoint keeps them)."""
        args, logger = self.args, self.run.logger
        self.num_updates = num_updates
        if not self.burnt_in and self.learning_clock is not None and global_step >= self.learning_clock[1] + self.burnin_steps:
            self.learning_clock, self.burnt_in = (time.perf_counter(), global_step, num_updates), True
        self._follow_schedule(policy, global_step)
        if crossed(previous_step, global_step, args.log_every):
            self._log_episodes()
            if losses:  # one device sync for all losses of all members, which are checked for NaN/inf then
                self._stop_diverged(logger.scalars(losses, global_step), global_step)
            logger.scalar("charts/SPS", self.sps(time.perf_counter(), global_step), global_step)
            if getattr(self.env, "frames", None) is not None:
                logger.scalar("charts/frames", self.env.frames, global_step)
            returns = [
                r for k, r in enumerate(logger.last_episodic_return) if r is not None and not self.run.members[k].diverged
            ]
            if returns:
                self.progress.set(ret=_mean(returns))
        if crossed(previous_step, global_step, args.eval_every) and self.records[0].last_eval.get("step") != global_step:
            self.evaluate(policy, global_step)
        if crossed(previous_step, global_step, args.checkpoint_every):
            self._log_episodes()  # episodes that ended up to here are logged before, not after, the checkpoint
            self._save(
                self.checkpoint_state(global_step, num_updates, obs), global_step, num_updates, False, time.perf_counter()
            )
        self.progress.update(global_step)

    def _save(self, checkpoints: list[dict[str, Any]], global_step: int, num_updates: int, finished: bool, now: float) -> None:
        summaries = [self.summary(k, global_step, num_updates, finished, now) for k in range(len(checkpoints))]
        prepared = []
        for k, (member, checkpoint) in enumerate(zip(self.run.members, checkpoints)):
            if member.diverged:
                continue
            if member.prepare_save(checkpoint, summaries[k]):
                prepared.append(k)
            else:
                self.run.logger.muted.add(k)  # NaN/inf in its state: marked diverged, the last good checkpoint kept
        for k in prepared:  # every member's next checkpoint is written: only now is any replaced (a kill keeps them in step)
            self.run.members[k].commit_save(global_step, summaries[k])
        if all(member.diverged for member in self.run.members):
            self.run.stop_if_all_diverged(global_step)

    def sps(self, now: float, global_step: int) -> float:
        """Env steps per second of one member (every member steps as many)."""
        return (global_step - self.start_step) / max(now - self.start_time, 1e-9)

    def summary(self, k: int, global_step: int, num_updates: int, finished: bool, now: float) -> dict[str, Any]:
        member, record = self.run.members[k], self.records[k]
        result = {
            "agent": self.agent,
            "env_id": self.args.env_id,
            "seed": member.args.seed,
            "run_dir": str(member.dir),
            "global_step": global_step,
            "num_updates": num_updates,
            "finished": finished,
            "device": str(self.run.device),
            "threads": torch.get_num_threads(),
            "members": self.count,  # runs trained together in this process (1: alone)
            "sps": self.sps(now, global_step),
            "eval": dict(record.last_eval),
            "eval_history": list(record.eval_history),
        }
        if self.task is not None:
            result["tasks"] = [self._task_summary(task_record, global_step) for _, task_record in sorted(record.tasks.items())]
        if getattr(self.env, "frames", None) is not None:
            result["frames"] = self.env.frames
        if self.learning_clock is not None:
            started, step, updates = self.learning_clock
            elapsed = max(now - started, 1e-9)
            result["sps_learning"] = (global_step - step) / elapsed
            result["updates_per_second"] = (num_updates - updates) / elapsed
        return result

    @staticmethod
    def _task_summary(record: dict[str, Any], global_step: int) -> dict[str, Any]:
        """Per-task metrics (docs/continual.md): the end-of-task evaluation, the AUC as the mean evaluation over the task,
        and the mean training return of the episodes that ran in it."""
        evals = [mean for _, mean in record["evals"]]
        episodes = record["train_episodes"]
        return record | {
            "end_step": record["end_step"] if record["end_step"] is not None else global_step,
            "final_eval": evals[-1] if evals else None,
            "auc_eval": sum(evals) / len(evals) if evals else None,
            "train_return_mean": record["train_return_sum"] / episodes if episodes else None,
        }

    def finish(
        self,
        global_step: int,
        num_updates: int,
        policy: Callable[[torch.Tensor], torch.Tensor],
        obs: torch.Tensor,
    ) -> dict[str, Any]:
        """Final evaluation (if the run finished), final checkpoints and summaries, closing message. Returns the run's
        summary; a group's is {"members": [each member's summary]}."""
        loop_end, finished = time.perf_counter(), global_step >= self.args.total_timesteps
        self.num_updates = num_updates
        if self.finished_before and global_step == self.start_step:
            return self._leave_finished_run(global_step)
        self._log_episodes()
        if finished and self.records[0].last_eval.get("step") != global_step:
            self.evaluate(policy, global_step)
        video = self.run.members[0].dir / "videos" / "final.mp4"
        if finished and self.recorder is not None and (global_step > self.start_step or not video.exists()):
            member = self.run.members[0]
            frames = self.recorder.record(policy, video, task=self.task)
            log_video(member.logger.writer, "videos/eval", frames, self.recorder.fps, global_step)
        if self.recorder is not None:
            self.recorder.close()
        self._save(self.checkpoint_state(global_step, num_updates, obs), global_step, num_updates, finished, loop_end)
        summaries = [self.summary(k, global_step, num_updates, finished, loop_end) for k in range(self.count)]
        for k, member in enumerate(self.run.members):
            if member.diverged:
                summaries[k] = json.loads((member.dir / "summary.json").read_text())
        self.progress.close(global_step)
        self.run.close()
        self.env.close()
        self.evaluator.close()
        where = self.run.members[0].dir if self.count == 1 else self.run.members[0].dir.parent
        state = "finished" if finished else f"stopped at step {global_step}; continue with --resume {self.run.members[0].dir}"
        logdir = where if self.count > 1 else where.parent
        print(f"{self.agent} {state} — TensorBoard logs in {where} (tensorboard --logdir {logdir})")
        return summaries[0] if self.count == 1 else {"members": summaries}

    def _finished_already(self, global_step: int) -> bool:
        """Whether every member's summary says it finished at `global_step`: a finished run that was resumed."""
        for member in self.run.members:
            try:
                summary = json.loads((member.dir / "summary.json").read_text())
            except (OSError, json.JSONDecodeError):
                return False
            if not (summary.get("finished") and summary.get("global_step") == global_step):
                return False
        return True

    def _leave_finished_run(self, global_step: int) -> dict[str, Any]:
        """A resumed run that had finished: no evaluation, point, checkpoint or summary is added; it says so."""
        if self.recorder is not None:
            self.recorder.close()
        self.run.close()
        self.env.close()
        self.evaluator.close()
        summaries = [json.loads((member.dir / "summary.json").read_text()) for member in self.run.members]
        where = ", ".join(str(member.dir) for member in self.run.members)
        print(
            f"{self.agent}: {where} finished at step {global_step} already — nothing to do; "
            "a larger --total-timesteps trains it on"
        )
        return summaries[0] if self.count == 1 else {"members": summaries}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


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
