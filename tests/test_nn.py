import torch
import torch.nn as nn

from cleanrl_plus.nn import EnsembleLinear, frozen, polyak_update


def test_ensemble_linear_equals_separate_linear_layers():
    torch.manual_seed(0)
    layer = EnsembleLinear(2, 4, 3)
    x = torch.randn(2, 5, 4)
    out = layer(x)
    for i in range(2):
        expected = x[i] @ layer.weight[i] + layer.bias[i]
        torch.testing.assert_close(out[i], expected)
        torch.testing.assert_close(layer.member(i, x[i]), expected)
    bound = 1 / 4**0.5
    assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound


def test_frozen_blocks_parameter_gradients_but_not_input_gradients():
    net = nn.Linear(3, 1)
    x = torch.randn(4, 3, requires_grad=True)
    with frozen(net):
        net(x).sum().backward()
    assert net.weight.grad is None and x.grad is not None
    assert net.weight.requires_grad


def test_polyak_update_interpolates():
    target, online = nn.Linear(2, 2), nn.Linear(2, 2)
    before = target.weight.detach().clone()
    polyak_update(target, online, 0.25)
    torch.testing.assert_close(target.weight, 0.75 * before + 0.25 * online.weight.detach())
