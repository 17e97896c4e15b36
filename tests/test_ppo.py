"""PPO and GTR: GAE with truncation, the clipped objectives, normalisers, the Gaussian trust region, resume."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from conftest import assert_states_equal

from agents import gtr, ppo
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.gae import generalized_advantages
from cleanrl_plus.normalization import ObservationNormalizer, RewardScaler
from cleanrl_plus.policy import Policy, make_actor_critic
from cleanrl_plus.rollout import Minibatch, RolloutStorage
from cleanrl_plus.transition import Transition
from plasticity.architecture import NetArgs

TINY = dict(
    num_steps=64, num_minibatches=2, update_epochs=2, hidden_sizes=(16, 16), eval_episodes=2, progress=False, eval_every=0
)


def test_gae_bootstraps_a_truncation_but_not_across_it():
    """T = 3, one env, γ = 0.9, λ = 0.8; the episode is cut by the time limit after step 1 (V(s_final) = 9)."""
    rewards = torch.tensor([[[1.0], [2.0], [3.0]]])  # (members, T, N): one member
    values = torch.tensor([[[0.5], [1.0], [1.5]]])
    next_values = torch.tensor([[[1.0], [9.0], [2.0]]])
    no = torch.zeros(1, 3, 1, dtype=torch.bool)
    cut = torch.tensor([[[False], [True], [False]]])
    advantages, returns = generalized_advantages(rewards, values, next_values, no, cut, 0.9, 0.8)
    # δ₂ = 3 + 0.9·2 − 1.5 = 3.3;  δ₁ = 2 + 0.9·9 − 1 = 9.1 (bootstrapped), Â₁ does not see Â₂;  Â₀ = 1.4 + 0.72·9.1
    torch.testing.assert_close(advantages[0, :, 0], torch.tensor([1.4 + 0.72 * 9.1, 9.1, 3.3]))
    torch.testing.assert_close(returns, advantages + values)
    # the same cut as a termination: no bootstrap from V(s_final)
    terminal, _ = generalized_advantages(rewards, values, next_values, cut, cut, 0.9, 0.8)
    torch.testing.assert_close(terminal[0, :, 0], torch.tensor([1.4 + 0.72 * 1.0, 1.0, 3.3]))
    # both as two members of one group: each member's recursion is its own
    pair = lambda x, y: torch.cat([x, y])
    group, _ = generalized_advantages(
        *(pair(x, x) for x in (rewards, values, next_values)), pair(no, cut), pair(cut, cut), 0.9, 0.8
    )
    torch.testing.assert_close(group, torch.cat([advantages, terminal]))


def test_gae_without_episode_ends_matches_the_discounted_sum_of_deltas():
    torch.manual_seed(0)
    rewards, values, next_values = torch.randn(3, 5, 2), torch.randn(3, 5, 2), torch.randn(3, 5, 2)  # 3 members
    no = torch.zeros(3, 5, 2, dtype=torch.bool)
    advantages, _ = generalized_advantages(rewards, values, next_values, no, no, 0.99, 0.95)
    deltas = rewards + 0.99 * next_values - values
    expected = sum((0.99 * 0.95) ** k * deltas[:, k] for k in range(5))
    torch.testing.assert_close(advantages[:, 0], expected)


def test_rollout_storage_values_the_stored_final_observation():
    from cleanrl_plus.members import Members

    storage = RolloutStorage(2, 1, (2,), (), torch.device("cpu"), Members((0,)), torch.long)
    one = torch.ones(1, 1, dtype=torch.bool)  # (members, num_envs)

    def step(obs, action, truncated, next_obs):
        return Transition(
            obs=torch.tensor([[obs]]),
            action=torch.tensor([[action]]),
            logprob=torch.zeros(1, 1),
            reward=torch.ones(1, 1),
            terminated=~one,
            truncated=truncated,
            next_obs=torch.tensor([[next_obs]]),
        )

    storage.add(0, step([1.0, 0.0], 0, one, [5.0, 5.0]))
    storage.add(1, step([0.0, 1.0], 1, ~one, [2.0, 0.0]))
    ppo.estimate_advantages(lambda obs: obs.sum(-1), storage, ppo.Args(gamma=0.5, gae_lambda=1.0))
    # step 0 was truncated: δ₀ = 1 + 0.5·V(final = [5, 5]) − V([1, 0]) = 1 + 5 − 1
    torch.testing.assert_close(storage.advantages[0, :, 0], torch.tensor([5.0, 1.0 + 0.5 * 2.0 - 1.0]))
    batches = [storage.gather(indices) for indices in storage.minibatch_indices(2)]
    assert [b.obs.shape[:2] for b in batches] == [(1, 1), (1, 1)]
    assert sorted(float(b.advantages[0, 0]) for b in batches) == [1.0, 5.0]


def test_rollout_storage_puts_each_field_of_a_transition_where_it_belongs():
    from cleanrl_plus.members import Members

    storage = RolloutStorage(3, 2, (2,), (1,), torch.device("cpu"), Members((0, 1)))
    value = torch.arange(1.0, 5.0).view(2, 2)  # (members, num_envs): each member's env its own number
    transition = Transition(
        obs=torch.stack([value + 0.1, value + 0.15], dim=-1),
        action=value[..., None] + 0.2,
        logprob=value + 0.3,
        reward=value + 0.4,
        # every (terminated, truncated) pair once
        terminated=torch.tensor([[True, False], [True, False]]),
        truncated=torch.tensor([[True, True], [False, False]]),
        next_obs=torch.stack([value + 0.5, value + 0.55], dim=-1),
    )
    storage.add(1, transition)
    expected = {
        "obs": transition.obs,
        "actions": transition.action,
        "logprobs": transition.logprob,
        "rewards": transition.reward,
        "terminated": transition.terminated,
        "dones": transition.terminated | transition.truncated,
        "next_obs": transition.next_obs,
    }
    for name, tensor in expected.items():
        assert torch.equal(getattr(storage, name)[:, 1], tensor), name
        assert not getattr(storage, name)[:, [0, 2]].any(), f"{name} written outside step 1"


def test_clipped_surrogate_on_a_constructed_batch():
    ratio = torch.tensor([0.5, 1.0, 1.5], requires_grad=True)
    advantages = torch.tensor([1.0, -1.0, 1.0])
    loss = ppo.clipped_surrogate_loss(ratio, advantages, 0.2)
    # −mean(min(ρÂ, clip(ρ)Â)) = −(0.5 − 1 + 1.2)/3
    torch.testing.assert_close(loss, torch.tensor(-(0.5 - 1.0 + 1.2) / 3))
    loss.backward()
    torch.testing.assert_close(ratio.grad, torch.tensor([-1 / 3, 1 / 3, 0.0]))  # the clipped sample gets no gradient


def test_value_loss_clips_around_the_rollout_values():
    batch = Minibatch(*[None] * 4, returns=torch.tensor([1.0, 1.0]), values=torch.tensor([0.0, 0.0]), extra=None)
    new_values = torch.tensor([0.5, 3.0])
    # sample 1: unclipped (3−1)² = 4, clipped (0 + 0.2 − 1)² = 0.64 → max 4; sample 0: 0.25 vs 0.64 → 0.64
    torch.testing.assert_close(ppo.value_loss(new_values, batch, 0.2, clip=True), torch.tensor(0.5 * (0.64 + 4.0) / 2))
    torch.testing.assert_close(ppo.value_loss(new_values, batch, 0.2, clip=False), torch.tensor(0.5 * (0.25 + 4.0) / 2))


def test_observation_normalizer_standardises_and_clips():
    normalizer = ObservationNormalizer((2,), enabled=True, clip=1.5, members=2)
    batch = torch.tensor([[[0.0, 10.0], [2.0, 30.0]], [[0.0, 0.0], [20.0, 4.0]]])  # (members, B, ...): own statistics
    out = normalizer(batch, update=True)
    torch.testing.assert_close(out, torch.tensor([[[-1.0, -1.0], [1.0, 1.0]]] * 2), atol=1e-4, rtol=0)
    assert float(normalizer(torch.tensor([[[100.0, 20.0]], [[100.0, 20.0]]]))[0, 0, 0]) == 1.5
    assert torch.equal(ObservationNormalizer((2,), enabled=False, members=2)(batch), batch)


def test_running_statistics_start_over_after_a_reset_and_carry_on_after_a_load():
    """The sample count is mirrored on the host (the merge's scalar arithmetic runs in Python): a reset and a loaded
    state must reach the mirror too."""
    from cleanrl_plus.normalization import RunningMeanStd

    torch.manual_seed(0)
    batches = [torch.randn(3, 2) * 4 + 1 for _ in range(6)]
    used = RunningMeanStd((2,))
    for batch in batches[:3]:
        used.update(batch)
    loaded = RunningMeanStd((2,))
    loaded.load_state_dict(used.state_dict())
    used.reset()
    fresh = RunningMeanStd((2,))
    for batch in batches[3:]:
        used.update(batch)
        fresh.update(batch)
    assert torch.equal(used.mean, fresh.mean) and torch.equal(used.var, fresh.var) and float(used.count) == 9
    straight = RunningMeanStd((2,))
    for batch in batches:
        straight.update(batch)
    for batch in batches[3:]:
        loaded.update(batch)
    assert torch.equal(loaded.mean, straight.mean) and torch.equal(loaded.var, straight.var)


def test_reward_scaler_divides_by_the_std_of_the_discounted_return_and_restarts_at_episode_ends():
    scaler = RewardScaler(1, gamma=0.5, enabled=True, members=2)
    done, not_done = torch.tensor([[True], [False]]), torch.tensor([[False], [False]])  # (members, num_envs)
    scaler(torch.tensor([[2.0], [4.0]]), not_done)  # G = 2 (member 1: 4)
    out = scaler(torch.tensor([[2.0], [1.0]]), done)  # G = 3, then restarts (member 1: G = 3, goes on)
    var = 0.25  # population variance of the discounted returns seen so far, [2, 3] (member 1: [4, 3], also 0.25)
    assert float(scaler.return_rms.count) == 2
    torch.testing.assert_close(out, torch.tensor([[2.0 / math.sqrt(var + 1e-8)], [1.0 / math.sqrt(var + 1e-8)]]))
    assert float(scaler.discounted_return[0, 0]) == 0.0 and float(scaler.discounted_return[1, 0]) == 3.0


def test_gaussian_penalty_is_bounded_peaks_in_slope_at_sigma_and_lets_go_far_away():
    sigma = 0.2
    delta = torch.linspace(-3, 3, 6001, requires_grad=True)
    penalty = gtr.gaussian_penalty(delta, sigma)
    penalty.sum().backward()
    assert (
        float(penalty.detach().max()) <= 1.0 and float(penalty.detach().min()) == 0.0
    )  # bounded: 1 − exp(·) reaches 1.0 only in float rounding
    assert float(gtr.gaussian_penalty(torch.tensor(3 * sigma), sigma)) < 1.0
    torch.testing.assert_close(gtr.gaussian_penalty(torch.tensor(sigma), sigma), torch.tensor(1 - math.exp(-0.5)))
    slope = delta.grad.abs()
    assert abs(float(delta.detach()[slope.argmax()].abs()) - sigma) < 1e-3
    torch.testing.assert_close(slope.max(), torch.tensor(math.exp(-0.5) / sigma), rtol=1e-4, atol=0)
    assert float(slope[delta.detach().abs() > 10 * sigma].max()) < 1e-15


def test_mixture_anchor_log_prob_is_the_log_of_the_weighted_snapshot_mixture():
    logps = torch.log(torch.tensor([[0.5, 0.1], [0.2, 0.4], [0.9, 0.3]]))  # (J=3 snapshots, 2 samples), most recent first
    weights = torch.tensor([1.0, 0.5, 0.25]) / 1.75
    expected = torch.log((weights[:, None] * logps.exp()).sum(0))
    torch.testing.assert_close(gtr.mixture_log_prob(logps, 0.5), expected)
    torch.testing.assert_close(gtr.mixture_log_prob(logps[:1], 0.5), logps[0])


def test_mixture_anchor_keeps_the_last_j_rollout_policies_most_recent_first():
    policy = Policy(2, 3, gym.spaces.Discrete(2), (8,), "tanh")  # two members
    anchor = gtr.MixtureAnchor(policy, size=3, decay=0.5)
    obs, actions = torch.randn(2, 4, 3), torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]])
    logps = []
    for _ in range(4):  # the 4th push shifts every kept policy along and drops the oldest
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(torch.randn_like(p))
        anchor.push(policy)
        logps.append(policy.log_prob(obs, actions)[0].detach())
    assert len(anchor.snapshots) == 3
    torch.testing.assert_close(
        anchor.log_prob(obs, actions), gtr.mixture_log_prob(torch.stack([logps[3], logps[2], logps[1]]), 0.5)
    )


def _final_state(run_dir: str) -> dict:
    return load_checkpoint(Path(run_dir) / "checkpoint.pt")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "LunarLander-v3"])
def test_ppo_resume_continues_bit_identically(runs_dir, env_id):
    if env_id == "LunarLander-v3":  # Box2D: restored mid-episode by replaying it (envs/gymnasium_backend.py)
        pytest.importorskip("Box2D")
    common = dict(env_id=env_id, num_envs=2, runs_dir=runs_dir, **TINY)
    straight = ppo.main(ppo.Args(total_timesteps=384, exp_name="straight", **common))
    half = ppo.main(ppo.Args(total_timesteps=128, exp_name="split", **common))
    resumed = ppo.main(ppo.Args(total_timesteps=384, exp_name="split", resume=half["run_dir"], **common))
    assert resumed["global_step"] == 384
    a, b = _final_state(straight["run_dir"]), _final_state(resumed["run_dir"])
    for name in ("agent", "obs_normalizer", "reward_scaler"):
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"


def test_gtr_resume_continues_bit_identically(runs_dir):
    # the anchor's policy snapshots and the previous update direction are state too: a resume must carry them
    common = dict(env_id="CartPole-v1", num_envs=2, runs_dir=runs_dir, gtr=gtr.GTRArgs(anchor_size=3), **TINY)
    straight = gtr.main(gtr.Args(total_timesteps=384, exp_name="straight", **common))
    half = gtr.main(gtr.Args(total_timesteps=128, exp_name="split", **common))  # one rollout: lr annealing agrees up to here
    resumed = gtr.main(gtr.Args(total_timesteps=384, exp_name="split", resume=half["run_dir"], **common))
    assert resumed["global_step"] == 384
    a, b = _final_state(straight["run_dir"]), _final_state(resumed["run_dir"])
    for name in ("agent", "obs_normalizer", "reward_scaler", "agent_optimizer"):
        assert_states_equal(a[name], b[name], name)
    assert len(a["trust_region"]["snapshots"]) == 3
    assert_states_equal(a["trust_region"], b["trust_region"], "trust_region")


def test_gtr_without_penalty_is_exactly_ppo_and_with_it_is_not(runs_dir):
    common = dict(env_id="CartPole-v1", num_envs=2, total_timesteps=256, runs_dir=runs_dir, **TINY)
    plain = _final_state(ppo.main(ppo.Args(exp_name="ppo", **common))["run_dir"])["agent"]
    no_penalty = _final_state(gtr.main(gtr.Args(exp_name="g0", gtr=gtr.GTRArgs(beta=0.0), **common))["run_dir"])["agent"]
    penalised = _final_state(gtr.main(gtr.Args(exp_name="g1", gtr=gtr.GTRArgs(beta=5.0, anchor_size=1), **common))["run_dir"])
    assert all(torch.equal(plain[k], no_penalty[k]) for k in plain)
    assert not all(torch.equal(plain[k], penalised["agent"][k]) for k in plain)
    assert len(penalised["trust_region"]["snapshots"]) == 1


def test_gtr_logs_its_diagnostics_and_replace_mode_runs(runs_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = gtr.Args(
        env_id="Pendulum-v1",
        num_envs=2,
        total_timesteps=512,
        log_every=128,
        runs_dir=runs_dir,
        gtr=gtr.GTRArgs(mode="replace"),
        **TINY,
    )
    result = gtr.main(args)
    events = EventAccumulator(result["run_dir"]).Reload()
    tags = set(events.Tags()["scalars"])
    for tag in (
        "gtr/released_fraction",
        "gtr/kl_anchor",
        "gtr/update_cosine",
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/explained_variance",
        "charts/episodic_return",
        "eval/episodic_return",
    ):
        assert tag in tags, tag
    assert result["agent"] == "gtr" and result["finished"]

    def logged(tag):
        return [e.value for e in events.Scalars(tag)]

    # the diagnostics are what they claim (the replace-mode loss itself: test_update_wiring.py): a fraction, a k3 KL
    # estimate (never negative), a cosine, and an anchor that gains one policy per rollout up to J = 4
    assert all(0 <= v <= 1 for v in logged("gtr/released_fraction")) and all(v >= 0 for v in logged("gtr/kl_anchor"))
    assert all(-1 <= v <= 1 for v in logged("gtr/update_cosine"))
    assert logged("gtr/anchor_policies") == [1.0, 2.0, 3.0, 4.0]  # one log per 128-step rollout


def test_ppo_logs_plasticity_diagnostics_for_tanh_networks_and_the_kl_churn_of_its_categorical_policy(runs_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from plasticity.diagnostics import DiagnosticsArgs

    args = ppo.Args(
        env_id="CartPole-v1",
        total_timesteps=256,
        log_every=64,
        runs_dir=runs_dir,
        diagnostics=DiagnosticsArgs(every=4, probe_size=32, churn_every=4, churn_batch=32),
        **TINY,
    )
    result = ppo.main(args)
    events = EventAccumulator(result["run_dir"]).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"plasticity/policy_dormant_0.1", "plasticity/critic_srank", "plasticity/policy_grad_norm"} <= tags
    kl_churn = [event.value for event in events.Scalars("plasticity/policy_kl_churn")]
    assert len(kl_churn) == result["num_updates"] // 4 and all(value >= 0 for value in kl_churn) and max(kl_churn) > 0


@pytest.mark.parametrize("obs_shape", [(4,), (4, 84, 84)], ids=["separate-networks", "one-torso"])
def test_the_actor_critic_is_one_network_in_two_parts_whose_units_two_heads_read_only_on_one_torso(obs_shape):
    """plasticity/actor_critic.py: "agent" (one loss, one optimiser) made of "critic" and "actor" (labelled "policy");
    with linear heads (--hidden-sizes with no widths) the Nature CNN's last layer feeds both heads, so ReDo's unit pairs
    are (torso, head) for each and the resets act on the whole; separate networks have no shared units."""
    from plasticity.actor_critic import actor_critic_network

    agent = make_actor_critic(1, obs_shape, gym.spaces.Discrete(3), (), "relu")
    optimizer = torch.optim.Adam(agent.parameters())
    network = actor_critic_network(agent, optimizer, lambda: agent, lambda: agent.policy, "relu", 4)
    value, policy = network.parts
    assert [(part.name, part.tag, part.module) for part in network.parts] == [
        ("critic", "critic", agent.critic),
        ("actor", "policy", agent.policy),
    ]
    policy_head, value_head = policy.heads[0], value.heads[0]
    assert network.heads == (policy_head, value_head) and network.optimizer is optimizer
    obs = torch.zeros(1, 5, *obs_shape)
    assert network.forward(Minibatch(obs, *[None] * 6)).shape == (1, 5, 4)  # three logits and V(s)
    if len(obs_shape) == 1:
        assert network.unit_pairs == [] and network.reset_units() == [value, policy]
    else:
        torso_layer = policy.hidden[0]
        assert torso_layer is value.hidden[0]
        assert network.unit_pairs == [(torso_layer, policy_head), (torso_layer, value_head)]
        assert network.reset_units() == [network]


def test_ppo_redo_needs_relu_units(runs_dir):
    from envs.errors import UserError
    from plasticity.resets import ResetArgs

    with pytest.raises(UserError, match="--net.activation relu"):
        ppo.main(ppo.Args(env_id="CartPole-v1", total_timesteps=64, runs_dir=runs_dir, reset=ResetArgs(method="redo"), **TINY))
    assert not Path(runs_dir).exists()  # refused before anything was written


def test_ppo_after_plasticity_injection_clips_the_trained_gradients_and_anneals_the_new_heads(runs_dir, monkeypatch):
    """The frozen old heads keep the gradient of the last update before the injection: the gradient-norm clip must leave
    them out (else a stale gradient shrinks every later step), and the fresh heads' parameter groups follow the lr anneal."""
    import plasticity.optimizers
    from plasticity.resets import ResetArgs

    clipped = []
    clip_grad_norm = plasticity.optimizers.clip_grad_norm_per_member  # each member's norm, as torch's clip_grad_norm_

    def recording_clip(parameters, *args, **kwargs):
        clipped.append(list(parameters))
        return clip_grad_norm(clipped[-1], *args, **kwargs)

    monkeypatch.setattr(plasticity.optimizers, "clip_grad_norm_per_member", recording_clip)
    # 3 iterations of 4 updates; the injection after the 10th update, in the last iteration
    args = ppo.Args(
        env_id="CartPole-v1",
        num_envs=2,
        total_timesteps=384,
        reset=ResetArgs(method="inject", every=10),
        runs_dir=runs_dir,
        **TINY,
    )
    ppo.main(args)
    assert len(clipped) == 12
    frozen = [p for p in clipped[0] if not p.requires_grad]  # the old heads, frozen by the injection
    assert len(frozen) == 4 and all(p.grad is not None for p in frozen)
    assert all(p.requires_grad for parameters in clipped[10:] for p in parameters)
    state = load_checkpoint(next(Path(runs_dir).rglob("checkpoint.pt")))
    final_lr = args.learning_rate * (1 - 2 / 3)  # the 3rd of 3 iterations
    groups = state["agent_optimizer"]["param_groups"]
    assert len(groups) == 3 and all(float(group["lr"]) == pytest.approx(final_lr, rel=1e-12) for group in groups)


@pytest.mark.parametrize("method", ["redo", "shrink-perturb", "full"])
def test_ppo_runs_each_reset_method_and_logs_it(runs_dir, method):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from plasticity.resets import ResetArgs

    args = ppo.Args(
        env_id="CartPole-v1",
        total_timesteps=256,
        log_every=64,
        runs_dir=runs_dir,
        net=NetArgs(activation="relu"),
        reset=ResetArgs(method=method, every=3),
        **TINY,
    )
    result = ppo.main(args)
    events = EventAccumulator(result["run_dir"]).Reload()
    assert events.Scalars("plasticity/resets")[-1].value >= 2
    if method == "redo":
        assert "plasticity/critic_recycled_fraction" in events.Tags()["scalars"]
