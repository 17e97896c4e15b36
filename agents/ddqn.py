"""Double DQN (van Hasselt, Guez, Silver, AAAI 2016; arXiv 1509.06461) on the DQN of Mnih et al.
(Nature 2015).

    for every environment step:
        ε = linear schedule from start_e to end_e over exploration_fraction · total_timesteps
        a = uniform random action with probability ε, else argmax_a Q(s, a)
        store (s, a, r, s', terminated)       # time-limit truncation is not terminal: bootstrap
        every `train_frequency` env steps after learning starts, `gradient_steps` times:
            sample a batch;  a* = argmax_a' Q(s', a')   # the online network selects …
            y = r + γ(1 − terminated)·Q̄(s', a*)         # … the target network evaluates
            minimise Huber (or MSE) of Q(s, a) − y
        every `target_network_frequency` env steps: θ̄ ← (1 − τ)θ̄ + τθ   (τ = 1: hard copy)

Defaults depend on the env family (the recipes cleanrl_plus/recipes/ddqn-*.toml, each with its
sources, picked by `--env-id`; flags given override them):
- Atari `ALE/<Game>-v5`: the field defaults below, CleanRL's `dqn_atari.py` (lr 1e-4, buffer 1M,
  batch 32, 80k random-ish steps, train every 4 steps, hard target copy every 1000 steps, ε 1 →
  0.01 over 10% of 10M steps, ε = 0.05 in evaluation) with the Double-DQN target and the Huber loss of Mnih et al./
  van Hasselt et al. (CleanRL uses MSE: `--loss mse`); Nature CNN.
- MinAtar `MinAtar/<Game>-v0|v1`: the DQN settings of a Stable-Baselines3 reference run we
  measured on MinAtar Breakout (docs/agents/ddqn.md; lr 2.5e-4, buffer 100k, batch 32, train
  every 4, target every 1000, ε 1 → 0.1 over 100k of 5M steps) with MinAtar's small CNN
  (conv 16×3×3 → 128) and 5k warm-up steps (Young & Tian 2019).
- Anything else (vector observations, e.g. CartPole-v1): rl-zoo's DQN CartPole settings
  (lr 2.3e-3, 128 gradient steps every 256 env steps, target copy every 10 env steps, ε → 0.04
  over 16%, batch 64, buffer 100k, 1k warm-up, [256, 256] MLP, gradient norm clipped at 10 as
  in SB3).

Every quantity holds the members of a group first (`--seeds 1 2 3`: one process trains each seed
as its own run; cleanrl_plus/members.py): Q-networks (members, ...), replay (members, capacity,
...), ε-greedy draws from each member's generator, one TD loss per member.

Run: python agents/ddqn.py --env-id ALE/Breakout-v5 --seed 1
(python agents/ddqn.py --help lists every flag). On a GPU, add --compile --cudagraphs: the same
math, captured and replayed (cleanrl_plus/speed.py, docs/speed.md).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Annotated, Any, Callable, Literal

import gymnasium as gym
import torch
import torch.nn as nn
import torch.nn.functional as F

from cleanrl_plus.config import RunArgs
from cleanrl_plus.encoders import MinAtarCNN, MLPTorso, NatureCNN
from cleanrl_plus.exploration import epsilon_greedy, exploration_draws
from cleanrl_plus.frame_replay import FrameStackReplay
from cleanrl_plus.members import GroupNetwork, Members
from cleanrl_plus.nn import EnsembleLinear, polyak_update, target_copy
from cleanrl_plus.offpolicy import OffPolicyParts, on_obs, prepare_run_and_envs, update_batches
from cleanrl_plus.replay import Batch, ReplayBuffer, step_and_store
from cleanrl_plus.run import check_run_args, cli_main
from cleanrl_plus.session import TrainingSession, crossed
from cleanrl_plus.speed import GraphStep, compiled
from envs.errors import UserError
from envs.ranges import AtLeastOne, Count, Fraction, NonNegative, Positive, Range
from plasticity import Network, Plasticity, catalogue
from plasticity.architecture import torso_settings
from plasticity.diagnostics import DiagnosticsArgs
from plasticity.hooks import RemedyArgs
from plasticity.network import Layout
from plasticity.optimizers import clip_each_members_gradient, make_optimizer
from plasticity.resets import ResetArgs, rebuild_injected_heads
from plasticity.swd import SWDArgs, make_sampler

NetworkKind = Literal["auto", "nature-cnn", "minatar-cnn", "mlp"]


@dataclasses.dataclass
class Args(RemedyArgs, RunArgs):
    exp_name: str = "ddqn"
    """name of this experiment (the run directory is
    runs/{env_id}__{exp_name}__{seed}__{unix_time})"""
    env_id: str = "ALE/Breakout-v5"
    """the environment id, discrete actions: ALE/<Game>-v5, MinAtar/<Game>-v1, CartPole-v1, …;
    it also picks the defaults"""
    env_backend: Literal["auto", "atari", "envpool"] = "auto"
    """'auto' = ale-py for ALE ids and gymnasium otherwise; 'envpool' runs ALE ids in envpool
    (faster on CPU)"""
    total_timesteps: AtLeastOne = 10_000_000
    """total environment steps (agent steps; Atari frames are 4× this)"""
    eval_every: Count = 250_000
    """environment steps between evaluations on a separately seeded env (full games, raw scores;
    0 = only at the end)"""
    checkpoint_every: Count = 1_000_000
    """environment steps between checkpoints (0 = only at the end); an Atari checkpoint holds the
    whole replay"""
    network: NetworkKind = "auto"
    """Q-network torso: 'auto' = Nature CNN for ≥36×36 frame stacks, MinAtar's small CNN for
    small grids, MLP for vectors"""
    hidden_sizes: tuple[AtLeastOne, ...] = (256, 256)
    """hidden layer widths of the MLP torso (vector observations)"""
    learning_rate: Positive = 1e-4
    """Adam learning rate"""
    buffer_size: AtLeastOne = 1_000_000
    """replay capacity in transitions (Atari frame stacks share their frames: 1M transitions
    ≈ 14.1 GB, see README)"""
    gamma: Fraction = 0.99
    """discount factor γ"""
    tau: Annotated[float, Range(gt=0, le=1)] = 1.0
    """target update θ̄ ← (1 − τ)θ̄ + τθ every target_network_frequency env steps
    (1.0 = hard copy)"""
    target_network_frequency: AtLeastOne = 1_000
    """environment steps between target-network updates"""
    batch_size: AtLeastOne = 32
    """transitions per gradient step"""
    start_e: Fraction = 1.0
    """ε at the start of the exploration schedule"""
    end_e: Fraction = 0.01
    """ε at the end of the exploration schedule (and after it)"""
    exploration_fraction: Fraction = 0.1
    """fraction of total_timesteps over which ε decays linearly from start_e to end_e"""
    learning_starts: Count = 80_000
    """environment steps before learning starts (the agent acts ε-greedily from the start, as
    CleanRL)"""
    train_frequency: AtLeastOne = 4
    """environment steps between training phases"""
    gradient_steps: AtLeastOne = 1
    """gradient steps per training phase, each on a fresh batch"""
    loss: Literal["huber", "mse"] = "huber"
    """TD loss: Huber (smooth L1, δ = 1; Mnih et al.'s error clipping, SB3, Dopamine) or MSE
    (CleanRL)"""
    max_grad_norm: NonNegative = 0.0
    """clip the gradient's global L2 norm to this (0 = no clipping; in a group, each member's
    own)"""
    eval_epsilon: Fraction = 0.05
    """ε of the evaluation policy (0 = greedy; Atari uses 0.05 so that a policy that never
    presses FIRE still ends)"""
    swd: SWDArgs = dataclasses.field(default_factory=SWDArgs)
    """Sample Weight Decay: replay sampling that favours recent transitions (plasticity/swd.py)"""
    diagnostics: DiagnosticsArgs = dataclasses.field(default_factory=DiagnosticsArgs)
    """plasticity diagnostics of the Q-network's fully connected layers (logged as
    plasticity/critic_*)"""
    reset: ResetArgs = dataclasses.field(default_factory=ResetArgs)
    """resets / shrink-and-perturb / ReDo of the Q-network (`--reset.networks critic|both`; ReDo
    on its FC layers)"""


# ---- networks -----------------------------------------------------------------------------------
class QNetwork(nn.Module):
    """Q(s, ·) = head(torso(s)): one value per action, for each of `members`: (members, B, ...) →
    (members, B, actions)."""

    def __init__(
        self,
        members: int,
        kind: NetworkKind,
        obs_shape: tuple[int, ...],
        num_actions: int,
        hidden: tuple[int, ...],
        norm: str = "none",
        activation: str = "relu",
    ) -> None:
        super().__init__()
        kind = network_for(obs_shape) if kind == "auto" else kind
        if kind == "nature-cnn":
            self.torso: nn.Module = NatureCNN(members, obs_shape, norm, activation)
        elif kind == "minatar-cnn":
            self.torso = MinAtarCNN(members, obs_shape, norm, activation)
        else:
            self.torso = MLPTorso(members, obs_shape, hidden, norm, activation)
        self.head = EnsembleLinear(members, self.torso.features, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(obs))

    def linear_layers(self) -> list[EnsembleLinear]:
        """The fully connected layers, each feeding a ReLU, then the head: what diagnostics and
        ReDo act on."""
        return [m for m in self.torso.modules() if isinstance(m, EnsembleLinear)] + [self.head]

    def layout(self) -> Layout:
        return Layout(hidden=self.linear_layers()[:-1], heads=(self.head,))


def network_for(obs_shape: tuple[int, ...]) -> NetworkKind:
    if len(obs_shape) == 1:
        return "mlp"
    if len(obs_shape) == 3:
        return "nature-cnn" if min(obs_shape[1:]) >= 36 else "minatar-cnn"
    raise UserError(
        f"no Q-network torso for observations of shape {obs_shape} — expected (K, H, W) frames, (H, W, C) grids or vectors"
    )


def evaluation_policy(q_network: QNetwork, num_actions: int, epsilon: float):
    """(observations (members, E, ...), the evaluation's generators) → ε-greedy actions in Q,
    ε = --eval-epsilon."""

    def policy(obs: torch.Tensor, members: Members) -> torch.Tensor:
        draws = exploration_draws(members, obs.shape[1], num_actions)
        return epsilon_greedy(q_network(obs), epsilon, draws)

    return policy


# ---- the algorithm: pure functions of networks and tensors --------------------------------------
# Every quantity is (members, B, ...); each loss is one value per member, its mean over its own
# batch. Random numbers come in as arguments, drawn outside: --compile and --cudagraphs replay the
# same math.
TD_LOSSES = {"huber": F.smooth_l1_loss, "mse": F.mse_loss}


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    return end if duration <= 0 else start + (end - start) * min(t / duration, 1.0)


def double_dqn_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_q_online: torch.Tensor,
    next_q_target: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """y = r + γ(1 − terminated)·Q̄(s', argmax_a' Q(s', a')): the online values select, the
    target values evaluate; values (..., actions), rewards and flags (...)."""
    next_action = next_q_online.argmax(dim=-1, keepdim=True)
    return rewards + gamma * (1.0 - terminated) * next_q_target.gather(-1, next_action).squeeze(-1)


def td_objective(
    q_network: QNetwork, q_target: QNetwork, plasticity: Plasticity, args: Args, batch: Batch, reference
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(Huber or MSE of Q(s, a) − y with the network's remedy terms, what it logs)."""
    # y = r + γ(1 − terminated)·Q̄(s', argmax_a' Q(s', a'))
    with torch.no_grad():
        next_q_online, next_q_target = q_network(batch.next_obs), q_target(batch.next_obs)
        rewards, terminated = batch.rewards, batch.terminated
        target = double_dqn_target(rewards, terminated, next_q_online, next_q_target, args.gamma)
    q_taken = q_network(batch.obs).gather(-1, batch.actions[..., None]).squeeze(-1)
    loss = TD_LOSSES[args.loss](q_taken, target, reduction="none").mean(-1)
    loss_and_remedies = plasticity.loss("critic", loss, reference)
    logged = {"losses/td_loss": loss.detach(), "losses/q_values": q_taken.detach().mean(-1)}
    return loss_and_remedies, logged


def act(q_network: QNetwork, obs: torch.Tensor, epsilon: torch.Tensor, draws) -> torch.Tensor:
    """ε-greedy in Q; `draws`: exploration_draws(…), made outside."""
    with torch.no_grad():
        return epsilon_greedy(q_network(obs), epsilon, draws)


def update(
    objective: Callable,
    optimizer: torch.optim.Optimizer,
    plasticity: Plasticity,
    max_grad_norm: float,
    members: int,
    batch: Batch,
    reference,
) -> dict[str, torch.Tensor]:
    """One step on `objective` (td_objective, compiled with --compile): each member's gradient
    norm clipped to max_grad_norm, then the optimiser's step."""
    loss, logged = objective(batch, reference)
    optimizer.zero_grad(set_to_none=True)
    loss.sum().backward()  # the members' sum: each member's gradient stays its own
    clip_each_members_gradient(optimizer, max_grad_norm, members)  # ‖∇‖ ≤ max_grad_norm, member by member
    plasticity.step("critic")  # Adam's step (TRAC's when on), then the step remedies (NaP, weight clipping)
    return logged


def exploration_epsilon(args: Args, session: TrainingSession, global_step: int) -> float:
    """ε over the run (over each task with --continual.reset-exploration); 1 in a task's
    --continual.random-steps-per-task."""
    if session.schedule.in_warmup(global_step):
        return 1.0
    duration = args.exploration_fraction * args.total_timesteps
    return linear_schedule(args.start_e, args.end_e, duration, session.schedule.schedule_step(global_step))


# ---- build: everything a run holds --------------------------------------------------------------
def check(args: Args) -> None:
    """Every check a Double DQN run makes before anything exists, each a one-line UserError:
    remedies it cannot take (plasticity/catalogue.py), then the run's own
    (cleanrl_plus.run.check_run_args)."""
    catalogue.check("ddqn", args)
    check_run_args(args)


@dataclasses.dataclass(eq=False)
class DDQNParts(OffPolicyParts):
    """The Q-network, its target and optimiser, and the ε-greedy acting and TD update steps, on top
    of what every off-policy run holds (OffPolicyParts)."""

    q_network: QNetwork
    q_target: QNetwork
    optimizer: torch.optim.Optimizer
    num_actions: int
    act: Callable
    """(obs, ε as a tensor, exploration_draws) → ε-greedy actions"""
    update: Callable
    """(batch, C-CHAIN's reference batch) → what it logs"""


def build(args: Args) -> DDQNParts:
    """Double DQN from its flags: checked first, then the Q-network, the first reset of the envs,
    the replay (frame stacks share their frames on Atari) and the steps; --compile compiles the TD
    loss and ε-greedy acting, --cudagraphs captures the update and acting."""
    check(args)
    instead = "agents/td3.py or agents/sac_simba.py"  # for continuous actions
    run, members, env, evaluator = prepare_run_and_envs(args, gym.spaces.Discrete, "Double DQN", instead)
    device, N = run.device, env.envs_per_member
    obs_shape, num_actions = tuple(env.single_observation_space.shape), int(env.single_action_space.n)
    norm, activation = torso_settings(args.net, args.nap)
    sizes = dict(obs_shape=obs_shape, num_actions=num_actions, hidden=args.hidden_sizes)
    one_q_network = partial(QNetwork, kind=args.network, **sizes, norm=norm, activation=activation)
    # member k drawn from member k's generator
    new_q_network = GroupNetwork(members, one_q_network, device)
    q_network = new_q_network()
    q_target = target_copy(q_network)
    optimizer = make_optimizer(args, q_network.parameters(), device, members=len(members))
    obs = env.reset(seed=run.seeds)  # (members, envs, ...)
    sampler = make_sampler(args.swd, N)
    capacity = args.buffer_size
    if getattr(env, "frame_stack", 0) > 1:
        replay: ReplayBuffer = FrameStackReplay(capacity, obs_shape, (), members, N, sampler=sampler)
    else:
        replay = ReplayBuffer(capacity, obs_shape, (), members, obs.dtype, torch.int64, sampler=sampler)
    on_batch = partial(on_obs, q_network)
    network = Network("critic", q_network, optimizer, on_batch, new_q_network, q_target)
    plasticity = Plasticity(args, network, logger=run.logger, members=len(members))

    objective = compiled(partial(td_objective, q_network, q_target, plasticity, args), args.compile)
    acting = compiled(partial(act, q_network), args.compile)
    step = partial(update, objective, optimizer, plasticity, args.max_grad_norm, len(members))
    # a captured step is captured again when a tensor it watches is replaced (injection, dropped
    # optimiser state)
    step = GraphStep(step, args.cudagraphs, watch=(q_network, q_target, optimizer))
    acting = GraphStep(acting, args.cudagraphs, watch=(q_network,))
    policy = evaluation_policy(q_network, num_actions, args.eval_epsilon)

    state = plasticity.checkpointed() | {"replay": replay}
    session = TrainingSession(run, "ddqn", env, evaluator, members=members, **state)
    loop = dict(args=args, run=run, members=members, env=env, obs=obs, replay=replay, plasticity=plasticity)
    return DDQNParts(
        **loop,
        session=session,
        policy=policy,
        q_network=q_network,
        q_target=q_target,
        optimizer=optimizer,
        num_actions=num_actions,
        act=acting,
        update=step,
    )


# ---- train: the loop ----------------------------------------------------------------------------
def train(parts: DDQNParts) -> dict:
    """Double DQN's loop: ε-greedy acting, step and store, a training phase every
    `train_frequency` env steps and a target update every `target_network_frequency`."""
    args, members, replay, plasticity = parts.args, parts.members, parts.replay, parts.plasticity
    session = parts.session
    N, batch_size = parts.env.envs_per_member, args.batch_size
    obs, global_step, num_updates = session.open_or_resume(parts.obs)
    losses: dict[str, Any] = {}

    while global_step < args.total_timesteps and not parts.run.stop_requested:
        # ---- act: ε-greedy on the whole batch of envs, from the start as CleanRL ---------------
        _, learn = session.off_policy_phase(global_step, num_updates, args.learning_starts)
        epsilon = exploration_epsilon(args, session, global_step)
        # ε as a device tensor filled from the host (a kernel argument, no copy to wait for), so
        # one graph serves every ε; each member's draws from its own generator
        draws = exploration_draws(members, N, parts.num_actions)
        actions = parts.act(obs, torch.full((), epsilon, device=parts.run.device), draws)
        # ---- step and store (terminated only: truncated episodes still bootstrap from s') ------
        _, obs, _ = step_and_store(parts.env, replay, obs, actions, plasticity, global_step)
        previous_step, global_step = global_step, global_step + N  # env steps of each member

        # ---- learn -----------------------------------------------------------------------------
        if learn:
            if crossed(previous_step, global_step, args.train_frequency):
                updates = args.gradient_steps
                for batch, last in update_batches(replay, updates, batch_size, reuse=False):
                    losses = parts.update(batch, plasticity.reference_batch(replay, batch_size))
                    num_updates += 1
                    plasticity.after_update(num_updates, replay, global_step, last)
                sample_age = replay.age(batch).float().mean(-1)
                losses = losses | {"replay/sample_age": sample_age, "charts/epsilon": epsilon}
                losses = losses | plasticity.report()
            if crossed(previous_step, global_step, args.target_network_frequency):
                # in place (τ = 1: an exact copy), so a captured update keeps reading it
                polyak_update(parts.q_target, parts.q_network, args.tau)

        session.after_step(previous_step, global_step, num_updates, losses, parts.policy, obs)
        # continual ids: what the agent keeps across a task switch (--continual.*)
        if session.schedule.switched:
            plasticity.on_task_switch(args.continual, replay)

    return session.finish(global_step, num_updates, parts.policy, obs)


def main(args: Args) -> dict:
    return train(build(args))


def load_policy(args: Args, env, state: dict, device: torch.device):
    """The evaluation policy of a checkpoint (`cleanrl-plus eval`): one member, the run's own."""
    obs_shape, num_actions = tuple(env.single_observation_space.shape), int(env.single_action_space.n)
    settings = torso_settings(args.net, args.nap)
    q_network = QNetwork(1, args.network, obs_shape, num_actions, args.hidden_sizes, *settings)
    rebuild_injected_heads(q_network.to(device), state["critic"]).load_state_dict(state["critic"])
    return evaluation_policy(q_network, num_actions, args.eval_epsilon)


if __name__ == "__main__":
    cli_main(main, Args)
