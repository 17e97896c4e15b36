import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from agents.td3 import TwinCritic
from plasticity.diagnostics import ActivationProbe, dormant_fraction
from plasticity.network import Network
from plasticity.optimizers import adam
from plasticity.resets import full_reset, recycle_dormant, shrink_and_perturb


def _trained_mlp_with_dead_units(seed: int = 0):
    torch.manual_seed(seed)
    make = lambda: nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    net = make()
    optimizer = adam(net.parameters(), 1e-3, torch.device("cpu"))
    x = torch.randn(64, 4)
    net(x).pow(2).mean().backward()
    optimizer.step()  # creates Adam moments everywhere
    with torch.no_grad():
        net[0].bias[:5] = -50.0  # five first-layer units can never fire
    pairs = [(net[0], net[2]), (net[2], net[4])]
    return net, optimizer, Network("critic", net, optimizer, lambda batch: net(batch.obs), make, unit_pairs=pairs), x


def test_redo_keeps_the_output_and_zeroes_the_right_adam_moments():
    net, optimizer, resettable, x = _trained_mlp_with_dead_units()
    before_out = net(x).detach()
    before_moments = {id(p): optimizer.state[p]["exp_avg"].clone() for p in net.parameters()}
    probe = ActivationProbe([net[0], net[2]], net[4])
    hidden, _ = probe(lambda: net(x))
    (dormant_before,) = dormant_fraction(hidden, 0.1)  # one member's
    silent_second_layer = hidden[1].abs().mean(0) == 0

    fraction = recycle_dormant(resettable, SimpleNamespace(obs=x), tau=0.0)  # τ = 0: exactly silent units

    assert fraction >= 5 / 32 and dormant_before >= 5 / 32
    torch.testing.assert_close(net(x), before_out)  # silent units' outgoing weights are zero: output unchanged
    # outgoing weights of the silent units are zero, except rows refilled as incoming weights of silent 2nd-layer units
    assert torch.all(net[2].weight[~silent_second_layer, :5] == 0) and torch.all(net[0].bias[:5] == 0)
    assert torch.all(optimizer.state[net[0].weight]["exp_avg"][:5] == 0)
    assert torch.all(optimizer.state[net[2].weight]["exp_avg_sq"][:, :5] == 0)
    assert torch.equal(optimizer.state[net[0].weight]["exp_avg"][5:], before_moments[id(net[0].weight)][5:])
    assert dormant_fraction(probe(lambda: net(x))[0], 0.1)[0] < dormant_before


def test_redo_restarts_the_adam_steps_of_exactly_the_recycled_rows_and_columns():
    net, optimizer, resettable, x = _trained_mlp_with_dead_units()
    hidden, _ = ActivationProbe([net[0], net[2]], net[4])(lambda: net(x))
    silent = [layer.abs().mean(0) == 0 for layer in hidden]  # first layer: units 0-4 (at least)
    recycle_dormant(resettable, SimpleNamespace(obs=x), tau=0.0)
    powers = {name: optimizer.state[p].get("beta1_power") for name, p in net.named_parameters()}  # β₁^tᵢ
    restarted = {name: power == 1 for name, power in powers.items() if power is not None}  # tᵢ = 0
    assert torch.equal(restarted["0.weight"], silent[0][:, None].expand(16, 4))
    assert torch.equal(restarted["0.bias"], silent[0])
    assert torch.equal(restarted["2.weight"], silent[1][:, None] | silent[0][None, :])  # incoming rows, outgoing columns
    assert torch.equal(restarted["4.weight"], silent[1][None, :].expand(1, 16))
    assert powers["4.bias"] is None  # untouched: no per-element counts, the fused step as before
    assert all(
        torch.all(restarted[name] | (power == 0.9)) for name, power in powers.items() if power is not None
    )  # others: t = 1


def test_redo_without_per_element_steps_zeroes_moments_only_and_needs_no_element_step_adam():
    from envs.errors import UserError
    from plasticity.resets import ResetArgs, Resetter

    net, _, resettable, x = _trained_mlp_with_dead_units()
    optimizer = resettable.optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)  # PyTorch's own Adam
    net(x).pow(2).mean().backward()
    optimizer.step()
    with pytest.raises(UserError, match="no-per-element-adam-steps"):
        Resetter(ResetArgs(method="redo"), [resettable])
    resetter = Resetter(ResetArgs(method="redo", every=1, redo_tau=0.0, per_element_adam_steps=False), [resettable])
    replay = SimpleNamespace(sample=lambda size: SimpleNamespace(obs=x))
    resetter.after_update(1, replay, SimpleNamespace(scalars=lambda *a: None), 1)
    state = optimizer.state[net[0].weight]
    assert torch.all(state["exp_avg"][:5] == 0) and torch.all(state["exp_avg_sq"][:5] == 0)
    assert "beta1_power" not in state and float(state["step"]) == 1


def test_redo_on_ensemble_layers_recycles_per_member():
    torch.manual_seed(0)
    critic = TwinCritic(3, 1, (8, 8))
    optimizer = adam(critic.parameters(), 1e-3, torch.device("cpu"))
    with torch.no_grad():
        critic.layers[0].bias[1, 0, :3] = -50.0  # three dead units in entry 1 (the second critic) only
    obs, action = torch.randn(1, 32, 3), torch.randn(1, 32, 1)
    before = critic(obs, action).detach()
    member0 = [p[0].detach().clone() for p in critic.parameters()]
    hidden, _ = ActivationProbe(critic.layers[:-1], critic.layers[-1])(lambda: critic(obs, action))
    silent_second_layer = hidden[1].abs().mean(1)[1] == 0
    pairs = list(zip(critic.layers[:-1], critic.layers[1:]))
    resettable = Network(
        "critic", critic, optimizer, lambda b: critic(b.obs, b.actions), lambda: TwinCritic(3, 1, (8, 8)), unit_pairs=pairs
    )
    recycle_dormant(resettable, SimpleNamespace(obs=obs, actions=action), tau=0.0)
    torch.testing.assert_close(critic(obs, action), before)
    # outgoing rows of the three silent first-layer units are zero (except columns refilled as incoming
    # weights of silent second-layer units); member 0 had no silent unit and is untouched
    assert torch.all(critic.layers[1].weight[1, :3][:, ~silent_second_layer] == 0)
    assert all(torch.equal(p[0], q) for p, q in zip(critic.parameters(), member0))


def test_full_reset_reinitialises_drops_optimizer_state_and_rebuilds_the_target():
    net, optimizer, resettable, x = _trained_mlp_with_dead_units()
    target = copy.deepcopy(net)
    with torch.no_grad():
        target[0].weight.add_(1.0)
    resettable.target = target
    old = [p.detach().clone() for p in net.parameters()]
    torch.manual_seed(5)
    expected = resettable.rebuild()
    torch.manual_seed(5)
    full_reset(resettable)
    for p, e, o in zip(net.parameters(), expected.parameters(), old):
        assert torch.equal(p, e) and not torch.equal(p, o)
    assert all(p not in optimizer.state for p in net.parameters())
    assert all(torch.equal(t, p) for t, p in zip(target.parameters(), net.parameters()))
    assert optimizer.param_groups[0]["params"][0] is net[0].weight  # the optimiser still trains these tensors


def test_shrink_and_perturb_interpolates_towards_a_fresh_init():
    net, optimizer, resettable, x = _trained_mlp_with_dead_units()
    old = [p.detach().clone() for p in net.parameters()]
    torch.manual_seed(9)
    fresh = list(resettable.rebuild().parameters())
    torch.manual_seed(9)
    shrink_and_perturb(resettable, alpha=0.8)
    for p, o, f in zip(net.parameters(), old, fresh):
        torch.testing.assert_close(p, 0.8 * o + 0.2 * f)
    assert all(p not in optimizer.state for p in net.parameters())


@pytest.mark.parametrize(
    "agent, method", [("td3", "redo"), ("td3", "full"), ("sac_simba", "redo"), ("sac_simba", "shrink-perturb")]
)
def test_agents_run_each_reset_method_and_log_it(agent, method, tmp_path):
    import importlib

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from cleanrl_plus.config import parse_args

    module = importlib.import_module(f"agents.{agent}")
    small = (
        ["--hidden-sizes", "16", "16"]
        if agent == "td3"
        else ["--actor-width", "16", "--critic-width", "16", "--critic-blocks", "1"]
    )
    args = parse_args(
        module.Args,
        [
            "--env-id",
            "Pendulum-v1",
            "--total-timesteps",
            "400",
            "--learning-starts",
            "100",
            "--eval-every",
            "0",
            "--eval-episodes",
            "1",
            "--batch-size",
            "32",
            "--runs-dir",
            str(tmp_path),
            "--no-progress",
            "--reset.method",
            method,
            "--reset.every",
            "100",
            *small,
        ],
    )
    result = module.main(args)
    events = EventAccumulator(result["run_dir"]).Reload()
    counted = 400 if method == "full" else result["num_updates"]  # a full reset counts environment steps, the rest updates
    assert events.Scalars("plasticity/resets")[-1].value == counted // 100
    if method == "redo":
        assert "plasticity/critic_recycled_fraction" in events.Tags()["scalars"]


def _injectable(seed: int = 0):
    from cleanrl_plus.nn import mlp

    torch.manual_seed(seed)
    net = mlp(1, 3, 2, (8, 8))  # one member
    target = copy.deepcopy(net)
    optimizer = adam(net.parameters(), 1e-2, torch.device("cpu"))
    resettable = Network(
        "critic", net, optimizer, lambda b: net(b.obs), lambda: mlp(1, 3, 2, (8, 8)), target, heads=(net[-1],), unit_pairs=[]
    )
    return net, target, optimizer, resettable


def test_plasticity_injection_keeps_the_output_and_gives_the_optimiser_exactly_the_trainable_parameters():
    from plasticity.resets import InjectedHead, inject_plasticity

    net, target, optimizer, resettable = _injectable()
    x = torch.randn(1, 16, 3)
    net(x).square().mean().backward()
    optimizer.step()  # the old head has Adam state that must go
    old_head = net[-1]
    before, target_before = net(x).detach(), target(x).detach()
    inject_plasticity(resettable)
    assert isinstance(net[-1], InjectedHead) and isinstance(target[-1], InjectedHead)
    torch.testing.assert_close(net(x), before, rtol=0, atol=1e-6)
    torch.testing.assert_close(target(x), target_before, rtol=0, atol=1e-6)
    in_optimizer = {p for group in optimizer.param_groups for p in group["params"]}
    trainable = {p for p in net.parameters() if p.requires_grad}
    assert in_optimizer == trainable and not any(p.requires_grad for p in old_head.parameters())
    assert set(net[-1].fresh.parameters()) <= trainable and not set(net[-1].fresh_frozen.parameters()) & trainable
    assert not any(p in optimizer.state for p in old_head.parameters())
    frozen_weight = old_head.weight.detach().clone()
    optimizer.zero_grad()
    net(x).square().mean().backward()
    optimizer.step()
    assert torch.equal(old_head.weight, frozen_weight) and not torch.allclose(net(x), before)


def test_td3_with_injection_resumes_bit_identically(runs_dir):
    from pathlib import Path

    from agents import td3
    from cleanrl_plus.checkpoint import load_checkpoint
    from plasticity.resets import ResetArgs

    common = dict(
        env_id="Pendulum-v1",
        learning_starts=100,
        eval_every=0,
        eval_episodes=1,
        runs_dir=runs_dir,
        progress=False,
        batch_size=32,
        hidden_sizes=(16, 16),
        reset=ResetArgs(method="inject", every=100),
    )
    straight = td3.main(td3.Args(total_timesteps=400, exp_name="straight", **common))
    half = td3.main(td3.Args(total_timesteps=250, exp_name="split", **common))  # injected at update 100, then killed
    resumed = td3.main(td3.Args(total_timesteps=400, exp_name="split", resume=half["run_dir"], **common))
    a = load_checkpoint(Path(straight["run_dir"]) / "checkpoint.pt")
    b = load_checkpoint(Path(resumed["run_dir"]) / "checkpoint.pt")
    assert a["plasticity"]["resets"]["injected"] == ["critic", "actor"] == b["plasticity"]["resets"]["injected"]
    for name in ("actor", "critic", "actor_target", "critic_target"):
        assert any("fresh_frozen" in key for key in a[name])
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"


def test_injection_where_it_cannot_apply_is_a_clear_error(runs_dir):
    from agents import gtr, sac_simba
    from envs.errors import UserError
    from plasticity.resets import ResetArgs

    with pytest.raises(UserError, match="several heads"):  # SAC's actor has a mean and a log-σ head
        sac_simba.main(
            sac_simba.Args(
                env_id="Pendulum-v1", total_timesteps=10, runs_dir=runs_dir, progress=False, reset=ResetArgs(method="inject")
            )
        )
    with pytest.raises(UserError, match="anchor snapshots"):
        gtr.main(gtr.Args(env_id="CartPole-v1", runs_dir=runs_dir, reset=ResetArgs(method="inject")))


@pytest.mark.parametrize("agent", ["td3", "sac_simba"])
def test_a_full_reset_lands_after_its_steps_evaluation_and_before_its_checkpoint(agent, runs_dir):
    """Nikishin et al.'s train_dense.py evaluates at step i, then builds the new agent: the reset arm's evaluation at
    the reset step is the trained agent's, equal to the no-reset arm's (their curves part only at the next one). The
    checkpoint at that step holds the reset networks, so a run stopped there resumes as the straight one."""
    import importlib
    from pathlib import Path

    from cleanrl_plus.checkpoint import load_checkpoint
    from plasticity.resets import ResetArgs

    module = importlib.import_module(f"agents.{agent}")
    small = (
        dict(hidden_sizes=(16, 16))
        if agent == "td3"
        else dict(actor_width=16, critic_width=16, critic_blocks=1, buffer_size=10_000)
    )
    common = dict(
        env_id="Pendulum-v1", learning_starts=100, eval_every=100, eval_episodes=2, runs_dir=runs_dir, progress=False
    )
    common |= dict(batch_size=32, **small)
    reset = ResetArgs(method="full", networks="both", every=200)
    kept = module.main(module.Args(total_timesteps=300, exp_name="kept", **common))
    straight = module.main(module.Args(total_timesteps=300, exp_name="reset", reset=reset, **common))
    stopped = module.main(module.Args(total_timesteps=200, exp_name="split", reset=reset, **common))
    resumed = module.main(module.Args(total_timesteps=300, exp_name="split", reset=reset, resume=stopped["run_dir"], **common))
    evaluations = {run: dict(map(tuple, summary["eval_history"])) for run, summary in [("kept", kept), ("reset", straight)]}
    assert evaluations["reset"][200] == evaluations["kept"][200]  # the trained agent, evaluated before the reset
    assert evaluations["reset"][300] != evaluations["kept"][300]
    assert dict(map(tuple, resumed["eval_history"])) == evaluations["reset"]
    a = load_checkpoint(Path(straight["run_dir"]) / "checkpoint.pt")
    b = load_checkpoint(Path(resumed["run_dir"]) / "checkpoint.pt")
    assert a["plasticity"]["resets"]["count"] == b["plasticity"]["resets"]["count"] == 1
    for name in ("actor", "critic", "critic_target"):
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"
