"""The plumbing around an agent's loop, shared by every agent: periodic logging, evaluation, checkpoints,
the progress line, SPS clocks and the run summary. The agent file keeps only the algorithm."""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from cleanrl_plus.evaluation import Evaluator
from cleanrl_plus.progress import Progress
from cleanrl_plus.run import Run
from envs.base import TorchVecEnv


def crossed(previous_step: int, global_step: int, every: int) -> bool:
    """Whether a step counter that moved from `previous_step` to `global_step` passed a multiple of `every` (> 0)."""
    return every > 0 and global_step // every > previous_step // every


class TrainingSession:
    def __init__(self, run: Run, agent: str, env: TorchVecEnv, evaluator: Evaluator, start_step: int) -> None:
        self.run, self.agent, self.env, self.evaluator, self.args = run, agent, env, evaluator, run.args
        self.progress = Progress(self.args.total_timesteps, start_step, f"{agent} {self.args.env_id}", self.args.progress)
        self.start_time, self.start_step = time.perf_counter(), start_step
        self.learning_clock: tuple[float, int, int] | None = None  # (time, step, updates) when updates began
        self.last_eval: dict[str, Any] = {}
        self.eval_history: list[tuple[int, float]] = []

    def learning_started(self, global_step: int, num_updates: int) -> None:
        if self.learning_clock is None:
            self.learning_clock = (time.perf_counter(), global_step, num_updates)

    def evaluate(self, policy: Callable[[torch.Tensor], torch.Tensor], global_step: int) -> None:
        returns = self.evaluator(policy)
        self.last_eval = {"step": global_step, "mean": float(returns.mean()), "returns": returns.tolist()}
        self.eval_history.append((global_step, self.last_eval["mean"]))
        self.run.logger.scalar("eval/episodic_return", self.last_eval["mean"], global_step)
        self.progress.set(eval=self.last_eval["mean"])

    def after_step(
        self,
        previous_step: int,
        global_step: int,
        num_updates: int,
        losses: dict[str, torch.Tensor],
        policy: Callable[[torch.Tensor], torch.Tensor],
        checkpoint_state: Callable[[], dict[str, Any]],
    ) -> None:
        """Log, evaluate and checkpoint when `global_step` crosses a multiple of the respective interval."""
        args, logger = self.args, self.run.logger
        if crossed(previous_step, global_step, args.log_every):
            logger.episodes(self.env.drain_episode_stats())
            if losses:
                logger.scalars(losses, global_step)  # one device sync for all losses
            logger.scalar("charts/SPS", self.sps(time.perf_counter(), global_step), global_step)
            if getattr(self.env, "frames", None) is not None:
                logger.scalar("charts/frames", self.env.frames, global_step)
            if logger.last_episodic_return is not None:
                self.progress.set(ret=logger.last_episodic_return)
        if crossed(previous_step, global_step, args.eval_every):
            self.evaluate(policy, global_step)
        if crossed(previous_step, global_step, args.checkpoint_every):
            self.run.save(checkpoint_state(), self.summary(global_step, num_updates, False, time.perf_counter()))
        self.progress.update(global_step)

    def sps(self, now: float, global_step: int) -> float:
        return (global_step - self.start_step) / max(now - self.start_time, 1e-9)

    def summary(self, global_step: int, num_updates: int, finished: bool, now: float) -> dict[str, Any]:
        result = {
            "agent": self.agent, "env_id": self.args.env_id, "seed": self.args.seed, "run_dir": str(self.run.dir),
            "global_step": global_step, "num_updates": num_updates, "finished": finished,
            "device": str(self.run.device), "threads": torch.get_num_threads(), "sps": self.sps(now, global_step),
            "eval": dict(self.last_eval), "eval_history": list(self.eval_history),
        }
        if getattr(self.env, "frames", None) is not None:
            result["frames"] = self.env.frames
        if self.learning_clock is not None:
            started, step, updates = self.learning_clock
            elapsed = max(now - started, 1e-9)
            result["sps_learning"] = (global_step - step) / elapsed
            result["updates_per_second"] = (num_updates - updates) / elapsed
        return result

    def finish(
        self,
        global_step: int,
        num_updates: int,
        policy: Callable[[torch.Tensor], torch.Tensor],
        checkpoint_state: Callable[[], dict[str, Any]],
    ) -> dict[str, Any]:
        """Final evaluation (if the run finished), final checkpoint and summary, closing message."""
        loop_end, finished = time.perf_counter(), global_step >= self.args.total_timesteps
        self.run.logger.episodes(self.env.drain_episode_stats())
        if finished and self.last_eval.get("step") != global_step:
            self.evaluate(policy, global_step)
        result = self.summary(global_step, num_updates, finished, loop_end)
        self.run.save(checkpoint_state(), result)
        self.progress.close(global_step)
        self.run.close()
        self.env.close()
        self.evaluator.close()
        state = "finished" if finished else f"stopped at step {global_step}; continue with --resume {self.run.dir}"
        print(f"{self.agent} {state} — TensorBoard logs in {self.run.dir} (tensorboard --logdir {self.run.dir.parent})")
        return result
