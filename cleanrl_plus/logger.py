"""TensorBoard logging with CleanRL's tag names; the hyperparameter table is the run's first text entry."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter

from envs.base import EpisodeStats


def hyperparameter_table(args: Any) -> str:
    rows = flatten_args(dataclasses.asdict(args))
    return "|param|value|\n|-|-|\n" + "\n".join(f"|{key}|{value}|" for key, value in rows.items())


def flatten_args(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested remedy settings become dotted keys (`swd.enabled`), as on the command line."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            flat.update(flatten_args(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


DIAGNOSED_NETWORK = re.compile(r"^plasticity/(\w+?)_dormant_0$")  # every diagnostics report has it, per network


def plasticity_layout(networks: list[str]) -> dict[str, dict[str, list]]:
    """TensorBoard's Custom Scalars dashboard: per diagnosed network, the returns next to its dormant fraction,
    ranks, norms and churn (tags of plasticity/diagnostics.py; regexes, so NTK and churn join when they start)."""
    returns = ["Multiline", [r"^charts/episodic_return$", r"^eval/episodic_return$"]]
    return {
        f"plasticity: {net}": {
            "return (train, eval)": returns,
            "dormant fraction": ["Multiline", [rf"^plasticity/{net}_dormant_"]],
            "active units": ["Multiline", [rf"^plasticity/{net}_active_units$"]],
            "ranks": ["Multiline", [rf"^plasticity/{net}_(srank|effective_rank|ntk_rank|ntk_effective_rank|ntk_srank)$"]],
            "norms": ["Multiline", [rf"^plasticity/{net}_(feature_norm|param_rms|distance_from_init|grad_norm)$"]],
            "churn": ["Multiline", [rf"^plasticity/{net}_(churn|greedy_churn|kl_churn)$"]],
        }
        for net in networks
    }


class Logger:
    def __init__(
        self, run_dir: str, args: Any, purge_step: int | None = None, before_first_event: Callable[[], None] | None = None
    ) -> None:
        # purge_step drops events a killed run wrote after its last checkpoint, so curves do not fold back.
        self.run_dir, self.purge_step, self.args = run_dir, purge_step, args
        self._writer: SummaryWriter | None = None  # opened on first use: a run refused at start-up leaves no events file
        self.before_first_event = before_first_event  # creates the run directory (Run.open)
        self._hyperparameters_written = False
        self.log_every = getattr(args, "log_every", 0)  # env steps between loss logs; remedies log their counters then too
        self.last_episodic_return: float | None = None
        self.diagnosed_networks: list[str] = []  # networks in the custom-scalars layout so far

    def _extend_layout(self, tags: Any) -> None:
        """Write the custom-scalars layout again when diagnostics report a network for the first time."""
        new = [m.group(1) for m in map(DIAGNOSED_NETWORK.match, tags) if m and m.group(1) not in self.diagnosed_networks]
        if new:
            self.diagnosed_networks += new
            self.writer.add_custom_scalars(plasticity_layout(self.diagnosed_networks))

    @property
    def writer(self) -> SummaryWriter:
        if self._writer is None:
            if self.before_first_event is not None:
                self.before_first_event()
            try:
                self._writer = SummaryWriter(self.run_dir, purge_step=self.purge_step)
            except OSError:
                self._remove_empty_events_files()
                raise
            if self.purge_step is None and not self._hyperparameters_written:  # a fresh run's first text entry
                self._writer.add_text("hyperparameters", hyperparameter_table(self.args))
                self._hyperparameters_written = True
        return self._writer

    def _remove_empty_events_files(self) -> None:
        """An events file this process opened on a full disk holds nothing; left behind it would only confuse readers."""
        for path in Path(self.run_dir).glob(f"events.out.tfevents.*.{os.getpid()}.*"):
            if path.stat().st_size == 0:
                path.unlink(missing_ok=True)

    def flush(self) -> None:
        """Hand every pending event to the OS: a checkpoint must not get ahead of the curves it continues."""
        if self._writer is not None:
            self._writer.flush()

    def scalar(self, tag: str, value: float | torch.Tensor, step: int) -> None:
        if isinstance(value, torch.Tensor):
            value = value.item()
        self.writer.add_scalar(tag, value, step)

    def scalars(self, values: Mapping[str, float | torch.Tensor], step: int) -> dict[str, float]:
        """Log several values with a single device sync (tensors are stacked and copied together); returns them."""
        tensors = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
        if tensors:
            host = torch.stack([v.detach().float().reshape(()) for v in tensors.values()]).cpu().tolist()
            values = {**values, **dict(zip(tensors, host))}
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self._extend_layout(values)
        return dict(values)

    def episodes(self, stats: EpisodeStats) -> None:
        """One point per env step at which episodes ended: the mean over the episodes that ended at that step
        (with one env, every episode; with thousands of envs, a few points per step instead of thousands)."""
        if not len(stats):
            return
        # grouped with numpy: tens of thousands of episodes end between two logs at 65,536 envs (a Python loop: ~50 ms)
        steps, group = np.unique(np.asarray(stats.end_steps), return_inverse=True)  # end steps arrive in order
        counts = np.bincount(group)
        mean_returns = np.bincount(group, weights=np.asarray(stats.returns, dtype=np.float64)) / counts
        mean_lengths = np.bincount(group, weights=np.asarray(stats.lengths, dtype=np.float64)) / counts
        for step, mean_return, mean_length in zip(steps.tolist(), mean_returns.tolist(), mean_lengths.tolist()):
            self.writer.add_scalar("charts/episodic_return", mean_return, step)
            self.writer.add_scalar("charts/episodic_length", mean_length, step)
        self.last_episodic_return = mean_returns[-1].item()

    def close(self) -> None:
        """Close the events file; one left empty (a write that failed on a full disk) is removed."""
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        try:
            writer.close()
        finally:
            self._remove_empty_events_files()


def member_values(value: Any, count: int) -> list[Any]:
    """One value per member: a (K,) tensor, list or array is split, anything else (a number, a 0-dim tensor) is every
    member's."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return list(value.reshape(count))
    if isinstance(value, (list, tuple, np.ndarray)):
        return list(value)
    return [value] * count


class GroupLogger:
    """The loggers of a group's members as one: a value with a member axis ((K,) tensor, list or array) goes to each
    member's run, a number to every member's. One device sync per call, whatever K. A member that diverged (`muted`)
    is written no more."""

    def __init__(self, loggers: list[Logger]) -> None:
        self.loggers = loggers
        self.muted: set[int] = set()
        self.log_every = loggers[0].log_every

    def __len__(self) -> int:
        return len(self.loggers)

    def scalars(self, values: Mapping[str, Any], step: int) -> list[dict[str, float]]:
        """Log each member's values; returns them, per member, on the host."""
        count = len(self.loggers)
        tensors = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
        host: dict[str, Any] = dict(values)
        if tensors:  # one copy for every tensor of every member
            flat = torch.cat([v.detach().float().reshape(-1) for v in tensors.values()]).cpu().tolist()
            offset = 0
            for key, v in tensors.items():
                host[key] = flat[offset : offset + v.numel()] if v.numel() > 1 else flat[offset]
                offset += v.numel()
        per_member = [{} for _ in range(count)]
        for key, value in host.items():
            for k, item in enumerate(member_values(value, count)):
                per_member[k][key] = float(item)
        for k, logger in enumerate(self.loggers):
            if k not in self.muted:
                logger.scalars(per_member[k], step)
        return per_member

    def scalar(self, tag: str, value: Any, step: int) -> None:
        self.scalars({tag: value}, step)

    def text(self, tag: str, text: str | list[str], step: int = 0) -> None:
        for k, (logger, item) in enumerate(zip(self.loggers, member_values(text, len(self.loggers)))):
            if k not in self.muted:
                logger.writer.add_text(tag, item, step)

    def episodes(self, stats: list[EpisodeStats]) -> None:
        """Each member's finished episodes (charts/episodic_return and _length)."""
        for k, (logger, member_stats) in enumerate(zip(self.loggers, stats)):
            if k not in self.muted:
                logger.episodes(member_stats)

    @property
    def last_episodic_return(self) -> list[float | None]:
        return [logger.last_episodic_return for logger in self.loggers]

    def flush(self) -> None:
        for logger in self.loggers:
            logger.flush()
