import math
from typing import NamedTuple

import pytest
import torch
import torch.nn as nn

from cleanrl_plus.nn import EnsembleLinear
from plasticity.diagnostics import (
    ActivationProbe,
    DiagnosticsArgs,
    PlasticityMonitor,
    active_fraction,
    churn_report,
    distance_from,
    dormant_fraction,
    effective_rank,
    gradient_norm,
    network_report,
    ntk_report,
    parameter_rms,
    policy_kl,
    srank,
)
from plasticity.network import Network


def test_dormant_fraction_on_constructed_activations():
    # 4 units with mean |h| = 0, 0.05, 1.95, 2.0 → layer mean 1.0 → scores 0, 0.05, 1.95, 2.0
    layer = torch.tensor([[0.0, 0.05, 1.95, 2.0]]).repeat(8, 1)
    assert dormant_fraction([layer], 0.0) == [0.25]
    assert dormant_fraction([layer], 0.025) == [0.25]
    assert dormant_fraction([layer], 0.1) == [0.5]
    # ensemble layers are normalised per entry: entry 1 is a scaled copy, so the same units are dormant, whether the two
    # entries are one member's copies (a twin critic) or two members
    ensemble = torch.stack([layer, 100 * layer])
    assert dormant_fraction([ensemble], 0.1) == [0.5]
    assert dormant_fraction([ensemble], 0.1, members=2) == [0.5, 0.5]
    # each member counts its own units: member 1's units all equal are none dormant
    assert dormant_fraction([torch.stack([layer, torch.ones(8, 4)])], 0.1, members=2) == [0.5, 0.0]


def test_active_fraction_counts_exact_zeros():
    assert active_fraction([torch.tensor([[0.0, 1.0], [0.0, 2.0]]), torch.ones(2, 4)]) == pytest.approx([1 - 2 / 12])
    # (members, B, H) activations of a group: each member's own zeros
    group = [torch.stack([torch.tensor([[0.0, 1.0], [0.0, 2.0]]), torch.ones(2, 2)]), torch.ones(2, 2, 4)]
    assert active_fraction(group, members=2) == pytest.approx([1 - 2 / 12, 1.0])


def test_srank_and_effective_rank_of_constructed_matrices():
    torch.manual_seed(0)
    low_rank = torch.randn(256, 3) @ torch.randn(3, 64)  # rank 3
    assert srank(low_rank) <= 3
    equal_spectrum = torch.eye(64)[:, :10] * 5  # ten equal singular values
    assert srank(equal_spectrum) == 10
    assert abs(effective_rank(equal_spectrum) - 10.0) < 1e-6
    one_direction = torch.outer(torch.randn(100), torch.randn(20))
    assert srank(one_direction) == 1 and abs(effective_rank(one_direction) - 1.0) < 1e-3


def test_norms_distance_and_gradient():
    weights = [torch.full((2, 2), 2.0), torch.zeros(4)]
    assert parameter_rms(weights) == pytest.approx([(16 / 8) ** 0.5])
    assert distance_from(weights, [torch.zeros(2, 2), torch.zeros(4)]) == pytest.approx([(16 / 8) ** 0.5])
    layer = nn.Linear(3, 1)
    (layer(torch.ones(1, 3)) * 2).sum().backward()
    (norm,) = gradient_norm(layer.parameters())
    assert abs(norm - (4 * 3 + 4) ** 0.5) < 1e-6
    # per member of a group: member k's rows of every tensor (member-major), no norm over all members
    group_weights = [torch.tensor([[2.0, 2.0], [0.0, 0.0]]), torch.tensor([0.0, 0.0, 3.0, 3.0])]
    assert parameter_rms(group_weights, members=2) == pytest.approx([(8 / 4) ** 0.5, (18 / 4) ** 0.5])
    group = EnsembleLinear(2, 3, 1)
    (group(torch.ones(2, 1, 3)) * torch.tensor([2.0, 1.0]).view(2, 1, 1)).sum().backward()
    assert gradient_norm(group.parameters(), members=2) == pytest.approx([(4 * 3 + 4) ** 0.5, (3 + 1) ** 0.5])


def test_probe_reads_hidden_units_and_penultimate_features_without_changing_the_net():
    torch.manual_seed(0)
    net = nn.Sequential(EnsembleLinear(1, 4, 8), nn.ReLU(), EnsembleLinear(1, 8, 6), nn.ReLU(), EnsembleLinear(1, 6, 1))
    x = torch.randn(1, 32, 4)  # one member's batch
    probe = ActivationProbe([net[0], net[2]], net[4])
    hidden, features = probe(lambda: net(x))
    assert [h.shape for h in hidden] == [(1, 32, 8), (1, 32, 6)] and features.shape == (1, 32, 6)
    torch.testing.assert_close(features, net[:4](x))
    assert not net[0]._forward_hooks and not net[4]._forward_pre_hooks  # hooks removed
    with torch.no_grad():
        net[0].bias.fill_(-100.0)  # every first-layer unit dead
    initial = [p.detach().clone() for p in net.parameters()]
    report = network_report("critic", net, probe, lambda: net(x), initial)
    assert report["plasticity/critic_dormant_0"][0] >= 8 / 14 and report["plasticity/critic_distance_from_init"] == [0.0]


# ---- NTK / Gram matrix and churn ---------------------------------------------------------------------------------


class Probe(NamedTuple):
    obs: torch.Tensor


class FakeReplay:
    def __init__(self, dim: int) -> None:
        self.dim, self.draws = dim, 0

    def sample(self, batch_size: int) -> Probe:
        self.draws += 1
        return Probe(torch.randn(1, batch_size, self.dim))  # one member's batch


class RecordingLogger:
    def __init__(self) -> None:
        self.logged: dict[int, dict] = {}

    def scalars(self, values, step) -> None:
        self.logged.setdefault(step, {}).update(values)


def test_ntk_rank_of_a_linear_model_is_the_rank_of_its_inputs():
    torch.manual_seed(0)
    # f(x) = w·x + b: ∇f = [x, 1], so K = [X, 1]·[X, 1]ᵀ has rank 3 + 1 for inputs spanning 3 directions
    linear = nn.Linear(8, 1)
    low_rank_inputs = torch.randn(64, 3) @ torch.randn(3, 8)
    report = ntk_report("critic", linear, lambda b: linear(b.obs), Probe(low_rank_inputs[None]), max_params=10_000)
    assert report["plasticity/critic_ntk_rank"] == [4] and report["plasticity/critic_ntk_srank"][0] <= 4
    assert report["plasticity/critic_ntk_params"] == [9]
    # orthogonal inputs of equal norm, no bias: K = 4·I — full rank, effective rank 8, no interference, condition 1
    no_bias = nn.Linear(8, 1, bias=False)
    report = ntk_report("critic", no_bias, lambda b: no_bias(b.obs), Probe(2 * torch.eye(8)[None]), max_params=10_000)
    assert report["plasticity/critic_ntk_rank"] == [8] and report["plasticity/critic_ntk_srank"] == [8]
    assert report["plasticity/critic_ntk_effective_rank"] == pytest.approx([8.0])
    assert report["plasticity/critic_ntk_grad_cos"] == pytest.approx([0.0], abs=1e-12)
    assert report["plasticity/critic_ntk_condition"] == pytest.approx([1.0])
    # the same input eight times: rank 1, every pair of gradients parallel
    report = ntk_report("critic", no_bias, lambda b: no_bias(b.obs), Probe(torch.ones(1, 8, 8)), max_params=10_000)
    assert report["plasticity/critic_ntk_rank"] == [1] and report["plasticity/critic_ntk_grad_cos"] == pytest.approx([1.0])
    # a group of two members, each its own linear model on its own inputs: each member's rank is its own inputs' rank
    group = EnsembleLinear(2, 8, 1)
    inputs = torch.stack([low_rank_inputs, torch.randn(64, 8)])  # rank 3 (+ bias) and full rank 8 (+ bias)
    report = ntk_report("critic", group, lambda b: group(b.obs), Probe(inputs), max_params=10_000, members=2)
    assert report["plasticity/critic_ntk_rank"] == [4, 9] and report["plasticity/critic_ntk_params"] == [9, 9]


def test_ntk_keeps_the_last_layers_within_the_parameter_budget_and_handles_twin_critics():
    from agents.td3 import TwinCritic

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    report = ntk_report("critic", net, lambda b: net(b.obs), Probe(torch.randn(1, 16, 4)), max_params=1_000)
    assert report["plasticity/critic_ntk_params"] == [33 + 32]  # the head (33) and the last hidden bias; 32·32 would exceed
    critic = TwinCritic(3, 1, (16, 16))
    batch = Probe(torch.randn(1, 20, 4))  # one member's batch
    report = ntk_report("critic", critic, lambda b: critic(b.obs[..., :3], b.obs[..., 3:]), batch, max_params=10**6)
    assert report["plasticity/critic_ntk_params"] == [sum(p.numel() for p in critic.parameters())]
    (rank,), (cosine,) = report["plasticity/critic_ntk_rank"], report["plasticity/critic_ntk_grad_cos"]
    assert 1 < rank <= 20 and 0 < cosine < 1
    assert not any(p.grad is not None for p in critic.parameters())  # the agent's gradients are left alone


def _watched(name: str, net: nn.Sequential, forward, distribution=None) -> Network:
    """A 3-layer MLP as the diagnostics see it (they read no optimiser and rebuild nothing)."""
    return Network(name, net, None, forward, None, hidden=[net[0]], heads=(net[2],), distribution=distribution)


def test_churn_is_zero_without_an_update_and_positive_after_one():
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 1))
    actor = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD([*critic.parameters(), *actor.parameters()], lr=0.1)
    monitor = PlasticityMonitor(
        DiagnosticsArgs(every=0, ntk_every=0, churn_every=2, churn_batch=32),
        [_watched("critic", critic, lambda b: critic(b.obs).squeeze(-1)), _watched("actor", actor, lambda b: actor(b.obs))],
    )
    replay, logger = FakeReplay(3), RecordingLogger()
    monitor.after_update(1, replay, logger, global_step=1)  # takes the reference before update 2
    monitor.after_update(2, replay, logger, global_step=2)  # nothing changed in between
    assert logger.logged[2] == {"plasticity/critic_churn": [0.0], "plasticity/actor_churn": [0.0]}
    monitor.after_update(3, replay, logger, global_step=3)
    reference, before, _ = monitor.churn_reference
    restored = PlasticityMonitor(monitor.args, list(monitor.networks.values()))
    restored.load_state_dict(monitor.state_dict())  # a checkpoint between the reference and the update
    (critic(torch.randn(8, 3)).square().mean() + actor(torch.randn(8, 3)).square().mean()).backward()
    optimizer.step()
    monitor.after_update(4, replay, logger, global_step=4)
    churn = logger.logged[4]
    with torch.no_grad():
        expected_value_churn = (critic(reference.obs).squeeze(-1) - before["critic"]).abs().mean()
        expected_policy_churn = (actor(reference.obs) - before["actor"]).norm(dim=-1).mean()
    (value_churn,), (policy_churn,) = churn["plasticity/critic_churn"], churn["plasticity/actor_churn"]
    assert value_churn == pytest.approx(float(expected_value_churn)) and value_churn > 0
    assert policy_churn == pytest.approx(float(expected_policy_churn)) and policy_churn > 0
    restored_logger = RecordingLogger()
    restored.after_update(4, replay, restored_logger, global_step=4)
    assert restored_logger.logged[4] == churn
    assert replay.draws == 2  # one reference batch per measurement, none otherwise


def test_policy_kl_is_zero_between_equal_policies_and_matches_hand_computed_pairs():
    torch.manual_seed(0)
    gaussian = {"mean": torch.randn(5, 3), "log_std": torch.randn(5, 3)}
    categorical = {"logits": torch.randn(5, 4)}
    assert torch.equal(policy_kl(gaussian, gaussian), torch.zeros(5))
    torch.testing.assert_close(policy_kl(categorical, categorical), torch.zeros(5))
    # KL(N(0, 1) ‖ N(1, 2²)) = log 2 + (1 + 1)/(2·4) − ½
    one_d = policy_kl(
        {"mean": torch.tensor([[0.0]]), "log_std": torch.tensor([[0.0]])},
        {"mean": torch.tensor([[1.0]]), "log_std": torch.tensor([[math.log(2.0)]])},
    )
    assert float(one_d) == pytest.approx(math.log(2.0) + 0.25 - 0.5)
    # KL((½, ½) ‖ (¼, ¾)) = ½·log 2 + ½·log(2/3)
    two_class = policy_kl({"logits": torch.tensor([[0.0, 0.0]])}, {"logits": torch.tensor([[0.0, math.log(3.0)]])})
    assert float(two_class) == pytest.approx(0.5 * math.log(2.0) + 0.5 * math.log(2.0 / 3.0))
    # a state-independent log σ (PPO's) broadcasts over states; dimensions add up
    moved = {"mean": gaussian["mean"] + 0.3, "log_std": torch.tensor([0.1, -0.2, 0.0])}
    shared = {"mean": gaussian["mean"], "log_std": torch.zeros(3)}
    expected = torch.distributions.kl_divergence(
        torch.distributions.Normal(shared["mean"], 1.0), torch.distributions.Normal(moved["mean"], moved["log_std"].exp())
    ).sum(-1)
    torch.testing.assert_close(policy_kl(shared, moved), expected)


def test_kl_churn_sees_a_log_std_parameter_that_the_update_changes_in_place():
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 2))
    log_std = nn.Parameter(torch.zeros(2))
    monitor = PlasticityMonitor(
        DiagnosticsArgs(every=0, ntk_every=0, churn_every=2, churn_batch=32),
        [_watched("policy", actor, lambda b: actor(b.obs), distribution=lambda b: {"mean": actor(b.obs), "log_std": log_std})],
    )
    replay, logger = FakeReplay(3), RecordingLogger()
    monitor.after_update(1, replay, logger, global_step=1)
    restored = PlasticityMonitor(monitor.args, list(monitor.networks.values()))
    restored.load_state_dict(monitor.state_dict())
    with torch.no_grad():
        log_std.add_(0.5)  # the update: σ grows, means stay
    monitor.after_update(2, replay, logger, global_step=2)
    # per dimension: KL(N(μ, 1) ‖ N(μ, e)) = ½ + ½·(e⁻¹ − 1)
    assert logger.logged[2]["plasticity/policy_kl_churn"] == pytest.approx([2 * (0.5 + 0.5 * (math.exp(-1.0) - 1))])
    assert logger.logged[2]["plasticity/policy_churn"] == [0.0]
    restored_logger = RecordingLogger()
    restored.after_update(2, replay, restored_logger, global_step=2)
    assert restored_logger.logged[2] == logger.logged[2]


def test_greedy_churn_counts_states_whose_best_action_changes():
    before = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]])
    after = before.clone()
    after[0, 1] = 2.0  # state 0: greedy action 0 → 1
    report = churn_report("critic", before[None], after[None], batch_size=4, actions=3)  # one member's Q(s, ·)
    assert report["plasticity/critic_greedy_churn"] == [0.25]
    assert report["plasticity/critic_churn"] == pytest.approx([2.0 / 12])  # mean |ΔQ(s, a)| over states and actions
    # a group of two: member 1's Q did not move
    group = churn_report("critic", torch.stack([before, before]), torch.stack([after, before]), 4, members=2, actions=3)
    assert group == {"plasticity/critic_churn": pytest.approx([2.0 / 12, 0.0]), "plasticity/critic_greedy_churn": [0.25, 0.0]}
    twin = churn_report(
        "critic", torch.zeros(1, 2, 4), torch.ones(1, 2, 4), batch_size=4
    )  # (members, 2, batch): no greedy action
    assert twin == {"plasticity/critic_churn": [1.0]}


def test_monitor_runs_the_ntk_on_the_probe_batch_when_both_are_due():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
    monitor = PlasticityMonitor(
        DiagnosticsArgs(every=5, probe_size=32, ntk_every=10, ntk_batch=16), [_watched("critic", net, lambda b: net(b.obs))]
    )
    replay, logger = FakeReplay(3), RecordingLogger()
    for update in range(1, 11):
        monitor.after_update(update, replay, logger, global_step=update)
    assert sorted(logger.logged) == [5, 10] and replay.draws == 2  # the NTK reused update 10's probe batch
    assert "plasticity/critic_ntk_rank" in logger.logged[10] and "plasticity/critic_ntk_rank" not in logger.logged[5]
    assert 1 <= logger.logged[10]["plasticity/critic_ntk_rank"][0] <= 16
