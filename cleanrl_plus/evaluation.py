"""Periodic deterministic evaluation on its own, separately seeded batch of environments."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

import envs

EVAL_SEED_OFFSET = 100_000  # evaluation episodes never share seeds with training episodes


class Evaluator:
    """Runs `num_episodes` episodes at once (one per sub-env) with a deterministic policy.

    Every evaluation resets with the same seed, so successive evaluations differ only by the policy:
    the curve is not confounded by changing start states. No training RNG is consumed.
    """

    def __init__(self, env_id: str, num_episodes: int, seed: int, device: torch.device, **env_kwargs: Any) -> None:
        self.seed = seed + EVAL_SEED_OFFSET
        self.env = envs.make(env_id, num_envs=num_episodes, seed=self.seed, device=device, **env_kwargs)

    @torch.no_grad()
    def __call__(self, policy: Callable[[torch.Tensor], torch.Tensor]) -> np.ndarray:
        obs = self.env.reset(seed=self.seed)
        n = self.env.num_envs
        returns = torch.zeros(n, device=self.env.device)
        finished = torch.zeros(n, dtype=torch.bool, device=self.env.device)
        while not bool(finished.all()):
            step = self.env.step(policy(obs))
            returns += step.reward * ~finished
            finished |= step.terminated | step.truncated
            obs = step.obs
        self.env.drain_episode_stats()
        return returns.cpu().numpy()

    def close(self) -> None:
        self.env.close()
