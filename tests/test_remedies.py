"""Each remedy's defining property (plasticity/architecture.py, regularizers.py, cchain.py, optimizers.py, resets.py)."""

import copy
import math
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.special
import torch
import torch.nn as nn

from agents.td3 import TwinCritic
from cleanrl_plus.nn import CReLU, EnsembleLinear, FourierFeatures, NormedLinear, mlp
from plasticity.architecture import NormProjector
from plasticity.cchain import CChainArgs, ChurnReducer, ChurnTarget
from plasticity.hooks import RemedyArgs, RemedyHooks
from plasticity.network import Network
from plasticity.optimizers import TRAC, OptimArgs, adam, erfi, make_optimizer
from plasticity.regularizers import RegArgs, WeightClipper, parseval_penalty, rows_as_units
from plasticity.resets import PreactivationGradients, depth_levels, recycle_low_gradient, reset_last_layers

CPU = torch.device("cpu")


# ---- architecture ---------------------------------------------------------------------------------------------
def test_crelu_doubles_the_features_and_keeps_exactly_one_of_each_pair_active():
    z = torch.randn(64, 8)
    h = CReLU()(z)
    assert h.shape == (64, 16)
    assert torch.all((h[:, :8] > 0) ^ (h[:, 8:] > 0))  # z ≠ 0: one side of each pair fires, never both
    torch.testing.assert_close(h[:, :8] - h[:, 8:], z)  # relu(z) − relu(−z) = z: nothing is lost


def test_fourier_features_are_sin_and_cos_of_each_preactivation():
    z = torch.randn(32, 5)
    h = FourierFeatures()(z)
    assert h.shape == (32, 10)
    torch.testing.assert_close(h[:, :5], torch.sin(z))
    torch.testing.assert_close(h[:, :5].square() + h[:, 5:].square(), torch.ones(32, 5))


def test_doubling_activations_halve_the_units_and_keep_the_feature_width():
    net = mlp(1, 4, 3, (32, 32), activation="crelu")  # one member
    linears = [m for m in net if isinstance(m, EnsembleLinear)]  # weights (members, in, out)
    assert [tuple(m.weight.shape[1:]) for m in linears] == [(4, 16), (32, 16), (32, 3)]
    assert net(torch.randn(1, 5, 4)).shape == (1, 5, 3)


def test_layer_norm_normalises_each_hidden_preactivation_and_the_twin_critic_copy_path_agrees():
    layer = NormedLinear(6, 10)
    h = layer(torch.randn(128, 6) * 5 + 3)
    torch.testing.assert_close(h.mean(-1), torch.zeros(128), atol=1e-5, rtol=0)
    torch.testing.assert_close(h.var(-1, unbiased=False), torch.ones(128), atol=1e-3, rtol=0)
    critic = TwinCritic(3, 1, (8, 8), norm="layer", activation="fourier")
    with torch.no_grad():
        for norm in (critic.layers[0].norm, critic.layers[1].norm):
            norm.weight.uniform_(0.5, 2.0)  # distinct affines per copy, so a wrong index in forward_copy() shows
            norm.bias.normal_()
    obs, action = torch.randn(1, 7, 3), torch.randn(1, 7, 1)  # one member
    torch.testing.assert_close(critic.q1(obs, action), critic(obs, action)[:, 0])


def test_nap_keeps_every_weight_norm_at_its_initial_value():
    torch.manual_seed(0)
    net = nn.Sequential(EnsembleLinear(2, 4, 16), nn.ReLU(), EnsembleLinear(2, 16, 1))
    initial = [torch.linalg.vector_norm(layer.weight, dim=(1, 2)) for layer in (net[0], net[2])]
    projector = NormProjector(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=1.0)
    for _ in range(5):
        optimizer.zero_grad()
        net(torch.randn(2, 32, 4)).square().mean().backward()
        optimizer.step()
        projector.project()
    for layer, norm in zip((net[0], net[2]), initial):
        torch.testing.assert_close(torch.linalg.vector_norm(layer.weight, dim=(1, 2)), norm)  # per member
    assert not torch.equal(net[0].weight, copy.deepcopy(net)[0].weight * 0)  # sanity: weights did move direction


# ---- regularisers ---------------------------------------------------------------------------------------------
def test_parseval_is_zero_for_orthogonal_rows_and_its_gradient_is_4_gram_minus_si_times_w():
    q = torch.linalg.qr(torch.randn(8, 8))[0][:5]  # 5 orthonormal rows in R^8
    assert parseval_penalty([q], 1.0) < 1e-10
    assert parseval_penalty([math.sqrt(2) * q], 2.0) < 1e-10  # WWᵀ = s·I with s = 2
    w = torch.randn(5, 8, requires_grad=True)
    parseval_penalty([w], 0.5).backward()
    expected = 4 * (w @ w.T - 0.5 * torch.eye(5)) @ w
    torch.testing.assert_close(w.grad, expected.detach())
    ensemble = EnsembleLinear(2, 8, 5)
    with torch.no_grad():
        ensemble.weight.copy_(torch.stack([q.T, q.T]))  # stored (E, in, out): rows are units after the transpose
    assert parseval_penalty([rows_as_units(ensemble, True)], 1.0) < 1e-10


def _hooks(net: nn.Module, optimizer, **remedies) -> RemedyHooks:
    args = RemedyArgs(**remedies)
    return RemedyHooks(args, [Network("net", net, optimizer, lambda b: net(b), lambda: copy.deepcopy(net), heads=(net[-1],))])


def test_l2_init_is_zero_at_initialisation_and_pulls_towards_theta0():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    hooks = _hooks(net, adam(net.parameters(), 1e-3, CPU), reg=RegArgs(l2_init=0.1))
    assert hooks.loss("net", torch.zeros(())) == 0
    theta0 = [p.detach().clone() for p in net.parameters()]
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p))
    loss = hooks.loss("net", torch.zeros(()))
    loss.backward()
    for p, p0 in zip(net.parameters(), theta0):
        torch.testing.assert_close(p.grad, 0.2 * (p.detach() - p0))  # ∇ λ‖θ − θ₀‖² = 2λ(θ − θ₀)


def test_l2_adds_lambda_times_the_sum_of_squares():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    hooks = _hooks(net, adam(net.parameters(), 1e-3, CPU), reg=RegArgs(l2=0.01))
    expected = 0.01 * sum(p.square().sum() for p in net.parameters()) + 1.5
    torch.testing.assert_close(hooks.loss("net", torch.tensor([1.5])), expected.reshape(1))  # one loss per member


def test_weight_clipping_keeps_every_parameter_within_kappa_times_the_initial_bound():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    bounds = [2.0 / math.sqrt(layer.in_features) for layer in (net[0], net[2])]  # κ·(PyTorch's init bound 1/√fan_in)
    clipper = WeightClipper(net, kappa=2.0)
    optimizer = torch.optim.SGD(net.parameters(), lr=100.0)
    optimizer.zero_grad()
    net(torch.randn(16, 4)).sum().backward()
    optimizer.step()
    assert any(layer.weight.abs().max() > bound for layer, bound in zip((net[0], net[2]), bounds))  # the step overshot
    clipper.clip()
    for layer, bound in zip((net[0], net[2]), bounds):
        assert layer.weight.abs().max() <= bound + 1e-7 and layer.bias.abs().max() <= bound + 1e-7
        assert math.isclose(float(layer.weight.detach().abs().max()), bound, rel_tol=1e-6)  # clipped exactly to the bound


# ---- C-CHAIN ---------------------------------------------------------------------------------------------------
def test_cchain_penalises_the_output_change_since_the_previous_update_with_the_official_coefficients():
    net = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        net.weight.fill_(1.0)
    reducer = ChurnReducer(
        CChainArgs(enabled=True, relative_scale=0.1, initial_coef=50.0, warmup=2), net, ChurnTarget(lambda b: net(b))
    )
    x = torch.tensor([[[1.0], [2.0]]])  # one member's batch; its losses (1,)
    assert reducer.loss(torch.tensor([3.0]), x) == 0  # first update: no previous parameters yet
    reducer.after_step()
    with torch.no_grad():
        net.weight.fill_(1.5)  # "an update": f changes by 0.5·x
    churn = 0.25 * (1.0 + 4.0) / 2
    torch.testing.assert_close(reducer.loss(torch.tensor([3.0]), x), torch.tensor([50.0 * churn]))  # warm-up coefficient
    reducer.after_step()
    # after the 2nd update (the warm-up): c = ρ·mean|L| / mean churn, the means over every update so far
    torch.testing.assert_close(reducer.coef, torch.tensor([0.1 * 3.0 / churn]))
    with torch.no_grad():
        net.weight.fill_(2.5)  # the change since the *previous* update (1.5 → 2.5), not since init
    loss = reducer.loss(torch.tensor([-2.0]), x)
    churn2 = 1.0 * (1.0 + 4.0) / 2
    torch.testing.assert_close(loss, torch.tensor([0.1 * 3.0 / churn * churn2]))  # rescaled after the update before
    loss.sum().backward()
    reducer.after_step()
    torch.testing.assert_close(reducer.coef, torch.tensor([0.1 * (3.0 + 3.0 + 2.0) / 3 / ((churn + churn2) / 2)]))
    torch.testing.assert_close(net.weight.grad, 0.1 * 3.0 / churn * 2 * (1.0 * 1 + 4.0 * 1) / 2 * torch.ones(1, 1))


def test_cchain_schedule_moves_on_without_a_host_decision():
    """after_step (recording and rescaling) compiles as one graph: no branch on a device value, so a captured update
    replays the schedule instead of baking in the branch taken at capture."""

    def run(compile_step: bool) -> list[float]:
        net = nn.Linear(2, 1)
        reducer = ChurnReducer(CChainArgs(enabled=True, warmup=2, window=3), net, ChurnTarget(lambda b: net(b)))
        step = torch.compile(reducer.after_step, fullgraph=True, backend="aot_eager") if compile_step else reducer.after_step
        coefficients = []
        for update in range(5):
            reducer.loss(torch.tensor(1.0 + update), torch.ones(4, 2))
            with torch.no_grad():
                net.weight.add_(0.1)
            step()
            coefficients.append(float(reducer.coef))
        return coefficients

    eager = run(False)
    assert eager[0] == 50.0 != eager[1]  # rescaled once the warm-up of two updates is over
    assert run(True) == pytest.approx(eager, rel=1e-5)


# ---- TRAC -------------------------------------------------------------------------------------------------------
def test_erfi_matches_scipy():
    x = torch.tensor([-7.5, -2.0, -0.3, 0.0, 0.4, 1.0, 3.3, 9.0])
    np.testing.assert_allclose(erfi(x).numpy(), scipy.special.erfi(x.double().numpy()), rtol=1e-12)


def test_trac_scale_follows_its_update_rule_on_a_constructed_sequence():
    """1-D parameter, SGD base (update −lr·g), a fixed gradient sequence: replay the rule in numpy with scipy's erfi."""
    theta = nn.Parameter(torch.tensor([0.5], dtype=torch.float64))
    trac = TRAC(torch.optim.SGD([theta], lr=0.1))
    betas = np.array([0.9, 0.99, 0.999, 0.9999, 0.99999, 0.999999])
    variance, sigma, s = np.zeros(6), np.full(6, 1e-8), np.zeros(6)
    reference, played = 0.5, 0.5
    for g in [1.0, 2.0, -0.5, 1.5, 1.0, 3.0, -1.0, 2.0]:
        theta.grad = torch.tensor([g], dtype=torch.float64)
        trac.step()
        offset = (played - reference) / (s.sum() + 1e-8)
        h = g * offset
        offset = offset - 0.1 * g
        variance = betas**2 * variance + h**2
        sigma = betas * sigma - h
        s = 1e-8 / scipy.special.erfi(1 / math.sqrt(2)) * scipy.special.erfi(sigma / (math.sqrt(2) * np.sqrt(variance) + 1e-8))
        played = reference + max(s.sum(), 0.0) * offset
        assert math.isclose(float(trac.scale), max(s.sum(), 0.0), rel_tol=1e-9, abs_tol=1e-30)
        assert math.isclose(float(theta), played, rel_tol=1e-9)
    assert float(trac.scale) > 0  # the gradients mostly agree: the tuner has grown the scale


# ---- Kron -------------------------------------------------------------------------------------------------------


def _flags(optim: OptimArgs, learning_rate: float):
    """The agent flags make_optimizer reads."""

    return SimpleNamespace(optim=optim, learning_rate=learning_rate, cudagraphs=False)


def test_kron_optimiser_learns_a_regression_and_round_trips_its_state():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = make_optimizer(_flags(OptimArgs(name="kron"), 1e-2), net.parameters(), CPU)
    x = torch.randn(128, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0]])
    losses = []
    for _ in range(60):
        loss = (net(x) - y).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.1 * losses[0]
    copy_ = make_optimizer(_flags(OptimArgs(name="kron"), 3e-3), net.parameters(), CPU)
    copy_.load_state_dict(optimizer.state_dict())


# ---- resets -----------------------------------------------------------------------------------------------------
def _resettable(seed: int = 0):
    torch.manual_seed(seed)
    make = lambda: nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    net = make()
    target = copy.deepcopy(net)
    optimizer = adam(net.parameters(), 1e-2, CPU)
    net(torch.randn(16, 3)).square().mean().backward()
    optimizer.step()
    pairs = [(net[0], net[2]), (net[2], net[4])]
    return (
        net,
        optimizer,
        target,
        make,
        Network("critic", net, optimizer, lambda b: net(b.obs), make, target, unit_pairs=pairs),
    )


def test_layer_reset_equals_a_fresh_init_of_exactly_the_chosen_layers_with_their_optimiser_state_dropped():
    net, optimizer, target, make, resettable = _resettable()
    before = copy.deepcopy(net.state_dict())
    torch.manual_seed(123)
    fresh = make()  # what reset_last_layers will build under the same seed
    torch.manual_seed(123)
    chosen = reset_last_layers(resettable, 2)
    assert chosen == [net[2], net[4]]
    for index in (2, 4):
        for key in ("weight", "bias"):
            assert torch.equal(getattr(net[index], key), getattr(fresh[index], key))
            assert torch.equal(getattr(target[index], key), getattr(fresh[index], key))  # the target follows
            assert getattr(net[index], key) not in optimizer.state  # fresh Adam moments and step
    assert torch.equal(net[0].weight, before["0.weight"]) and torch.equal(net[0].bias, before["0.bias"])
    assert net[0].weight in optimizer.state  # untouched layers keep their optimiser state


def test_layer_reset_treats_sibling_heads_as_one_layer():
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.torso, self.mean, self.log_std = nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(4, 2)

    net = TwoHeads()
    resettable = Network(
        "actor", net, adam(net.parameters(), 1e-3, CPU), lambda b: None, TwoHeads, heads=(net.mean, net.log_std), unit_pairs=[]
    )
    assert depth_levels(resettable) == [[net.torso], [net.mean, net.log_std]]
    assert reset_last_layers(resettable, 1) == [net.mean, net.log_std]


def test_regrama_recycles_exactly_the_units_whose_preactivation_gradients_vanished_and_restarts_the_sums():
    net, optimizer, _, _, resettable = _resettable()
    gradients = PreactivationGradients([net[0], net[2]])
    with torch.no_grad():
        gradients.sums[net[0]].fill_(3.0)  # every unit learns …
        gradients.sums[net[0]][[1, 6]] = 0.0  # … except units 1 and 6 of the first layer
        gradients.sums[net[2]].fill_(2.0)
    first_before, second_before = net[0].weight.detach().clone(), net[2].weight.detach().clone()
    fraction = recycle_low_gradient(resettable, gradients, tau=0.01)
    assert fraction == 2 / 16
    changed = (net[0].weight != first_before).any(dim=1)
    assert changed.tolist() == [i in (1, 6) for i in range(8)]  # fresh incoming weights of exactly those units
    assert torch.all(net[2].weight[:, [1, 6]] == 0)  # their outgoing weights are zeroed: the output is kept
    assert torch.equal(net[2].weight[:, [0, 2, 3, 4, 5, 7]], second_before[:, [0, 2, 3, 4, 5, 7]])
    assert all(not sums.any() for sums in gradients.sums.values())  # the next interval starts from zero
    assert recycle_low_gradient(resettable, gradients, tau=0.01) == 0  # no gradient since: nothing is judged


def test_grama_scores_of_an_ensemble_layer_are_per_member_and_per_unit():
    layer = EnsembleLinear(2, 3, 4)  # pre-activations (E, B, H)
    gradients = PreactivationGradients([layer])
    x = torch.randn(2, 5, 3)
    upstream = torch.ones(2, 5, 4)
    upstream[1, :, 2] = 0.0  # member 1's unit 2 gets no gradient
    layer(x).backward(upstream)
    scores = gradients.scores(layer)
    assert scores.shape == (2, 4)
    assert (scores <= 0.01).nonzero().tolist() == [[1, 2]]
    torch.testing.assert_close(scores[0], torch.ones(4))


def test_simba_blocks_take_the_doubling_activation_with_half_the_expansion_units():
    from cleanrl_plus.simba import SimbaEncoder

    encoder = SimbaEncoder(2, 5, 8, 1, activation="crelu")
    block = encoder.blocks[0]
    assert block.expand.weight.shape == (2, 8, 16) and block.contract.weight.shape == (
        2,
        32,
        8,
    )  # 4d = 32 features from 16 units
    assert isinstance(block.activation, CReLU) and encoder(torch.randn(2, 3, 5)).shape == (2, 3, 8)
