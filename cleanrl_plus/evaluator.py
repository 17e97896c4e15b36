"""Periodic evaluation on its own, separately seeded batch of environments (built with `training=False`:
full episodes and raw rewards where a backend shapes them for learning, e.g. Atari)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

import envs

EVAL_SEED_OFFSET = 100_000  # evaluation episodes never share seeds with training episodes


class Evaluator:
    """Runs `num_episodes` episodes at once (one per sub-env) with the agent's evaluation policy.

    Every evaluation resets with the same seed, so successive evaluations differ only by the policy:
    the curve is not confounded by changing start states. A policy that draws random numbers (ε-greedy
    evaluation) draws them from torch's RNG forked and seeded the same way at every evaluation, so no
    training RNG is consumed.
    """

    check_every = 16  # env steps between host checks that every episode has ended (a device sync each); steps past
    # the end change no return, and fewer syncs let a GPU queue the steps ahead

    def __init__(self, env_id: str, num_episodes: int, seed: int, device: torch.device, **env_kwargs: Any) -> None:
        self.seed = seed + EVAL_SEED_OFFSET
        self.env_id, self.env_kwargs = env_id, env_kwargs  # what a video recorder of the same episodes needs
        self.env = envs.make(env_id, num_envs=num_episodes, seed=self.seed, device=device, training=False, **env_kwargs)

    def __call__(self, policy: Callable[[torch.Tensor], torch.Tensor]) -> np.ndarray:
        devices = [self.env.device] if self.env.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(self.seed)
            return self._run(policy)

    def _run(self, policy: Callable[[torch.Tensor], torch.Tensor]) -> np.ndarray:
        obs = self.env.reset(seed=self.seed)
        n = self.env.num_envs
        returns = torch.zeros(n, device=self.env.device)
        finished = torch.zeros(n, dtype=torch.bool, device=self.env.device)
        steps = 0
        while steps % self.check_every or not bool(finished.all()):
            step = self.env.step(policy(obs))
            returns += step.reward * ~finished
            finished |= step.terminated | step.truncated
            obs = step.obs
            steps += 1
        self.env.drain_episode_stats()
        return returns.cpu().numpy()

    def close(self) -> None:
        self.env.close()


def env_options(args: Any) -> dict[str, Any]:
    """The env keywords an agent's flags ask for: the continual setting, --env-backend, dm-control's --action-repeat."""
    options: dict[str, Any] = {"continual": args.continual}
    if getattr(args, "env_backend", "auto") != "auto":
        options["backend"] = args.env_backend
    if hasattr(args, "action_repeat") and envs.backend_for(args.env_id) == "dmc":
        options["action_repeat"] = args.action_repeat
    return options


def make_envs(args: Any, device: torch.device) -> tuple[Any, Evaluator]:
    """An agent's training envs (--num-envs, seeded from --seed) and its evaluator (--eval-episodes, seeds of its own)."""
    options = env_options(args)
    env = envs.make(args.env_id, num_envs=args.num_envs, seed=args.seed, device=device, **options)
    return env, Evaluator(args.env_id, args.eval_episodes, args.seed, device, **options)
