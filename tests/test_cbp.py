"""Continual backprop (plasticity/resets.py): replacement counts, maturity, the output-preserving replacement, Adam
moments, ensemble layers, exact resume, and both agent families running it."""

import copy
import importlib
from typing import NamedTuple

import pytest
import torch
import torch.nn as nn

from agents.td3 import TwinCritic
from plasticity.diagnostics import ntk_report
from plasticity.network import Network
from plasticity.optimizers import adam
from plasticity.resets import ResetArgs, Resetter


class Probe(NamedTuple):
    obs: torch.Tensor


class RecordingLogger:
    def __init__(self, log_every: int = 1) -> None:
        self.log_every, self.logged = log_every, []

    def scalars(self, values, step) -> None:
        self.logged.append((step, dict(values)))


def _mlp(seed: int = 0, width: int = 16):
    torch.manual_seed(seed)
    make = lambda: nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 2))
    net = make()
    optimizer = adam(net.parameters(), 1e-2, torch.device("cpu"))
    resettable = Network(
        "critic", net, optimizer, lambda batch: net(batch), make, unit_pairs=[(net[0], net[2]), (net[2], net[4])]
    )
    return net, optimizer, resettable


def _cbp(resettable: Network, rate: float, maturity: int) -> Resetter:
    return Resetter(ResetArgs(method="cbp", cbp_replacement_rate=rate, cbp_maturity=maturity), [resettable])


def _train_step(net: nn.Module, optimizer, x: torch.Tensor) -> None:
    optimizer.zero_grad()
    net(x).square().mean().backward()  # the forward the hooks read
    optimizer.step()


def test_cbp_replaces_rate_times_mature_units_accumulated_and_never_an_immature_one():
    net, optimizer, resettable = _mlp()
    resetter = _cbp(resettable, rate=0.1, maturity=5)
    layers = resetter.cbp["critic"].layers
    owed = [0.0, 0.0]
    counts = []
    for update in range(1, 41):
        ages_before = [stats.age.clone() for stats in layers]
        _train_step(net, optimizer, torch.randn(32, 4))
        resetter.after_update(update, None, RecordingLogger(0), update)
        step_counts = []
        for index, stats in enumerate(layers):
            aged = ages_before[index] + 1
            mature = aged > 5
            owed[index] += 0.1 * int(mature.sum())  # the test's own bookkeeping, from the device ages
            expected = int(owed[index])
            owed[index] -= expected
            replaced = stats.age == 0
            assert int(replaced.sum()) == expected, f"update {update}, layer {index}"
            assert not (replaced & ~mature).any(), "an immature unit was replaced"
            assert stats.mature_units(5) == int((stats.age > 5).sum())  # the host's count agrees with the device's ages
            step_counts.append(expected)
        counts.append(step_counts)
    assert counts[:5] == [[0, 0]] * 5  # nobody is older than the maturity yet
    assert counts[5] == [1, 1] and counts[6] == [2, 2]  # 16·0.1 = 1.6 → 1 (0.6 owed); 0.6 + 15·0.1 = 2.1 → 2
    assert resetter.cbp["critic"].replaced == sum(map(sum, counts)) > 20


def test_replacement_zeroes_outgoing_weights_and_keeps_the_output_when_activations_are_constant():
    net, optimizer, resettable = _mlp(width=8)
    with torch.no_grad():  # first-layer units ignore the input: h = relu(b) is constant, and so is every later unit
        net[0].weight.zero_()
        net[0].bias.uniform_(0.5, 1.5)
        net[2].bias.add_(1.0)
    x = torch.randn(64, 4)
    before = net(x).detach()
    resetter = _cbp(resettable, rate=0.2, maturity=3)
    stats_in, stats_second = resetter.cbp["critic"].layers
    replaced_any = False
    for update in range(1, 16):
        net(torch.randn(32, 4)).sum()  # a training forward (grad on) without an optimiser step: weights only change by CBP
        resetter.after_update(update, None, RecordingLogger(0), update)
        torch.testing.assert_close(net(x), before, rtol=0, atol=1e-5)  # the next-layer bias took over f̄ᵢ·w_out[:, i]
        replaced = stats_in.age[0] == 0
        if replaced.any():
            replaced_any = True
            refilled = stats_second.age[0] == 0  # second-layer units replaced now got fresh incoming rows
            assert torch.all(net[2].weight[~refilled][:, replaced] == 0) and torch.all(net[0].bias[replaced] == 0)
            assert torch.all(net[0].weight[replaced].abs().sum(dim=1) > 0)  # fresh incoming weights (they were 0)
            assert torch.all(stats_in.utility[0, replaced] == 0) and torch.all(stats_in.mean_activation[0, replaced] == 0)
    assert replaced_any


def test_adam_moments_of_exactly_the_replaced_entries_are_zeroed():
    net, optimizer, resettable = _mlp()
    resetter = _cbp(resettable, rate=0.1, maturity=5)
    stats = resetter.cbp["critic"].layers[0]
    for update in range(1, 6):
        _train_step(net, optimizer, torch.randn(32, 4))
        resetter.after_update(update, None, RecordingLogger(0), update)
    _train_step(net, optimizer, torch.randn(32, 4))
    moments = {
        name: {key: optimizer.state[p][key].clone() for key in ("exp_avg", "exp_avg_sq")} for name, p in net.named_parameters()
    }
    resetter.after_update(6, None, RecordingLogger(0), 6)  # first mature step: 16·0.1 → one unit per layer
    replaced = stats.age[0] == 0
    assert int(replaced.sum()) == 1
    for key in ("exp_avg", "exp_avg_sq"):
        state = {name: optimizer.state[p][key] for name, p in net.named_parameters()}
        assert torch.all(state["0.weight"][replaced] == 0) and torch.all(state["0.bias"][replaced] == 0)
        assert torch.all(state["2.weight"][:, replaced] == 0)
        assert torch.equal(state["0.weight"][~replaced], moments["0.weight"][key][~replaced])
        assert torch.equal(state["0.bias"][~replaced], moments["0.bias"][key][~replaced])
        assert torch.equal(state["4.bias"], moments["4.bias"][key])  # the compensated bias keeps its moments
    powers = {name: optimizer.state[p].get("beta1_power") for name, p in net.named_parameters()}  # β₁^tᵢ
    restarted = {name: power == 1 for name, power in powers.items() if power is not None}  # tᵢ = 0: fresh bias correction
    replaced_second = resetter.cbp["critic"].layers[1].age[0] == 0
    assert torch.equal(restarted["0.weight"], replaced[:, None].expand(16, 4))
    assert torch.equal(restarted["0.bias"], replaced)
    assert torch.equal(restarted["2.weight"], replaced_second[:, None] | replaced[None, :])
    assert torch.equal(restarted["4.weight"], replaced_second[None, :].expand(2, 16))
    six_steps = torch.pow(0.9, torch.tensor(6.0))  # the others keep the tensor's t = 6
    assert all(torch.all(restarted[name] | (power == six_steps)) for name, power in powers.items() if power is not None)
    assert powers["4.bias"] is None


def test_cbp_on_ensemble_layers_replaces_each_members_own_least_useful_unit():
    torch.manual_seed(0)
    critic = TwinCritic(3, 1, (8, 8))
    optimizer = adam(critic.parameters(), 1e-3, torch.device("cpu"))
    with torch.no_grad():  # constant first-layer units; member 0's unit 2 and member 1's unit 5 barely reach the output
        critic.layers[0].weight.zero_()
        critic.layers[0].bias.uniform_(0.5, 1.5)
        critic.layers[1].weight[0, 2].mul_(1e-3)
        critic.layers[1].weight[1, 5].mul_(1e-3)
    obs, action = torch.randn(1, 32, 3), torch.randn(1, 32, 1)  # one member: its two critics are the ensemble's entries
    critic(obs, action).sum().backward()
    optimizer.step()  # Adam state everywhere
    with torch.no_grad():
        critic.layers[0].weight.zero_()
    before = critic(obs, action).detach()
    moments = optimizer.state[critic.layers[1].weight]["exp_avg"].clone()
    pairs = list(zip(critic.layers[:-1], critic.layers[1:]))
    resettable = Network(
        "critic", critic, optimizer, lambda b: critic(b.obs, b.actions), lambda: TwinCritic(3, 1, (8, 8)), unit_pairs=pairs
    )
    resetter = Resetter(ResetArgs(method="cbp", cbp_replacement_rate=0.125, cbp_maturity=4, networks="critic"), [resettable])
    stats = resetter.cbp["critic"].layers[0]
    for update in range(1, 6):
        critic(obs, action).sum()
        resetter.after_update(update, None, RecordingLogger(0), update)
    replaced = stats.age == 0  # (members, H)
    kept = resetter.cbp["critic"].layers[1].age != 0  # columns not refilled as incoming weights of new second-layer units
    assert replaced.sum(dim=1).tolist() == [1, 1] and replaced[0, 2] and replaced[1, 5]
    torch.testing.assert_close(critic(obs, action), before, rtol=0, atol=1e-5)
    weight = critic.layers[1].weight  # (members, H, out)
    assert torch.all(weight[0, 2][kept[0]] == 0) and torch.all(weight[1, 5][kept[1]] == 0)
    assert torch.all(critic.layers[0].bias[0, 0, 2] == 0) and torch.all(critic.layers[0].weight[0, :, 2] != 0)
    exp_avg = optimizer.state[weight]["exp_avg"]
    assert torch.all(exp_avg[0, 2] == 0) and torch.all(exp_avg[1, 5] == 0)
    assert torch.equal(exp_avg[0, 5][kept[0]], moments[0, 5][kept[0]])  # member 0's unit 5 is member 1's choice, not 0's
    assert torch.equal(exp_avg[1, 2][kept[1]], moments[1, 2][kept[1]])


def test_cbp_state_round_trip_continues_identically_and_counts_are_logged_without_reading_the_device():
    def run(updates, start=1, state=None, seed=0):
        net, optimizer, resettable = _mlp(seed)
        resetter = _cbp(resettable, rate=0.1, maturity=5)
        if state is not None:
            resetter.load_state_dict(state["resetter"])
            net.load_state_dict(state["net"])
            optimizer.load_state_dict(state["optimizer"])
        logger = RecordingLogger(log_every=4)
        for update in range(start, start + updates):
            torch.manual_seed(update)  # the same batch and the same fresh weights in both runs
            _train_step(net, optimizer, torch.randn(32, 4))
            resetter.after_update(update, None, logger, update)
        snapshot = {
            "resetter": copy.deepcopy(resetter.state_dict()),
            "net": copy.deepcopy(net.state_dict()),
            "optimizer": copy.deepcopy(optimizer.state_dict()),
        }
        return snapshot, logger.logged

    straight, logged = run(28)
    half, _ = run(12)
    resumed, logged_after_resume = run(16, start=13, state=half, seed=1)  # other initial weights: all must come from the state
    for key, value in straight["net"].items():
        assert torch.equal(value, resumed["net"][key]), key
    for a, b in zip(straight["resetter"]["cbp"]["critic"], resumed["resetter"]["cbp"]["critic"]):
        for key in ("birth", "mean_activation", "utility"):
            assert torch.equal(a[key], b[key]), key
        assert (a["steps"], a["owed"], a["recent"], a["replaced"]) == (b["steps"], b["owed"], b["recent"], b["replaced"])
    assert [step for step, _ in logged] == [4, 8, 12, 16, 20, 24, 28]
    assert logged[-1] == logged_after_resume[-1]
    assert (
        logged[-1][1]["plasticity/cbp_replaced"]
        == straight["resetter"]["cbp"]["critic"][0]["replaced"] + straight["resetter"]["cbp"]["critic"][1]["replaced"]
        > 0
    )


def test_cbp_ignores_forwards_that_do_not_train_and_networks_that_did_not_update():
    net, optimizer, resettable = _mlp()
    resetter = _cbp(resettable, rate=0.1, maturity=5)
    stats = resetter.cbp["critic"].layers[0]
    with torch.no_grad():
        net(torch.randn(8, 4))  # acting / target / probe forwards
    copy.deepcopy(net)(torch.randn(8, 4)).sum()  # a copy of the network (GTR's snapshot evaluator)
    ntk_report("critic", net, lambda b: net(b.obs), Probe(torch.randn(1, 4, 4)), max_params=10**6)  # per-sample gradients
    resetter.after_update(1, None, RecordingLogger(0), 1)
    assert stats.steps == 0 and stats.samples == 0  # nothing trained: no ageing
    net(torch.randn(8, 4)).sum()
    net(torch.randn(24, 4)).sum()
    assert stats.samples == 32
    resetter.after_update(2, None, RecordingLogger(0), 2)
    assert stats.steps == 1 and int(stats.age.max()) == 1


@pytest.mark.parametrize("agent", ["td3", "ppo"])
def test_agents_run_cbp_and_the_ntk_and_churn_diagnostics(agent, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from cleanrl_plus.checkpoint import load_checkpoint
    from cleanrl_plus.config import parse_args

    module = importlib.import_module(f"agents.{agent}")
    # PPO logs at its first minibatch update after crossing a log step: two iterations, so the first one's count shows
    extra = (
        ["--learning-starts", "300", "--total-timesteps", "600"]
        if agent == "td3"
        else ["--net.activation", "relu", "--num-steps", "600", "--total-timesteps", "1200"]
    )
    args = parse_args(
        module.Args,
        [
            "--env-id",
            "Pendulum-v1",
            "--reset.method",
            "cbp",
            "--reset.cbp-maturity",
            "50",
            "--threads",
            "1",
            "--no-progress",
            "--eval-every",
            "0",
            "--eval-episodes",
            "1",
            "--log-every",
            "100",
            "--runs-dir",
            str(tmp_path),
            "--diagnostics.ntk-every",
            "100",
            "--diagnostics.churn-every",
            "100",
            *extra,
        ],
    )
    result = module.main(args)
    events = EventAccumulator(result["run_dir"]).Reload()
    replaced = events.Scalars("plasticity/cbp_replaced")[-1].value
    cbp_state = load_checkpoint(f"{result['run_dir']}/checkpoint.pt")["plasticity"]["resets"]["cbp"]
    # units of one member: a layer's count is per ensemble entry, and TD3's twin critics are two entries per member
    entries = {"critic": 2} if agent == "td3" else {}
    total = sum(layer["replaced"] * entries.get(name, 1) for name, layers in cbp_state.items() for layer in layers)
    assert 0 < replaced <= total and (agent != "td3" or replaced == total)
    assert events.Scalars("plasticity/actor_cbp_replaced")[-1].value > 0
    policy = "actor" if agent == "td3" else "policy"
    for tag in ("critic_ntk_rank", f"{policy}_ntk_effective_rank", "critic_churn", f"{policy}_churn"):
        assert len(events.Scalars(f"plasticity/{tag}")) == result["num_updates"] // 100, tag
    assert events.Scalars(f"plasticity/{policy}_churn")[-1].value > 0  # TD3: update 300 trains the delayed actor too
    kl_tags = {tag for tag in events.Tags()["scalars"] if tag.endswith("kl_churn")}
    assert kl_tags == (
        set() if agent == "td3" else {"plasticity/policy_kl_churn"}
    )  # PPO's Gaussian policy; TD3 is deterministic
    if agent == "ppo":
        assert events.Scalars("plasticity/policy_kl_churn")[-1].value > 0


def test_cbp_needs_relu_units():
    from agents import ppo
    from envs.errors import UserError

    with pytest.raises(UserError, match="CBP replaces ReLU units"):
        ppo.main(ppo.Args(env_id="Pendulum-v1", total_timesteps=10, progress=False, reset=ResetArgs(method="cbp")))


def test_td3_with_cbp_resumes_bit_identically(runs_dir):
    from pathlib import Path

    from agents import td3
    from cleanrl_plus.checkpoint import load_checkpoint

    common = dict(
        env_id="Pendulum-v1",
        learning_starts=100,
        eval_every=0,
        eval_episodes=1,
        runs_dir=runs_dir,
        progress=False,
        batch_size=32,
        hidden_sizes=(16, 16),
        reset=ResetArgs(method="cbp", cbp_maturity=20, cbp_replacement_rate=0.02),
    )
    straight = td3.main(td3.Args(total_timesteps=400, exp_name="straight", **common))
    half = td3.main(td3.Args(total_timesteps=250, exp_name="split", **common))  # killed between replacements
    resumed = td3.main(td3.Args(total_timesteps=400, exp_name="split", resume=half["run_dir"], **common))
    a = load_checkpoint(Path(straight["run_dir"]) / "checkpoint.pt")
    b = load_checkpoint(Path(resumed["run_dir"]) / "checkpoint.pt")
    for name in ("actor", "critic", "actor_target", "critic_target"):
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"
    for network in ("critic", "actor"):
        for layer_a, layer_b in zip(a["plasticity"]["resets"]["cbp"][network], b["plasticity"]["resets"]["cbp"][network]):
            assert all(torch.equal(layer_a[k], layer_b[k]) for k in ("birth", "mean_activation", "utility"))
            assert layer_a["replaced"] == layer_b["replaced"] and layer_a["steps"] == layer_b["steps"]
    assert sum(layer["replaced"] for layer in a["plasticity"]["resets"]["cbp"]["critic"]) > 10
