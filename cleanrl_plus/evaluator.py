"""Periodic evaluation on its own, separately seeded batch of environments (built with `training=False`:
full episodes and raw rewards where a backend shapes them for learning, e.g. Atari)."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

import numpy as np
import torch

import envs
from cleanrl_plus.members import MemberEnvs, Members
from cleanrl_plus.run import group_seeds
from cleanrl_plus.speed import compiled
from envs.continual import is_continual

EVAL_SEED_OFFSET = 100_000  # evaluation episodes never share seeds with training episodes


class Evaluator:
    """Runs `num_episodes` episodes at once (one per sub-env) with the agent's evaluation policy; for a group of
    `members` seeds, `num_episodes` per member in one env, member k's seeded as a one-seed run of its seed would be.

    Every evaluation resets with the same seeds, so successive evaluations differ only by the policy:
    the curve is not confounded by changing start states. A policy that draws random numbers (ε-greedy
    evaluation) draws them from torch's RNG forked and seeded the same way at every evaluation, so no
    training RNG is consumed; a group's policy draws from `rng` instead (one generator per member, made anew at every
    evaluation), so that each member draws what it would alone.
    """

    check_every = 16  # env steps between host checks that every episode has ended (a device sync each); steps past
    # the end change no return, and fewer syncs let a GPU queue the steps ahead

    def __init__(
        self,
        env_id: str,
        num_episodes: int,
        seed: int,
        device: torch.device,
        members: tuple[int, ...] | None = None,
        **env_kwargs: Any,
    ) -> None:
        """`members`: the training seeds of a group (then `seed` is ignored); each member's evaluation seed is its
        training seed + EVAL_SEED_OFFSET."""
        training_seeds = members if members is not None else (seed,)
        self.seeds = tuple(member + EVAL_SEED_OFFSET for member in training_seeds)
        self.seed = self.seeds[0]
        if is_continual(env_id):  # the task schedules the members train on, not ones drawn from the evaluation seeds
            env_kwargs = env_kwargs | {"schedule_seeds": tuple(training_seeds)}
        self.env_id, self.env_kwargs = env_id, env_kwargs  # what a video recorder of the same episodes needs
        env = envs.make(env_id, num_episodes, device=device, training=False, members=self.seeds, **env_kwargs)
        self.env = MemberEnvs(env, len(self.seeds))
        self.rng = self.members_rng()

    def members_rng(self) -> Members:
        """Fresh per-member generators, seeded with the members' evaluation seeds, on the env's device."""
        return Members(self.seeds, self.env.device)

    def __call__(self, policy: Callable[[torch.Tensor, Members], torch.Tensor]) -> np.ndarray:
        """Each episode's return, shape (members, num_episodes) — (1, num_episodes) for a one-seed run. The policy
        takes (members, num_episodes, ...) observations and the members' generators (`rng`), and returns
        (members, num_episodes, ...) actions."""
        devices = [self.env.device] if self.env.device.type == "cuda" else []
        self.rng = self.members_rng()
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(self.seed)
            return self._run(policy)

    def _run(self, policy: Callable[[torch.Tensor, Members], torch.Tensor]) -> np.ndarray:
        obs = self.env.reset(seed=self.seeds)
        shape = (self.env.members, self.env.envs_per_member)
        returns = torch.zeros(shape, device=self.env.device)
        finished = torch.zeros(shape, dtype=torch.bool, device=self.env.device)
        steps = 0
        while steps % self.check_every or not bool(finished.all()):
            step = self.env.step(policy(obs, self.rng))
            returns += step.reward * ~finished
            finished |= step.terminated | step.truncated
            obs = step.obs
            steps += 1
        self.env.drain_episode_stats()
        return returns.cpu().numpy()

    def close(self) -> None:
        self.env.close()


class DeterministicPolicy:
    """An actor as an evaluation policy, called `policy(obs, generators)` as `Evaluator` calls one: its action
    `actor(obs)` (TD3's μ(s), SAC's tanh(μ(x))), which draws nothing from the evaluation's generators."""

    def __init__(self, actor: torch.nn.Module) -> None:
        self.actor = actor

    def __call__(self, obs: torch.Tensor, generators: Members) -> torch.Tensor:
        return self.actor(obs)


def env_options(args: Any) -> dict[str, Any]:
    """The env keywords an agent's flags ask for: the continual setting, --env-backend, dm-control's --action-repeat
    (the same for every member of a group: the member seeds go to `envs.make(members=)` apart)."""
    options: dict[str, Any] = {"continual": args.continual}
    if getattr(args, "env_backend", "auto") != "auto":
        options["backend"] = args.env_backend
    if hasattr(args, "action_repeat") and envs.backend_for(args.env_id) == "dmc":
        options["action_repeat"] = args.action_repeat
    return options


def make_envs(args: Any, device: torch.device) -> tuple[Any, Evaluator]:
    """An agent's training envs (--num-envs per member, seeded from each of --seeds, or --seed), seen as members
    (observations (members, num_envs, ...); cleanrl_plus.members.MemberEnvs), and its evaluator (--eval-episodes per
    member, seeds of its own)."""
    options, seeds = env_options(args), group_seeds(args)
    env = envs.make(args.env_id, num_envs=args.num_envs, device=device, members=seeds, **options)
    if getattr(args, "compile", False):  # tensor backends step through one compiled function (host backends: no-op)
        env.compile_steps(partial(compiled, enabled=True))
    return MemberEnvs(env, len(seeds)), Evaluator(args.env_id, args.eval_episodes, args.seed, device, members=seeds, **options)
