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

import json
import math
import time
from typing import Any, Callable

import torch

from cleanrl_plus.checkpoint import capture_rng_state, load_error_detail, restore_rng_state
from cleanrl_plus.errors import UserError
from cleanrl_plus.evaluator import Evaluator
from cleanrl_plus.progress import Progress
from cleanrl_plus.run import Run
from cleanrl_plus.video import VideoRecorder, log_video
from envs.base import TorchVecEnv


def crossed(previous_step: int, global_step: int, every: int) -> bool:
    """Whether a step counter that moved from `previous_step` to `global_step` passed a multiple of `every` (> 0)."""
    return every > 0 and global_step // every > previous_step // every


class TrainingSession:
    burnin_steps = 0  # `cleanrl-plus bench --burnin`: env steps of learning before the learning clock starts over

    def __init__(self, run: Run, agent: str, env: TorchVecEnv, evaluator: Evaluator, /, **state: Any) -> None:
        self.run, self.agent, self.env, self.evaluator, self.args = run, agent, env, evaluator, run.args
        # name → object with state_dict()/load_state_dict(): what a checkpoint holds and a resume loads, the env included
        self.state = state | {"env": env}

    def start(self, obs: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        """(obs, global_step, num_updates) to start the loop from: the given observations and zeros, or, for a resumed
        run, its checkpoint's, with every registered state and the RNG restored. Starts the clocks and the records."""
        run, counters = self.run, (obs, 0, 0)
        if run.resumed:
            for name, thing in self.state.items():
                try:
                    thing.load_state_dict(run.resumed[name])
                except (RuntimeError, KeyError, ValueError) as error:  # another run's checkpoint, or other flags' networks
                    raise UserError(
                        f"--resume {run.dir}: its checkpoint does not fit this run: {load_error_detail(error, name)} — "
                        "was checkpoint.pt copied from another run? Resume each run with its own checkpoint"
                    ) from None
            restore_rng_state(run.resumed["rng"])
            counters = (run.resumed["obs"].to(run.device), run.resumed["global_step"], run.resumed["num_updates"])
        run.open()  # everything is built and checked: the run starts writing
        start_step = counters[1]
        self.progress = Progress(self.args.total_timesteps, start_step, f"{self.agent} {self.args.env_id}", self.args.progress)
        self.start_time, self.start_step = time.perf_counter(), start_step
        self.learning_clock: tuple[float, int, int] | None = None  # (time, step, updates) when updates began
        self.burnt_in = self.burnin_steps == 0  # the clock restarted after the burn-in (compilation, graph capture)
        self.last_eval: dict[str, Any] = {}
        self.eval_history: list[tuple[int, float]] = []
        # continual envs: the scheduled task, where it began, and per-task records (None: a stationary env)
        self.task: int | None = getattr(self.env, "scheduled_task", None)
        self.task_start_step = 0
        self.task_switched = False  # True right after the step at which the schedule moved to a new task
        self.num_updates = counters[2]  # as of the latest after_step, for a summary written when the run stops early
        self.tasks: dict[int, dict[str, Any]] = {}
        self.recorder = None  # --capture-video: built now, so a missing renderer stops the run before training
        if self.args.capture_video:
            self.recorder = VideoRecorder(self.evaluator.env_id, self.evaluator.seed, run.device, **self.evaluator.env_kwargs)
        if run.resumed:
            self._restore_history(start_step)
        if self.task is not None:
            self._open_task(self.task, start_step, resumed=run.resumed is not None)
        return counters

    def checkpoint_state(self, global_step: int, num_updates: int, obs: torch.Tensor) -> dict[str, Any]:
        counters = {"global_step": global_step, "num_updates": num_updates, "obs": obs, "rng": capture_rng_state()}
        return counters | {name: thing.state_dict() for name, thing in self.state.items()}

    def _restore_history(self, start_step: int) -> None:
        """A resumed run continues the evaluation and per-task records of its summary (up to its checkpoint)."""
        path = self.run.dir / "summary.json"
        try:
            previous = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return
        self.eval_history = [tuple(entry) for entry in previous.get("eval_history", []) if entry[0] <= start_step]
        for record in previous.get("tasks", []):
            self.tasks[record["task"]] = record | {"evals": [tuple(e) for e in record.get("evals", []) if e[0] <= start_step]}

    def _open_task(self, task: int, step: int, resumed: bool = False) -> None:
        if resumed and task in self.tasks:
            self.task_start_step = self.tasks[task]["start_step"]
            return
        self.task_start_step = step
        self.tasks[task] = {
            "task": task,
            "start_step": step,
            "end_step": None,
            "evals": [],
            "train_return_sum": 0.0,
            "train_episodes": 0,
        }
        self.run.logger.scalar("continual/task", task, step)  # the switch marker in TensorBoard
        if not resumed and task == 0:
            schedule = self.env.describe()
            (self.run.dir / "schedule.json").write_text(json.dumps(schedule, indent=2))
            self.run.logger.writer.add_text("continual/schedule", "\n".join(f"    {entry}" for entry in schedule), step)

    def schedule_step(self, global_step: int) -> int:
        """The step count exploration schedules run on: steps since the task began when they restart per task
        (--continual.reset-exploration, the oracle)."""
        restart_per_task = self.args.continual.restarts_exploration and self.task is not None
        return global_step - self.task_start_step if restart_per_task else global_step

    def off_policy_phase(self, global_step: int, num_updates: int, learning_starts: int) -> tuple[bool, bool]:
        """(act uniformly at random, learn after this step) for an off-policy agent at `global_step`: the first
        `learning_starts` steps act at random (from each task's start with --continual.reset-exploration), as do the
        --continual.random-steps-per-task of each task, which learn nothing; learning starts with the step that
        reaches `learning_starts`. Starts the learning clock."""
        schedule_step, task_warmup = self.schedule_step(global_step), self.in_task_warmup(global_step)
        learn = schedule_step + self.env.num_envs > learning_starts and not task_warmup
        if learn:
            self.learning_started(global_step + self.env.num_envs, num_updates)
        return schedule_step < learning_starts or task_warmup, learn

    def in_task_warmup(self, global_step: int) -> bool:
        """Continual ids with --continual.random-steps-per-task N: the first N steps of every task act at random and
        learn nothing (C-CHAIN starts each MinAtar game so)."""
        setting = getattr(self.env, "setting", None)
        return self.task is not None and global_step - self.task_start_step < setting.random_steps_per_task

    def learning_started(self, global_step: int, num_updates: int) -> None:
        if self.learning_clock is None:
            self.learning_clock = (time.perf_counter(), global_step, num_updates)

    def evaluate(self, policy: Callable[[torch.Tensor], torch.Tensor], global_step: int) -> None:
        """Deterministic evaluation; in a continual run, on the task the agent is in."""
        if self.task is not None:
            self.evaluator.env.set_task(self.task)
        returns = self.evaluator(policy)
        self.last_eval = {"step": global_step, "mean": float(returns.mean()), "returns": returns.tolist()}
        self.eval_history.append((global_step, self.last_eval["mean"]))
        self.run.logger.scalar("eval/episodic_return", self.last_eval["mean"], global_step)
        if self.task is not None:
            self.tasks[self.task]["evals"].append((global_step, self.last_eval["mean"]))
        self.progress.set(eval=self.last_eval["mean"])
        self._stop_if_not_finite({"eval/episodic_return": self.last_eval["mean"]}, global_step)

    def _stop_if_not_finite(self, values: dict[str, float], global_step: int) -> None:
        """Values already on the host (read at the logging cadence): a NaN/inf stops the run (see Run.stop_diverged)."""
        for quantity, value in values.items():
            if isinstance(value, float) and not math.isfinite(value):
                summary = self.summary(global_step, self.num_updates, False, time.perf_counter())
                self.progress.close(global_step)
                self.run.stop_diverged(global_step, quantity, value, summary)

    def _log_episodes(self) -> None:
        stats = self.env.drain_episode_stats()
        self.run.logger.episodes(stats)
        for episodic_return, task in zip(stats.returns, stats.task_ids):
            record = self.tasks.get(task)
            if record is not None:
                record["train_return_sum"] += episodic_return
                record["train_episodes"] += 1

    def _follow_schedule(self, policy: Callable[[torch.Tensor], torch.Tensor], global_step: int) -> None:
        """At a switch: the end-of-task evaluation (on the task that ends), then the new task's record."""
        self.task_switched = False
        if self.task is None or self.env.scheduled_task == self.task:
            return
        if self.last_eval.get("step") != global_step:
            self.evaluate(policy, global_step)
        self.tasks[self.task]["end_step"] = global_step
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
        """Log, evaluate and checkpoint when `global_step` crosses a multiple of the respective interval; `obs` are the
        observations the loop acts on next (a checkpoint keeps them)."""
        args, logger = self.args, self.run.logger
        self.num_updates = num_updates
        if not self.burnt_in and self.learning_clock is not None and global_step >= self.learning_clock[1] + self.burnin_steps:
            self.learning_clock, self.burnt_in = (time.perf_counter(), global_step, num_updates), True
        self._follow_schedule(policy, global_step)
        if crossed(previous_step, global_step, args.log_every):
            self._log_episodes()
            if losses:  # one device sync for all losses, which are checked for NaN/inf then
                self._stop_if_not_finite(logger.scalars(losses, global_step), global_step)
            logger.scalar("charts/SPS", self.sps(time.perf_counter(), global_step), global_step)
            if getattr(self.env, "frames", None) is not None:
                logger.scalar("charts/frames", self.env.frames, global_step)
            if logger.last_episodic_return is not None:
                self.progress.set(ret=logger.last_episodic_return)
        if crossed(previous_step, global_step, args.eval_every) and self.last_eval.get("step") != global_step:
            self.evaluate(policy, global_step)
        if crossed(previous_step, global_step, args.checkpoint_every):
            self._log_episodes()  # episodes that ended up to here are logged before, not after, the checkpoint
            self.run.save(
                self.checkpoint_state(global_step, num_updates, obs),
                self.summary(global_step, num_updates, False, time.perf_counter()),
            )
        self.progress.update(global_step)

    def sps(self, now: float, global_step: int) -> float:
        return (global_step - self.start_step) / max(now - self.start_time, 1e-9)

    def summary(self, global_step: int, num_updates: int, finished: bool, now: float) -> dict[str, Any]:
        result = {
            "agent": self.agent,
            "env_id": self.args.env_id,
            "seed": self.args.seed,
            "run_dir": str(self.run.dir),
            "global_step": global_step,
            "num_updates": num_updates,
            "finished": finished,
            "device": str(self.run.device),
            "threads": torch.get_num_threads(),
            "sps": self.sps(now, global_step),
            "eval": dict(self.last_eval),
            "eval_history": list(self.eval_history),
        }
        if self.task is not None:
            result["tasks"] = [self._task_summary(record, global_step) for _, record in sorted(self.tasks.items())]
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
        """Final evaluation (if the run finished), final checkpoint and summary, closing message."""
        loop_end, finished = time.perf_counter(), global_step >= self.args.total_timesteps
        self.num_updates = num_updates
        self._log_episodes()
        if finished and self.last_eval.get("step") != global_step:
            self.evaluate(policy, global_step)
        if finished and self.recorder is not None:
            frames = self.recorder.record(policy, self.run.dir / "videos" / "final.mp4", task=self.task)
            log_video(self.run.logger.writer, "videos/eval", frames, self.recorder.fps, global_step)
        if self.recorder is not None:
            self.recorder.close()
        result = self.summary(global_step, num_updates, finished, loop_end)
        self.run.save(self.checkpoint_state(global_step, num_updates, obs), result)
        self.progress.close(global_step)
        self.run.close()
        self.env.close()
        self.evaluator.close()
        state = "finished" if finished else f"stopped at step {global_step}; continue with --resume {self.run.dir}"
        print(f"{self.agent} {state} — TensorBoard logs in {self.run.dir} (tensorboard --logdir {self.run.dir.parent})")
        return result
