"""How each agent wires its networks into its losses, checked on the agent's own first updates.

A short real run records, at every optimiser step, the parameters before and after it and the gradient it
applied, and every batch the agent sampled (with torch's RNG state right after, so that the update's own noise
can be redrawn). The test then rebuilds the networks from those parameters and computes the loss the agent should
have optimised by hand, from the algorithm's equations; the agent's gradient must equal the hand one. So a
swapped online/target network, a wrong aggregate over twin critics or a wrong sign in a loss term fails here even
where the target functions themselves are right. The agents are not changed for this: the optimiser factory and
the storage class they import are wrapped.
"""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import pytest
import torch
import torch.nn.functional as F

import envs
from cleanrl_plus.policy import make_actor_critic
from cleanrl_plus.replay import NStepReplay, ReplayBuffer


@dataclasses.dataclass
class OptimizerStep:
    optimizer: int  # the index of the optimiser, in the order the agent built them
    before: list[torch.Tensor]
    grads: list[torch.Tensor | None]
    after: list[torch.Tensor]


class UpdateRecorder:
    """Wraps an agent module's `make_optimizer` factory and its storage's sampling to record the first `limit` updates."""

    def __init__(self, monkeypatch, module, limit: int = 12) -> None:
        self.steps: list[OptimizerStep] = []
        self.samples: list[tuple] = []  # (batch, torch RNG state right after sampling it)
        self.generator_states: list[torch.Tensor] = []  # the first member's generator state right after it (groups)
        self.limit = limit
        make_optimizer = module.make_optimizer

        def recording_optimizer(*args, **kwargs):
            optimizer = make_optimizer(*args, **kwargs)
            index, step = self.num_optimizers, optimizer.step
            self.num_optimizers += 1

            def recording_step(*step_args, **step_kwargs):
                params_now = [p for group in optimizer.param_groups for p in group["params"]]
                before = [p.detach().clone() for p in params_now]
                grads = [None if p.grad is None else p.grad.clone() for p in params_now]
                result = step(*step_args, **step_kwargs)
                if len(self.steps) < self.limit:
                    self.steps.append(OptimizerStep(index, before, grads, [p.detach().clone() for p in params_now]))
                return result

            optimizer.step = recording_step
            return optimizer

        self.num_optimizers = 0
        monkeypatch.setattr(module, "make_optimizer", recording_optimizer)

    def record_sample(self, batch, members=None) -> None:
        if len(self.samples) < self.limit:
            self.samples.append((batch, torch.get_rng_state()))
            if members is not None:
                self.generator_states.append(members.generators[0].get_state())

    def member_randn(self, sample: int, *shape: int, count: int = 1):
        """The (1, *shape) normal numbers a one-member run drew from its generator right after sample `sample` (`count`
        draws in a row: a list of them)."""
        generator = torch.Generator().set_state(self.generator_states[sample])
        draws = [torch.randn(shape, generator=generator)[None] for _ in range(count)]
        return draws[0] if count == 1 else draws

    def of(self, optimizer: int) -> list[OptimizerStep]:
        return [s for s in self.steps if s.optimizer == optimizer]


def record_replay_samples(monkeypatch, module, recorder: UpdateRecorder, storage: type = ReplayBuffer) -> None:
    class RecordingReplay(storage):
        def sample(self, batch_size):
            batch = super().sample(batch_size)
            recorder.record_sample(batch, getattr(self, "members", None))
            return batch

    import cleanrl_plus.replay

    # the agents that build their replay with make_replay find the class there; the others import it
    monkeypatch.setattr(
        module if hasattr(module, storage.__name__) else cleanrl_plus.replay, storage.__name__, RecordingReplay
    )


def with_parameters(network: torch.nn.Module, values: list[torch.Tensor]) -> torch.nn.Module:
    parameters = list(network.parameters())
    assert len(parameters) == len(values)
    with torch.no_grad():
        for parameter, value in zip(parameters, values):
            parameter.copy_(value)
    return network


def polyak(target: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> list[torch.Tensor]:
    return [(1 - tau) * t + tau * o for t, o in zip(target, online)]


def assert_gradients_equal(loss: torch.Tensor, network: torch.nn.Module, recorded: OptimizerStep) -> None:
    parameters = list(network.parameters())
    hand = torch.autograd.grad(loss, parameters, allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in hand)
    for h, g in zip(hand, recorded.grads):
        h = torch.zeros_like(g) if h is None and g is not None else h
        if g is None:
            assert h is None or not h.any()
            continue
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-5)  # float rounding of equivalent forms only


RUN = dict(eval_every=0, eval_episodes=1, progress=False)


# ---- TD3 --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("convex_lambda", [None, 0.3], ids=["td3", "cir-convex-target"])
def test_td3_update_wiring(convex_lambda, monkeypatch, runs_dir):
    from agents import td3
    from plasticity.cir import CIRArgs

    recorder = UpdateRecorder(monkeypatch, td3)
    record_replay_samples(monkeypatch, td3, recorder)
    # two critic updates (the 2nd has critic ≠ target) and one actor update after the 2nd (policy delay 2)
    cir = CIRArgs() if convex_lambda is None else CIRArgs(critic=True, width=16, convex_lambda=convex_lambda)
    args = td3.Args(
        env_id="InvertedPendulum-v5",
        total_timesteps=66,
        learning_starts=64,
        batch_size=32,
        hidden_sizes=(16, 16),
        learning_rate=0.01,
        buffer_size=100,
        runs_dir=runs_dir,
        cir=cir,
        **RUN,
    )
    td3.main(args)
    actor_steps, critic_steps = recorder.of(0), recorder.of(1)
    assert len(critic_steps) == 2 and len(actor_steps) == 1
    space = envs.make(args.env_id).single_action_space
    obs_dim, action_dim = 4, 1

    def critic_with(values):
        return with_parameters(td3.make_critic(1, obs_dim, action_dim, args), values)

    def actor_with(values):
        return with_parameters(td3.Actor(obs_dim, space, args.hidden_sizes), values)

    batch, _ = recorder.samples[1]  # one member's: (1, batch, ...)
    critic, critic_target = critic_with(critic_steps[1].before), critic_with(critic_steps[0].before)
    actor_target = actor_with(actor_steps[0].before)
    noise = recorder.member_randn(1, *batch.actions.shape[1:]) * args.policy_noise
    noise = noise.clamp(-args.noise_clip, args.noise_clip) * 3.0  # scale 3
    with torch.no_grad():
        next_action = (actor_target(batch.next_obs) + noise).clamp(-3.0, 3.0)
        next_q = critic_target(batch.next_obs, next_action)[0]  # (2, batch): y uses the smaller of the target twins
        lower, upper = torch.minimum(next_q[0], next_q[1]), torch.maximum(next_q[0], next_q[1])
        bootstrap = (
            lower if convex_lambda is None else convex_lambda * lower + (1 - convex_lambda) * upper
        )  # CIR: λ·min + (1 − λ)·max
        y = batch.rewards[0] + args.gamma * (1 - batch.terminated[0]) * bootstrap
    q = critic(batch.obs, batch.actions)[0]
    assert_gradients_equal(((q[0] - y) ** 2).mean() + ((q[1] - y) ** 2).mean(), critic, critic_steps[1])

    # the actor ascends Q₁ (the first twin) of the critic as it is after this update's critic step
    actor, critic_now = actor_with(actor_steps[0].before), critic_with(critic_steps[1].after)
    assert_gradients_equal(-critic_now(batch.obs, actor(batch.obs))[0, 0].mean(), actor, actor_steps[0])


def hand_projection(atoms: torch.Tensor, rewards: torch.Tensor, discount: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Φ_j = Σ_i p_i·max(0, 1 − |b_i − j|), b_i = (clip(r + d·z_i) − v_min)/Δz: C51's projection written as a triangle
    kernel."""
    return triangle_projection(atoms, rewards[:, None] + discount[:, None] * atoms, probs)


def triangle_projection(atoms: torch.Tensor, shifted: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Probabilities `probs` (B, K) of the returns `shifted` (B, K) projected onto `atoms` by the triangle kernel."""
    delta = (atoms[-1] - atoms[0]) / (len(atoms) - 1)
    b = (shifted.clamp(atoms[0], atoms[-1]) - atoms[0]) / delta  # (B, K)
    kernel = (1 - (b[:, :, None] - torch.arange(len(atoms))).abs()).clamp_min(0)  # (B, K_from, K_to)
    return (probs[:, :, None] * kernel).sum(dim=1)


@pytest.mark.parametrize("convex_lambda", [1.0, 0.3], ids=["clipped-double", "cir-convex-mixture"])
def test_td3_distributional_n_step_normalised_update_wiring(convex_lambda, monkeypatch, runs_dir):
    """C51 critics, 3-step returns over two envs, normalised observations: the critics' cross-entropy to the projected
    distribution of the target twin with the smaller mean (or CIR's mixture), bootstrapped with the batch's γ^m; the
    actor's expected Q₁; both on observations normalised with the statistics of every observation acted on so far."""
    from pathlib import Path

    from agents import td3
    from cleanrl_plus.checkpoint import load_checkpoint
    from cleanrl_plus.distributional import CriticArgs
    from plasticity.cir import CIRArgs

    recorder = UpdateRecorder(monkeypatch, td3)
    record_replay_samples(monkeypatch, td3, recorder, NStepReplay)
    critic_args = CriticArgs(distributional=True, num_atoms=11, v_min=-10.0, v_max=10.0)
    args = td3.Args(
        env_id="InvertedPendulum-v5",
        num_envs=2,
        total_timesteps=68,
        learning_starts=64,
        batch_size=32,
        hidden_sizes=(16, 16),
        learning_rate=0.01,
        buffer_size=100,
        n_step=3,
        critic=critic_args,
        normalize_obs=True,
        cir=CIRArgs(convex_lambda=convex_lambda),
        runs_dir=runs_dir,
        **RUN,
    )
    result = td3.main(args)
    actor_steps, critic_steps = recorder.of(0), recorder.of(1)
    assert len(critic_steps) == 2 and len(actor_steps) == 1
    space = envs.make(args.env_id).single_action_space
    stored_obs = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")["replay"]["obs"][0]

    def normalise(x, rows):  # statistics of the first `rows` stored (= acted-on) observations
        seen = stored_obs[:rows]
        return (x - seen.mean(0)) / torch.sqrt(seen.var(0, unbiased=False) + 1e-8)

    def critic_with(values):
        return with_parameters(td3.make_critic(1, 4, 1, args), values)

    batch, _ = recorder.samples[1]
    assert batch.discount is not None and (batch.discount < args.gamma**2).any()  # some 3-step windows
    x, next_x = normalise(batch.obs, 68), normalise(batch.next_obs, 68)  # the 2nd update follows vector step 33 (68 obs)
    critic, critic_target = critic_with(critic_steps[1].before), critic_with(critic_steps[0].before)
    actor_target = with_parameters(td3.Actor(4, space, args.hidden_sizes), actor_steps[0].before)
    noise = recorder.member_randn(1, *batch.actions.shape[1:]) * args.policy_noise
    noise = noise.clamp(-args.noise_clip, args.noise_clip) * 3.0
    atoms = torch.linspace(-10.0, 10.0, 11)
    with torch.no_grad():
        next_action = (actor_target(next_x) + noise).clamp(-3.0, 3.0)
        next_probs = critic_target.base(next_x, next_action).softmax(-1)[0]  # (2, B, K)
        means = (next_probs * atoms).sum(-1)
        first_lower = (means[0] <= means[1])[:, None]
        lower, upper = (
            torch.where(first_lower, next_probs[0], next_probs[1]),
            torch.where(first_lower, next_probs[1], next_probs[0]),
        )
        target_probs = convex_lambda * lower + (1 - convex_lambda) * upper
        target = hand_projection(atoms, batch.rewards[0], batch.discount[0] * (1 - batch.terminated[0]), target_probs)
    log_probs = critic.base(x, batch.actions).log_softmax(-1)[0]
    loss = -(target * log_probs[0]).sum(-1).mean() - (target * log_probs[1]).sum(-1).mean()
    assert_gradients_equal(loss, critic, critic_steps[1])

    actor, critic_now = (
        with_parameters(td3.Actor(4, space, args.hidden_sizes), actor_steps[0].before),
        critic_with(critic_steps[1].after),
    )
    q1 = (critic_now.base(x, actor(x))[0, 0].softmax(-1) * atoms).sum(-1)
    assert_gradients_equal(-q1.mean(), actor, actor_steps[0])


# ---- SAC ----------------------------------------------------------------------------------------------------------
def test_sac_update_wiring(monkeypatch, runs_dir):
    from agents import sac_simba

    recorder = UpdateRecorder(monkeypatch, sac_simba)
    record_replay_samples(monkeypatch, sac_simba, recorder)
    args = sac_simba.Args(
        env_id="InvertedPendulum-v5",
        total_timesteps=66,
        learning_starts=64,
        batch_size=32,
        network="mlp",
        mlp_hidden_sizes=(16, 16),
        clipped_double_q="on",
        normalize_obs=False,
        updates_per_step=1,
        learning_rate=0.01,
        alpha_learning_rate=0.1,
        initial_alpha=0.2,
        tau=0.3,
        buffer_size=100,
        runs_dir=runs_dir,
        **RUN,
    )
    sac_simba.main(args)
    actor_steps, critic_steps = recorder.of(0), recorder.of(1)
    assert len(actor_steps) == len(critic_steps) == 2
    space = envs.make(args.env_id).single_action_space
    log_alpha = torch.tensor(math.log(args.initial_alpha), requires_grad=True)
    alpha_optimizer = torch.optim.Adam([log_alpha], args.alpha_learning_rate)
    target_entropy = -args.target_entropy_scale * 1
    critic_target_values = critic_steps[0].before
    for k in range(2):  # update k: actor → temperature → critic → Polyak target, on the k-th sampled batch
        batch, _ = recorder.samples[k]  # one member's: (1, B, ...)
        actor = with_parameters(sac_simba.Actor(args, 4, space), actor_steps[k].before)
        critic = with_parameters(sac_simba.Critic(args, 4, 1, 2), critic_steps[k].before)
        actor_after = with_parameters(sac_simba.Actor(args, 4, space), actor_steps[k].after)
        critic_target = with_parameters(sac_simba.Critic(args, 4, 1, 2), critic_target_values)
        noise, next_noise = recorder.member_randn(k, *batch.actions.shape[1:], count=2)  # the agent's draws, in its order
        alpha = log_alpha.detach().exp()
        actions, log_prob = actor.sample(batch.obs, noise)
        q = critic(batch.obs, actions)[0]
        # the actor maximises the *smaller* twin (clipped double-Q), minus the entropy term
        assert_gradients_equal((alpha * log_prob - torch.minimum(q[0], q[1])).mean(), actor, actor_steps[k])
        alpha_loss = -(log_alpha.exp() * (log_prob.detach() + target_entropy)).mean()
        alpha_optimizer.zero_grad()
        alpha_loss.backward()
        alpha_optimizer.step()

        with torch.no_grad():
            next_actions, next_log_prob = actor_after.sample(batch.next_obs, next_noise)  # the updated actor proposes a'
            next_q = critic_target(batch.next_obs, next_actions)[0]
            soft_value = torch.minimum(next_q[0], next_q[1]) - log_alpha.exp() * next_log_prob[0]  # the updated α
            y = batch.rewards[0] + args.gamma * (1 - batch.terminated[0]) * soft_value
        q = critic(batch.obs, batch.actions)[0]
        assert_gradients_equal(((q[0] - y) ** 2).mean() + ((q[1] - y) ** 2).mean(), critic, critic_steps[k])
        critic_target_values = polyak(critic_target_values, critic_steps[k].after, args.tau)


@pytest.mark.parametrize(
    "critics, convex_lambda",
    [("on", 1.0), ("on", 0.3), ("off", 1.0)],
    ids=["clipped-double", "cir-convex-mixture", "one-critic"],
)
def test_sac_distributional_n_step_normalised_update_wiring(critics, convex_lambda, monkeypatch, runs_dir):
    """C51 critics, 3-step returns over two envs, normalised observations: each critic's cross-entropy to the projection
    of the target critic with the smaller mean (CIR: the mixture; one critic: its own) onto the support shifted to
    r + γ^m(1 − terminated)·(z − α·log π(a'|x')), a' from the actor just updated and α just updated; the actor's loss
    α·log π − min_i E[Z_i]; all on observations normalised with the statistics of every observation acted on so far."""
    from pathlib import Path

    from agents import sac_simba
    from cleanrl_plus.checkpoint import load_checkpoint
    from cleanrl_plus.distributional import CriticArgs
    from plasticity.cir import CIRArgs

    recorder = UpdateRecorder(monkeypatch, sac_simba)
    record_replay_samples(monkeypatch, sac_simba, recorder, NStepReplay)
    atoms = torch.linspace(-10.0, 10.0, 11)
    args = sac_simba.Args(
        env_id="InvertedPendulum-v5",
        num_envs=2,
        total_timesteps=68,
        learning_starts=64,
        batch_size=32,
        network="mlp",
        mlp_hidden_sizes=(16, 16),
        clipped_double_q=critics,
        updates_per_step=1,
        learning_rate=0.01,
        alpha_learning_rate=0.1,
        initial_alpha=0.2,
        tau=0.3,
        buffer_size=100,
        n_step=3,
        critic=CriticArgs(distributional=True, num_atoms=11, v_min=-10.0, v_max=10.0),
        cir=CIRArgs(convex_lambda=convex_lambda),
        runs_dir=runs_dir,
        **RUN,
    )
    result = sac_simba.main(args)
    actor_steps, critic_steps = recorder.of(0), recorder.of(1)
    assert len(actor_steps) == len(critic_steps) == 2
    num_critics = 2 if critics == "on" else 1
    space = envs.make(args.env_id).single_action_space
    stored_obs = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")["replay"]["obs"][0]

    def normalise(x, rows):  # statistics of the first `rows` stored (= acted-on) observations
        seen = stored_obs[:rows]
        return (x - seen.mean(0)) / torch.sqrt(seen.var(0, unbiased=False) + 1e-8)

    def critic_with(values):  # the bare critics: their outputs are the logits
        return with_parameters(sac_simba.Critic(args, 4, 1, num_critics, outputs=11), values)

    log_alpha = torch.tensor(math.log(args.initial_alpha), requires_grad=True)
    alpha_optimizer = torch.optim.Adam([log_alpha], args.alpha_learning_rate)
    critic_target_values = critic_steps[0].before
    for k in range(2):  # update k follows vector step 32 + k, after 66 + 2k acted-on observations
        batch, _ = recorder.samples[k]  # one member's: (1, B, ...)
        assert batch.discount is not None and (batch.discount < args.gamma**2).any()  # some 3-step windows
        x, next_x = normalise(batch.obs, 66 + 2 * k), normalise(batch.next_obs, 66 + 2 * k)
        actor = with_parameters(sac_simba.Actor(args, 4, space), actor_steps[k].before)
        critic = critic_with(critic_steps[k].before)
        actor_after = with_parameters(sac_simba.Actor(args, 4, space), actor_steps[k].after)
        critic_target = critic_with(critic_target_values)
        noise, next_noise = recorder.member_randn(k, *batch.actions.shape[1:], count=2)
        alpha = log_alpha.detach().exp()
        actions, log_prob = actor.sample(x, noise)
        q = (critic(x, actions)[0].softmax(-1) * atoms).sum(-1)  # (critics, B) expected values
        assert_gradients_equal((alpha * log_prob - q.min(dim=0).values).mean(), actor, actor_steps[k])
        alpha_loss = -(log_alpha.exp() * (log_prob.detach() - 0.5)).mean()  # H̄ = −|A|/2
        alpha_optimizer.zero_grad()
        alpha_loss.backward()
        alpha_optimizer.step()

        with torch.no_grad():
            next_actions, next_log_prob = actor_after.sample(next_x, next_noise)
            next_log_prob = next_log_prob[0]
            next_probs = critic_target(next_x, next_actions)[0].softmax(-1)  # (critics, B, K)
            if num_critics == 2:
                means = (next_probs * atoms).sum(-1)
                first_lower = (means[0] <= means[1])[:, None]
                lower = torch.where(first_lower, next_probs[0], next_probs[1])
                upper = torch.where(first_lower, next_probs[1], next_probs[0])
                next_probs = convex_lambda * lower + (1 - convex_lambda) * upper
            else:
                next_probs = next_probs[0]
            d = batch.discount[0] * (1 - batch.terminated[0])
            soft_support = batch.rewards[0][:, None] + d[:, None] * (atoms - log_alpha.exp() * next_log_prob[:, None])
            target = triangle_projection(atoms, soft_support, next_probs)
        log_probs = critic(x, batch.actions)[0].log_softmax(-1)
        loss = sum(-(target * log_probs[i]).sum(-1).mean() for i in range(num_critics))
        assert_gradients_equal(loss, critic, critic_steps[k])
        critic_target_values = polyak(critic_target_values, critic_steps[k].after, args.tau)


# ---- Double DQN ----------------------------------------------------------------------------------------------------
def test_ddqn_update_wiring(monkeypatch, runs_dir):
    from agents import ddqn

    recorder = UpdateRecorder(monkeypatch, ddqn)
    record_replay_samples(monkeypatch, ddqn, recorder)
    args = ddqn.Args.defaults_for(
        "CartPole-v1",
        total_timesteps=67,
        learning_starts=64,
        train_frequency=1,
        gradient_steps=1,
        target_network_frequency=1_000,
        max_grad_norm=0.0,
        learning_rate=0.05,
        batch_size=32,
        hidden_sizes=(16, 16),
        buffer_size=100,
        runs_dir=runs_dir,
        **RUN,
    )
    ddqn.main(args)
    steps = recorder.of(0)
    assert len(steps) == 3
    # one member: (1, B, ...) batches
    target = with_parameters(ddqn.QNetwork(1, "mlp", (4,), 2, args.hidden_sizes), steps[0].before)  # never synced in this run
    for k in (1, 2):  # the online network has moved away from the target one
        batch, _ = recorder.samples[k]
        online = with_parameters(ddqn.QNetwork(1, "mlp", (4,), 2, args.hidden_sizes), steps[k].before)
        with torch.no_grad():
            selected = online(batch.next_obs).argmax(dim=-1, keepdim=True)  # the online network selects …
            y = batch.rewards + args.gamma * (1 - batch.terminated) * target(batch.next_obs).gather(-1, selected).squeeze(
                -1
            )  # … the target evaluates
        q_taken = online(batch.obs).gather(-1, batch.actions[..., None]).squeeze(-1)
        assert_gradients_equal(F.smooth_l1_loss(q_taken, y), online, steps[k])


# ---- PPO and GTR ---------------------------------------------------------------------------------------------------
def run_ppo_family(module, monkeypatch, runs_dir, **overrides):
    from agents import ppo

    recorder = UpdateRecorder(monkeypatch, ppo)

    class RecordingStorage(ppo.RolloutStorage):
        def gather(self, indices):
            minibatch = super().gather(indices)
            recorder.record_sample(minibatch)
            return minibatch

    monkeypatch.setattr(ppo, "RolloutStorage", RecordingStorage)
    args = module.Args(
        env_id="CartPole-v1",
        num_envs=2,
        num_steps=32,
        total_timesteps=128,
        num_minibatches=2,
        update_epochs=2,
        normalize_obs=False,
        normalize_reward=False,
        learning_rate=0.05,
        ent_coef=0.01,
        max_grad_norm=1e9,
        hidden_sizes=(16, 16),
        runs_dir=runs_dir,
        **RUN,
        **overrides,
    )
    module.main(args)
    return args, recorder


def hand_ppo_loss(agent, minibatch, args, policy_loss=None):
    """L = L_clip − c_H·H + c_V·L_V with normalised advantages and a clipped value loss (CleanRL's PPO). The run has one
    member: the minibatch is (1, B, ...), so every mean and std here is that member's own."""
    dist = torch.distributions.Categorical(logits=agent.policy.net(minibatch.obs))
    new_logprobs = dist.log_prob(minibatch.actions)
    ratio = (new_logprobs - minibatch.logprobs).exp()
    advantages = (minibatch.advantages - minibatch.advantages.mean()) / (minibatch.advantages.std() + 1e-8)
    eps = args.clip_coef
    if policy_loss is None:
        policy_loss = -torch.minimum(ratio * advantages, ratio.clamp(1 - eps, 1 + eps) * advantages).mean()
    else:
        policy_loss = policy_loss(ratio, advantages, new_logprobs)
    values = agent.critic(minibatch.obs).squeeze(-1)
    clipped_values = minibatch.values + (values - minibatch.values).clamp(-eps, eps)
    v_loss = 0.5 * torch.maximum((values - minibatch.returns) ** 2, (clipped_values - minibatch.returns) ** 2).mean()
    return policy_loss - args.ent_coef * dist.entropy().mean() + args.vf_coef * v_loss, ratio


def test_ppo_update_wiring(monkeypatch, runs_dir):
    from agents import ppo

    args, recorder = run_ppo_family(ppo, monkeypatch, runs_dir)
    assert len(recorder.steps) == 8  # 2 rollouts × 2 epochs × 2 minibatches
    clipped_somewhere = False
    for k in (1, 3, 5):  # later minibatches: π_θ ≠ π_old, so the clip can bite
        agent = with_parameters(
            make_actor_critic(1, (4,), gym.spaces.Discrete(2), args.hidden_sizes, ppo.network_settings(args)[1]),
            recorder.steps[k].before,
        )
        loss, ratio = hand_ppo_loss(agent, recorder.samples[k][0], args)
        clipped_somewhere |= bool(((ratio - 1).abs() > args.clip_coef).any())
        assert_gradients_equal(loss, agent, recorder.steps[k])
    assert clipped_somewhere


@pytest.mark.parametrize("mode", ["add", "replace"])
def test_gtr_update_wiring(mode, monkeypatch, runs_dir):
    from agents import gtr, ppo

    sigma, beta, decay = 0.05, 2.0, 0.5
    # a small clip ε so that the clip bites in the checked minibatches: replace mode must not apply it
    args, recorder = run_ppo_family(
        gtr,
        monkeypatch,
        runs_dir,
        clip_coef=0.02,
        gtr=gtr.GTRArgs(sigma=sigma, beta=beta, anchor_size=4, anchor_decay=decay, mode=mode),
    )
    assert len(recorder.steps) == 8

    def agent_with(values):
        return with_parameters(
            make_actor_critic(1, (4,), gym.spaces.Discrete(2), args.hidden_sizes, ppo.network_settings(args)[1]), values
        )

    # the 2nd rollout's anchor mixes π_old of rollout 2 (weight 1/(1 + η)) and of rollout 1 (η/(1 + η))
    old_policies = [agent_with(recorder.steps[4].before), agent_with(recorder.steps[0].before)]
    for k in (5, 6):
        minibatch = recorder.samples[k][0]
        with torch.no_grad():
            probs = [
                torch.distributions.Categorical(logits=p.policy.net(minibatch.obs)).log_prob(minibatch.actions).exp()
                for p in old_policies
            ]
            anchor_logprobs = torch.log((probs[0] + decay * probs[1]) / (1 + decay))

        def policy_loss(ratio, advantages, new_logprobs):
            if mode == "add":
                eps = args.clip_coef
                surrogate = -torch.minimum(ratio * advantages, ratio.clamp(1 - eps, 1 + eps) * advantages).mean()
            else:
                surrogate = -(ratio * advantages).mean()
            delta = new_logprobs - anchor_logprobs
            return surrogate + beta * (1 - torch.exp(-(delta**2) / (2 * sigma**2))).mean()

        agent = agent_with(recorder.steps[k].before)
        loss, ratio = hand_ppo_loss(agent, minibatch, args, policy_loss)
        assert ((ratio - 1).abs() > args.clip_coef).any()
        assert_gradients_equal(loss, agent, recorder.steps[k])
