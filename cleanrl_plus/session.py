"""The plumbing around an agent's loop, shared by every agent: resume, periodic logging, evaluation, checkpoints,
the progress line, SPS clocks and the run summary. The agent file keeps only the algorithm.

    session = TrainingSession(run, "td3", env, evaluator, plasticity=plasticity, actor=actor, replay=replay, …)
    obs, global_step, num_updates = session.open_or_resume(env.reset(seed=args.seed))   # a resumed run continues here
    while global_step < args.total_timesteps and not run.stop_requested:
        …
        session.after_step(previous_step, global_step, num_updates, losses, policy, obs)
    return session.finish(global_step, num_updates, policy, obs)

The objects given as keywords, and the env, are the run's state: each `state_dict()` goes into every checkpoint under its
keyword, with the counters, the observations to act on next and the RNG states, and `open_or_resume` loads them back in that
order. The session ties together its parts, each a module of its own: the run's state (cleanrl_plus/run_state.py),
each member's evaluations and tasks (records.py), the continual schedule (schedule.py) and the clocks (clocks.py);
it evaluates, stops diverged members, logs, checkpoints and writes the summaries."""

from __future__ import annotations

import functools
import json
import math
import time
from pathlib import Path
from typing import Any, Callable

import torch

from cleanrl_plus.clocks import Clocks
from cleanrl_plus.evaluator import Evaluator
from cleanrl_plus.progress import Progress
from cleanrl_plus.records import MemberRecord, split_episodes
from cleanrl_plus.run import Run
from cleanrl_plus.run_state import RunState, finished_already
from cleanrl_plus.schedule import TaskSchedule, check_resumed_schedules
from cleanrl_plus.video import VideoRecorder, log_video
from envs.base import TorchVecEnv


def crossed(previous_step: int, global_step: int, every: int) -> bool:
    """Whether a step counter that moved from `previous_step` to `global_step` passed a multiple of `every` (> 0)."""
    return every > 0 and global_step // every > previous_step // every


class TrainingSession:
    def __init__(self, run: Run, agent: str, env: TorchVecEnv, evaluator: Evaluator, /, **state: Any) -> None:
        self.run, self.agent, self.env, self.evaluator, self.args = run, agent, env, evaluator, run.args
        self.count = len(run.members)
        self.state = RunState(state, env, self.count)
        # what runs at each step's end, after its evaluation: a reset due at that step (plasticity)
        self.step_end = [thing.at_step_end for thing in self.state.objects.values() if hasattr(thing, "at_step_end")]

    # ---- start and resume -------------------------------------------------------------------------------------
    def open_or_resume(self, obs: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        """(obs, global_step, num_updates) to start the loop from: the given observations and zeros, or, for a resumed
        group, its checkpoints', with every registered state and the RNG restored. Starts the clocks and the records."""
        run, counters = self.run, (obs, 0, 0)
        if run.resumed:
            counters = self.state.resume(run.resumed, run.device, run.resumed_from)
        start_step = counters[1]
        # a finished run resumed: nothing to train, evaluate or write (finish says so)
        self.finished_before = (
            run.resumed is not None
            and start_step >= self.args.total_timesteps
            and finished_already([member.dir for member in run.members], start_step)
        )
        if run.resumed:
            check_resumed_schedules(self.env, run.members)
        run.open(announce=not self.finished_before)  # everything is built and checked: the runs start writing
        self.progress = Progress(self.args.total_timesteps, start_step, f"{self.agent} {self.args.env_id}", self.args.progress)
        self.clocks = Clocks(start_step)
        self.records = [MemberRecord() for _ in run.members]
        self.schedule = TaskSchedule(self.env, self.args.continual.restarts_exploration, self.records, run)
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
        if self.schedule.task is not None:
            self.schedule.open(self.schedule.task, start_step, resumed=run.resumed is not None)
        return counters

    # ---- what the loop asks ---------------------------------------------------------------------------------------
    def off_policy_phase(
        self, global_step: int, num_updates: int, learning_starts: int, random_steps: int | None = None
    ) -> tuple[bool, bool]:
        """(act uniformly at random, learn after this step) for an off-policy agent at `global_step`
        (TaskSchedule.off_policy_phase). Starts the learning clock. Steps count per member."""
        act_randomly, learn = self.schedule.off_policy_phase(global_step, learning_starts, random_steps)
        if learn:
            self.clocks.learning_started(global_step + self.env.envs_per_member, num_updates)
        return act_randomly, learn

    # ---- evaluation, logging, divergence ----------------------------------------------------------------------
    def evaluate(self, policy: Callable[[torch.Tensor], torch.Tensor], global_step: int) -> None:
        """Deterministic evaluation of every member; in a continual run, on the task the agent is in."""
        task = self.schedule.task
        if task is not None:
            self.evaluator.env.set_task(task)
        returns = self.evaluator(policy).reshape(self.count, -1)
        means = [float(member_returns.mean()) for member_returns in returns]
        for record, mean, member_returns in zip(self.records, means, returns):
            record.add_evaluation(global_step, mean, member_returns.tolist(), task)
        self.run.logger.scalar("eval/episodic_return", means, global_step)
        self.progress.set(eval=_mean([mean for k, mean in enumerate(means) if not self.run.members[k].diverged]))
        self._stop_diverged([{"eval/episodic_return": mean} for mean in means], global_step)

    def _evaluate_unless_done(self, policy: Callable[[torch.Tensor], torch.Tensor], global_step: int) -> None:
        if self.records[0].last_eval.get("step") != global_step:
            self.evaluate(policy, global_step)

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
            record.add_episodes(member_stats)

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
        self.clocks.tick(global_step, num_updates)
        self.schedule.follow(global_step, functools.partial(self._evaluate_unless_done, policy, global_step))
        if crossed(previous_step, global_step, args.log_every):
            self._log_episodes()
            if losses:  # one device sync for all losses of all members, which are checked for NaN/inf then
                self._stop_diverged(logger.scalars(losses, global_step), global_step)
            logger.scalar("charts/SPS", self.clocks.sps(time.perf_counter(), global_step), global_step)
            if getattr(self.env, "frames", None) is not None:
                logger.scalar("charts/frames", self.env.frames, global_step)
            returns = [
                r for k, r in enumerate(logger.last_episodic_return) if r is not None and not self.run.members[k].diverged
            ]
            if returns:
                self.progress.set(ret=_mean(returns))
        if crossed(previous_step, global_step, args.eval_every):
            self._evaluate_unless_done(policy, global_step)
        for at_step_end in self.step_end:
            at_step_end(num_updates, global_step)
        if crossed(previous_step, global_step, args.checkpoint_every):
            self._log_episodes()  # episodes that ended up to here are logged before, not after, the checkpoint
            self._save(self._checkpoints(global_step, num_updates, obs), global_step, num_updates, False, time.perf_counter())
        self.progress.update(global_step)

    # ---- checkpoints and summaries ----------------------------------------------------------------------------
    def _checkpoints(self, global_step: int, num_updates: int, obs: torch.Tensor) -> list[dict[str, Any]]:
        return self.state.checkpoints(global_step, num_updates, obs, self.records)

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

    def summary(self, k: int, global_step: int, num_updates: int, finished: bool, now: float) -> dict[str, Any]:
        member, record = self.run.members[k], self.records[k]
        result = {
            "agent": self.agent,
            "env_id": self.args.env_id,
            "recipe": self.run.recipe.name if self.run.recipe else None,  # cleanrl_plus/recipes/<name>.toml
            "seed": member.args.seed,
            "run_dir": str(member.dir),
            "global_step": global_step,
            "num_updates": num_updates,
            "finished": finished,
            "device": str(self.run.device),
            "threads": torch.get_num_threads(),
            "members": self.count,  # runs trained together in this process (1: alone)
            "sps": self.clocks.sps(now, global_step),
            "eval": dict(record.last_eval),
            "eval_history": list(record.eval_history),
        }
        if self.schedule.task is not None:
            result["tasks"] = record.task_summaries(global_step)
        if getattr(self.env, "frames", None) is not None:
            result["frames"] = self.env.frames
        return result | self.clocks.learning_rates(now, global_step, num_updates)

    def _where(self) -> Path:
        """The run's directory; a group's: the folder of its members' directories."""
        return self.run.members[0].dir if self.count == 1 else self.run.members[0].dir.parent

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
        if self.finished_before and global_step == self.clocks.start_step:
            return self._leave_finished_run(global_step)
        self._log_episodes()
        if finished:
            self._evaluate_unless_done(policy, global_step)
        video = self.run.members[0].dir / "videos" / "final.mp4"
        if finished and self.recorder is not None and (global_step > self.clocks.start_step or not video.exists()):
            member = self.run.members[0]
            frames = self.recorder.record(policy, video, task=self.schedule.task)
            log_video(member.logger.writer, "videos/eval", frames, self.recorder.fps, global_step)
        if self.recorder is not None:
            self.recorder.close()
        self._save(self._checkpoints(global_step, num_updates, obs), global_step, num_updates, finished, loop_end)
        summaries = [self.summary(k, global_step, num_updates, finished, loop_end) for k in range(self.count)]
        for k, member in enumerate(self.run.members):
            if member.diverged:
                summaries[k] = json.loads((member.dir / "summary.json").read_text())
        self.progress.close(global_step)
        self.run.close()
        self.env.close()
        self.evaluator.close()
        where = self._where()
        state = "finished" if finished else f"stopped at step {global_step}; continue with --resume {self.run.members[0].dir}"
        logdir = where if self.count > 1 else where.parent
        print(f"{self.agent} {state} — TensorBoard logs in {where} (tensorboard --logdir {logdir})")
        return summaries[0] if self.count == 1 else {"members": summaries}

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
