"""PPO: Proximal Policy Optimization (Schulman et al. 2017, arXiv 1707.06347), discrete and continuous actions.

Defaults are CleanRL's `ppo_continuous_action.py` (also GTR's base, agents/gtr.py): 1 env,
2,048-step rollouts, 10 epochs × 32 minibatches, clip 0.2 with value clipping, entropy 0,
γ 0.99, GAE λ 0.95, Adam lr 3e-4 (eps 1e-5) annealed linearly, grad-norm clip 0.5, per-minibatch
advantage normalisation, 64-64 tanh networks with orthogonal init, observation and reward
normalisation (clip ±10). For CartPole the rl-zoo recipe is in the README (8 envs, 32 steps,
20 epochs, λ 0.8, γ 0.98, lr 1e-3 and clip 0.2 both annealed). Atari `ALE/<Game>-v5` ids take
CleanRL's `ppo_atari.py` recipe instead, and `continual:cchain-*` ids C-CHAIN's classic-control one
(cleanrl_plus/recipes/ppo-*.toml, each with its sources; flags given override them); on Atari the
network is the Nature CNN (orthogonal init, gain √2) shared by a linear policy head (gain 0.01) and
a linear value head (gain 1), frames /255, and the training env clips rewards to their sign.

    for each iteration:
        lr ← lr₀·(1 − (i − 1)/I)                                              (--anneal-lr)
        collect T steps × N envs with π_old: store s, a, log π_old(a|s), r̃, terminated, truncated, s'
        Â = GAE(γ, λ) bootstrapping from V(s') on truncation, not on termination
        for each epoch, for each minibatch:
            ρ = π_θ(a|s)/π_old(a|s);  Â ← (Â − mean)/std
            L_clip = −E[min(ρÂ, clip(ρ, 1 − ε, 1 + ε)Â)]
            L_V = ½E[max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²)]      (--clip-vloss)
            minimise L_clip + c_V·L_V − c_H·H[π_θ];  clip ‖∇‖ ≤ 0.5

GTR (agents/gtr.py) is this agent with another policy-loss term in place of L_clip, a
`TrustRegion` that `build(args, trust_region=...)` takes: it may keep anchor data with the rollout
and act before and after the epochs; everything else is PPO's.

Run: python agents/ppo.py --env-id CartPole-v1      (python agents/ppo.py --help lists every flag)
     python agents/ppo.py --env-id ALE/Breakout-v5 --env-backend envpool
On a GPU, add --compile --cudagraphs: the same math, captured and replayed (cleanrl_plus/speed.py,
docs/speed.md).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Annotated, Any, Callable, Literal, Protocol

import gymnasium as gym
import torch
from torch import Tensor

import envs
from cleanrl_plus.config import RunArgs
from cleanrl_plus.evaluator import make_envs
from cleanrl_plus.gae import generalized_advantages
from cleanrl_plus.members import GroupNetwork, Members
from cleanrl_plus.normalization import ObservationNormalizer, RewardScaler
from cleanrl_plus.policy import ActorCritic, Policy, evaluation_policy, make_actor_critic
from cleanrl_plus.rollout import Minibatch, RolloutStorage, check_rollout_flags, check_rollout_spaces
from cleanrl_plus.run import Run, check_run_args, cli_main, prepare_run
from cleanrl_plus.session import TrainingSession
from cleanrl_plus.speed import GraphStep, compiled
from cleanrl_plus.transition import Transition
from envs.continual import base_env_id
from envs.ranges import AtLeastOne, Fraction, NonNegative, Positive, Range
from plasticity import Plasticity, catalogue
from plasticity.actor_critic import actor_critic_network
from plasticity.architecture import torso_settings
from plasticity.diagnostics import DiagnosticsArgs
from plasticity.hooks import RemedyArgs
from plasticity.least import LEASTArgs
from plasticity.optimizers import clip_each_members_gradient, make_optimizer, set_learning_rate
from plasticity.resets import ResetArgs, rebuild_injected_heads

# argument checks cost more than the math here
torch.distributions.Distribution.set_default_validate_args(False)

AdamBeta = Annotated[float, Range(ge=0, lt=1)]


@dataclasses.dataclass
class Args(RemedyArgs, RunArgs):
    exp_name: str = "ppo"
    """name of this experiment (the run directory is
    runs/{env_id}__{exp_name}__{seed}__{unix_time})"""
    env_id: str = "Hopper-v5"
    """the environment id (discrete or continuous actions, e.g. CartPole-v1, Hopper-v5,
    ALE/Breakout-v5); it also picks the defaults"""
    env_backend: Literal["auto", "atari", "envpool"] = "auto"
    """'auto' = ale-py for ALE ids and gymnasium otherwise; 'envpool' runs ALE ids in envpool
    (faster on CPU)"""
    learning_rate: Positive = 3e-4
    """Adam learning rate"""
    adam_eps: Positive = 1e-5
    """Adam ε (CleanRL's 1e-5)"""
    adam_betas: tuple[AdamBeta, AdamBeta] = (0.9, 0.999)
    """Adam (β1, β2); continual-learning work (Dohare et al. 2024) uses (0.99, 0.99)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over the run"""
    num_steps: AtLeastOne = 2048
    """steps per environment per rollout (rollout size = num_steps × num_envs)"""
    gamma: Fraction = 0.99
    """discount factor γ"""
    gae_lambda: Fraction = 0.95
    """GAE λ"""
    num_minibatches: AtLeastOne = 32
    """minibatches per epoch"""
    update_epochs: AtLeastOne = 10
    """passes over each rollout"""
    norm_adv: bool = True
    """normalise advantages"""
    norm_adv_over: Literal["minibatch", "rollout"] = "minibatch"
    """where advantages are normalised: per minibatch (CleanRL: (Â − mean)/(std + 1e-8)), or once
    over each rollout (TRAC/C-CHAIN's classic control: (Â − mean)/(population std + 1e-5))"""
    value_lambda: Annotated[float, Range(ge=0, le=1)] | None = None
    """λ of the value targets R = GAE(γ, λ_V) + V (None: --gae-lambda, CleanRL's); 1.0 gives the
    discounted return-to-go, bootstrapped from V(s') where an episode is cut (TRAC/C-CHAIN's classic
    control)"""
    reward_scale: Positive = 1.0
    """multiply the rewards the agent learns from by this (after --normalize-reward); logged returns
    stay raw"""
    restart_episodes: bool = False
    """start every rollout with fresh episodes: an episode still running at a rollout's end is cut
    there (a truncation, bootstrapped) and logged (TRAC/C-CHAIN's classic-control loop)"""
    clip_coef: Positive = 0.2
    """surrogate clipping ε (also the value clipping range)"""
    anneal_clip: bool = False
    """anneal ε linearly to 0 like the lr (rl-zoo's lin_0.2 for CartPole)"""
    clip_vloss: bool = True
    """clip the value loss around the rollout-time values"""
    ent_coef: NonNegative = 0.0
    """entropy bonus coefficient c_H"""
    vf_coef: NonNegative = 0.5
    """value loss coefficient c_V"""
    max_grad_norm: NonNegative = 0.5
    """gradient-norm clip (of each member's gradient, in a group); 0 = no clipping"""
    target_kl: NonNegative = 0.0
    """stop the epochs of an iteration once the approximate KL to π_old exceeds this (0 = never;
    costs a sync per epoch; one seed only)"""
    normalize_obs: bool = True
    """normalise observations with running statistics (clip ±10); statistics are checkpointed"""
    normalize_reward: bool = True
    """scale rewards by the running std of the discounted return (clip ±10); logged returns stay
    raw"""
    categorical_from: Literal["logits", "probs"] = "logits"
    """how a Discrete policy is built from the network's outputs: Categorical(logits=…) (CleanRL), or
    Categorical(probs=softmax(…)) (C-CHAIN's networks.py), whose probabilities torch clamps to
    [ε, 1 − ε] (ε = 1.19e-7), so that log π(a|s) and its gradient stop where the softmax saturates"""
    init: Literal["orthogonal", "default"] = "orthogonal"
    """initialisation of the dense layers: orthogonal (CleanRL: gain √2, 0.01 for the policy head,
    1 for the value head, zero biases) or torch's default nn.Linear init (uniform ±1/√fan_in,
    TRAC/C-CHAIN)"""
    hidden_sizes: tuple[AtLeastOne, ...] = (64, 64)
    """hidden widths of the policy and of the value network (separate networks); on Atari, of each
    head on the shared Nature CNN (() = CleanRL's linear heads)"""
    eval_epsilon: Fraction = 0.0
    """ε of the evaluation policy around the most probable action (Atari: 0.05, as DDQN, so that a
    policy that never presses FIRE still ends its game)"""
    diagnostics: DiagnosticsArgs = dataclasses.field(
        default_factory=lambda: DiagnosticsArgs(every=1_000, probe_size=512),
    )
    """plasticity diagnostics of policy and value network on a probe batch of the current rollout
    (plasticity/diagnostics.py)"""
    least: LEASTArgs = dataclasses.field(default_factory=LEASTArgs)
    """LEAST does not apply to PPO/GTR (it needs a Q function); present so that asking for it is a
    clear error"""
    reset: ResetArgs = dataclasses.field(default_factory=ResetArgs)
    """neuron resets of the policy ('actor') and/or value network ('critic'), counted in minibatch
    updates (plasticity/resets.py);
    on Atari both together (one torso: 'agent'), ReDo on its fully connected layers"""


def is_atari(env_id: str) -> bool:
    # a continual id has the observations of the env it is built on
    return base_env_id(env_id).startswith("ALE/")


def network_settings(args: Args) -> tuple[str, str]:
    """(norm, activation) of the networks: --net.activation auto is CleanRL's tanh, ReLU on Atari
    (its Nature CNN)."""
    default_activation = "relu" if is_atari(args.env_id) else "tanh"
    return torso_settings(args.net, args.nap, default_activation)


# ---- networks: π_θ and V (cleanrl_plus/policy.py), built as the flags say ---------------------------
def make_agent(members: int, obs_shape: tuple[int, ...], action_space: gym.Space, args: Args) -> ActorCritic:
    """The policy and value network of `members` members as the flags say (--hidden-sizes, --init,
    --net.*)."""
    norm, activation = network_settings(args)
    return make_actor_critic(
        members, obs_shape, action_space, args.hidden_sizes, activation, norm, args.init, args.categorical_from
    )


def make_policy(members: int, obs_shape: tuple[int, ...], action_space: gym.Space, args: Args) -> Policy:
    """A policy alone, as a reset of the policy ('actor') draws it afresh."""
    norm, activation = network_settings(args)
    hidden, init, categorical_from = args.hidden_sizes, args.init, args.categorical_from
    return Policy(members, obs_shape[0], action_space, hidden, activation, norm, None, init, categorical_from)


# ---- losses: every quantity is (members, B), every loss one value per member, its own mean -------
def clipped_surrogate_loss(ratio: Tensor, advantages: Tensor, clip_coef: float | Tensor) -> Tensor:
    """L_clip = −E[min(ρÂ, clip(ρ, 1 − ε, 1 + ε)Â)], per member:
    (members, B) → (members,)."""
    return torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean(-1)


def value_loss(new_values: Tensor, minibatch: Minibatch, clip_coef: float | Tensor, clip: bool) -> Tensor:
    """½E[(V − R)²], or with clipping ½E[max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²)],
    per member."""
    unclipped = (new_values - minibatch.returns).square()
    if not clip:
        return 0.5 * unclipped.mean(-1)
    clipped = minibatch.values + (new_values - minibatch.values).clamp(-clip_coef, clip_coef)
    return 0.5 * torch.max(unclipped, (clipped - minibatch.returns).square()).mean(-1)


class TrustRegion(Protocol):
    """A policy-loss term in place of L_clip (GTR's, agents/gtr.py; PPO has none): it keeps `extra_features` values
    of every rollout sample (storage.extra), acts before each iteration's epochs and after them (returning what it
    logs), and a checkpoint holds it (state_dict, load_state_dict)."""

    extra_features: int

    def __call__(
        self, ratio: Tensor, advantages: Tensor, new_logprobs: Tensor, minibatch: Minibatch, clip_coef: Tensor
    ) -> Tensor: ...
    def before_update(self, storage: RolloutStorage, policy: Policy) -> None: ...
    def after_update(self, storage: RolloutStorage, policy: Policy) -> dict[str, Tensor | float]: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


def ppo_objective(
    agent: ActorCritic,
    trust_region: TrustRegion | None,
    plasticity: Plasticity,
    args: Args,
    minibatch: Minibatch,
    clip_coef: Tensor,
    reference: Minibatch | None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """(L = L_π + c_V·L_V − c_H·H[π_θ] plus the remedies' penalties, CleanRL's tags): one loss
    per member, each its own mean over its minibatch."""
    new_logprobs, entropy, new_values = agent.evaluate(minibatch.obs, minibatch.actions)
    logratio = new_logprobs - minibatch.logprobs
    ratio = logratio.exp()
    advantages = minibatch.advantages
    if args.norm_adv and args.norm_adv_over == "minibatch":
        advantages = (advantages - advantages.mean(-1, keepdim=True)) / (advantages.std(-1, keepdim=True) + 1e-8)
    # L_clip, or the trust region's term in its place (GTR)
    if trust_region is None:
        pg_loss = clipped_surrogate_loss(ratio, advantages, clip_coef)
    else:
        pg_loss = trust_region(ratio, advantages, new_logprobs, minibatch, clip_coef)
    v_loss = value_loss(new_values, minibatch, clip_coef, args.clip_vloss)
    entropy_loss = entropy.mean(-1)
    loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss
    # C-CHAIN scales against the policy loss, entropy bonus included (the authors' `policy_loss`)
    loss = plasticity.loss("agent", loss, reference, scale_against=pg_loss - args.ent_coef * entropy_loss)
    return loss, ppo_report(pg_loss, v_loss, entropy_loss, ratio, logratio, clip_coef)


def ppo_report(
    pg_loss: Tensor,
    v_loss: Tensor,
    entropy: Tensor,
    ratio: Tensor,
    logratio: Tensor,
    clip_coef: Tensor,
) -> dict[str, Tensor]:
    """CleanRL's PPO tags of a minibatch, per member: the losses, the k3 estimate of
    KL(π_old ‖ π_θ) and the clipped fraction."""
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean(-1)
        clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean(-1)
    return {
        "losses/policy_loss": pg_loss.detach(),
        "losses/value_loss": v_loss.detach(),
        "losses/entropy": entropy.detach(),
        "losses/approx_kl": approx_kl,
        "losses/clipfrac": clip_fraction,
    }


# ---- the steps, as functions of tensors: --compile compiles the objective and the acting step,
# --cudagraphs captures each step whole and replays it (cleanrl_plus/speed.py); random numbers are
# drawn outside, by the loop
def act(agent: ActorCritic, obs: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
    """(a ~ π_old(·|s), log π_old(a|s)) of every member."""
    with torch.no_grad():
        return agent.policy.sample(obs, noise)


@torch.no_grad()
def estimate_advantages(value: Callable[[Tensor], Tensor], storage: RolloutStorage, args: Args) -> None:
    """V(s) and V(s') of the whole rollout in two batched passes (the parameters did not change
    during it), then Â = GAE(γ, λ) and the value targets R = GAE(γ, λ_V) + V (λ_V = --value-lambda,
    default λ), in the storage; Â normalised over the rollout with --norm-adv-over rollout.
    Captured, never compiled: dynamo would unroll GAE's loop."""
    storage.values.copy_(value(storage.obs.flatten(1, 2)).view_as(storage.values))
    next_values = value(storage.next_obs.flatten(1, 2)).view_as(storage.values)
    rollout = (storage.rewards, storage.values, next_values, storage.terminated, storage.dones, args.gamma)
    advantages, returns = generalized_advantages(*rollout, args.gae_lambda)
    if args.value_lambda is not None and args.value_lambda != args.gae_lambda:
        returns = generalized_advantages(*rollout, args.value_lambda)[1]
    storage.advantages.copy_(advantages)
    storage.returns.copy_(returns)
    if args.norm_adv and args.norm_adv_over == "rollout":
        storage.normalize_advantages()


def minibatch_update(
    objective: Callable,
    optimizer: torch.optim.Optimizer,
    plasticity: Plasticity,
    storage: RolloutStorage,
    max_grad_norm: float,
    members: int,
    indices: Tensor,
    clip_coef: Tensor,
    reference: Minibatch | None,
) -> dict[str, Tensor]:
    """One gradient step on the minibatch `indices` of the rollout; returns the tags of
    `ppo_report`."""
    loss, stats = objective(storage.gather(indices), clip_coef, reference)
    optimizer.zero_grad(set_to_none=True)
    loss.sum().backward()  # the members' sum: each member's gradient stays its own
    clip_each_members_gradient(optimizer, max_grad_norm, members)  # ‖∇‖ ≤ max_grad_norm, member by member
    plasticity.step("agent")  # Adam's step (TRAC's when on), then the step remedies (NaP, weight clipping)
    return stats


# ---- checks, build, train ------------------------------------------------------------------------
def check(args: Args, agent_name: str = "ppo") -> None:
    """Every start-up check that needs no machine, env or network (`cleanrl-plus sweep` runs it for
    each configuration): the remedies PPO takes, the rollout flags, then the run's own."""
    # uint8 frame stacks for the Nature CNN, one torso under both heads
    frames = is_atari(args.env_id)
    activation = network_settings(args)[1]
    catalogue.check(agent_name, args, activation=activation, shared_torso=frames)
    check_rollout_flags(args, agent_name, frames)
    check_run_args(args)


@dataclasses.dataclass
class PPOParts:
    """Everything a PPO run holds (`build` makes it, `train` runs it)."""

    args: Args
    run: Run
    members: Members
    env: Any
    agent: ActorCritic
    optimizer: torch.optim.Optimizer
    learning_rate: Tensor
    """the annealed lr and clip range ε: tensors changed in place, so a captured update reads each
    iteration's values"""
    clip_coef: Tensor
    obs_normalizer: ObservationNormalizer
    reward_scaler: RewardScaler
    storage: RolloutStorage
    trust_region: TrustRegion | None
    plasticity: Plasticity
    session: TrainingSession
    eval_policy: Callable[[Tensor, Members], Tensor]
    to_env: Callable[[Tensor], Tensor]
    """actions as the env takes them, clipped to a Box's bounds (the stored action stays
    unclipped)"""
    act: GraphStep
    estimate_advantages: GraphStep
    update: GraphStep

    def draw_rollout(self) -> Tensor:
        """The next rollout's random numbers, drawn now: the env's reset states (it keeps them) and
        the action noise, returned (members, num_steps, envs, ...). The numbers a step-by-step draw
        takes, in one call per member instead of one per member and step."""
        self.env.draw_ahead(self.args.num_steps)
        return self.agent.policy.noise(self.members, self.args.num_steps, self.env.envs_per_member)

    def anneal(self, progress_left: float) -> None:
        """lr ← lr₀·progress_left (--anneal-lr) and ε ← ε₀·progress_left (--anneal-clip), in place."""
        args = self.args
        learning_rate = args.learning_rate * (progress_left if args.anneal_lr else 1.0)
        set_learning_rate(self.optimizer, self.learning_rate, learning_rate)
        if args.anneal_clip:
            self.clip_coef.fill_(args.clip_coef * progress_left)


def build(args: Args, trust_region: Callable[[Policy, int], TrustRegion] | None = None, agent_name: str = "ppo") -> PPOParts:
    """Check the flags, then build a run, in this order (each member's weights are drawn from its
    own generator, so the order is part of the numbers): envs, networks, optimiser, normalisers, the
    policy-loss term (PPO's, or `trust_region(policy, members)`), storage, remedies and the steps,
    compiled and captured here once. The run directory opens when the loop starts."""
    check(args, agent_name)
    norm, activation = network_settings(args)
    run = prepare_run(args)
    device = run.device
    members = Members(run.seeds, device)  # each member's random streams, from its own seed
    K = len(members)
    env, evaluator = make_envs(args, device)
    check_rollout_spaces(env, args.env_id, agent_name, is_atari(args.env_id))
    space, obs_shape = env.single_action_space, tuple(env.single_observation_space.shape)
    built_for = dict(obs_shape=obs_shape, action_space=space, args=args)
    new_agent = GroupNetwork(members, partial(make_agent, **built_for), device)
    agent = new_agent()
    adam_settings = dict(eps=args.adam_eps, betas=args.adam_betas) if args.optim.name == "adam" else {}
    optimizer = make_optimizer(args, agent.parameters(), device, members=K, **adam_settings)
    # float64 on a CPU, where the fused Adam kernel then reads the very double it read as a Python
    # float; CUDA's fused Adam reads a float32 lr
    schedule_dtype = torch.float64 if device.type == "cpu" else torch.float32
    learning_rate = torch.tensor(args.learning_rate, dtype=schedule_dtype, device=device)
    clip_coef = torch.tensor(args.clip_coef, dtype=schedule_dtype, device=device)
    obs_normalizer = ObservationNormalizer(obs_shape, args.normalize_obs, members=K).to(device)
    reward_scaler = RewardScaler(env.envs_per_member, args.gamma, args.normalize_reward, members=K).to(device)
    trust_region = trust_region(agent.policy, K) if trust_region else None
    extra_features = trust_region.extra_features if trust_region else 0
    storage = RolloutStorage.for_env(args.num_steps, env, device, members, extra_features)
    to_env = envs.action_clipper(space, device)
    eval_policy = evaluation_policy(agent, obs_normalizer, space, args.eval_epsilon, device)
    new_policy = GroupNetwork(members, partial(make_policy, **built_for), device)
    updates_per_iteration = args.update_epochs * args.num_minibatches
    network = actor_critic_network(agent, optimizer, new_agent, new_policy, activation, updates_per_iteration)
    plasticity = Plasticity(args, network, logger=run.logger, members=K)

    objective = compiled(partial(ppo_objective, agent, trust_region, plasticity, args), args.compile)
    update = partial(minibatch_update, objective, optimizer, plasticity, storage, args.max_grad_norm, K)
    acting = compiled(partial(act, agent), args.compile)
    advantages = partial(estimate_advantages, agent.value, storage, args)
    normalizers = dict(obs_normalizer=obs_normalizer, reward_scaler=reward_scaler)
    checkpointed = plasticity.checkpointed() | normalizers | ({"trust_region": trust_region} if trust_region else {})
    session = TrainingSession(run, agent_name, env, evaluator, members=members, **checkpointed)
    loop = dict(args=args, run=run, members=members, env=env, storage=storage, plasticity=plasticity, session=session)
    optimisation = dict(agent=agent, optimizer=optimizer, learning_rate=learning_rate, clip_coef=clip_coef)
    return PPOParts(
        **loop,
        **optimisation,
        **normalizers,
        trust_region=trust_region,
        eval_policy=eval_policy,
        to_env=to_env,
        # each captured again when a tensor it watches is replaced (injection, dropped optimiser state)
        act=GraphStep(acting, args.cudagraphs, watch=(agent.policy,)),
        estimate_advantages=GraphStep(advantages, args.cudagraphs, watch=(agent.critic,)),
        update=GraphStep(update, args.cudagraphs, watch=(agent, optimizer)),
    )


def train(parts: PPOParts) -> dict:
    """PPO's loop (the box above), for every member at once; returns the run's summary."""
    args, run, env, agent, storage = parts.args, parts.run, parts.env, parts.agent, parts.storage
    session, plasticity, trust_region = parts.session, parts.plasticity, parts.trust_region
    members, obs_normalizer, reward_scaler = parts.members, parts.obs_normalizer, parts.reward_scaler
    obs, global_step, num_updates = session.open_or_resume(obs_normalizer(env.reset(seed=run.seeds), update=True))
    session.clocks.learning_started(global_step, num_updates)
    batch_size = args.num_steps * env.envs_per_member  # env steps of each member per iteration
    num_iterations = -(-args.total_timesteps // batch_size)  # ceil: the run spends at least its whole budget

    for iteration in range(global_step // batch_size + 1, num_iterations + 1):
        if run.stop_requested:
            break
        parts.anneal(progress_left=1.0 - (iteration - 1) / num_iterations)

        # ---- rollout with π_old (observations are stored normalised, as the policy saw them) ----
        noise = parts.draw_rollout()
        with torch.no_grad():
            for t in range(args.num_steps):
                actions, logprobs = parts.act(obs, noise[:, t])
                step = env.step(parts.to_env(actions))
                rewards = reward_scaler(step.reward, step.terminated | step.truncated) * args.reward_scale
                # s': the true next observation (the final one at an episode's end), current statistics
                ends = dict(terminated=step.terminated, truncated=step.truncated, next_obs=obs_normalizer(step.next_obs))
                storage.add(t, Transition(obs=obs, action=actions, logprob=logprobs, reward=rewards, **ends))
                obs = obs_normalizer(step.obs, update=True)
            if args.restart_episodes:
                # cut the episodes still running (their last step bootstraps: a truncation)
                running = ~(step.terminated | step.truncated)
                obs = obs_normalizer(env.cut_episodes(running, obs), update=True)
        previous_step, global_step = global_step, global_step + batch_size
        # Â = GAE(γ, λ), bootstrapping from V(s') on truncation, not on termination
        parts.estimate_advantages()
        if trust_region:  # GTR: the anchor's log-probabilities of the rollout
            trust_region.before_update(storage, agent.policy)

        # ---- epochs of minibatch updates, one clipped fraction per member ------------------------
        clipped, updates_done = torch.zeros(len(members), device=run.device), 0
        for epoch in range(args.update_epochs):
            minibatches = storage.minibatch_indices(args.num_minibatches)
            references = plasticity.reference_pass(storage, args.num_minibatches)  # C-CHAIN's, drawn after
            for indices, reference in zip(minibatches, references):
                stats = parts.update(indices, parts.clip_coef, reference)
                # summed at once: a replayed graph overwrites its outputs
                clipped += stats["losses/clipfrac"]
                num_updates, updates_done = num_updates + 1, updates_done + 1
                plasticity.after_update(num_updates, storage, global_step)
            # one sync per epoch, outside the graphs
            if args.target_kl and float(stats["losses/approx_kl"]) > args.target_kl:
                break

        losses = stats | {"losses/clipfrac": clipped / updates_done}
        losses |= {"charts/learning_rate": parts.learning_rate}
        losses |= plasticity.report() | {"losses/explained_variance": storage.explained_variance()}
        losses |= trust_region.after_update(storage, agent.policy) if trust_region else {}
        session.after_step(previous_step, global_step, num_updates, losses, parts.eval_policy, obs)
        # continual ids: what the agent keeps across a task switch (--continual.*)
        if session.schedule.switched:
            plasticity.on_task_switch(args.continual, normalizers=(obs_normalizer, reward_scaler))

    return session.finish(global_step, num_updates, parts.eval_policy, obs)


def main(args: Args) -> dict:
    return train(build(args))


def load_policy(args: Args, env, state: dict, device: torch.device):
    """The evaluation policy of a checkpoint (`cleanrl-plus eval`): one member, the run's own."""
    obs_shape, space = tuple(env.single_observation_space.shape), env.single_action_space
    agent = make_agent(1, obs_shape, space, args).to(device)
    rebuild_injected_heads(agent, state["agent"]).load_state_dict(state["agent"])
    obs_normalizer = ObservationNormalizer(obs_shape, args.normalize_obs).to(device)
    obs_normalizer.load_state_dict(state["obs_normalizer"])
    return evaluation_policy(agent, obs_normalizer, space, args.eval_epsilon, device)


if __name__ == "__main__":
    cli_main(main, Args)
