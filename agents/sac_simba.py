"""SAC with the SimBa architecture (Haarnoja et al. 2018, arXiv 1812.05905; Lee et al., ICLR 2025, arXiv 2410.09754).

Defaults follow the official SimBa SAC config: running-statistics observation normalisation, residual
pre-LayerNorm encoders (actor 128 wide × 1 block, critic 512 wide × 2 blocks), AdamW (lr 1e-4, weight decay
1e-2), temperature Adam lr 1e-4 from α = 0.01 with target entropy −|A|/2, batch 256, τ 0.005, 5k random
steps, 2 updates per agent step with a fresh batch each, action repeat 2 on dm-control, and one critic on
tasks that never terminate (dm-control) but clipped double-Q where episodes can terminate.

    for every agent step:
        update the observation statistics with s (acting observations only); x = norm(s)
        a ~ U(A) before learning starts, else a ~ π(·|x) = tanh(N(μ(x), σ(x)²))
        store raw (s, a, r, s', terminated)              # time-limit truncation is not terminal: bootstrap
        repeat `updates_per_step` times, on a fresh batch (or the same one with --reuse-batch):
            actor:       minimise E[α·log π(ã|x) − Q(x, ã)],  ã ~ π(·|x)    (Q = min over critics with CDQ)
            temperature: minimise E[−α·(log π(ã|x) + H̄)]
            critic:      y = r + γ(1 − terminated)·(Q̄(x', a') − α·log π(a'|x')),  a' ~ π(·|x');  minimise (Q(x, a) − y)²
            target:      θ̄ ← (1 − τ)θ̄ + τθ

`--network mlp` swaps both encoders for plain ReLU MLPs (256-256) to compare "SAC" with "SAC+SimBa".

Many envs (FastTD3's recipe, Seo et al. 2025, as FastSAC in their repository; docs/agents/sac_simba.md), off by default:
    --n-step n                  y = Σ_{k<m} γ^k r_{t+k} + γ^m(1 − terminated)·(Q̄(x_{t+m}, a') − α·log π(a'|x_{t+m})), m ≤ n cut
                                at episode ends; the entropy term only at the bootstrap state, as FastSAC
    --critic.distributional     C51 critics: cross-entropy to Φ(r + γ^m(1 − terminated)·(z − α·log π(a'|x'))) of the target
                                critic with the smaller mean; the actor's Q is each critic's expected value
Observation normalisation (--normalize-obs) and AdamW's weight decay (--weight-decay) are on already, for both networks.
Run: python agents/sac_simba.py --env-id dmc:cheetah-run       (python agents/sac_simba.py --help lists every flag)
On a GPU, add --compile --cudagraphs: the same math, captured and replayed (cleanrl_plus/graphs.py, docs/speed.md).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Literal

import gymnasium as gym
import torch
import torch.nn as nn
import torch.nn.functional as F

import envs
from cleanrl_plus.checkpoint import capture_rng_state, load_state_dicts, restore_rng_state, state_dicts
from cleanrl_plus.config import RunArgs
from cleanrl_plus.continual import on_task_switch, restarts_exploration
from cleanrl_plus.distributional import CategoricalCritic, CriticArgs, clipped_double, cross_entropy, expected_value, project
from cleanrl_plus.errors import UserError
from cleanrl_plus.evaluation import Evaluator
from cleanrl_plus.graphs import GraphStep, compiled
from cleanrl_plus.nn import ElementStepAdam, EnsembleLinear, frozen, polyak_update
from cleanrl_plus.normalization import RunningMeanStd
from cleanrl_plus.replay import Batch, batch_gamma, make_replay
from cleanrl_plus.run import cli_main, start_run
from cleanrl_plus.session import TrainingSession
from plasticity import ActorCriticRemedies, catalogue
from plasticity.architecture import torso_settings
from plasticity.cir import CIREncoder, cir_activation_probe, convex_min_max
from plasticity.diagnostics import ActivationProbe, PlasticityMonitor
from plasticity.hooks import RemedyHooks, Trained, reference_batch
from plasticity.least import EpisodeStopper
from plasticity.optimizers import make_optimizer
from plasticity.resets import Resettable, Resetter
from plasticity.swd import make_sampler
from cleanrl_plus.simba import MLPEncoder, SimbaEncoder, orthogonal_, relu_layers, unit_pairs


@dataclasses.dataclass
class Args(ActorCriticRemedies, RunArgs):
    exp_name: str = "sac_simba"
    """name of this experiment (the run directory is runs/{env_id}__{exp_name}__{seed}__{unix_time})"""
    env_id: str = "dmc:cheetah-run"
    """the environment id: dm-control (dmc:<domain>-<task>) or a continuous gymnasium task (Hopper-v5, Pendulum-v1)"""
    total_timesteps: int = 500_000
    """total agent steps (with action repeat 2 on dm-control: 1M frames, SimBa's DMC-hard budget)"""
    action_repeat: int = 2
    """dm-control only: physics control steps per agent step (SimBa uses 2); frames are logged as charts/frames"""
    network: Literal["simba", "mlp"] = "simba"
    """encoders of actor and critic: SimBa residual blocks, or a plain ReLU MLP (the 'SAC' baseline)"""
    actor_width: int = 128
    """SimBa actor hidden width d (blocks expand to 4d inside)"""
    actor_blocks: int = 1
    """SimBa actor residual blocks"""
    critic_width: int = 512
    """SimBa critic hidden width d"""
    critic_blocks: int = 2
    """SimBa critic residual blocks"""
    mlp_hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden widths of actor and critic when --network mlp"""
    normalize_obs: bool = True
    """running mean/std observation normalisation (statistics updated only from observations acted on)"""
    clipped_double_q: Literal["auto", "on", "off"] = "auto"
    """twin critics with a min target ('on') or one critic ('off'); 'auto' = on only if the task can terminate, as SimBa"""
    learning_rate: float = 1e-4
    """AdamW learning rate of actor and critic"""
    weight_decay: float = 1e-2
    """AdamW decoupled weight decay of actor and critic (all parameters, as in the official code)"""
    alpha_learning_rate: float = 1e-4
    """Adam learning rate of the temperature (no weight decay)"""
    initial_alpha: float = 0.01
    """initial entropy temperature α"""
    target_entropy_scale: float = 0.5
    """target entropy H̄ = −scale·|A|"""
    buffer_size: int = 1_000_000
    """replay capacity in transitions"""
    gamma: float = 0.99
    """discount factor γ (SimBa's horizon heuristic gives 0.99 on dm-control)"""
    tau: float = 0.005
    """target smoothing coefficient τ"""
    batch_size: int = 256
    """transitions per gradient step"""
    learning_starts: int = 5_000
    """agent steps of uniformly random actions before learning starts"""
    updates_per_step: int = 2
    """gradient updates per agent step (the update-to-data ratio)"""
    reuse_batch: bool = False
    """reuse one batch for all updates of a step (same-batch reuse; CIR's SMR) instead of drawing a fresh batch per update"""
    actor_q: Literal["min", "mean"] = "min"
    """how the actor loss aggregates the critics: min (SAC/SimBa) or mean (CIR)"""
    # ---- many envs (FastTD3/FastSAC; docs/agents/sac_simba.md): every default keeps the one-env recipe -------------
    n_step: int = 1
    """n-step returns: Σ_{k<n} γ^k r_{t+k}, bootstrapped (with the entropy term) from s_{t+n}, cut at episode ends
    (1 = one-step TD; FastTD3 1–3)"""
    critic: CriticArgs = dataclasses.field(default_factory=CriticArgs)
    """the critics' output: a scalar Q (SAC) or a C51 distribution over soft returns (as FastTD3's critics)"""


LOG_STD_MIN, LOG_STD_MAX = -10.0, 2.0


def make_encoder(args: Args, ensemble_size: int, in_features: int, width: int, blocks: int) -> nn.Module:
    norm, activation = torso_settings(args.net, args.nap)
    if args.network == "simba":  # its blocks hold their own LayerNorms: --net.norm is refused in main()
        return SimbaEncoder(ensemble_size, in_features, width, blocks, activation)
    return MLPEncoder(ensemble_size, in_features, args.mlp_hidden_sizes, norm, activation)


class Actor(nn.Module):
    """Tanh-Gaussian policy; log σ = −10 + 6·(tanh ℓ + 1) lies in [−10, 2]."""

    def __init__(self, args: Args, obs_dim: int, action_space: gym.spaces.Box) -> None:
        super().__init__()
        action_dim = action_space.shape[0]
        self.encoder = make_encoder(args, 1, obs_dim, args.actor_width, args.actor_blocks)
        self.mean = orthogonal_(EnsembleLinear(1, self.encoder.out_features, action_dim))
        self.log_std = orthogonal_(EnsembleLinear(1, self.encoder.out_features, action_dim))
        low, high = torch.as_tensor(action_space.low), torch.as_tensor(action_space.high)
        self.register_buffer("action_scale", ((high - low) / 2).float())
        self.register_buffer("action_bias", ((high + low) / 2).float())

    def _distribution(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(x.unsqueeze(0))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(self.log_std(h)) + 1)
        return self.mean(h).squeeze(0), log_std.squeeze(0)

    def sample(self, x: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in the env's bounds, u = μ + σ·noise with noise ~ N(0, I) drawn by the caller
        (batch, |A|), and its log-probability (with the tanh correction)."""
        mean, log_std = self._distribution(x)
        u = mean + log_std.exp() * noise
        gaussian_log_prob = (-0.5 * ((u - mean) / log_std.exp()).square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # log(1 − tanh(u)²) = 2·(log 2 − u − softplus(−2u)), stable for large |u|
        squash_correction = (2 * (math.log(2) - u - F.softplus(-2 * u)) + torch.log(self.action_scale)).sum(-1)
        return torch.tanh(u) * self.action_scale + self.action_bias, gaussian_log_prob - squash_correction

    def distribution_parameters(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The pre-tanh Gaussian N(μ, σ²) (for KL churn): a ↦ tanh(a)·scale + bias is a bijection, so the KL between two
        such policies equals the KL between their Gaussians."""
        mean, log_std = self._distribution(x)
        return {"mean": mean, "log_std": log_std}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The deterministic action used for evaluation: tanh(μ(x))."""
        return torch.tanh(self._distribution(x)[0]) * self.action_scale + self.action_bias


class Critic(nn.Module):
    """`num_critics` Q-functions as one ensemble: (num_critics, batch) values ((num_critics, batch, outputs) C51 logits)."""

    def __init__(self, args: Args, obs_dim: int, action_dim: int, num_critics: int, outputs: int = 1) -> None:
        super().__init__()
        self.num_critics, self.cir = num_critics, args.cir.critic
        if self.cir:  # PyTorch default init throughout, as CIR's code
            self.encoder = CIREncoder(num_critics, obs_dim + action_dim, args.cir.width, args.cir.shared_layer_norm)
            self.head = EnsembleLinear(num_critics, self.encoder.out_features, outputs)
        else:
            self.encoder = make_encoder(args, num_critics, obs_dim + action_dim, args.critic_width, args.critic_blocks)
            self.head = orthogonal_(EnsembleLinear(num_critics, self.encoder.out_features, outputs))

    def forward(self, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        inputs = torch.cat([x, action], dim=-1).expand(self.num_critics, -1, -1)
        return self.head(self.encoder(inputs)).squeeze(-1)

    def activation_probe(self) -> ActivationProbe:
        return cir_activation_probe(self.encoder, self.head) if self.cir else ActivationProbe(relu_layers(self.encoder), self.head)

    def unit_pairs(self) -> list:
        return [] if self.cir else unit_pairs(self.encoder, self.head)  # ReDo cannot pass CIR's LayerNorms and skips


def make_critic(args: Args, obs_dim: int, action_dim: int, num_critics: int) -> nn.Module:
    """The critics; with --critic.distributional their heads output C51 logits, and called as critics they give the
    expected values (so the actor, LEAST, diagnostics and remedies read Q as before)."""
    if not args.critic.distributional:
        return Critic(args, obs_dim, action_dim, num_critics)
    return CategoricalCritic(Critic(args, obs_dim, action_dim, num_critics, args.critic.num_atoms), args.critic)


def soft_q_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor,
    gamma: float | torch.Tensor,
    convex_lambda: float = 1.0,
) -> torch.Tensor:
    """y = r + γ(1 − terminated)·(min_i Q̄_i(x', a') − α·log π(a'|x')); with one critic the min is that critic;
    CIR's convex target replaces the min by λ·min + (1 − λ)·max. For an n-step batch `gamma` is each transition's γ^m
    and r its n-step return."""
    return rewards + gamma * (1.0 - terminated) * (convex_min_max(next_q, convex_lambda) - alpha * next_log_prob)


def soft_categorical_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_probs: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor,
    gamma: float | torch.Tensor,
    atoms: torch.Tensor,
    convex_lambda: float = 1.0,
) -> torch.Tensor:
    """C51's soft target (B, K): Φ(r + d·(z − α·log π(a'|x'))), d = γ(1 − terminated) (γ^m for an n-step batch), of the
    target critic with the smaller mean at (x', a') (CIR: the mixture; one critic: its own). The entropy term is one
    number per transition, so it shifts the whole support before the projection."""
    discount = gamma * (1.0 - terminated)
    next_probs = clipped_double(next_probs, atoms, convex_lambda)
    return project(atoms, rewards - discount * alpha * next_log_prob, discount, next_probs)


def main(args: Args) -> dict:
    catalogue.check("sac_simba", args)
    if args.network == "simba" and args.net.norm != "none":
        raise UserError("SimBa blocks already hold LayerNorms (pre-norm and a final norm) — drop --net.norm, or use --network mlp")
    run = start_run(args)
    device = run.device
    env_kwargs = {"action_repeat": args.action_repeat} if envs.backend_for(args.env_id) == "dmc" else {}
    env = envs.make(args.env_id, num_envs=args.num_envs, seed=args.seed, device=device, continual=args.continual, **env_kwargs)
    if not isinstance(env.single_action_space, gym.spaces.Box):
        raise UserError(f"SAC needs continuous (Box) actions; {args.env_id} has {env.single_action_space} — use agents/ddqn.py or agents/ppo.py")
    evaluator = Evaluator(args.env_id, args.eval_episodes, args.seed, device, continual=args.continual, **env_kwargs)
    obs_dim, action_dim = int(env.single_observation_space.shape[0]), int(env.single_action_space.shape[0])
    use_cdq = env.can_terminate if args.clipped_double_q == "auto" else args.clipped_double_q == "on"
    num_critics = 2 if use_cdq else 1
    print(f"sac_simba: {num_critics} critic{'s with clipped double-Q' if use_cdq else ''} ({args.env_id} can terminate: {env.can_terminate})")
    run.logger.writer.add_text("critics", f"{num_critics} (clipped double-Q: {use_cdq})")

    normalizer = RunningMeanStd((obs_dim,)).to(device)
    normalize = normalizer if args.normalize_obs else nn.Identity()
    actor = Actor(args, obs_dim, env.single_action_space).to(device)
    critic = make_critic(args, obs_dim, action_dim, num_critics).to(device)
    critic_target = copy.deepcopy(critic).requires_grad_(False)
    log_alpha = torch.tensor(math.log(args.initial_alpha), device=device, requires_grad=True)
    target_entropy = -args.target_entropy_scale * action_dim
    adamw = dict(weight_decay=args.weight_decay, decoupled_weight_decay=True)
    actor_optimizer = make_optimizer(args.optim, actor.parameters(), args.learning_rate, device, capturable=args.cudagraphs, **adamw)
    critic_optimizer = make_optimizer(args.optim, critic.parameters(), args.learning_rate, device, capturable=args.cudagraphs, **adamw)
    # the temperature's Adam: torch's default kernel on CPU, fused and capturable on CUDA; ElementStepAdam keeps this
    # run's `capturable` when a checkpoint is loaded
    alpha_optimizer = ElementStepAdam([log_alpha], lr=args.alpha_learning_rate, fused=True if device.type == "cuda" else None,
                                      capturable=args.cudagraphs and device.type == "cuda")
    sampler = make_sampler(args.swd, env.num_envs)
    replay = make_replay(args.buffer_size, (obs_dim,), (action_dim,), device, sampler, env.num_envs, args.n_step, args.gamma)
    action_low, action_high = actor.action_bias - actor.action_scale, actor.action_bias + actor.action_scale

    def policy(obs: torch.Tensor) -> torch.Tensor:  # evaluation: deterministic, statistics frozen
        return actor(normalize(obs))

    monitor = PlasticityMonitor(
        args.diagnostics,
        critic=(critic, critic.activation_probe(), lambda b: critic(normalize(b.obs), b.actions)),
        actor=(actor, ActivationProbe(relu_layers(actor.encoder), actor.mean), lambda b: actor(normalize(b.obs)),
               lambda b: actor.distribution_parameters(normalize(b.obs))),
    )
    networks = dict(
        critic=Resettable(critic, critic_optimizer, critic_target, lambda: make_critic(args, obs_dim, action_dim, num_critics).to(device),
                          critic.unit_pairs(), lambda b: critic(normalize(b.obs), b.actions), head=critic.head),
        actor=Resettable(actor, actor_optimizer, None, lambda: Actor(args, obs_dim, env.single_action_space).to(device),
                         unit_pairs(actor.encoder), lambda b: actor(normalize(b.obs)), output_layers=(actor.mean, actor.log_std)),
    )
    resetter = Resetter(args.reset, **networks)
    remedies = RemedyHooks(args, critic=Trained(critic, critic_optimizer, lambda b: critic(normalize(b.obs), b.actions), (critic.head,)),
                           actor=Trained(actor, actor_optimizer, lambda b: actor(normalize(b.obs)), (actor.mean, actor.log_std)))

    @torch.no_grad()
    def fresh_temperature() -> None:  # the oracle's fresh agent also starts from the initial α
        log_alpha.fill_(math.log(args.initial_alpha))
        alpha_optimizer.state.clear()
    stateful = dict(  # the resetter loads first: an injected head must exist again before the weights arrive
        resetter=resetter, actor=actor, critic=critic, critic_target=critic_target, normalizer=normalizer,
        actor_optimizer=actor_optimizer, critic_optimizer=critic_optimizer, alpha_optimizer=alpha_optimizer, replay=replay,
        env=env, monitor=monitor,
    ) | remedies.stateful()
    stopper = None
    if args.least.enabled:
        stopper = stateful["stopper"] = EpisodeStopper(args.least, env.num_envs, env.max_episode_steps, args.total_timesteps, device)
    global_step, num_updates = 0, 0
    obs = env.reset(seed=args.seed)
    if run.resumed:
        state = run.resumed
        load_state_dicts(state, **stateful)
        with torch.no_grad():
            log_alpha.copy_(state["log_alpha"])
        obs, global_step, num_updates = state["obs"].to(device), state["global_step"], state["num_updates"]
        restore_rng_state(state["rng"])

    def checkpoint_state() -> dict:
        counters = {"global_step": global_step, "num_updates": num_updates, "obs": obs, "log_alpha": log_alpha.detach().clone()}
        return counters | {"rng": capture_rng_state()} | state_dicts(**stateful)

    # ---- the update and the acting step as functions of tensors: --compile compiles the losses and the acting step,
    # --cudagraphs captures each step whole and replays it (cleanrl_plus/graphs.py); random numbers are drawn outside
    def actor_objective(batch: Batch, noise: torch.Tensor, reference: Batch | None):
        x = normalize(batch.obs)
        alpha = log_alpha.exp().detach()
        new_actions, log_prob = actor.sample(x, noise)  # ã ~ π(·|x)
        q_all = critic(x, new_actions)
        q_new = q_all.min(dim=0).values if args.actor_q == "min" else q_all.mean(dim=0)
        actor_loss = (alpha * log_prob - q_new).mean()
        return remedies.loss("actor", actor_loss, reference), actor_loss.detach(), log_prob.detach()

    def temperature_objective(log_prob: torch.Tensor) -> torch.Tensor:
        return (-log_alpha.exp() * (log_prob + target_entropy)).mean()

    def critic_objective(batch: Batch, next_noise: torch.Tensor, reference: Batch | None):
        x, next_x = normalize(batch.obs), normalize(batch.next_obs)
        # n-step: r is Σ γ^k r_{t+k} without the intermediate entropy terms, α·log π only at x' = x_{t+m} (as FastSAC)
        gamma = batch_gamma(batch, args.gamma)
        with torch.no_grad():  # a' ~ π(·|x') of the actor just updated, α just updated
            next_actions, next_log_prob = actor.sample(next_x, next_noise)
            if args.critic.distributional:
                target = soft_categorical_target(batch.rewards, batch.terminated, critic_target.probabilities(next_x, next_actions), next_log_prob,
                                                 log_alpha.exp(), gamma, critic_target.atoms, args.cir.convex_lambda)
            else:
                target = soft_q_target(batch.rewards, batch.terminated, critic_target(next_x, next_actions), next_log_prob, log_alpha.exp(), gamma,
                                       args.cir.convex_lambda)
        if args.critic.distributional:  # cross-entropy to the projected soft target distribution
            logits = critic.logits(x, batch.actions)
            qf_losses = cross_entropy(logits, target.expand(num_critics, -1, -1)).mean(dim=1)
            q_values = expected_value(logits, critic.atoms)
        else:
            q_values = critic(x, batch.actions)
            qf_losses = F.mse_loss(q_values, target.expand(num_critics, -1), reduction="none").mean(dim=1)
        return remedies.loss("critic", qf_losses.sum(), reference), q_values.detach(), qf_losses.detach()

    def explore(obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # a ~ π(·|norm(s))
            return actor.sample(normalize(obs), noise)[0]

    actor_objective, temperature_objective, critic_objective, explore = (
        compiled(f, args.compile) for f in (actor_objective, temperature_objective, critic_objective, explore))

    def update(batch: Batch, actor_noise: torch.Tensor, actor_reference: Batch | None, next_noise: torch.Tensor,
               critic_reference: Batch | None) -> dict[str, torch.Tensor]:
        with frozen(critic):  # the gradient flows through Q to the action, not into the critic's weights
            loss, actor_loss, log_prob = actor_objective(batch, actor_noise, actor_reference)
        actor_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        remedies.step("actor")

        alpha_loss = temperature_objective(log_prob)
        alpha_optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        alpha_optimizer.step()

        loss, q_values, qf_losses = critic_objective(batch, next_noise, critic_reference)
        critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        remedies.step("critic")
        polyak_update(critic_target, critic, args.tau)
        logged = {
            "losses/qf1_values": q_values[0].mean(), "losses/qf1_loss": qf_losses[0], "losses/qf_loss": qf_losses.mean(),
            "losses/actor_loss": actor_loss, "losses/alpha": log_alpha.detach().exp(), "losses/alpha_loss": alpha_loss.detach(),
            "losses/entropy": -log_prob.mean(),
        }
        if use_cdq:
            logged |= {"losses/qf2_values": q_values[1].mean(), "losses/qf2_loss": qf_losses[1]}
        return logged

    # a captured step is captured again when a tensor it watches is replaced (injection, dropped optimiser state)
    update = GraphStep(update, args.cudagraphs, watch=(actor, critic, critic_target, normalizer, log_alpha, actor_optimizer,
                                                       critic_optimizer, alpha_optimizer))
    explore = GraphStep(explore, args.cudagraphs, watch=(actor, normalizer))

    session = TrainingSession(run, "sac_simba", env, evaluator, start_step=global_step)
    losses: dict[str, torch.Tensor] = {}

    while global_step < args.total_timesteps and not run.stop_requested:
        # ---- act (the only place the observation statistics are updated) -----------------------------
        if args.normalize_obs:
            normalizer.update(obs)
        schedule_step = session.schedule_step(global_step, restarts_exploration(args.continual))
        task_warmup = session.in_task_warmup(global_step)  # continual: random steps at each task's start, if asked
        if schedule_step < args.learning_starts or task_warmup:
            actions = action_low + torch.rand((env.num_envs, action_dim), device=device) * (action_high - action_low)
        else:
            actions = explore(obs, torch.randn((env.num_envs, action_dim), device=device))
        # ---- step and store raw observations (normalised with the current statistics when sampled) ----
        step = env.step(actions)
        next_obs, truncated = step.obs, step.truncated
        if stopper is not None:  # LEAST: Q̂ = min Q(x, a), G = |soft TD error| of this transition; a stop is a truncation
            with torch.no_grad():
                q_taken = critic(normalize(obs), actions).min(dim=0).values
                next_x = normalize(step.next_obs)
                next_actions, next_log_prob = actor.sample(next_x, torch.randn((env.num_envs, action_dim), device=device))
                next_value = critic_target(next_x, next_actions).min(dim=0).values - log_alpha.exp() * next_log_prob
            next_obs = stopper.after_env_step(env, step, q_taken, next_value, args.gamma, global_step)
            truncated = truncated | stopper.stopped_now
        replay.add(obs, actions, step.reward, step.next_obs, step.terminated, truncated)  # n-step windows end at either
        obs = next_obs
        previous_step, global_step = global_step, global_step + env.num_envs

        # ---- learn: actor → temperature → critic → target, as in SimBa -------------------------------
        if schedule_step + env.num_envs > args.learning_starts and not task_warmup:
            session.learning_started(global_step, num_updates)
            batch = replay.sample(args.batch_size)
            for update_index in range(args.updates_per_step):
                if update_index > 0 and not args.reuse_batch:
                    batch = replay.sample(args.batch_size)
                # drawn in the order the update uses them: ã's noise, the actor's C-CHAIN batch, a′'s noise, the critic's
                actor_noise = torch.randn((args.batch_size, action_dim), device=device)
                actor_reference = reference_batch(args, replay, args.batch_size)
                next_noise = torch.randn((args.batch_size, action_dim), device=device)
                losses = update(batch, actor_noise, actor_reference, next_noise, reference_batch(args, replay, args.batch_size))
                num_updates += 1
                monitor.after_update(num_updates, replay, run.logger, global_step)
                resetter.after_update(num_updates, replay, run.logger, global_step)
            losses = losses | {"replay/sample_age": replay.age(batch).float().mean()} | remedies.report()
            if stopper is not None:
                losses |= stopper.report()

        session.after_step(previous_step, global_step, num_updates, losses, policy, checkpoint_state)
        if session.task_switched:  # continual ids: what the agent keeps across a task switch (--continual.*)
            on_task_switch(args.continual, networks.values(), replay, (normalizer,), also_on_fresh_start=(fresh_temperature,))

    return session.finish(global_step, num_updates, policy, checkpoint_state)


def load_policy(args: Args, env, state: dict, device: torch.device) -> nn.Module:
    """The evaluation policy tanh(μ(norm(s))) of a checkpoint (`cleanrl-plus eval`), statistics frozen."""
    obs_dim = int(env.single_observation_space.shape[0])
    actor = Actor(args, obs_dim, env.single_action_space).to(device)
    actor.load_state_dict(state["actor"])
    normalizer = RunningMeanStd((obs_dim,)).to(device)
    normalizer.load_state_dict(state["normalizer"])
    return nn.Sequential(normalizer if args.normalize_obs else nn.Identity(), actor)


if __name__ == "__main__":
    cli_main(main, Args)
