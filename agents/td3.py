"""TD3: Twin Delayed Deep Deterministic policy gradient (Fujimoto, van Hoof, Meger, ICML 2018;
arXiv 1802.09477).

Defaults are CleanRL's `td3_continuous_action.py`: lr 3e-4, batch 256, buffer 1e6, γ 0.99,
τ 0.005, policy noise 0.2, noise clip 0.5, exploration noise 0.1, 25k random steps, policy
delay 2, 256-256 ReLU.

    for every environment step:
        a ~ U(A) before learning starts, else a = clip(μ(s) + ε, A),  ε ~ N(0, (0.1·scale)²)
        store (s, a, r, s', terminated)   # time-limit truncation is not terminal: bootstrap
        (--update-every F: what follows runs F times on every F-th step instead)
        sample a batch;  ã = clip(μ̄(s') + clip(N(0, 0.2²), −0.5, 0.5)·scale, A)
        y = r + γ(1 − terminated)·min(Q̄₁, Q̄₂)(s', ã)
        minimise Σᵢ (Qᵢ(s, a) − y)²
        every `policy_frequency` critic updates:
            maximise Q₁(s, μ(s));  θ̄ ← (1 − τ)θ̄ + τθ for μ̄, Q̄₁, Q̄₂

Many envs (FastTD3, Seo et al. 2025; docs/agents/td3.md has the recipe), each off by default:
    --n-step n                  y = Σ_{k<m} γ^k r_{t+k} + γ^m(1 − terminated)·min Q̄(s_{t+m}, ã),
                                m ≤ n cut at episode ends
    --critic.distributional     C51 twin critics, cross-entropy to the projected target of
                                the smaller-mean twin
    --normalize-obs             running mean/std of the acted-on observations, for actor and
                                critics
    --exploration-noise-min/max env i explores with its own σᵢ ~ U[min, max], drawn again
                                when its episode ends
    --weight-decay              AdamW's decoupled weight decay

Run: python agents/td3.py --env-id Hopper-v5 --seed 1
(python agents/td3.py --help lists every flag). On a GPU, add --compile --cudagraphs: the same
math, captured and replayed (cleanrl_plus/speed.py, docs/speed.md).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Callable

import gymnasium as gym
import torch
import torch.nn as nn

from cleanrl_plus.config import RunArgs
from cleanrl_plus.critics import convex_min_max, critic_losses, critic_report
from cleanrl_plus.distributional import CategoricalCritic, CriticArgs, categorical_target
from cleanrl_plus.evaluator import DeterministicPolicy
from cleanrl_plus.exploration import ExplorationScales
from cleanrl_plus.members import GroupNetwork
from cleanrl_plus.nn import ACTIVATIONS, EnsembleLinear, ensemble_stack, frozen, mlp, polyak_update, target_copy
from cleanrl_plus.normalization import RunningMeanStd, with_normalizer
from cleanrl_plus.offpolicy import (
    ActorCriticParts,
    DeferredUpdates,
    act_in_box,
    check_update_schedule,
    on_obs,
    prepare_run_and_envs,
    q_on_batch,
    update_batches,
)
from cleanrl_plus.replay import Batch, bootstrap_discount, make_replay, step_and_store
from cleanrl_plus.run import check_run_args, cli_main
from cleanrl_plus.session import TrainingSession
from cleanrl_plus.speed import GraphStep, compiled
from envs.errors import UserError
from envs.ranges import AtLeastOne, Count, Fraction, NonNegative, Positive
from plasticity import ActorCriticRemedies, Network, Plasticity, catalogue
from plasticity.architecture import torso_settings
from plasticity.cir import CIRCritic
from plasticity.network import Layout
from plasticity.optimizers import make_optimizer
from plasticity.resets import rebuild_injected_heads
from plasticity.swd import make_sampler


@dataclasses.dataclass
class Args(ActorCriticRemedies, RunArgs):
    exp_name: str = "td3"
    """name of this experiment (the run directory is
    runs/{env_id}__{exp_name}__{seed}__{unix_time})"""
    env_id: str = "Hopper-v5"
    """the environment id (a continuous-action task, e.g. Hopper-v5, Pendulum-v1,
    InvertedPendulum-v5)"""
    learning_rate: Positive = 3e-4
    """Adam learning rate of the actor and the critics"""
    buffer_size: AtLeastOne = 1_000_000
    """replay capacity in transitions"""
    gamma: Fraction = 0.99
    """discount factor γ"""
    tau: Fraction = 0.005
    """target smoothing coefficient τ (Polyak averaging)"""
    batch_size: AtLeastOne = 256
    """transitions per gradient step"""
    policy_noise: NonNegative = 0.2
    """std of the target policy smoothing noise, in units of the action scale"""
    noise_clip: NonNegative = 0.5
    """target policy noise is clipped to ±noise_clip (units of the action scale)"""
    exploration_noise: Fraction = 0.1
    """std of the Gaussian exploration noise, in units of the action scale"""
    learning_starts: Count = 25_000
    """environment steps before learning starts, acting uniformly at random (unless --random-steps
    says how long)"""
    random_steps: Count | None = None
    """environment steps of uniformly random actions where they differ from --learning-starts (None:
    as many): the camera-ready TD3 (sfujim/TD3 @bc98e626, main.py) acts at random for its first 10k
    steps on HalfCheetah but trains from the end of its first episode on"""
    policy_frequency: AtLeastOne = 2
    """the actor and the targets are updated once every `policy_frequency` critic updates
    (policy delay)"""
    gradient_steps: AtLeastOne = 1
    """critic updates per vector-env step (1 = CleanRL's replay ratio with one env)"""
    update_every: Count = 1
    """update every this many vector-env steps, their updates at once (1: each step, CleanRL's; 0: at
    episode ends, one seed, one env: sfujim/TD3 @bc98e626 main.py; HalfCheetah: 1000 is that too)"""
    reuse_batch: bool = False
    """reuse one batch for all gradient steps of an env step (same-batch reuse, CIR's SMR)
    instead of fresh batches"""
    hidden_sizes: tuple[AtLeastOne, ...] = (256, 256)
    """hidden layer widths of the actor and of each critic"""
    # ---- many envs (FastTD3; docs/agents/td3.md): every default keeps CleanRL's one-env TD3 ----
    n_step: AtLeastOne = 1
    """n-step returns: Σ_{k<n} γ^k r_{t+k}, bootstrapped from s_{t+n}, cut at episode ends
    (1 = one-step TD; FastTD3 1–3)"""
    critic: CriticArgs = dataclasses.field(default_factory=CriticArgs)
    """the critics' output: a scalar Q (TD3) or a C51 distribution over returns (FastTD3)"""
    normalize_obs: bool = False
    """running mean/std normalisation of actor and critic inputs, statistics from acted-on
    observations only (FastTD3: on)"""
    exploration_noise_min: Fraction = 0.0
    """with --exploration-noise-max > 0: each env explores with its own std drawn from
    U[min, max] (units of the action scale), drawn again when its episode ends (FastTD3: 0.001)"""
    exploration_noise_max: Fraction = 0.0
    """0: every env explores with --exploration-noise; else the upper end of the per-env stds
    (FastTD3: 0.4)"""
    weight_decay: NonNegative = 0.0
    """AdamW's decoupled weight decay of the actor and the critics (0: Adam, as CleanRL;
    FastTD3: 0.1)"""


# ---- networks -----------------------------------------------------------------------------------
class Actor(nn.Module):
    """μ(s) = tanh(MLP(norm(s)))·scale + bias, so actions land inside the Box bounds, for each
    of `members`: observations (members, B, obs) → actions (members, B, |A|). Its `normalize`
    is attached by the agent (`with_normalizer`): the observation statistics (--normalize-obs;
    shared with the critics and the targets, updated only by acting)."""

    def __init__(
        self,
        obs_dim: int,
        action_space: gym.spaces.Box,
        hidden: tuple[int, ...],
        norm: str = "none",
        activation: str = "relu",
        members: int = 1,
    ) -> None:
        super().__init__()
        self.normalize: nn.Module = nn.Identity()
        self.net = mlp(members, obs_dim, action_space.shape[0], hidden, norm, activation)
        low, high = torch.as_tensor(action_space.low), torch.as_tensor(action_space.high)
        self.register_buffer("action_scale", ((high - low) / 2).float())
        self.register_buffer("action_bias", ((high + low) / 2).float())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(self.normalize(obs))) * self.action_scale + self.action_bias

    @property
    def bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The Box's (low, high)."""
        return self.action_bias - self.action_scale, self.action_bias + self.action_scale

    def layout(self) -> Layout:
        layers = [m for m in self.net if isinstance(m, EnsembleLinear)]
        return Layout(hidden=layers[:-1], heads=layers[-1:])


class TwinCritic(nn.Module):
    """Q₁ and Q₂ of each of `members` as one ensemble of 2·members (member-major: each member's
    two copies side by side): (members, 2, batch) values from a single batched matmul per layer
    ((members, 2, batch, outputs) for C51 logits)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: tuple[int, ...],
        norm: str = "none",
        activation: str = "relu",
        outputs: int = 1,
        members: int = 1,
    ) -> None:
        super().__init__()
        self.normalize: nn.Module = nn.Identity()
        widths = (obs_dim + action_dim, *hidden, outputs)
        self.layers = ensemble_stack(2 * members, widths, norm, activation)
        self.activation = ACTIVATIONS[activation]()

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.normalize(obs), action], dim=-1)
        # each member's input to both of its copies
        x = x.unsqueeze(1).expand(-1, 2, -1, -1).flatten(0, 1)
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x).unflatten(0, (obs.shape[0], 2)).squeeze(-1)

    def q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q₁ of each member alone (its first copy), (members, B)."""
        x = torch.cat([self.normalize(obs), action], dim=-1)
        for layer in self.layers[:-1]:
            x = self.activation(layer.forward_copy(0, x))
        return self.layers[-1].forward_copy(0, x).squeeze(-1)

    @property
    def head(self) -> nn.Module:
        return self.layers[-1]

    def layout(self) -> Layout:
        return Layout(hidden=self.layers[:-1], heads=(self.head,))


def make_critic(members: int, obs_dim: int, action_dim: int, args: Args) -> nn.Module:
    """Twin critics of each member: MLPs (TD3; --net.* picks norm and activation), or CIR torsos
    with --cir.critic; with --critic.distributional their heads output C51 logits, and called as
    critics they give the expected values."""
    outputs = args.critic.num_atoms if args.critic.distributional else 1
    if args.cir.critic:
        base: nn.Module = CIRCritic(obs_dim, action_dim, args.cir, outputs, members)
    else:
        settings = torso_settings(args.net, args.nap)
        hidden = args.hidden_sizes
        base = TwinCritic(obs_dim, action_dim, hidden, *settings, outputs=outputs, members=members)
    return CategoricalCritic(base, args.critic) if args.critic.distributional else base


def make_actor(members: int, obs_dim: int, action_space: gym.spaces.Box, args: Args) -> Actor:
    settings = torso_settings(args.net, args.nap)
    return Actor(obs_dim, action_space, args.hidden_sizes, *settings, members=members)


# ---- the algorithm: pure functions of networks and tensors --------------------------------------
# Every quantity is (members, B, ...); each loss is one value per member, its own mean. Random
# numbers come in as arguments, drawn outside: --compile and --cudagraphs replay the same math.
def smoothed_target_action(
    next_obs: torch.Tensor, actor_target: Actor, smoothing_noise: torch.Tensor, noise_clip: float
) -> torch.Tensor:
    """ã = clip(μ̄(s') + clip(noise, ±c)·scale, bounds): target policy smoothing."""
    noise = smoothing_noise.clamp(-noise_clip, noise_clip) * actor_target.action_scale
    low = actor_target.action_bias - actor_target.action_scale
    high = actor_target.action_bias + actor_target.action_scale
    return (actor_target(next_obs) + noise).clamp(low, high)


def td3_target(
    critic_target: nn.Module, batch: Batch, next_actions: torch.Tensor, gamma: float, convex_lambda: float = 1.0
) -> torch.Tensor:
    """y = r + d·min(Q̄₁, Q̄₂)(s', ã), d = γ(1 − terminated) (γ^m for n-step batches); CIR's convex
    λ·min + (1 − λ)·max with --cir.convex-lambda; a C51 critic: Φ(r + d·z) of its target
    distribution. (members, B), or (members, B, atoms). Call it under torch.no_grad()."""
    discount = bootstrap_discount(batch, gamma)
    if isinstance(critic_target, CategoricalCritic):
        return categorical_target(critic_target, batch.next_obs, next_actions, batch.rewards, discount, convex_lambda)
    next_value = convex_min_max(critic_target(batch.next_obs, next_actions), convex_lambda)
    return batch.rewards + discount * next_value


def critic_objective(
    critic: nn.Module,
    critic_target: nn.Module,
    actor_target: Actor,
    plasticity: Plasticity,
    args: Args,
    batch: Batch,
    smoothing_noise: torch.Tensor,
    reference: Batch | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Σᵢ (Qᵢ(s, a) − y)² with the critic's remedy terms, the Q-values, each twin's loss)."""
    with torch.no_grad():
        next_actions = smoothed_target_action(batch.next_obs, actor_target, smoothing_noise, args.noise_clip)
        target = td3_target(critic_target, batch, next_actions, args.gamma, args.cir.convex_lambda)
    qf_losses, q_values = critic_losses(critic, batch.obs, batch.actions, target)
    loss = plasticity.loss("critic", qf_losses.sum(dim=1), reference)
    return loss, q_values.detach(), qf_losses.detach()


def actor_objective(
    actor: Actor, critic: nn.Module, plasticity: Plasticity, batch: Batch, reference: Batch | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(−Q₁(s, μ(s)) with the actor's remedy terms, −Q₁(s, μ(s))); C51: Q₁'s expected value."""
    actor_loss = -critic.q1(batch.obs, actor(batch.obs)).mean(dim=-1)
    return plasticity.loss("actor", actor_loss, reference), actor_loss.detach()


def explore(
    actor: Actor,
    noise_scales: ExplorationScales | None,
    exploration_noise: float,
    obs: torch.Tensor,
    noise: torch.Tensor,
) -> torch.Tensor:
    """a = clip(μ(s) + ε, A), ε = noise·scale·σ: σ = --exploration-noise, or each env's own
    (--exploration-noise-max)."""
    with torch.no_grad():
        std = exploration_noise if noise_scales is None else noise_scales.std[..., None]
        return (actor(obs) + noise * actor.action_scale * std).clamp(*actor.bounds)


def episode_values(
    actor_target: Actor, critic: nn.Module, critic_target: nn.Module, obs, actions, next_obs
) -> tuple[torch.Tensor, torch.Tensor]:
    """LEAST's values: Q̂ = min Q(s, a) of the action taken, V̄(s') = min Q̄(s', μ̄(s'))."""
    next_value = critic_target(next_obs, actor_target(next_obs)).min(dim=1).values
    return critic(obs, actions).min(dim=1).values, next_value


def update_critic(
    objective: Callable,
    optimizer: torch.optim.Optimizer,
    plasticity: Plasticity,
    batch: Batch,
    smoothing_noise,
    reference,
) -> dict[str, torch.Tensor]:
    """One critic step on `objective` (critic_objective, compiled with --compile); no gradient
    clipping (TD3.py has none)."""
    loss, q_values, qf_losses = objective(batch, smoothing_noise, reference)
    optimizer.zero_grad(set_to_none=True)
    loss.sum().backward()  # the members' sum: each member's gradient stays its own
    plasticity.step("critic")  # Adam's step (TRAC's when on), then the step remedies (NaP, weight clipping)
    return critic_report(q_values, qf_losses)


def update_actor(
    objective: Callable,
    actor: Actor,
    critic: nn.Module,
    actor_target: Actor,
    critic_target: nn.Module,
    optimizer: torch.optim.Optimizer,
    plasticity: Plasticity,
    tau: float,
    batch: Batch,
    reference: Batch | None,
) -> dict[str, torch.Tensor]:
    """One actor step on `objective` (actor_objective); then θ̄ ← (1 − τ)θ̄ + τθ, all targets."""
    # the gradient flows through Q₁ to the action, not into the critic's weights
    with frozen(critic):
        loss, actor_loss = objective(batch, reference)
    optimizer.zero_grad(set_to_none=True)
    loss.sum().backward()
    plasticity.step("actor")
    polyak_update(actor_target, actor, tau)
    polyak_update(critic_target, critic, tau)
    return {"losses/actor_loss": actor_loss}


# ---- build: everything a run holds --------------------------------------------------------------
def check(args: Args) -> None:
    """Every check a TD3 run makes before anything exists, each a one-line UserError: remedies
    TD3 cannot take (plasticity/catalogue.py), many-env flags that cannot work together, then
    the run's own (cleanrl_plus.run.check_run_args)."""
    catalogue.check("td3", args)
    check_update_schedule(args)
    low, high = args.exploration_noise_min, args.exploration_noise_max
    if high > 0 and low > high:
        raise UserError(f"--exploration-noise-min {low} is above --exploration-noise-max {high}")
    check_run_args(args)


@dataclasses.dataclass(eq=False)
class TD3Parts(ActorCriticParts):
    """What a TD3 run holds besides an off-policy actor-critic's own (ActorCriticParts): the
    target actor μ̄, FastTD3's exploration scales and the two update steps."""

    actor_target: Actor
    noise_scales: ExplorationScales | None
    """FastTD3's exploration std of each env (--exploration-noise-max); None: --exploration-noise"""
    update_critic: Callable
    """(batch, smoothing noise, C-CHAIN's reference batch) → what it logs"""
    update_actor: Callable
    """(batch, C-CHAIN's reference batch) → what it logs"""
    deferred: DeferredUpdates
    """the updates owed until the next learning phase (--update-every)"""


def build(args: Args) -> TD3Parts:
    """Check the flags, then build TD3 in the order its random numbers have always been drawn
    (the actor's initialisation first). --compile compiles both losses and the acting step;
    --cudagraphs captures the critic step, the actor step and the acting step."""
    check(args)
    instead = "agents/ddqn.py or agents/ppo.py"  # for discrete actions
    run, members, env, evaluator = prepare_run_and_envs(args, gym.spaces.Box, "TD3", instead)
    device, space, N, K = run.device, env.single_action_space, env.envs_per_member, len(members)
    obs_dim, action_dim = int(env.single_observation_space.shape[0]), int(space.shape[0])
    # raw observations are stored; actor and critics normalise them inside, with the statistics
    # of those acted on
    normalizer = RunningMeanStd((obs_dim,), members=K, enabled=args.normalize_obs).to(device)
    one_actor = partial(make_actor, obs_dim=obs_dim, action_space=space, args=args)
    one_critic = partial(make_critic, obs_dim=obs_dim, action_dim=action_dim, args=args)
    new_actor = GroupNetwork(members, one_actor, device, normalizer)
    new_critic = GroupNetwork(members, one_critic, device, normalizer)
    actor, critic = new_actor(), new_critic()
    actor_target, critic_target = target_copy(actor), target_copy(critic)
    adamw = dict(weight_decay=args.weight_decay, decoupled_weight_decay=True)
    adamw = adamw if args.weight_decay else {}
    actor_optimizer = make_optimizer(args, actor.parameters(), device, members=K, **adamw)
    critic_optimizer = make_optimizer(args, critic.parameters(), device, members=K, **adamw)
    replay = make_replay(args, (obs_dim,), (action_dim,), members, make_sampler(args.swd, N), N)
    noise_scales = None
    if args.exploration_noise_max > 0:
        low, high = args.exploration_noise_min, args.exploration_noise_max
        noise_scales = ExplorationScales(members, N, low, high)

    critic_on_batch = partial(q_on_batch, critic)
    critic_net = Network("critic", critic, critic_optimizer, critic_on_batch, new_critic, critic_target)
    actor_on_batch = partial(on_obs, actor)
    actor_net = Network("actor", actor, actor_optimizer, actor_on_batch, new_actor, actor_target)
    least = dict(env=env, episode_values=partial(episode_values, actor_target, critic, critic_target))
    plasticity = Plasticity(args, critic_net, actor_net, logger=run.logger, members=K, **least)

    critic_loss = partial(critic_objective, critic, critic_target, actor_target, plasticity, args)
    actor_loss = partial(actor_objective, actor, critic, plasticity)
    act = partial(explore, actor, noise_scales, args.exploration_noise)
    critic_loss, actor_loss, act = (compiled(f, args.compile) for f in (critic_loss, actor_loss, act))
    critic_step = partial(update_critic, critic_loss, critic_optimizer, plasticity)
    targets = (actor_target, critic_target)
    actor_step = partial(update_actor, actor_loss, actor, critic, *targets, actor_optimizer, plasticity, args.tau)
    # a captured step is captured again when a tensor it watches is replaced (injection, dropped
    # optimiser state)
    networks = (actor, critic, actor_target, critic_target, normalizer)
    critic_step = GraphStep(critic_step, args.cudagraphs, watch=(*networks, critic_optimizer))
    actor_step = GraphStep(actor_step, args.cudagraphs, watch=(*networks, actor_optimizer))
    acting = (actor, normalizer, *([noise_scales] if noise_scales else []))
    act = GraphStep(act, args.cudagraphs, watch=acting)

    # the generators load after the networks: re-injecting a head on resume draws a fresh one
    state = plasticity.checkpointed() | {"replay": replay}
    state |= {"exploration_scales": noise_scales} if noise_scales else {}
    deferred = DeferredUpdates(args.update_every)
    state |= {"deferred_updates": deferred} if args.update_every != 1 else {}
    session = TrainingSession(run, "td3", env, evaluator, **state, members=members)
    obs, policy = env.reset(seed=run.seeds), DeterministicPolicy(actor)  # once everything is built
    loop = dict(args=args, run=run, members=members, env=env, obs=obs, replay=replay, plasticity=plasticity)
    optimizers = dict(actor_optimizer=actor_optimizer, critic_optimizer=critic_optimizer)
    networks = dict(actor=actor, critic=critic, critic_target=critic_target, normalizer=normalizer, **optimizers)
    return TD3Parts(
        **loop,
        session=session,
        policy=policy,
        **networks,
        explore=act,
        actor_target=actor_target,
        noise_scales=noise_scales,
        update_critic=critic_step,
        update_actor=actor_step,
        deferred=deferred,
    )


# ---- train: the loop ----------------------------------------------------------------------------
def train(parts: TD3Parts) -> dict:
    """The loop of the TD3 box: explore with Gaussian noise, step and store, update the critics on
    every gradient step and the actor with the targets on every `policy_frequency`-th."""
    args, members, replay, plasticity = parts.args, parts.members, parts.replay, parts.plasticity
    session, policy = parts.session, parts.policy
    action_dim, batch_size = int(parts.env.single_action_space.shape[0]), args.batch_size
    obs, global_step, num_updates = session.open_or_resume(parts.obs)
    losses: dict[str, torch.Tensor] = {}

    while global_step < args.total_timesteps and not parts.run.stop_requested:
        # ---- act: a ~ U(A) before learning starts, else a = clip(μ(s) + ε, A) ----------------
        learn, actions = act_in_box(parts, obs, global_step, num_updates)
        # ---- step and store (s, a, r, s', terminated): truncations (LEAST's too) bootstrap ------
        step, next_obs, truncated = step_and_store(parts.env, replay, obs, actions, plasticity, global_step)
        if parts.noise_scales is not None:
            parts.noise_scales.redraw(step.terminated | truncated, members)
        obs = next_obs
        previous_step, global_step = global_step, global_step + parts.env.envs_per_member

        # ---- learn: the critics every update, the actor and targets every `policy_frequency` --
        vector_steps = global_step // parts.env.envs_per_member
        updates = parts.deferred.after_step(learn, args.gradient_steps, vector_steps, step.terminated, truncated)
        if updates:
            for batch, last in update_batches(replay, updates, batch_size, args.reuse_batch, args.gradient_steps):
                smoothing_noise = members.randn(batch_size, action_dim) * args.policy_noise
                reference = plasticity.reference_batch(replay, batch_size)
                losses |= parts.update_critic(batch, smoothing_noise, reference)
                num_updates += 1
                if num_updates % args.policy_frequency == 0:
                    reference = plasticity.reference_batch(replay, batch_size)
                    losses |= parts.update_actor(batch, reference)
                plasticity.after_update(num_updates, replay, global_step, last)
            losses |= {"replay/sample_age": replay.age(batch).float().mean(dim=-1)}
            losses |= plasticity.report()

        session.after_step(previous_step, global_step, num_updates, losses, policy, obs)
        # continual ids: what the agent keeps across a task switch (--continual.*)
        if session.schedule.switched:
            plasticity.on_task_switch(args.continual, replay, (parts.normalizer,))

    # evaluation: μ(s) of each member, (members, E, |A|)
    return session.finish(global_step, num_updates, policy, obs)


def main(args: Args) -> dict:
    return train(build(args))


def load_policy(args: Args, env, state: dict, device: torch.device) -> DeterministicPolicy:
    """The evaluation policy μ(s) of a checkpoint (`cleanrl-plus eval`): one member, the run's
    own, observation statistics included."""
    obs_dim = int(env.single_observation_space.shape[0])
    normalizer = RunningMeanStd((obs_dim,), enabled=args.normalize_obs)
    actor = make_actor(1, obs_dim, env.single_action_space, args)
    actor = with_normalizer(actor, normalizer).to(device)
    rebuild_injected_heads(actor, state["actor"]).load_state_dict(state["actor"])
    return DeterministicPolicy(actor)


if __name__ == "__main__":
    cli_main(main, Args)
