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

import dataclasses
import math
from typing import Literal

import gymnasium as gym
import torch
import torch.nn as nn
import torch.nn.functional as F

import envs
from cleanrl_plus.config import RunArgs
from cleanrl_plus.critics import critic_losses, q_target
from cleanrl_plus.distributional import CategoricalCritic, CriticArgs
from cleanrl_plus.errors import UserError
from cleanrl_plus.evaluation import Evaluator
from cleanrl_plus.graphs import GraphStep, compiled
from cleanrl_plus.nn import ElementStepAdam, EnsembleLinear, frozen, polyak_update, target_copy
from cleanrl_plus.normalization import RunningMeanStd
from cleanrl_plus.ranges import AnyFinite, AtLeastOne, Count, Fraction, NonNegative, Positive
from cleanrl_plus.replay import Batch, bootstrap_discount, make_replay
from cleanrl_plus.run import cli_main, start_run
from cleanrl_plus.session import TrainingSession
from cleanrl_plus.simba import MLPEncoder, SimbaEncoder, orthogonal_, relu_layers, unit_pairs
from plasticity import ActorCriticRemedies, Network, Plasticity, catalogue
from plasticity.architecture import torso_settings
from plasticity.cir import CIREncoder, cir_activation_probe
from plasticity.diagnostics import ActivationProbe
from plasticity.optimizers import make_optimizer
from plasticity.swd import make_sampler


@dataclasses.dataclass
class Args(ActorCriticRemedies, RunArgs):
    exp_name: str = "sac_simba"
    """name of this experiment (the run directory is runs/{env_id}__{exp_name}__{seed}__{unix_time})"""
    env_id: str = "dmc:cheetah-run"
    """the environment id: dm-control (dmc:<domain>-<task>) or a continuous gymnasium task (Hopper-v5, Pendulum-v1)"""
    total_timesteps: AtLeastOne = 500_000
    """total agent steps (with action repeat 2 on dm-control: 1M frames, SimBa's DMC-hard budget)"""
    action_repeat: AtLeastOne = 2
    """dm-control only: physics control steps per agent step (SimBa uses 2); frames are logged as charts/frames"""
    network: Literal["simba", "mlp"] = "simba"
    """encoders of actor and critic: SimBa residual blocks, or a plain ReLU MLP (the 'SAC' baseline)"""
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
    normalize_obs: bool = True
    """running mean/std observation normalisation (statistics updated only from observations acted on)"""
    clipped_double_q: Literal["auto", "on", "off"] = "auto"
    """twin critics with a min target ('on') or one critic ('off'); 'auto' = on only if the task can terminate, as SimBa"""
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
    """reuse one batch for all updates of a step (same-batch reuse; CIR's SMR) instead of drawing a fresh batch per update"""
    actor_q: Literal["min", "mean"] = "min"
    """how the actor loss aggregates the critics: min (SAC/SimBa) or mean (CIR)"""
    # ---- many envs (FastTD3/FastSAC; docs/agents/sac_simba.md): every default keeps the one-env recipe -------------
    n_step: AtLeastOne = 1
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
    """Tanh-Gaussian policy on x = norm(s); log σ = −10 + 6·(tanh ℓ + 1) lies in [−10, 2]. `normalize` holds the observation
    statistics (shared with the critics, updated only by acting)."""

    def __init__(self, args: Args, obs_dim: int, action_space: gym.spaces.Box, normalize: nn.Module | None = None) -> None:
        super().__init__()
        self.normalize = normalize or nn.Identity()
        action_dim = action_space.shape[0]
        self.encoder = make_encoder(args, 1, obs_dim, args.actor_width, args.actor_blocks)
        self.mean = orthogonal_(EnsembleLinear(1, self.encoder.out_features, action_dim))
        self.log_std = orthogonal_(EnsembleLinear(1, self.encoder.out_features, action_dim))
        low, high = torch.as_tensor(action_space.low), torch.as_tensor(action_space.high)
        self.register_buffer("action_scale", ((high - low) / 2).float())
        self.register_buffer("action_bias", ((high + low) / 2).float())

    def _distribution(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(self.normalize(x).unsqueeze(0))
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

    def __init__(self, args: Args, obs_dim: int, action_dim: int, num_critics: int, outputs: int = 1, normalize: nn.Module | None = None) -> None:
        super().__init__()
        self.normalize = normalize or nn.Identity()
        self.num_critics, self.cir = num_critics, args.cir.critic
        if self.cir:  # PyTorch default init throughout, as CIR's code
            self.encoder = CIREncoder(num_critics, obs_dim + action_dim, args.cir.width, args.cir.shared_layer_norm)
            self.head = EnsembleLinear(num_critics, self.encoder.out_features, outputs)
        else:
            self.encoder = make_encoder(args, num_critics, obs_dim + action_dim, args.critic_width, args.critic_blocks)
            self.head = orthogonal_(EnsembleLinear(num_critics, self.encoder.out_features, outputs))

    def forward(self, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        inputs = torch.cat([self.normalize(x), action], dim=-1).expand(self.num_critics, -1, -1)
        return self.head(self.encoder(inputs)).squeeze(-1)

    def activation_probe(self) -> ActivationProbe:
        return cir_activation_probe(self.encoder, self.head) if self.cir else ActivationProbe(relu_layers(self.encoder), self.head)

    def unit_pairs(self) -> list:
        return [] if self.cir else unit_pairs(self.encoder, self.head)  # ReDo cannot pass CIR's LayerNorms and skips


def make_critic(args: Args, obs_dim: int, action_dim: int, num_critics: int, normalize: nn.Module | None = None) -> nn.Module:
    """The critics; with --critic.distributional their heads output C51 logits, and called as critics they give the
    expected values (so the actor, LEAST, diagnostics and remedies read Q as before)."""
    if not args.critic.distributional:
        return Critic(args, obs_dim, action_dim, num_critics, normalize=normalize)
    return CategoricalCritic(Critic(args, obs_dim, action_dim, num_critics, args.critic.num_atoms, normalize), args.critic)


class Temperature(nn.Module):
    """α = exp(log α) with its own Adam (no weight decay), from α₀ = --initial-alpha; `reset` starts both afresh."""

    def __init__(self, initial_alpha: float, learning_rate: float, device: torch.device, capturable: bool) -> None:
        super().__init__()
        self.initial_alpha = initial_alpha
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha), device=device))
        # torch's default kernel on CPU, fused and capturable on CUDA; ElementStepAdam keeps this run's `capturable`
        # when a checkpoint is loaded
        self.optimizer = ElementStepAdam([self.log_alpha], lr=learning_rate, fused=True if device.type == "cuda" else None,
                                         capturable=capturable and device.type == "cuda")

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def loss(self, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
        """E[−α·(log π(ã|x) + H̄)]."""
        return (-self.log_alpha.exp() * (log_prob + target_entropy)).mean()

    @torch.no_grad()
    def reset(self) -> None:
        self.log_alpha.fill_(math.log(self.initial_alpha))
        self.optimizer.state.clear()


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

    # raw observations are stored; actor and critics normalise them inside, with the statistics of the observations acted on
    normalizer = RunningMeanStd((obs_dim,), enabled=args.normalize_obs).to(device)
    new_actor = lambda: Actor(args, obs_dim, env.single_action_space, normalizer).to(device)  # noqa: E731
    new_critic = lambda: make_critic(args, obs_dim, action_dim, num_critics, normalizer).to(device)  # noqa: E731
    actor, critic = new_actor(), new_critic()
    critic_target = target_copy(critic).requires_grad_(False)
    temperature = Temperature(args.initial_alpha, args.alpha_learning_rate, device, args.cudagraphs)
    target_entropy = -args.target_entropy_scale * action_dim
    adamw = dict(weight_decay=args.weight_decay, decoupled_weight_decay=True)
    actor_optimizer = make_optimizer(args.optim, actor.parameters(), args.learning_rate, device, capturable=args.cudagraphs, **adamw)
    critic_optimizer = make_optimizer(args.optim, critic.parameters(), args.learning_rate, device, capturable=args.cudagraphs, **adamw)
    replay = make_replay(args.buffer_size, (obs_dim,), (action_dim,), device, make_sampler(args.swd, env.num_envs), env.num_envs,
                         args.n_step, args.gamma)
    action_low, action_high = actor.action_bias - actor.action_scale, actor.action_bias + actor.action_scale

    def episode_values(obs, actions, next_obs):  # LEAST: Q̂ = min Q(x, a), V̄(x') = min Q̄(x', a') − α·log π(a'|x')
        q_taken = critic(obs, actions).min(dim=0).values
        next_actions, next_log_prob = actor.sample(next_obs, torch.randn((next_obs.shape[0], action_dim), device=device))
        return q_taken, critic_target(next_obs, next_actions).min(dim=0).values - temperature.alpha * next_log_prob

    plasticity = Plasticity(
        args,
        Network("critic", critic, critic_optimizer, lambda b: critic(b.obs, b.actions), new_critic, critic_target,
                heads=(critic.head,), unit_pairs=critic.unit_pairs(), probe=critic.activation_probe()),
        Network("actor", actor, actor_optimizer, lambda b: actor(b.obs), new_actor, hidden=relu_layers(actor.encoder),
                heads=(actor.mean, actor.log_std), unit_pairs=unit_pairs(actor.encoder), distribution=lambda b: actor.distribution_parameters(b.obs)),
        logger=run.logger, env=env, episode_values=episode_values)

    # ---- the update and the acting step as functions of tensors: --compile compiles the losses and the acting step,
    # --cudagraphs captures each step whole and replays it (cleanrl_plus/graphs.py); random numbers are drawn outside
    def actor_objective(batch: Batch, noise: torch.Tensor, reference: Batch | None):
        new_actions, log_prob = actor.sample(batch.obs, noise)  # ã ~ π(·|x)
        q_all = critic(batch.obs, new_actions)
        q_new = q_all.min(dim=0).values if args.actor_q == "min" else q_all.mean(dim=0)
        actor_loss = (temperature.alpha * log_prob - q_new).mean()
        return plasticity.loss("actor", actor_loss, reference), actor_loss.detach(), log_prob.detach()

    def critic_objective(batch: Batch, next_noise: torch.Tensor, reference: Batch | None):
        # n-step: r is Σ γ^k r_{t+k} without the intermediate entropy terms, α·log π only at x' = x_{t+m} (as FastSAC)
        with torch.no_grad():  # a' ~ π(·|x') of the actor just updated, α just updated
            next_actions, next_log_prob = actor.sample(batch.next_obs, next_noise)
            target = q_target(critic_target, batch.next_obs, next_actions, batch.rewards, bootstrap_discount(batch, args.gamma),
                              args.cir.convex_lambda, temperature.alpha, next_log_prob)
        qf_losses, q_values = critic_losses(critic, batch.obs, batch.actions, target)
        return plasticity.loss("critic", qf_losses.sum(), reference), q_values.detach(), qf_losses.detach()

    def explore(obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # a ~ π(·|norm(s))
            return actor.sample(obs, noise)[0]

    actor_objective, temperature_objective, critic_objective, explore = (
        compiled(f, args.compile) for f in (actor_objective, temperature.loss, critic_objective, explore))

    def update(batch: Batch, actor_noise: torch.Tensor, actor_reference: Batch | None, next_noise: torch.Tensor,
               critic_reference: Batch | None) -> dict[str, torch.Tensor]:
        with frozen(critic):  # the gradient flows through Q to the action, not into the critic's weights
            loss, actor_loss, log_prob = actor_objective(batch, actor_noise, actor_reference)
        actor_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        plasticity.step("actor")

        alpha_loss = temperature_objective(log_prob, target_entropy)
        temperature.optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        temperature.optimizer.step()

        loss, q_values, qf_losses = critic_objective(batch, next_noise, critic_reference)
        critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        plasticity.step("critic")
        polyak_update(critic_target, critic, args.tau)
        logged = {
            "losses/qf1_values": q_values[0].mean(), "losses/qf1_loss": qf_losses[0], "losses/qf_loss": qf_losses.mean(),
            "losses/actor_loss": actor_loss, "losses/alpha": temperature.alpha, "losses/alpha_loss": alpha_loss.detach(),
            "losses/entropy": -log_prob.mean(),
        }
        if use_cdq:
            logged |= {"losses/qf2_values": q_values[1].mean(), "losses/qf2_loss": qf_losses[1]}
        return logged

    # a captured step is captured again when a tensor it watches is replaced (injection, dropped optimiser state)
    update = GraphStep(update, args.cudagraphs, watch=(actor, critic, critic_target, normalizer, temperature, actor_optimizer,
                                                       critic_optimizer, temperature.optimizer))
    explore = GraphStep(explore, args.cudagraphs, watch=(actor, normalizer))

    session = TrainingSession(run, "sac_simba", env, evaluator, plasticity=plasticity, actor=actor, critic=critic, critic_target=critic_target,
                              temperature=temperature, actor_optimizer=actor_optimizer, critic_optimizer=critic_optimizer,
                              alpha_optimizer=temperature.optimizer, replay=replay)
    obs, global_step, num_updates = session.start(env.reset(seed=args.seed))
    run.logger.writer.add_text("critics", f"{num_critics} (clipped double-Q: {use_cdq})")
    losses: dict[str, torch.Tensor] = {}

    while global_step < args.total_timesteps and not run.stop_requested:
        # ---- act: a ~ U(A) before learning starts, else a ~ π(·|x) ----------------------------------------------
        normalizer.update(obs)  # with --normalize-obs: the only place the observation statistics change
        schedule_step = session.schedule_step(global_step, args.continual.restarts_exploration)
        task_warmup = session.in_task_warmup(global_step)  # continual: random steps at each task's start, if asked
        if schedule_step < args.learning_starts or task_warmup:
            actions = action_low + torch.rand((env.num_envs, action_dim), device=device) * (action_high - action_low)
        else:
            actions = explore(obs, torch.randn((env.num_envs, action_dim), device=device))
        # ---- step and store raw (s, a, r, s', terminated): a truncation, LEAST's early stops included, bootstraps --
        step = env.step(actions)
        next_obs, truncated = plasticity.after_env_step(env, step, obs, actions, global_step)
        replay.add(obs, actions, step.reward, step.next_obs, step.terminated, truncated)  # n-step windows end at either
        obs = next_obs
        previous_step, global_step = global_step, global_step + env.num_envs

        # ---- learn: actor → temperature → critic → target, `updates_per_step` times, as in SimBa ---------------
        if schedule_step + env.num_envs > args.learning_starts and not task_warmup:
            session.learning_started(global_step, num_updates)
            batch = replay.sample(args.batch_size)
            for update_index in range(args.updates_per_step):
                if update_index > 0 and not args.reuse_batch:
                    batch = replay.sample(args.batch_size)
                # drawn in the order the update uses them: ã's noise, the actor's C-CHAIN batch, a′'s noise, the critic's
                actor_noise = torch.randn((args.batch_size, action_dim), device=device)
                actor_reference = plasticity.reference_batch(replay, args.batch_size)
                next_noise = torch.randn((args.batch_size, action_dim), device=device)
                losses = update(batch, actor_noise, actor_reference, next_noise, plasticity.reference_batch(replay, args.batch_size))
                num_updates += 1
                plasticity.after_update(num_updates, replay, global_step)
            losses = losses | {"replay/sample_age": replay.age(batch).float().mean()} | plasticity.report()

        session.after_step(previous_step, global_step, num_updates, losses, actor, obs)
        if session.task_switched:  # continual ids: what the agent keeps across a task switch (--continual.*)
            plasticity.on_task_switch(args.continual, replay, (normalizer,), also_on_fresh_start=(temperature.reset,))

    return session.finish(global_step, num_updates, actor, obs)


def load_policy(args: Args, env, state: dict, device: torch.device) -> nn.Module:
    """The evaluation policy tanh(μ(norm(s))) of a checkpoint (`cleanrl-plus eval`), observation statistics included."""
    obs_dim = int(env.single_observation_space.shape[0])
    actor = Actor(args, obs_dim, env.single_action_space, RunningMeanStd((obs_dim,), enabled=args.normalize_obs)).to(device)
    actor.load_state_dict(state["actor"])
    return actor


if __name__ == "__main__":
    cli_main(main, Args)
