import pytest
import torch
import torch.nn as nn

from plasticity.diagnostics import (
    ActivationProbe,
    active_fraction,
    distance_from,
    dormant_fraction,
    effective_rank,
    gradient_norm,
    network_report,
    parameter_rms,
    srank,
)


def test_dormant_fraction_on_constructed_activations():
    # 4 units with mean |h| = 0, 0.05, 1.95, 2.0 → layer mean 1.0 → scores 0, 0.05, 1.95, 2.0
    layer = torch.tensor([[0.0, 0.05, 1.95, 2.0]]).repeat(8, 1)
    assert dormant_fraction([layer], 0.0) == 0.25
    assert dormant_fraction([layer], 0.025) == 0.25
    assert dormant_fraction([layer], 0.1) == 0.5
    # ensemble layers are normalised per member: member 1 is a scaled copy, so the same units are dormant
    ensemble = torch.stack([layer, 100 * layer])
    assert dormant_fraction([ensemble], 0.1) == 0.5


def test_active_fraction_counts_exact_zeros():
    assert active_fraction([torch.tensor([[0.0, 1.0], [0.0, 2.0]]), torch.ones(2, 4)]) == 1 - 2 / 12


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
    assert parameter_rms(weights) == pytest.approx((16 / 8) ** 0.5)
    assert distance_from(weights, [torch.zeros(2, 2), torch.zeros(4)]) == pytest.approx((16 / 8) ** 0.5)
    layer = nn.Linear(3, 1)
    (layer(torch.ones(1, 3)) * 2).sum().backward()
    assert abs(gradient_norm(layer.parameters()) - (4 * 3 + 4) ** 0.5) < 1e-6


def test_probe_reads_hidden_units_and_penultimate_features_without_changing_the_net():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 1))
    x = torch.randn(32, 4)
    probe = ActivationProbe([net[0], net[2]], net[4])
    hidden, features = probe(lambda: net(x))
    assert [h.shape for h in hidden] == [(32, 8), (32, 6)] and features.shape == (32, 6)
    torch.testing.assert_close(features, net[:4](x))
    assert not net[0]._forward_hooks and not net[4]._forward_pre_hooks  # hooks removed
    with torch.no_grad():
        net[0].bias.fill_(-100.0)  # every first-layer unit dead
    initial = [p.detach().clone() for p in net.parameters()]
    report = network_report("critic", net, probe, lambda: net(x), initial)
    assert report["plasticity/critic_dormant_0"] >= 8 / 14 and report["plasticity/critic_distance_from_init"] == 0.0
