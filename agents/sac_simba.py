"""SAC with the SimBa architecture (Haarnoja et al. 2018, arXiv 1812.05905; Lee et al., ICLR 2025,
arXiv 2410.09754).

Defaults follow the official SimBa SAC config: running-statistics observation normalisation,
residual pre-LayerNorm encoders (actor 128 wide × 1 block, critic 512 wide × 2 blocks), AdamW
(lr 1e-4, weight decay 1e-2), temperature Adam lr 1e-4 from α = 0.01 with target entropy −|A|/2,
batch 256, τ 0.005, 5k random steps, 2 updates per agent step with a fresh batch each, action
repeat 2 on dm-control, and one critic on tasks that never terminate (dm-control) but clipped
double-Q where episodes can terminate.

    for every agent step:
        update the observation statistics with s (acting observations only); x = norm(s)
        a ~ U(A) before learning starts, else a ~ π(·|x) = tanh(N(μ(x), σ(x)²))
        store raw (s, a, r, s', terminated)   # time-limit truncation is not terminal: bootstrap
        repeat `updates_per_step` times, on a fresh batch (or the same one with --reuse-batch):
            actor:       minimise E[α·log π(ã|x) − Q(x, ã)],  ã ~ π(·|x)
                         (Q = min over critics with CDQ)
            temperature: minimise E[−α·(log π(ã|x) + H̄)]
            critic:      y = r + γ(1 − terminated)·(Q̄(x', a') − α·log π(a'|x')),
                         a' ~ π(·|x');  minimise (Q(x, a) − y)²
            target:      θ̄ ← (1 − τ)θ̄ + τθ

`--network mlp` swaps both encoders for plain ReLU MLPs (256-256) to compare "SAC" with
"SAC+SimBa".

Many envs (FastTD3's recipe, Seo et al. 2025, as FastSAC): n-step returns (--n-step) and C51
critics (--critic.distributional), off by default; their equations, the recipe and our choices where
the papers are silent: docs/agents/sac_simba.md.

Run: python agents/sac_simba.py --env-id dmc:cheetah-run
(python agents/sac_simba.py --help lists every flag). On a GPU, add --compile --cudagraphs: the
same math, captured and replayed (cleanrl_plus/speed.py, docs/speed.md).
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Callable, Literal

import gymnasium as gym
import torch
import torch.nn as nn

from cleanrl_plus.config import RunArgs
from cleanrl_plus.critics import convex_min_max, critic_losses, critic_report
from cleanrl_plus.distributional import CategoricalCritic, CriticArgs, categorical_target
from cleanrl_plus.evaluator import DeterministicPolicy
from cleanrl_plus.members import GroupNetwork, Members
from cleanrl_plus.nn import frozen, polyak_update, target_copy
from cleanrl_plus.normalization import RunningMeanStd, with_normalizer
from cleanrl_plus.offpolicy import ActorCriticParts, act_in_box, on_obs, prepare_run_and_envs, q_on_batch, update_batches
from cleanrl_plus.replay import Batch, bootstrap_discount, make_replay, step_and_store
from cleanrl_plus.run import check_run_args, cli_main
from cleanrl_plus.session import TrainingSession
from cleanrl_plus.simba import QEnsemble, TanhGaussianActor, critics_for, make_encoder, relu_layers, unit_pairs
from cleanrl_plus.speed import GraphStep, compiled
from envs.errors import UserError
from envs.ranges import AnyFinite, AtLeastOne, Count, Fraction, NonNegative, Positive
from plasticity import ActorCriticRemedies, Network, Plasticity, catalogue
from plasticity.architecture import torso_settings
from plasticity.cir import CIREncoder, cir_layout
from plasticity.network import Layout
from plasticity.optimizers import ElementStepAdam, make_optimizer
from plasticity.resets import rebuild_injected_heads
from plasticity.swd import make_sampler


@dataclasses.dataclass
class Args(ActorCriticRemedies, RunArgs):
    exp_name: str = "sac_simba"
    """name of this experiment (the run directory is
    runs/{env_id}__{exp_name}__{seed}__{unix_time})"""
    env_id: str = "dmc:cheetah-run"
    """the environment id: dm-control (dmc:<domain>-<task>) or a continuous gymnasium task
    (Hopper-v5, Pendulum-v1)"""
    total_timesteps: AtLeastOne = 500_000
    """total agent steps (with action repeat 2 on dm-control: 1M frames, SimBa's DMC-hard budget)"""
    action_repeat: AtLeastOne = 2
    """dm-control only: physics control steps per agent step (SimBa uses 2); frames are logged as
    charts/frames"""
    network: Literal["simba", "mlp"] = "simba"
    """encoders of actor and critic: SimBa residual blocks, or a plain ReLU MLP (the 'SAC'
    baseline)"""
    actor_width: AtLeastOne = 128
    """SimBa actor hidden width d (blocks expand to 4d inside)"""
    actor_blocks: Count = 1
    """SimBa actor residual blocks"""
    critic_width: AtLeastOne = 512
    """SimBa critic hidden width d"""
    critic_blocks: Count = 2
    """SimBa critic residual blocks"""
    mlp_hidden_sizes: tuple[AtLeastOne, ...] = (256, 256)
    """hidden widths of actor and critic when --network mlp"""
    mlp_init: Literal["default", "orthogonal"] = "default"
    """initialisation of the --network mlp hidden layers: nn.Linear's default, or orthogonal with gain √2
    and zero biases (SimBa's plain-SAC MLPBlock, SonyResearch/simba scale_rl/networks/layers.py)"""
    normalize_obs: bool = True
    """running mean/std observation normalisation (statistics updated only from observations
    acted on)"""
    clipped_double_q: Literal["auto", "on", "off"] = "auto"
    """twin critics with a min target ('on') or one critic ('off'); 'auto' = on only if the task
    can terminate, as SimBa"""
    learning_rate: Positive = 1e-4
    """AdamW learning rate of actor and critic"""
    weight_decay: NonNegative = 1e-2
    """AdamW decoupled weight decay of actor and critic (all parameters, as in the official code)"""
    alpha_learning_rate: Positive = 1e-4
    """Adam learning rate of the temperature (no weight decay)"""
    initial_alpha: Positive = 0.01
    """initial entropy temperature α"""
    target_entropy_scale: AnyFinite = 0.5
    """target entropy H̄ = −scale·|A|"""
    buffer_size: AtLeastOne = 1_000_000
    """replay capacity in transitions"""
    gamma: Fraction = 0.99
    """discount factor γ (SimBa's horizon heuristic gives 0.99 on dm-control)"""
    tau: Fraction = 0.005
    """target smoothing coefficient τ"""
    batch_size: AtLeastOne = 256
    """transitions per gradient step"""
    learning_starts: Count = 5_000
    """agent steps of uniformly random actions before learning starts"""
    updates_per_step: AtLeastOne = 2
    """gradient updates per agent step (the update-to-data ratio)"""
    reuse_batch: bool = False
    """reuse one batch for all updates of a step (same-batch reuse; CIR's SMR) instead of drawing a
    fresh batch per update"""
    actor_q: Literal["min", "mean"] = "min"
    """how the actor loss aggregates the critics: min (SAC/SimBa) or mean (CIR)"""
    # ---- many envs (FastTD3/FastSAC; docs/agents/sac_simba.md): defaults keep the one-env recipe
    n_step: AtLeastOne = 1
    """n-step returns: Σ_{k<n} γ^k r_{t+k}, bootstrapped (with the entropy term) from s_{t+n}, cut
    at episode ends (1 = one-step TD; FastTD3 1–3)"""
    critic: CriticArgs = dataclasses.field(default_factory=CriticArgs)
    """the critics' output: a scalar Q (SAC) or a C51 distribution over soft returns (as FastTD3's
    critics)"""


# ---- networks: SAC's actor and critics (cleanrl_plus/simba.py), as the remedies see them --------
class Actor(TanhGaussianActor):
    """SAC's policy on --network's encoder, NaP's LayerNorm and --net.activation in it."""

    def __init__(self, args: Args, obs_dim: int, action_space: gym.spaces.Box, members: int = 1) -> None:
        torso = torso_settings(args.net, args.nap)
        encoder = make_encoder(args, torso, members, obs_dim, args.actor_width, args.actor_blocks)
        super().__init__(encoder, action_space, members)

    def layout(self) -> Layout:
        # two heads read the last hidden layer: its units cannot be recycled
        heads, pairs = (self.mean, self.log_std), unit_pairs(self.encoder)
        return Layout(hidden=relu_layers(self.encoder), heads=heads, unit_pairs=pairs)


class Critic(QEnsemble):
    """SAC's critics on --network's encoder, or with --cir.critic on CIR's torso (PyTorch's default
    init throughout, as CIR's code)."""

    def __init__(
        self, args: Args, obs_dim: int, action_dim: int, num_critics: int, outputs: int = 1, members: int = 1
    ) -> None:
        size, inputs, cir = members * num_critics, obs_dim + action_dim, args.cir
        if cir.critic:
            encoder = CIREncoder(size, inputs, cir.width, cir.shared_layer_norm, members)
        else:
            torso = torso_settings(args.net, args.nap)
            encoder = make_encoder(args, torso, size, inputs, args.critic_width, args.critic_blocks)
        super().__init__(encoder, num_critics, outputs, members, orthogonal_head=not cir.critic)

    def layout(self) -> Layout:
        if isinstance(self.encoder, CIREncoder):
            return cir_layout(self.encoder, self.head)
        pairs = unit_pairs(self.encoder, self.head)
        return Layout(hidden=relu_layers(self.encoder), heads=(self.head,), unit_pairs=pairs)


def make_critic(members: int, args: Args, obs_dim: int, action_dim: int, num_critics: int) -> nn.Module:
    """The critics of each member; with --critic.distributional their heads output C51 logits,
    and called as critics they give the expected values (so the actor, LEAST, diagnostics and
    remedies read Q as before)."""
    outputs = args.critic.num_atoms if args.critic.distributional else 1
    critics = Critic(args, obs_dim, action_dim, num_critics, outputs, members)
    return CategoricalCritic(critics, args.critic) if args.critic.distributional else critics


class Temperature(nn.Module):
    """α = exp(log α) of each of `members`, from α₀ = --initial-alpha, learned towards the
    target entropy H̄ = −scale·|A| with its own Adam (--alpha-learning-rate, no weight decay;
    its moments are per member, as log α is); `reset` starts both afresh, for every member or
    for the chosen ones only."""

    def __init__(self, args: Args, action_dim: int, device: torch.device, members: int = 1) -> None:
        super().__init__()
        self.initial_alpha = args.initial_alpha
        self.target_entropy = -args.target_entropy_scale * action_dim
        self.objective = compiled(self.loss, args.compile)
        initial = torch.full((members,), math.log(args.initial_alpha), device=device)
        self.log_alpha = nn.Parameter(initial)
        # torch's default kernel on CPU, fused and capturable on CUDA; ElementStepAdam keeps this
        # run's `capturable` when a checkpoint is loaded
        self.optimizer = ElementStepAdam(
            [self.log_alpha],
            members=members,
            lr=args.alpha_learning_rate,
            fused=True if device.type == "cuda" else None,
            capturable=args.cudagraphs and device.type == "cuda",
        )

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        """E[−α·(log π(ã|x) + H̄)] of each member, (members,), from its (members, B)
        log-probabilities."""
        return (-self.log_alpha.exp().unsqueeze(-1) * (log_prob + self.target_entropy)).mean(dim=-1)

    def minimise(self, log_prob: torch.Tensor) -> dict[str, torch.Tensor]:
        """One Adam step on the loss of the actor's log π(ã|x) (the members' sum: each member's
        gradient its own); returns what it logs, per member."""
        loss = self.objective(log_prob)
        self.optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        self.optimizer.step()
        report = {"losses/alpha": self.alpha, "losses/alpha_loss": loss.detach()}
        return report | {"losses/entropy": -log_prob.mean(dim=-1)}

    def checkpointed(self) -> dict[str, "Temperature | torch.optim.Optimizer"]:
        return {"temperature": self, "alpha_optimizer": self.optimizer}

    @torch.no_grad()
    def reset(self, chosen: torch.Tensor | None = None) -> None:
        """α = α₀ and a fresh Adam: for every member (None), or only for the members `chosen`
        (a (members,) bool mask), whose moments and step counts restart while the others' stay as
        they are."""
        if chosen is None:
            self.log_alpha.fill_(math.log(self.initial_alpha))
            self.optimizer.state.clear()
            return
        self.log_alpha.masked_fill_(chosen, math.log(self.initial_alpha))
        self.optimizer.restart(self.log_alpha, chosen)


# ---- the algorithm: pure functions of networks and tensors --------------------------------------
# Every quantity is (members, B, ...); each loss is one value per member, its own mean. Random
# numbers come in as arguments, drawn outside: --compile and --cudagraphs replay the same math.
def actor_objective(
    actor: Actor,
    critic: nn.Module,
    temperature: Temperature,
    plasticity: Plasticity,
    actor_q: str,
    batch: Batch,
    noise: torch.Tensor,
    reference: Batch | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(E[α·log π(ã|x) − Q(x, ã)] with the actor's remedy terms, that loss, log π(ã|x))."""
    new_actions, log_prob = actor.sample(batch.obs, noise)  # ã ~ π(·|x)
    q_all = critic(batch.obs, new_actions)
    q_new = q_all.min(dim=1).values if actor_q == "min" else q_all.mean(dim=1)
    actor_loss = (temperature.alpha.unsqueeze(-1) * log_prob - q_new).mean(dim=-1)
    return plasticity.loss("actor", actor_loss, reference), actor_loss.detach(), log_prob.detach()


def soft_target(
    critic_target: nn.Module,
    batch: Batch,
    next_actions: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor,
    gamma: float,
    convex_lambda: float = 1.0,
) -> torch.Tensor:
    """y = r + d·(min_i Q̄_i(x', a') − α·log π(a'|x')), d = γ(1 − terminated) (γ^m for n-step
    batches, the entropy term only at the bootstrap state, as FastSAC); CIR's convex λ·min +
    (1 − λ)·max with --cir.convex-lambda; a C51 critic: Φ(r − d·α·log π(a'|x') + d·z).
    (members, B), or (members, B, atoms). Call it under torch.no_grad()."""
    discount = bootstrap_discount(batch, gamma)
    if isinstance(critic_target, CategoricalCritic):
        shifted = batch.rewards - discount * alpha.unsqueeze(-1) * next_log_prob
        return categorical_target(critic_target, batch.next_obs, next_actions, shifted, discount, convex_lambda)
    next_value = convex_min_max(critic_target(batch.next_obs, next_actions), convex_lambda)
    return batch.rewards + discount * (next_value - alpha.unsqueeze(-1) * next_log_prob)


def critic_objective(
    actor: Actor,
    critic: nn.Module,
    critic_target: nn.Module,
    temperature: Temperature,
    plasticity: Plasticity,
    args: Args,
    batch: Batch,
    next_noise: torch.Tensor,
    reference: Batch | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The soft TD loss Σᵢ (Qᵢ(x, a) − y)² of the critics, the remedy terms added; also returns
    their Q-values and each critic's own loss, detached for the logs."""
    # n-step: r is Σ γ^k r_{t+k} without the intermediate entropy terms, α·log π only at
    # x' = x_{t+m} (as FastSAC); a' ~ π(·|x') of the actor just updated, α just updated
    with torch.no_grad():
        next_actions, next_log_prob = actor.sample(batch.next_obs, next_noise)
        alpha, convex_lambda = temperature.alpha, args.cir.convex_lambda
        target = soft_target(critic_target, batch, next_actions, next_log_prob, alpha, args.gamma, convex_lambda)
    qf_losses, q_values = critic_losses(critic, batch.obs, batch.actions, target)
    loss = plasticity.loss("critic", qf_losses.sum(dim=1), reference)
    return loss, q_values.detach(), qf_losses.detach()


def explore(actor: Actor, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """a ~ π(·|norm(s))."""
    with torch.no_grad():
        return actor.sample(obs, noise)[0]


def episode_values(
    actor: Actor,
    critic: nn.Module,
    critic_target: nn.Module,
    temperature: Temperature,
    members: Members,
    noise_shape: tuple[int, int],
    obs,
    actions,
    next_obs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """LEAST's values: Q̂ = min Q(x, a), V̄(x') = min Q̄(x', a') − α·log π(a'|x')."""
    next_actions, next_log_prob = actor.sample(next_obs, members.randn(*noise_shape))
    next_q = critic_target(next_obs, next_actions).min(dim=1).values
    next_value = next_q - temperature.alpha[:, None] * next_log_prob
    return critic(obs, actions).min(dim=1).values, next_value


def update(
    actor_objective: Callable,
    critic_objective: Callable,
    critic: nn.Module,
    critic_target: nn.Module,
    temperature: Temperature,
    optimizers: tuple[torch.optim.Optimizer, torch.optim.Optimizer],
    plasticity: Plasticity,
    tau: float,
    batch: Batch,
    draws: list[tuple[torch.Tensor, Batch | None]],
) -> dict[str, torch.Tensor]:
    """One SAC update on the two objectives (compiled with --compile): actor → temperature →
    critic → target, each step without gradient clipping (the SimBa code has none). `draws`: the
    actor's (noise, C-CHAIN's reference batch), then the critic's."""
    actor_optimizer, critic_optimizer = optimizers
    (actor_noise, actor_reference), (next_noise, critic_reference) = draws
    # the gradient flows through Q to the action, not into the critic's weights
    with frozen(critic):
        loss, actor_loss, log_prob = actor_objective(batch, actor_noise, actor_reference)
    actor_optimizer.zero_grad(set_to_none=True)
    loss.sum().backward()  # the members' sum: each member's gradient stays its own
    plasticity.step("actor")  # AdamW's step (TRAC's when on), then the step remedies (NaP, weight clipping)
    temperature_report = temperature.minimise(log_prob)
    loss, q_values, qf_losses = critic_objective(batch, next_noise, critic_reference)
    critic_optimizer.zero_grad(set_to_none=True)
    loss.sum().backward()
    plasticity.step("critic")
    polyak_update(critic_target, critic, tau)
    report = critic_report(q_values, qf_losses) | temperature_report
    return report | {"losses/actor_loss": actor_loss}


# ---- build: everything a run holds --------------------------------------------------------------
def check(args: Args) -> None:
    """Every check a SAC run makes before anything exists, each a one-line UserError: remedies SAC
    cannot take (plasticity/catalogue.py) or that its SimBa blocks hold already, then the run's
    own (cleanrl_plus.run.check_run_args)."""
    catalogue.check("sac_simba", args)
    if args.network == "simba" and args.net.norm != "none":
        raise UserError(
            "SimBa blocks already hold LayerNorms (pre-norm and a final norm) — drop --net.norm, or use --network mlp"
        )
    check_run_args(args)


@dataclasses.dataclass(eq=False)
class SACParts(ActorCriticParts):
    """SAC's part of a run, besides an off-policy actor-critic's own (ActorCriticParts): the
    temperature, the number of critics and the update step."""

    temperature: Temperature
    num_critics: int
    """2: clipped double-Q; 1: one critic (--clipped-double-q)"""
    update: Callable
    """(batch, [(noise, reference batch)] of the actor and the critic) → what it logs"""


def build(args: Args) -> SACParts:
    """SAC+SimBa, checked and built; its random numbers drawn as they always were. With --compile
    the actor, temperature and critic losses and the acting step are compiled, with --cudagraphs
    one whole update (actor → temperature → critic → target) and the acting step are captured."""
    check(args)
    instead = "agents/ddqn.py or agents/ppo.py"  # for discrete actions
    run, members, env, evaluator = prepare_run_and_envs(args, gym.spaces.Box, "SAC", instead)
    device, space, N, K = run.device, env.single_action_space, env.envs_per_member, len(members)
    obs_dim, action_dim = int(env.single_observation_space.shape[0]), int(space.shape[0])
    num_critics = critics_for(args, env)
    # raw observations are stored; actor and critics normalise them inside, with the statistics
    # of those acted on
    normalizer = RunningMeanStd((obs_dim,), members=K, enabled=args.normalize_obs).to(device)
    one_actor = partial(Actor, args, obs_dim, space)
    sizes = dict(obs_dim=obs_dim, action_dim=action_dim, num_critics=num_critics)
    one_critic = partial(make_critic, args=args, **sizes)
    new_actor = GroupNetwork(members, one_actor, device, normalizer)
    new_critic = GroupNetwork(members, one_critic, device, normalizer)
    actor, critic = new_actor(), new_critic()
    critic_target = target_copy(critic).requires_grad_(False)
    temperature = Temperature(args, action_dim, device, K)
    adamw = dict(weight_decay=args.weight_decay, decoupled_weight_decay=True)
    actor_optimizer = make_optimizer(args, actor.parameters(), device, members=K, **adamw)
    critic_optimizer = make_optimizer(args, critic.parameters(), device, members=K, **adamw)
    replay = make_replay(args, (obs_dim,), (action_dim,), members, make_sampler(args.swd, N), N)

    critic_on_batch = partial(q_on_batch, critic)
    critic_net = Network("critic", critic, critic_optimizer, critic_on_batch, new_critic, critic_target)
    # `distribution`: the KL churn diagnostic of a stochastic policy; a reset of the actor starts
    # α and its Adam afresh too, as Nikishin et al.'s reset builds a new agent
    kl = partial(on_obs, actor.distribution_parameters)
    stochastic = dict(distribution=kl, restarts_with=(temperature.reset,))
    actor_on_batch = partial(on_obs, actor)
    actor_net = Network("actor", actor, actor_optimizer, actor_on_batch, new_actor, **stochastic)
    networks = (actor, critic, critic_target, temperature)
    least = dict(env=env, episode_values=partial(episode_values, *networks, members, (N, action_dim)))
    plasticity = Plasticity(args, critic_net, actor_net, logger=run.logger, members=K, **least)

    actor_loss = partial(actor_objective, actor, critic, temperature, plasticity, args.actor_q)
    critic_loss = partial(critic_objective, *networks, plasticity, args)
    actor_loss, critic_loss = (compiled(f, args.compile) for f in (actor_loss, critic_loss))
    act = compiled(partial(explore, actor), args.compile)
    optimizers = (actor_optimizer, critic_optimizer)
    step = partial(update, actor_loss, critic_loss, critic, critic_target, temperature, optimizers, plasticity, args.tau)
    # a captured step is captured again when a tensor it watches is replaced (injection, dropped
    # optimiser state)
    optimizers = (actor_optimizer, critic_optimizer, temperature.optimizer)
    watched = (actor, critic, critic_target, normalizer, temperature, *optimizers)
    step = GraphStep(step, args.cudagraphs, watch=watched)
    act = GraphStep(act, args.cudagraphs, watch=(actor, normalizer))

    # the generators load after the networks: re-injecting a head on resume draws a fresh one
    state = plasticity.checkpointed() | temperature.checkpointed() | {"replay": replay}
    session = TrainingSession(run, "sac_simba", env, evaluator, **state, members=members)
    obs, policy = env.reset(seed=run.seeds), DeterministicPolicy(actor)  # once everything is built
    # by name: an off-policy agent's fields, an actor-critic's, then SAC's own
    common = dict(args=args, run=run, members=members, env=env, obs=obs, replay=replay)
    common |= dict(plasticity=plasticity, session=session, policy=policy)
    learner = dict(actor=actor, critic=critic, critic_target=critic_target, normalizer=normalizer)
    learner |= dict(actor_optimizer=actor_optimizer, critic_optimizer=critic_optimizer, explore=act)
    return SACParts(**common, **learner, temperature=temperature, num_critics=num_critics, update=step)


# ---- train: the loop ----------------------------------------------------------------------------
def train(parts: SACParts) -> dict:
    """SAC as the box above runs it: act by sampling π, step and store the raw observations,
    then `updates_per_step` updates (actor, temperature, critic, target). Returns the summary."""
    args, members, replay, plasticity = parts.args, parts.members, parts.replay, parts.plasticity
    session, policy = parts.session, parts.policy
    action_dim, batch_size = int(parts.env.single_action_space.shape[0]), args.batch_size
    obs, global_step, num_updates = session.open_or_resume(parts.obs)
    # once the run directories exist
    parts.run.logger.text("critics", f"{parts.num_critics} (clipped double-Q: {parts.num_critics == 2})")
    losses: dict[str, torch.Tensor] = {}

    while global_step < args.total_timesteps and not parts.run.stop_requested:
        # ---- act: a ~ U(A) before learning starts, else a ~ π(·|x) --------------------------
        learn, actions = act_in_box(parts, obs, global_step, num_updates)
        # ---- step and store raw (s, a, r, s', terminated): truncations (LEAST's too) bootstrap --
        _, obs, _ = step_and_store(parts.env, replay, obs, actions, plasticity, global_step)
        previous_step, global_step = global_step, global_step + parts.env.envs_per_member

        # ---- learn: actor → temperature → critic → target, `updates_per_step` times -----
        if learn:
            updates = args.updates_per_step
            for batch, last in update_batches(replay, updates, batch_size, args.reuse_batch):
                # drawn in the order the update uses them: ã's noise, the actor's C-CHAIN batch,
                # then a′'s and the critic's
                draws = []
                for _ in range(2):
                    noise = members.randn(batch_size, action_dim)
                    draws.append((noise, plasticity.reference_batch(replay, batch_size)))
                losses = parts.update(batch, draws)
                num_updates += 1
                plasticity.after_update(num_updates, replay, global_step, last)
            losses = losses | {"replay/sample_age": replay.age(batch).float().mean(dim=-1)}
            losses = losses | plasticity.report()

        session.after_step(previous_step, global_step, num_updates, losses, policy, obs)
        # continual ids: what the agent keeps across a task switch (--continual.*)
        if session.schedule.switched:
            fresh_start, kept = (parts.temperature.reset,), (parts.normalizer,)
            plasticity.on_task_switch(args.continual, replay, kept, also_on_fresh_start=fresh_start)

    # evaluation: tanh(μ(x)) of each member
    return session.finish(global_step, num_updates, policy, obs)


def main(args: Args) -> dict:
    return train(build(args))


def load_policy(args: Args, env, state: dict, device: torch.device) -> DeterministicPolicy:
    """The evaluation policy tanh(μ(norm(s))) of a checkpoint (`cleanrl-plus eval`): one member,
    the run's own, observation statistics included."""
    obs_dim = int(env.single_observation_space.shape[0])
    normalizer = RunningMeanStd((obs_dim,), enabled=args.normalize_obs)
    actor = with_normalizer(Actor(args, obs_dim, env.single_action_space), normalizer).to(device)
    rebuild_injected_heads(actor, state["actor"]).load_state_dict(state["actor"])
    return DeterministicPolicy(actor)


if __name__ == "__main__":
    cli_main(main, Args)
