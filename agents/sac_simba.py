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
from cleanrl_plus.critics import critic_losses, critic_report, q_target
from cleanrl_plus.distributional import CategoricalCritic, CriticArgs
from cleanrl_plus.errors import UserError
from cleanrl_plus.evaluator import make_envs
from cleanrl_plus.exploration import uniform_or_explore
from cleanrl_plus.graphs import GraphStep, compiled
from cleanrl_plus.members import Members
from cleanrl_plus.nn import EnsembleLinear, frozen, polyak_update, target_copy
from cleanrl_plus.normalization import RunningMeanStd
from cleanrl_plus.ranges import AnyFinite, AtLeastOne, Count, Fraction, NonNegative, Positive
from cleanrl_plus.replay import Batch, make_replay, step_and_store
from cleanrl_plus.run import check_run_args, cli_main, start_run
from cleanrl_plus.session import TrainingSession
from cleanrl_plus.simba import MLPEncoder, SimbaEncoder, orthogonal_, relu_layers, unit_pairs
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
    if (
        args.network == "simba"
    ):  # its blocks hold their own LayerNorms: --net.norm is refused in main(), NaP adds one before the ReLU
        return SimbaEncoder(ensemble_size, in_features, width, blocks, activation, norm)
    return MLPEncoder(ensemble_size, in_features, args.mlp_hidden_sizes, norm, activation)


class Actor(nn.Module):
    """Tanh-Gaussian policy on x = norm(s) for each of `members`: (members, B, obs) → (members, B, |A|); log σ = −10 +
    6·(tanh ℓ + 1) lies in [−10, 2]. Its `normalize`, attached by the agent (`with_normalizer`), holds the observation
    statistics (shared with the critics, updated only by acting)."""

    def __init__(self, args: Args, obs_dim: int, action_space: gym.spaces.Box, members: int = 1) -> None:
        super().__init__()
        self.normalize: nn.Module = nn.Identity()
        action_dim = action_space.shape[0]
        self.encoder = make_encoder(args, members, obs_dim, args.actor_width, args.actor_blocks)
        self.mean = orthogonal_(EnsembleLinear(members, self.encoder.out_features, action_dim))
        self.log_std = orthogonal_(EnsembleLinear(members, self.encoder.out_features, action_dim))
        low, high = torch.as_tensor(action_space.low), torch.as_tensor(action_space.high)
        self.register_buffer("action_scale", ((high - low) / 2).float())
        self.register_buffer("action_bias", ((high + low) / 2).float())

    def _distribution(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(self.normalize(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(self.log_std(h)) + 1)
        return self.mean(h), log_std

    def sample(self, x: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in the env's bounds, u = μ + σ·noise with noise ~ N(0, I) drawn by the caller
        (members, batch, |A|), and its log-probability (with the tanh correction), (members, batch)."""
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

    def layout(self) -> Layout:  # two heads read the last hidden layer: its units cannot be recycled
        return Layout(hidden=relu_layers(self.encoder), heads=(self.mean, self.log_std), unit_pairs=unit_pairs(self.encoder))

    def forward(self, x: torch.Tensor, members: Members | None = None) -> torch.Tensor:
        """The deterministic action used for evaluation: tanh(μ(x)) (handed the evaluation's generators, it needs none)."""
        return torch.tanh(self._distribution(x)[0]) * self.action_scale + self.action_bias

    @property
    def bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The Box's (low, high)."""
        return self.action_bias - self.action_scale, self.action_bias + self.action_scale


class Critic(nn.Module):
    """`num_critics` Q-functions of each of `members` as one ensemble of members × num_critics (member-major):
    (members, num_critics, batch) values ((members, num_critics, batch, outputs) C51 logits)."""

    def __init__(
        self, args: Args, obs_dim: int, action_dim: int, num_critics: int, outputs: int = 1, members: int = 1
    ) -> None:
        super().__init__()
        self.normalize: nn.Module = nn.Identity()
        self.num_critics, self.cir = num_critics, args.cir.critic
        size = members * num_critics
        if self.cir:  # PyTorch default init throughout, as CIR's code
            self.encoder = CIREncoder(size, obs_dim + action_dim, args.cir.width, args.cir.shared_layer_norm, members)
            self.head = EnsembleLinear(size, self.encoder.out_features, outputs)
        else:
            self.encoder = make_encoder(args, size, obs_dim + action_dim, args.critic_width, args.critic_blocks)
            self.head = orthogonal_(EnsembleLinear(size, self.encoder.out_features, outputs))

    def forward(self, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        inputs = torch.cat([self.normalize(x), action], dim=-1)
        inputs = inputs.unsqueeze(1).expand(-1, self.num_critics, -1, -1).flatten(0, 1)  # each member's, to its critics
        return self.head(self.encoder(inputs)).unflatten(0, (x.shape[0], self.num_critics)).squeeze(-1)

    def layout(self) -> Layout:
        if self.cir:
            return cir_layout(self.encoder, self.head)
        return Layout(hidden=relu_layers(self.encoder), heads=(self.head,), unit_pairs=unit_pairs(self.encoder, self.head))


def make_critic(members: int, args: Args, obs_dim: int, action_dim: int, num_critics: int) -> nn.Module:
    """The critics of each member; with --critic.distributional their heads output C51 logits, and called as critics they
    give the expected values (so the actor, LEAST, diagnostics and remedies read Q as before)."""
    if not args.critic.distributional:
        return Critic(args, obs_dim, action_dim, num_critics, members=members)
    return CategoricalCritic(Critic(args, obs_dim, action_dim, num_critics, args.critic.num_atoms, members), args.critic)


def check_flags(args: Args) -> None:
    """One-line UserError for remedies SAC cannot take (plasticity/catalogue.py) or that its SimBa blocks hold already."""
    catalogue.check("sac_simba", args)
    if args.network == "simba" and args.net.norm != "none":
        raise UserError(
            "SimBa blocks already hold LayerNorms (pre-norm and a final norm) — drop --net.norm, or use --network mlp"
        )


def critics_for(args: Args, env) -> int:
    """Two critics with clipped double-Q where episodes can terminate, one where they cannot (--clipped-double-q auto, as
    SimBa); says which."""
    use_cdq = env.can_terminate if args.clipped_double_q == "auto" else args.clipped_double_q == "on"
    print(
        f"sac_simba: {2 if use_cdq else 1} critic{'s with clipped double-Q' if use_cdq else ''} ({args.env_id} can "
        f"terminate: {env.can_terminate})"
    )
    return 2 if use_cdq else 1


class Temperature(nn.Module):
    """α = exp(log α) of each of `members`, from α₀ = --initial-alpha, learned towards the target entropy H̄ = −scale·|A|
    with its own Adam (--alpha-learning-rate, no weight decay; its moments are per member, as log α is); `reset` starts
    both afresh, for every member or for the chosen ones only."""

    def __init__(self, args: Args, action_dim: int, device: torch.device, members: int = 1) -> None:
        super().__init__()
        self.initial_alpha, self.target_entropy = args.initial_alpha, -args.target_entropy_scale * action_dim
        self.objective = compiled(self.loss, args.compile)
        self.log_alpha = nn.Parameter(torch.full((members,), math.log(args.initial_alpha), device=device))
        # torch's default kernel on CPU, fused and capturable on CUDA; ElementStepAdam keeps this run's `capturable`
        # when a checkpoint is loaded
        self.optimizer = ElementStepAdam(
            [self.log_alpha],
            lr=args.alpha_learning_rate,
            fused=True if device.type == "cuda" else None,
            capturable=args.cudagraphs and device.type == "cuda",
        )

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        """E[−α·(log π(ã|x) + H̄)] of each member, (members,), from its (members, B) log-probabilities."""
        return (-self.log_alpha.exp().unsqueeze(-1) * (log_prob + self.target_entropy)).mean(dim=-1)

    def minimise(self, log_prob: torch.Tensor) -> dict[str, torch.Tensor]:
        """One Adam step on the loss of the actor's log π(ã|x) (the members' sum: each member's gradient its own);
        returns what it logs, per member."""
        loss = self.objective(log_prob)
        self.optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        self.optimizer.step()
        return {"losses/alpha": self.alpha, "losses/alpha_loss": loss.detach(), "losses/entropy": -log_prob.mean(dim=-1)}

    def checkpointed(self) -> dict[str, "Temperature | torch.optim.Optimizer"]:
        return {"temperature": self, "alpha_optimizer": self.optimizer}

    @torch.no_grad()
    def reset(self, chosen: torch.Tensor | None = None) -> None:
        """α = α₀ and a fresh Adam: for every member (None), or only for the members `chosen` (a (members,) bool mask),
        whose moments and step counts restart while the others' stay as they are."""
        if chosen is None:
            self.log_alpha.fill_(math.log(self.initial_alpha))
            self.optimizer.state.clear()
            return
        self.log_alpha.masked_fill_(chosen, math.log(self.initial_alpha))
        self.optimizer.restart(self.log_alpha, chosen)


def check(args: Args) -> None:
    """Every start-up check that needs no machine, env or network (`cleanrl-plus sweep` runs it too)."""
    check_flags(args)
    check_run_args(args)


def main(args: Args) -> dict:
    check(args)
    run = start_run(args)
    device = run.device
    members = Members(run.seeds, device)  # each member's random streams, from its own seed
    K = len(members)
    env, evaluator = make_envs(args, device)
    envs.check_actions(env, args.env_id, gym.spaces.Box, "SAC", "agents/ddqn.py or agents/ppo.py")
    obs_dim, action_dim = int(env.single_observation_space.shape[0]), int(env.single_action_space.shape[0])
    N, space = env.envs_per_member, env.single_action_space
    num_critics = critics_for(args, env)
    # raw observations are stored; actor and critics normalise them inside, with the statistics of those acted on
    normalizer = RunningMeanStd((obs_dim,), members=K, enabled=args.normalize_obs).to(device)
    new_actor = lambda: with_normalizer(members.build(lambda k: Actor(args, obs_dim, space, k)).to(device), normalizer)
    new_critic = lambda: with_normalizer(
        members.build(lambda k: make_critic(k, args, obs_dim, action_dim, num_critics)).to(device), normalizer
    )
    actor, critic = new_actor(), new_critic()
    critic_target = target_copy(critic).requires_grad_(False)
    temperature = Temperature(args, action_dim, device, K)
    adamw = dict(weight_decay=args.weight_decay, decoupled_weight_decay=True)
    actor_optimizer = make_optimizer(args, actor.parameters(), device, **adamw)
    critic_optimizer = make_optimizer(args, critic.parameters(), device, **adamw)
    replay = make_replay(args, (obs_dim,), (action_dim,), members, make_sampler(args.swd, N), N)

    def episode_values(obs, actions, next_obs):  # LEAST: Q̂ = min Q(x, a), V̄(x') = min Q̄(x', a') − α·log π(a'|x')
        next_actions, next_log_prob = actor.sample(next_obs, members.randn(N, action_dim))
        next_value = critic_target(next_obs, next_actions).min(dim=1).values - temperature.alpha[:, None] * next_log_prob
        return critic(obs, actions).min(dim=1).values, next_value

    critic_net = Network("critic", critic, critic_optimizer, lambda b: critic(b.obs, b.actions), new_critic, critic_target)
    kl = lambda b: actor.distribution_parameters(b.obs)  # (the KL churn diagnostic of a stochastic policy)
    # a reset of the actor starts α and its Adam afresh too, as Nikishin et al.'s reset builds a new agent
    actor_net = Network(
        "actor", actor, actor_optimizer, lambda b: actor(b.obs), new_actor, distribution=kl, restarts_with=(temperature.reset,)
    )
    plasticity = Plasticity(args, critic_net, actor_net, logger=run.logger, members=K, env=env, episode_values=episode_values)

    # ---- the update and the acting step as functions of tensors: --compile compiles the losses and the acting step,
    # --cudagraphs captures each step whole and replays it (cleanrl_plus/graphs.py); random numbers are drawn outside.
    # Every quantity is (members, B, ...); each loss is one value per member, its own mean
    def actor_objective(batch: Batch, noise: torch.Tensor, reference: Batch | None):
        new_actions, log_prob = actor.sample(batch.obs, noise)  # ã ~ π(·|x)
        q_all = critic(batch.obs, new_actions)
        q_new = q_all.min(dim=1).values if args.actor_q == "min" else q_all.mean(dim=1)
        actor_loss = (temperature.alpha.unsqueeze(-1) * log_prob - q_new).mean(dim=-1)
        return plasticity.loss("actor", actor_loss, reference), actor_loss.detach(), log_prob.detach()

    def critic_objective(batch: Batch, next_noise: torch.Tensor, reference: Batch | None):
        # n-step: r is Σ γ^k r_{t+k} without the intermediate entropy terms, α·log π only at x' = x_{t+m} (as FastSAC)
        with torch.no_grad():  # a' ~ π(·|x') of the actor just updated, α just updated
            next_actions, next_log_prob = actor.sample(batch.next_obs, next_noise)
            target = q_target(
                critic_target, batch, next_actions, args.gamma, args.cir.convex_lambda, temperature.alpha, next_log_prob
            )
        qf_losses, q_values = critic_losses(critic, batch.obs, batch.actions, target)
        return plasticity.loss("critic", qf_losses.sum(dim=1), reference), q_values.detach(), qf_losses.detach()

    def explore(obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # a ~ π(·|norm(s))
            return actor.sample(obs, noise)[0]

    actor_objective, critic_objective = (compiled(f, args.compile) for f in (actor_objective, critic_objective))
    explore = compiled(explore, args.compile)

    def update(batch: Batch, draws: list[tuple[torch.Tensor, Batch | None]]) -> dict[str, torch.Tensor]:
        (actor_noise, actor_reference), (next_noise, critic_reference) = draws
        with frozen(critic):  # the gradient flows through Q to the action, not into the critic's weights
            loss, actor_loss, log_prob = actor_objective(batch, actor_noise, actor_reference)
        plasticity.minimise("actor", loss)
        temperature_report = temperature.minimise(log_prob)
        loss, q_values, qf_losses = critic_objective(batch, next_noise, critic_reference)
        plasticity.minimise("critic", loss)
        polyak_update(critic_target, critic, args.tau)
        return critic_report(q_values, qf_losses) | temperature_report | {"losses/actor_loss": actor_loss}

    # a captured step is captured again when a tensor it watches is replaced (injection, dropped optimiser state)
    watched = (actor, critic, critic_target, normalizer, temperature, actor_optimizer, critic_optimizer, temperature.optimizer)
    update, explore = (
        GraphStep(update, args.cudagraphs, watch=watched),
        GraphStep(explore, args.cudagraphs, watch=(actor, normalizer)),
    )

    state = plasticity.checkpointed() | temperature.checkpointed()
    # the generators load after the networks: re-injecting a head on resume draws a fresh one from them
    session = TrainingSession(run, "sac_simba", env, evaluator, **state, replay=replay, members=members)
    obs, global_step, num_updates = session.start(env.reset(seed=run.seeds))
    run.logger.text("critics", f"{num_critics} (clipped double-Q: {num_critics == 2})")  # once the run directories exist
    losses: dict[str, torch.Tensor] = {}

    while global_step < args.total_timesteps and not run.stop_requested:
        # ---- act: a ~ U(A) before learning starts, else a ~ π(·|x) ----------------------------------------------
        act_randomly, learn = session.off_policy_phase(global_step, num_updates, args.learning_starts)
        normalizer.update(obs)  # with --normalize-obs: the only place the observation statistics change
        actions = uniform_or_explore(act_randomly, explore, obs, *actor.bounds, members)
        # ---- step and store raw (s, a, r, s', terminated): truncations, LEAST's early stops included, bootstrap ---
        step, next_obs, truncated = step_and_store(env, replay, obs, actions, plasticity, global_step)
        obs = next_obs
        previous_step, global_step = global_step, global_step + N

        # ---- learn: actor → temperature → critic → target, `updates_per_step` times, as in SimBa ---------------
        if learn:
            batch = replay.sample(args.batch_size)
            for update_index in range(args.updates_per_step):
                if update_index > 0 and not args.reuse_batch:
                    batch = replay.sample(args.batch_size)
                # drawn in the order the update uses them: ã's noise, the actor's C-CHAIN batch, then a′'s and the critic's
                draws = [
                    (members.randn(args.batch_size, action_dim), plasticity.reference_batch(replay, args.batch_size))
                    for _ in range(2)
                ]
                losses = update(batch, draws)
                num_updates += 1
                plasticity.after_update(num_updates, replay, global_step, update_index == args.updates_per_step - 1)
            losses = losses | {"replay/sample_age": replay.age(batch).float().mean(dim=-1)} | plasticity.report()

        session.after_step(previous_step, global_step, num_updates, losses, actor, obs)
        if session.task_switched:  # continual ids: what the agent keeps across a task switch (--continual.*)
            plasticity.on_task_switch(args.continual, replay, (normalizer,), also_on_fresh_start=(temperature.reset,))

    return session.finish(global_step, num_updates, actor, obs)  # evaluation: tanh(μ(x)) of each member


def with_normalizer(module: nn.Module, normalizer: nn.Module) -> nn.Module:
    """`module` reading its inputs through `normalizer` (the group's observation statistics, one per member), attached
    after `Members.build` so each member's part of it is its own."""
    (module.base if isinstance(module, CategoricalCritic) else module).normalize = normalizer
    return module


def load_policy(args: Args, env, state: dict, device: torch.device) -> nn.Module:
    """The evaluation policy tanh(μ(norm(s))) of a checkpoint (`cleanrl-plus eval`): one member, the run's own,
    observation statistics included."""
    obs_dim = int(env.single_observation_space.shape[0])
    normalizer = RunningMeanStd((obs_dim,), enabled=args.normalize_obs)
    actor = with_normalizer(Actor(args, obs_dim, env.single_action_space), normalizer).to(device)
    rebuild_injected_heads(actor, state["actor"]).load_state_dict(state["actor"])
    return actor


if __name__ == "__main__":
    cli_main(main, Args)
