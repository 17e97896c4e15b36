"""TD3: Twin Delayed Deep Deterministic policy gradient (Fujimoto, van Hoof, Meger, ICML 2018; arXiv 1802.09477).

Defaults are CleanRL's `td3_continuous_action.py`: lr 3e-4, batch 256, buffer 1e6, γ 0.99, τ 0.005,
policy noise 0.2, noise clip 0.5, exploration noise 0.1, 25k random steps, policy delay 2, 256-256 ReLU.

    for every environment step:
        a ~ U(A) before learning starts, else a = clip(μ(s) + ε, A),  ε ~ N(0, (0.1·scale)²)
        store (s, a, r, s', terminated)                 # time-limit truncation is not terminal: bootstrap
        sample a batch;  ã = clip(μ̄(s') + clip(N(0, 0.2²), −0.5, 0.5)·scale, A)
        y = r + γ(1 − terminated)·min(Q̄₁, Q̄₂)(s', ã)
        minimise Σᵢ (Qᵢ(s, a) − y)²
        every `policy_frequency` critic updates: maximise Q₁(s, μ(s)); θ̄ ← (1 − τ)θ̄ + τθ for μ̄, Q̄₁, Q̄₂

Run: python agents/td3.py --env-id Hopper-v5 --seed 1      (python agents/td3.py --help lists every flag)
On a GPU, add --compile --cudagraphs: the same math, captured and replayed (cleanrl_plus/graphs.py, docs/speed.md).
"""

from __future__ import annotations

import copy
import dataclasses

import gymnasium as gym
import torch
import torch.nn as nn
import torch.nn.functional as F

import envs
from cleanrl_plus.checkpoint import capture_rng_state, load_state_dicts, restore_rng_state, state_dicts
from cleanrl_plus.config import RunArgs
from cleanrl_plus.continual import on_task_switch, restarts_exploration
from cleanrl_plus.errors import UserError
from cleanrl_plus.evaluation import Evaluator
from cleanrl_plus.graphs import GraphStep, compiled
from cleanrl_plus.nn import ACTIVATIONS, ensemble_stack, frozen, mlp, polyak_update
from cleanrl_plus.replay import Batch, ReplayBuffer
from cleanrl_plus.run import cli_main, start_run
from cleanrl_plus.session import TrainingSession
from plasticity import ActorCriticRemedies, catalogue
from plasticity.architecture import torso_settings
from plasticity.cir import CIRCritic, convex_min_max
from plasticity.diagnostics import ActivationProbe, PlasticityMonitor
from plasticity.hooks import RemedyHooks, Trained, reference_batch
from plasticity.least import EpisodeStopper
from plasticity.optimizers import make_optimizer
from plasticity.resets import Resettable, Resetter
from plasticity.swd import make_sampler


@dataclasses.dataclass
class Args(ActorCriticRemedies, RunArgs):
    exp_name: str = "td3"
    """name of this experiment (the run directory is runs/{env_id}__{exp_name}__{seed}__{unix_time})"""
    env_id: str = "Hopper-v5"
    """the environment id (a continuous-action task, e.g. Hopper-v5, Pendulum-v1, InvertedPendulum-v5)"""
    learning_rate: float = 3e-4
    """Adam learning rate of the actor and the critics"""
    buffer_size: int = 1_000_000
    """replay capacity in transitions"""
    gamma: float = 0.99
    """discount factor γ"""
    tau: float = 0.005
    """target smoothing coefficient τ (Polyak averaging)"""
    batch_size: int = 256
    """transitions per gradient step"""
    policy_noise: float = 0.2
    """std of the target policy smoothing noise, in units of the action scale"""
    noise_clip: float = 0.5
    """target policy noise is clipped to ±noise_clip (units of the action scale)"""
    exploration_noise: float = 0.1
    """std of the Gaussian exploration noise, in units of the action scale"""
    learning_starts: int = 25_000
    """environment steps of uniformly random actions before learning starts"""
    policy_frequency: int = 2
    """the actor and the targets are updated once every `policy_frequency` critic updates (policy delay)"""
    gradient_steps: int = 1
    """critic updates per vector-env step (1 = CleanRL's replay ratio with one env)"""
    reuse_batch: bool = False
    """reuse one batch for all gradient steps of an env step (same-batch reuse, CIR's SMR) instead of fresh batches"""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden layer widths of the actor and of each critic"""


class Actor(nn.Module):
    """μ(s) = tanh(MLP(s))·scale + bias, so actions land inside the Box bounds."""

    def __init__(self, obs_dim: int, action_space: gym.spaces.Box, hidden: tuple[int, ...], norm: str = "none", activation: str = "relu") -> None:
        super().__init__()
        self.net = mlp(obs_dim, action_space.shape[0], hidden, norm, activation)
        low, high = torch.as_tensor(action_space.low), torch.as_tensor(action_space.high)
        self.register_buffer("action_scale", ((high - low) / 2).float())
        self.register_buffer("action_bias", ((high + low) / 2).float())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)) * self.action_scale + self.action_bias


class TwinCritic(nn.Module):
    """Q₁ and Q₂ as one ensemble: (2, batch) values from a single batched matmul per layer."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...], norm: str = "none", activation: str = "relu") -> None:
        super().__init__()
        self.layers = ensemble_stack(2, (obs_dim + action_dim, *hidden, 1), norm, activation)
        self.activation = ACTIVATIONS[activation]()

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1).expand(2, -1, -1)
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x).squeeze(-1)

    def q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        for layer in self.layers[:-1]:
            x = self.activation(layer.member(0, x))
        return self.layers[-1].member(0, x).squeeze(-1)

    @property
    def head(self) -> nn.Module:
        return self.layers[-1]

    def activation_probe(self) -> ActivationProbe:
        return ActivationProbe(self.layers[:-1], self.layers[-1])

    def unit_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return list(zip(self.layers[:-1], self.layers[1:]))


def make_critic(obs_dim: int, action_dim: int, args: Args) -> nn.Module:
    """Twin critics: MLPs (TD3; --net.* picks norm and activation), or CIR torsos with --cir.critic."""
    if args.cir.critic:
        return CIRCritic(obs_dim, action_dim, args.cir)
    return TwinCritic(obs_dim, action_dim, args.hidden_sizes, *torso_settings(args.net, args.nap))


def make_actor(obs_dim: int, action_space: gym.spaces.Box, args: Args) -> Actor:
    return Actor(obs_dim, action_space, args.hidden_sizes, *torso_settings(args.net, args.nap))


def td3_target(
    batch: Batch,
    actor_target: Actor,
    critic_target: TwinCritic,
    gamma: float,
    smoothing_noise: torch.Tensor,
    noise_clip: float,
    convex_lambda: float = 1.0,
) -> torch.Tensor:
    """y = r + γ(1 − terminated)·min(Q̄₁, Q̄₂)(s', ã), ã = clip(μ̄(s') + clip(noise, ±c)·scale, bounds);
    with CIR's convex target the min becomes λ·min + (1 − λ)·max."""
    with torch.no_grad():
        noise = smoothing_noise.clamp(-noise_clip, noise_clip) * actor_target.action_scale
        low = actor_target.action_bias - actor_target.action_scale
        high = actor_target.action_bias + actor_target.action_scale
        next_action = (actor_target(batch.next_obs) + noise).clamp(low, high)
        next_q = convex_min_max(critic_target(batch.next_obs, next_action), convex_lambda)
        return batch.rewards + gamma * (1.0 - batch.terminated) * next_q


def main(args: Args) -> dict:
    catalogue.check("td3", args)
    run = start_run(args)
    device = run.device
    env = envs.make(args.env_id, num_envs=args.num_envs, seed=args.seed, device=device, continual=args.continual)
    if not isinstance(env.single_action_space, gym.spaces.Box):
        raise UserError(f"TD3 needs continuous (Box) actions; {args.env_id} has {env.single_action_space} — use agents/ddqn.py or agents/ppo.py")
    evaluator = Evaluator(args.env_id, args.eval_episodes, args.seed, device, continual=args.continual)
    obs_dim = int(env.single_observation_space.shape[0])
    action_dim = int(env.single_action_space.shape[0])

    actor = make_actor(obs_dim, env.single_action_space, args).to(device)
    critic = make_critic(obs_dim, action_dim, args).to(device)
    actor_target, critic_target = copy.deepcopy(actor), copy.deepcopy(critic)
    actor_optimizer = make_optimizer(args.optim, actor.parameters(), args.learning_rate, device, capturable=args.cudagraphs)
    critic_optimizer = make_optimizer(args.optim, critic.parameters(), args.learning_rate, device, capturable=args.cudagraphs)
    replay = ReplayBuffer(args.buffer_size, (obs_dim,), (action_dim,), device, sampler=make_sampler(args.swd, env.num_envs))
    action_low, action_high = actor.action_bias - actor.action_scale, actor.action_bias + actor.action_scale

    actor_linears = [m for m in actor.net if isinstance(m, nn.Linear)]
    monitor = PlasticityMonitor(
        args.diagnostics,
        critic=(critic, critic.activation_probe(), lambda b: critic(b.obs, b.actions)),
        actor=(actor, ActivationProbe(actor_linears[:-1], actor_linears[-1]), lambda b: actor(b.obs)),
    )
    networks = dict(
        critic=Resettable(critic, critic_optimizer, critic_target, lambda: make_critic(obs_dim, action_dim, args).to(device),
                          critic.unit_pairs(), lambda b: critic(b.obs, b.actions), head=critic.head),
        actor=Resettable(actor, actor_optimizer, actor_target, lambda: make_actor(obs_dim, env.single_action_space, args).to(device),
                         list(zip(actor_linears[:-1], actor_linears[1:])), lambda b: actor(b.obs), head=actor.net[-1]),
    )
    resetter = Resetter(args.reset, **networks)
    remedies = RemedyHooks(args, critic=Trained(critic, critic_optimizer, lambda b: critic(b.obs, b.actions), (critic.head,)),
                           actor=Trained(actor, actor_optimizer, lambda b: actor(b.obs), (actor.net[-1],)))
    stateful = dict(  # the resetter loads first: an injected head must exist again before the weights arrive
        resetter=resetter, actor=actor, critic=critic, actor_target=actor_target, critic_target=critic_target,
        actor_optimizer=actor_optimizer, critic_optimizer=critic_optimizer, replay=replay, env=env, monitor=monitor,
    ) | remedies.stateful()
    stopper = None
    if args.least.enabled:
        stopper = stateful["stopper"] = EpisodeStopper(args.least, env.num_envs, env.max_episode_steps, args.total_timesteps, device)
    global_step, num_updates = 0, 0
    obs = env.reset(seed=args.seed)
    if run.resumed:
        state = run.resumed
        load_state_dicts(state, **stateful)
        obs, global_step, num_updates = state["obs"].to(device), state["global_step"], state["num_updates"]
        restore_rng_state(state["rng"])

    def checkpoint_state() -> dict:
        counters = {"global_step": global_step, "num_updates": num_updates, "obs": obs, "rng": capture_rng_state()}
        return counters | state_dicts(**stateful)

    # ---- the update and the acting step as functions of tensors: --compile compiles the losses and the acting step,
    # --cudagraphs captures each step whole and replays it (cleanrl_plus/graphs.py); random numbers are drawn outside
    def critic_objective(batch: Batch, smoothing_noise: torch.Tensor, reference: Batch | None):
        target = td3_target(batch, actor_target, critic_target, args.gamma, smoothing_noise, args.noise_clip, args.cir.convex_lambda)
        q_values = critic(batch.obs, batch.actions)
        qf_losses = F.mse_loss(q_values, target.expand(2, -1), reduction="none").mean(dim=1)
        return remedies.loss("critic", qf_losses.sum(), reference), q_values.detach(), qf_losses.detach()

    def actor_objective(batch: Batch, reference: Batch | None):
        actor_loss = -critic.q1(batch.obs, actor(batch.obs)).mean()
        return remedies.loss("actor", actor_loss, reference), actor_loss.detach()

    def explore(obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # a = clip(μ(s) + ε, A), ε = noise·scale·σ
            return (actor(obs) + noise * actor.action_scale * args.exploration_noise).clamp(action_low, action_high)

    critic_objective, actor_objective, explore = (compiled(f, args.compile) for f in (critic_objective, actor_objective, explore))

    def update_critic(batch: Batch, smoothing_noise: torch.Tensor, reference: Batch | None) -> dict[str, torch.Tensor]:
        loss, q_values, qf_losses = critic_objective(batch, smoothing_noise, reference)
        critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        remedies.step("critic")
        return {"losses/qf1_values": q_values[0].mean(), "losses/qf2_values": q_values[1].mean(),
                "losses/qf1_loss": qf_losses[0], "losses/qf2_loss": qf_losses[1], "losses/qf_loss": qf_losses.sum() / 2}

    def update_actor(batch: Batch, reference: Batch | None) -> dict[str, torch.Tensor]:
        with frozen(critic):  # the gradient flows through Q₁ to the action, not into the critic's weights
            loss, actor_loss = actor_objective(batch, reference)
        actor_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        remedies.step("actor")
        polyak_update(actor_target, actor, args.tau)
        polyak_update(critic_target, critic, args.tau)
        return {"losses/actor_loss": actor_loss}

    # a captured step is captured again when a tensor it watches is replaced (injection, dropped optimiser state)
    update_critic = GraphStep(update_critic, args.cudagraphs, watch=(critic, critic_target, actor_target, critic_optimizer))
    update_actor = GraphStep(update_actor, args.cudagraphs, watch=(actor, critic, actor_target, critic_target, actor_optimizer))
    explore = GraphStep(explore, args.cudagraphs, watch=(actor,))

    session = TrainingSession(run, "td3", env, evaluator, start_step=global_step)
    losses: dict[str, torch.Tensor] = {}

    while global_step < args.total_timesteps and not run.stop_requested:
        # ---- act (random warm-up steps count from the task's start with --continual.reset-exploration) --------
        schedule_step = session.schedule_step(global_step, restarts_exploration(args.continual))
        task_warmup = session.in_task_warmup(global_step)  # continual: random steps at each task's start, if asked
        if schedule_step < args.learning_starts or task_warmup:
            actions = action_low + torch.rand((env.num_envs, action_dim), device=device) * (action_high - action_low)
        else:
            actions = explore(obs, torch.randn((env.num_envs, action_dim), device=device))
        # ---- step and store (terminated only: truncated episodes still bootstrap from next_obs) ---------
        step = env.step(actions)
        replay.add(obs, actions, step.reward, step.next_obs, step.terminated)
        if stopper is not None:  # LEAST: Q̂ = min Q(s, a), G = |TD error| of this transition; a stop is a truncation
            with torch.no_grad():
                q_taken = critic(obs, actions).min(dim=0).values
                next_value = critic_target(step.next_obs, actor_target(step.next_obs)).min(dim=0).values
            obs = stopper.after_env_step(env, step, q_taken, next_value, args.gamma, global_step)
        else:
            obs = step.obs
        previous_step, global_step = global_step, global_step + env.num_envs

        # ---- learn -----------------------------------------------------------------------------------
        if schedule_step + env.num_envs > args.learning_starts and not task_warmup:
            session.learning_started(global_step, num_updates)
            for gradient_step in range(args.gradient_steps):
                if gradient_step == 0 or not args.reuse_batch:
                    batch = replay.sample(args.batch_size)
                smoothing_noise = torch.randn_like(batch.actions) * args.policy_noise
                losses |= update_critic(batch, smoothing_noise, reference_batch(args, replay, args.batch_size))
                num_updates += 1
                if num_updates % args.policy_frequency == 0:
                    losses |= update_actor(batch, reference_batch(args, replay, args.batch_size))
                monitor.after_update(num_updates, replay, run.logger, global_step)
                resetter.after_update(num_updates, replay, run.logger, global_step)
            if stopper is not None:
                losses |= stopper.report()
            losses |= {"replay/sample_age": replay.age(batch).float().mean()} | remedies.report()

        session.after_step(previous_step, global_step, num_updates, losses, actor, checkpoint_state)
        if session.task_switched:  # continual ids: what the agent keeps across a task switch (--continual.*)
            on_task_switch(args.continual, networks.values(), replay)

    return session.finish(global_step, num_updates, actor, checkpoint_state)


def load_policy(args: Args, env, state: dict, device: torch.device) -> nn.Module:
    """The evaluation policy μ(s) of a checkpoint (`cleanrl-plus eval`)."""
    actor = make_actor(int(env.single_observation_space.shape[0]), env.single_action_space, args).to(device)
    actor.load_state_dict(state["actor"])
    return actor


if __name__ == "__main__":
    cli_main(main, Args)
