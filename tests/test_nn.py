import io
import math

import pytest
import torch
import torch.nn as nn

from cleanrl_plus.nn import EnsembleLinear, frozen, polyak_update
from plasticity.optimizers import ElementStepAdam


def test_ensemble_linear_equals_separate_linear_layers():
    torch.manual_seed(0)
    layer = EnsembleLinear(2, 4, 3)
    x = torch.randn(2, 5, 4)
    out = layer(x)
    for i in range(2):
        expected = x[i] @ layer.weight[i] + layer.bias[i]
        torch.testing.assert_close(out[i], expected)
        torch.testing.assert_close(layer.forward_copy(i, x[i]), expected)
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


def _element_steps(optimizer: ElementStepAdam, parameter: torch.Tensor) -> torch.Tensor:
    """tᵢ from the stored β₁^tᵢ (small counts only: β₁^t must not underflow)."""
    beta1 = optimizer.param_groups[0]["betas"][0]
    return (optimizer.state[parameter]["beta1_power"].log() / math.log(beta1)).round()


def _twin_adams(**kwargs):
    """An ElementStepAdam and a torch.optim.Adam on copies of the same weight (4, 3) and bias (4,), and a step function
    that gives both the same gradients."""
    torch.manual_seed(0)
    params = [nn.Parameter(torch.randn(4, 3)), nn.Parameter(torch.randn(4))]
    reference = [nn.Parameter(p.detach().clone()) for p in params]
    optimizer, ordinary = ElementStepAdam(params, **kwargs), torch.optim.Adam(reference, **kwargs)

    def step(grads):
        for p, q, g in zip(params, reference, grads):
            p.grad, q.grad = g.clone(), g.clone()
        optimizer.step()
        ordinary.step()

    return params, reference, optimizer, ordinary, step


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize(
    "betas, weight_decay, decoupled",
    [((0.9, 0.999), 0.0, False), ((0.99, 0.99), 0.0, False), ((0.9, 0.999), 1e-2, True), ((0.9, 0.999), 1e-2, False)],
)
def test_restarted_entries_step_like_a_fresh_adam_and_the_others_like_ordinary_adam(betas, weight_decay, decoupled, fused):
    kwargs = dict(lr=1e-2, betas=betas, weight_decay=weight_decay, decoupled_weight_decay=decoupled, fused=fused)
    (weight, bias), (reference_weight, reference_bias), optimizer, ordinary, step = _twin_adams(**kwargs)
    for _ in range(30):
        step([torch.randn(4, 3), torch.randn(4)])
    row = torch.zeros(4, 3, dtype=torch.bool)
    row[1] = True
    optimizer.restart(weight, row)
    fresh_row = nn.Parameter(weight[1].detach().clone())  # what a brand-new Adam would do with row 1 from here
    fresh = torch.optim.Adam([fresh_row], **kwargs)
    for update in range(5):
        grads = [torch.randn(4, 3), torch.randn(4)]
        before = weight[1].detach().clone()
        step(grads)
        fresh_row.grad = grads[0][1].clone()
        fresh.step()
        if update == 0 and weight_decay == 0:  # m̂ = g, v̂ = g²: lr·g/(|g| + ε)
            torch.testing.assert_close(weight[1] - before, -1e-2 * grads[0][1] / (grads[0][1].abs() + 1e-8))
        torch.testing.assert_close(weight[1], fresh_row)
        torch.testing.assert_close(weight[~row[:, 0]], reference_weight[~row[:, 0]], rtol=1e-6, atol=1e-7)
        assert torch.equal(bias, reference_bias)  # never restarted: the parent's own (fused/foreach) step
    assert "beta1_power" not in optimizer.state[bias]
    steps = _element_steps(optimizer, weight)
    assert steps[1].eq(5).all() and steps[0].eq(35).all()


def test_restarting_moments_alone_oversteps_as_the_spec_pitfall_says():
    """What ElementStepAdam fixes (plasticity/resets.py's docstring): after a long run (bias corrections ≈ 1), zeroed moments
    with the tensor's
    step count make the next update lr·(1 − β₁)/√(1 − β₂)·g/|g|: 3.16× lr for β = (0.9, 0.999), 0.1× lr for (0.99, 0.99)."""
    for betas, factor in (((0.9, 0.999), 0.1 / 0.001**0.5), ((0.99, 0.99), 0.01 / 0.01**0.5)):
        (weight, _), (reference_weight, _), optimizer, ordinary, step = _twin_adams(lr=1e-3, betas=betas, eps=1e-12)
        step([torch.randn(4, 3), torch.randn(4)])
        for state in (optimizer.state[weight], ordinary.state[reference_weight]):
            state["step"].fill_(1e6)
        row = torch.zeros(4, 3, dtype=torch.bool)
        row[1] = True
        optimizer.restart(weight, row)
        for key in ("exp_avg", "exp_avg_sq"):
            ordinary.state[reference_weight][key][1] = 0.0
        before, reference_before = weight[1].detach().clone(), reference_weight[1].detach().clone()
        grads = [torch.randn(4, 3), torch.randn(4)]
        step(grads)
        sign = grads[0][1].sign()
        torch.testing.assert_close(weight[1] - before, -1e-3 * sign)
        torch.testing.assert_close(reference_weight[1] - reference_before, -1e-3 * factor * sign)


def test_per_element_steps_survive_a_state_dict_round_trip():
    (weight, bias), _, optimizer, _, step = _twin_adams(lr=1e-2)
    for _ in range(3):
        step([torch.randn(4, 3), torch.randn(4)])
    optimizer.restart(weight, torch.tensor([True, False, True])[None, :].expand(4, 3))  # columns 0 and 2
    step([torch.randn(4, 3), torch.randn(4)])
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    copies = [nn.Parameter(p.detach().clone()) for p in (weight, bias)]
    resumed = ElementStepAdam(copies, lr=1e-2)
    resumed.load_state_dict(torch.load(buffer))
    assert torch.equal(_element_steps(resumed, copies[0]), torch.tensor([1.0, 4.0, 1.0]).expand(4, 3))
    for _ in range(3):
        grads = [torch.randn(4, 3), torch.randn(4)]
        step(grads)
        for p, g in zip(copies, grads):
            p.grad = g.clone()
        resumed.step()
    assert torch.equal(copies[0], weight) and torch.equal(copies[1], bias)
    for key in ("beta1_power", "beta2_power"):
        assert torch.equal(resumed.state[copies[0]][key], optimizer.state[weight][key])


def test_restart_before_the_first_step_is_a_no_op_and_amsgrad_is_refused():
    weight = nn.Parameter(torch.randn(2, 2))
    optimizer = ElementStepAdam([weight], lr=1e-2)
    optimizer.restart(weight, torch.ones(2, 2, dtype=torch.bool))
    assert not optimizer.state.get(weight)
    with pytest.raises(ValueError, match="amsgrad"):
        ElementStepAdam([weight], lr=1e-2, amsgrad=True)
