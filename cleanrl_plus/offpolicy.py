"""What Double DQN, TD3 and SAC share around their algorithm, written once: the start of a run (its members'
generators and its envs), the part of a built agent every off-policy loop reads, networks built member by member
(and rebuilt so by the resets), the forwards the plasticity code runs on a replay batch and the batches of a learning
phase.

    agent = build(args)     # an OffPolicyParts: networks, optimisers, replay, plasticity, session, the steps
    train(agent)            # act → step and store → learn, the CleanRL loop
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator

import gymnasium as gym
import torch
import torch.nn as nn

import envs
from cleanrl_plus.evaluator import Evaluator, make_envs
from cleanrl_plus.exploration import uniform_or_explore
from cleanrl_plus.members import Members
from cleanrl_plus.replay import Batch, ReplayBuffer
from cleanrl_plus.run import Run, group_seeds, prepare_run
from cleanrl_plus.session import TrainingSession
from envs.errors import UserError


def prepare_run_and_envs(
    args: Any, space: type[gym.Space], algorithm: str, instead: str
) -> tuple[Run, Members, Any, Evaluator]:
    """The run (its checks passed), its members' generators (each from its own seed), its training envs and evaluator;
    an action space other than `space` is a one-line UserError that names the agents to use `instead`."""
    run = prepare_run(args)
    members = Members(run.seeds, run.device)
    env, evaluator = make_envs(args, run.device)
    envs.check_actions(env, args.env_id, space, algorithm, instead)
    return run, members, env, evaluator


@dataclasses.dataclass(eq=False)
class OffPolicyParts:
    """What every off-policy `build` returns besides its own networks, optimisers and steps (each agent's subclass)."""

    args: Any
    run: Run
    members: Members
    env: Any
    obs: torch.Tensor
    """the observations of the first step (a resumed run continues from its checkpoint's: `session.open_or_resume`)"""
    replay: ReplayBuffer
    plasticity: Any
    """the agent's plasticity.Plasticity: remedies, diagnostics and resets of its networks"""
    session: TrainingSession
    policy: Callable[[torch.Tensor, Members], torch.Tensor]
    """the evaluation policy, (observations, the evaluation's generators) → actions"""


@dataclasses.dataclass(eq=False)
class ActorCriticParts(OffPolicyParts):
    """An off-policy actor-critic on a Box (TD3, SAC): what its acting step reads, and the networks
    and optimisers every such agent holds, besides OffPolicyParts's."""

    actor: nn.Module
    critic: nn.Module
    critic_target: nn.Module
    actor_optimizer: torch.optim.Optimizer
    critic_optimizer: torch.optim.Optimizer
    normalizer: nn.Module
    """the observation statistics every network reads, changed only by acting (--normalize-obs)"""
    explore: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """(observations, noise ~ N(0, I) drawn outside) → the exploring policy's actions"""


def act_in_box(agent: ActorCriticParts, obs: torch.Tensor, global_step: int, num_updates: int) -> tuple[bool, torch.Tensor]:
    """(learn after this step, the actions) of an actor-critic at `global_step`: a ~ U(A) while it acts at random (before
    learning starts or for TD3's --random-steps, and in a continual task's random steps), else `agent.explore(s,
    noise)`. The observation statistics are updated with s first: with --normalize-obs the only place they change."""
    # TD3's --random-steps: random actions for another number of steps than --learning-starts (SAC has none)
    random_steps = getattr(agent.args, "random_steps", None)
    act_randomly, learn = agent.session.off_policy_phase(global_step, num_updates, agent.args.learning_starts, random_steps)
    agent.normalizer.update(obs)
    return learn, uniform_or_explore(act_randomly, agent.explore, obs, *agent.actor.bounds, agent.members)


def on_obs(network: Callable[[torch.Tensor], Any], batch: Batch) -> Any:
    """network(s) on a replay batch: an actor's or a Q(s, ·) network's output, as the plasticity code reads it."""
    return network(batch.obs)


def q_on_batch(critic: nn.Module, batch: Batch) -> torch.Tensor:
    """Q(s, a) of every copy of a critic on a replay batch, as the plasticity code reads it."""
    return critic(batch.obs, batch.actions)


class DeferredUpdates:
    """The gradient steps owed since the last learning phase, with `--update-every F`: each step that learns adds its
    gradient steps, and every F-th vector-env step pays them all at once (F = 1: after each step, CleanRL's loop; F = 0:
    at each episode's end, for one member with one env). The camera-ready TD3 trains at each episode's end, as many
    times as the episode had steps (sfujim/TD3 @bc98e626, main.py): that is F = 0 from the first step, and on
    HalfCheetah, whose episodes are always 1,000 steps, F = 1000 too, for a group. The debt is the group's (every member
    steps together) and goes into the checkpoint, so a run stopped inside a block resumes owing what it owed."""

    def __init__(self, every: int) -> None:
        self.every, self.owed = every, 0

    def after_step(
        self, learn: bool, gradient_steps: int, vector_steps: int, terminated: torch.Tensor, truncated: torch.Tensor
    ) -> int:
        """The gradient steps to make now, after the `vector_steps`-th vector-env step of the run, which ended the
        episodes `terminated` or `truncated` mark (read only with F = 0: the hot path computes nothing more)."""
        self.owed += gradient_steps if learn else 0
        if vector_steps % self.every if self.every else not bool((terminated | truncated).any()):
            return 0
        updates, self.owed = self.owed, 0
        return updates

    def state_dict(self) -> dict[str, int]:
        return {"owed": self.owed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.owed = int(state["owed"])

    def member_state_dict(self, k: int) -> dict[str, int]:
        return self.state_dict()  # the same for every member

    def load_member_state_dicts(self, states: list[dict[str, int]]) -> None:
        self.load_state_dict(states[0])


def check_update_schedule(args: Any) -> None:
    """--update-every 0 (at each episode's end) is one member's with one env: the episodes of several end at different
    steps, and a group's members update together."""
    if args.update_every == 0 and (len(group_seeds(args)) > 1 or args.num_envs > 1):
        raise UserError(
            "--update-every 0 trains at each episode's end, which needs one seed and one env: run each seed on its own "
            "(--seed S, --num-envs 1), or give --update-every F > 0"
        )


def update_batches(
    replay: ReplayBuffer, updates: int, batch_size: int, reuse: bool, per_step: int | None = None
) -> Iterator[tuple[Batch, bool]]:
    """(batch, whether it is the phase's last update) for each of `updates` gradient steps of a learning phase: a fresh
    batch for each, sampled as its update begins, or with `reuse` (same-batch reuse, CIR's SMR) one batch for each env
    step's `per_step` updates (None: the whole phase; a phase of --update-every F holds F steps' updates)."""
    per_step = per_step or updates
    for index in range(updates):
        if index % per_step == 0 or not reuse:
            batch = replay.sample(batch_size)
        yield batch, index == updates - 1
