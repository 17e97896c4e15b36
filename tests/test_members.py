"""Several seeds in one process (cleanrl_plus.members): a member of a group is the one-seed run of its seed, and no
member's numbers depend on another's.

The harness trains a small regression network through `Plasticity` with every remedy family, once as a group of three
members and once per seed alone, and compares each member with its own run. A remedy that reduced over all members (a
global gradient norm, one penalty, one C-CHAIN coefficient, one TRAC scale, one dormant mask) would make the group's
members differ from their runs.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import pytest
import torch
import torch.nn as nn
from conftest import OnTheGpu

from agents import ppo
from cleanrl_plus.members import Members, drawing_from, group_state, member_state
from cleanrl_plus.nn import EnsembleLinear
from cleanrl_plus.normalization import RunningMeanStd
from cleanrl_plus.policy import make_actor_critic
from plasticity import Network, Plasticity
from plasticity.optimizers import adam, clip_each_members_gradient, clip_grad_norm_per_member

SEEDS = (3, 11, 5)


def small_net(members: int) -> nn.Sequential:
    return nn.Sequential(
        EnsembleLinear(members, 4, 16), nn.ReLU(), EnsembleLinear(members, 16, 16), nn.ReLU(), EnsembleLinear(members, 16, 2)
    )


class Sample(NamedTuple):
    obs: torch.Tensor
    targets: torch.Tensor


class Regression:
    """Each member's data set (drawn from its seed alone) and batches from its own generator: the `source` remedies
    sample probe, reference and ReDo batches from."""

    def __init__(self, members: Members) -> None:
        data = [torch.randn(64, 4, generator=torch.Generator().manual_seed(1000 + seed)) for seed in members.seeds]
        self.x = torch.stack(data)
        self.y = torch.stack([torch.tanh(x @ torch.ones(4, 2) * 3) + 0.1 * x[:, :2] for x in data])
        self.members = members
        self.rows = torch.arange(len(members)).unsqueeze(1)

    def sample(self, batch_size: int) -> Sample:
        index = self.members.randint(self.x.shape[1], batch_size)
        return Sample(self.x[self.rows, index], self.y[self.rows, index])


class Recorder:
    """A logger that keeps what it was given."""

    log_every = 1

    def __init__(self) -> None:
        self.logged: list[dict] = []

    def scalars(self, values: dict, step: int) -> None:
        self.logged.append(dict(values))


def train(seeds: tuple[int, ...], flags: dict, updates: int = 60, lr: float = 3e-3, scale: dict[int, float] | None = None):
    """Train the small network on each member's regression for `updates` updates; returns (network, logged)."""
    args = ppo.Args()
    for path, value in flags.items():
        owner = args
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        setattr(owner, name, value)
    members = Members(seeds)
    K = len(members)
    new_net = lambda: members.build(small_net)
    net = new_net()
    optimizer = adam(net.parameters(), lr, torch.device("cpu"))
    source = Regression(members)
    if scale:  # a member whose targets are scaled: its losses and gradients are larger, nothing else may change
        for k, factor in scale.items():
            source.y[k] *= factor
    network = Network(
        "critic", net, optimizer, lambda batch: net(batch.obs), new_net, hidden=[net[0], net[2]], heads=(net[4],)
    )
    logger = Recorder()
    plasticity = Plasticity(args, network, logger=logger, members=K)
    for update in range(1, updates + 1):
        batch = source.sample(16)
        loss = (net(batch.obs) - batch.targets).square().mean(dim=(1, 2))
        loss = plasticity.loss("critic", loss, plasticity.reference_batch(source, 16))
        optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        clip_each_members_gradient(optimizer, 0.5, K)
        plasticity.step("critic")
        plasticity.after_update(update, source, update)
        logger.logged.append({key: value.clone() for key, value in plasticity.report().items()})
    return net, logger.logged


REMEDIES = {
    "none": {},
    "l2": {"reg.l2": 1e-2},
    "l2-init": {"reg.l2_init": 1e-1},
    "parseval": {"reg.parseval": 1e-2},
    "weight-clipping": {"clip.kappa": 1.0},
    "c-chain": {"cchain.enabled": True, "cchain.warmup": 5, "cchain.window": 10},
    "trac": {"optim.trac": True},
    "redo": {"reset.method": "redo", "reset.every": 20, "reset.redo_tau": 0.5, "reset.redo_batch": 32},
    "regrama": {"reset.method": "regrama", "reset.every": 20, "reset.regrama_tau": 0.5},
    "cbp": {"reset.method": "cbp", "reset.cbp_maturity": 10, "reset.cbp_replacement_rate": 0.05},
    "full-reset": {"reset.method": "full", "reset.every": 25},
    "shrink-perturb": {"reset.method": "shrink-perturb", "reset.every": 25},
    "layer-reset": {"reset.method": "layers", "reset.every": 25},
    "inject": {"reset.method": "inject", "reset.every": 25},
    "diagnostics": {"diagnostics.every": 20, "diagnostics.ntk_every": 30, "diagnostics.ntk_batch": 4},
}


def member_parameters(net: nn.Module, k: int, count: int) -> dict[str, torch.Tensor]:
    return member_state(net.state_dict(), k, count)


@pytest.mark.parametrize("remedy", sorted(REMEDIES))
def test_each_member_of_a_group_trains_as_its_own_one_seed_run(remedy):
    """Member k of a group of three ends where a group of one of its seed ends, with every remedy family; the
    diagnostics and remedy reports (per member) match too."""
    group, group_logged = train(SEEDS, REMEDIES[remedy])
    for k, seed in enumerate(SEEDS):
        single, single_logged = train((seed,), REMEDIES[remedy])
        for name, value in member_parameters(group, k, len(SEEDS)).items():
            assert torch.allclose(value, single.state_dict()[name], atol=2e-5), f"{remedy}: member {k} {name}"
        for step, (together, alone) in enumerate(zip(group_logged, single_logged)):
            assert together.keys() == alone.keys(), f"{remedy}: update {step + 1} logs other tags"
            for key, value in together.items():
                mine = member_value(value, k, len(SEEDS))
                assert torch.allclose(torch.as_tensor(mine), torch.as_tensor(member_value(alone[key], 0, 1)), atol=1e-4), (
                    f"{remedy}: member {k} {key} at update {step + 1}"
                )


def member_value(value, k: int, count: int):
    if isinstance(value, (list, tuple)):
        return float(value[k])
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value.reshape(count, -1)[k]
    return value


@pytest.mark.parametrize("remedy", ["none", "c-chain", "trac", "redo", "cbp", "parseval"])
def test_a_member_with_ten_times_larger_losses_leaves_the_others_unchanged(remedy):
    """Member 1's targets ×10 (its losses and gradients grow): members 0 and 2 end exactly where they did."""
    reference, _ = train(SEEDS, REMEDIES[remedy], updates=40)
    changed, _ = train(SEEDS, REMEDIES[remedy], updates=40, scale={1: 10.0})
    for k in (0, 2):
        for name, value in member_parameters(changed, k, len(SEEDS)).items():
            assert torch.equal(value, member_parameters(reference, k, len(SEEDS))[name]), f"{remedy}: member {k} {name}"
    assert not torch.equal(member_parameters(changed, 1, 3)["0.weight"], member_parameters(reference, 1, 3)["0.weight"])


def test_gradient_clipping_is_per_member():
    """A huge gradient in member 1 scales member 1's gradient alone; each member's norm is clipped to the bound."""
    layer = EnsembleLinear(3, 2, 2)
    layer.weight.grad = torch.ones_like(layer.weight)
    layer.bias.grad = torch.ones_like(layer.bias)
    layer.weight.grad[1] *= 1000
    before = layer.weight.grad.clone()
    norms = clip_grad_norm_per_member(list(layer.parameters()), 10.0, 3)
    assert torch.allclose(norms, torch.tensor([6**0.5, (4e6 + 2) ** 0.5, 6**0.5]))
    assert torch.equal(layer.weight.grad[0], before[0]) and torch.equal(layer.weight.grad[2], before[2])
    clipped = torch.cat([layer.weight.grad[1].flatten(), layer.bias.grad[1].flatten()]).norm()
    assert torch.allclose(clipped, torch.tensor(10.0), atol=1e-4)


def test_an_agents_clip_reads_the_optimisers_parameters_and_zero_turns_it_off():
    """clip_each_members_gradient: the norm is over what the optimiser trains (a frozen parameter outside its groups keeps
    its gradient and adds nothing to the norm), member by member; max_norm 0 leaves every gradient as it is."""
    trained, frozen = EnsembleLinear(2, 2, 2), EnsembleLinear(2, 2, 2)
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.1)
    for parameter in [*trained.parameters(), *frozen.parameters()]:
        parameter.grad = torch.full_like(parameter, 3.0)
    before = [p.grad.clone() for p in trained.parameters()]
    clip_each_members_gradient(optimizer, 0.0, 2)
    assert all(torch.equal(p.grad, b) for p, b in zip(trained.parameters(), before))
    clip_each_members_gradient(optimizer, 1.0, 2)
    for k in range(2):  # 6 entries of 3 each: norm √54 → 1
        member_norm = torch.cat([p.grad[k].flatten() for p in trained.parameters()]).norm()
        assert torch.allclose(member_norm, torch.tensor(1.0), atol=1e-5)
    assert all(torch.equal(p.grad, torch.full_like(p, 3.0)) for p in frozen.parameters())


def test_a_group_network_holds_each_members_one_seed_network():
    """Members.build: member k's initialisation is the one-member network built from its seed alone, whatever K."""
    group = Members(SEEDS).build(lambda k: make_actor_critic(k, (4,), ppo.gym.spaces.Discrete(2), (8, 8), "tanh"))
    for k, seed in enumerate(SEEDS):
        single = Members((seed,)).build(lambda k: make_actor_critic(k, (4,), ppo.gym.spaces.Discrete(2), (8, 8), "tanh"))
        for name, value in member_state(group.state_dict(), k, len(SEEDS)).items():
            assert torch.equal(value, single.state_dict()[name]), name


def test_member_and_group_states_are_inverse():
    state = {"a": torch.arange(6.0).reshape(3, 2), "b": [torch.arange(3)], "n": torch.tensor(4), "s": "x"}
    parts = [member_state(state, k, 3) for k in range(3)]
    assert torch.equal(parts[1]["a"], torch.tensor([[2.0, 3.0]])) and parts[1]["n"] == 4 and parts[1]["s"] == "x"
    rebuilt = group_state(parts)
    assert torch.equal(rebuilt["a"], state["a"]) and torch.equal(rebuilt["b"][0], state["b"][0])


def test_members_draw_from_their_own_seeds_only():
    """Row k of every draw is what a group of one of seed k draws, whatever the other members are."""
    alone = Members((11,))
    together = Members((3, 11, 5))
    for draw in ("randn", "rand", "exponential"):
        assert torch.equal(getattr(together, draw)(4, 2)[1], getattr(alone, draw)(4, 2)[0]), draw
    assert torch.equal(together.randint(7, 5)[1], alone.randint(7, 5)[0])
    assert torch.equal(together.randperm(9)[1], alone.randperm(9)[0])


def test_drawing_from_leaves_the_global_stream_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    with drawing_from(torch.Generator().manual_seed(5)):
        torch.rand(10)
    assert torch.equal(torch.rand(3), expected)


def test_running_statistics_are_per_member():
    """One member's observations move its own mean and variance only."""
    stats = RunningMeanStd((2,), members=3)
    batch = torch.randn(3, 5, 2)
    stats.update(batch)
    other = RunningMeanStd((2,), members=3)
    changed = batch.clone()
    changed[1] *= 100
    other.update(changed)
    for k in (0, 2):
        assert torch.equal(stats.mean[k], other.mean[k]) and torch.equal(stats.var[k], other.var[k])
    assert torch.allclose(stats.mean[0], batch[0].mean(0)) and torch.allclose(stats.var[0], batch[0].var(0, unbiased=False))


def test_remedy_flags_parse_into_the_harness():
    """The harness sets nested flags on real Args (a typo there would silently test nothing)."""
    for flags in REMEDIES.values():
        args = ppo.Args()
        for path in flags:
            owner = args
            *parents, name = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            assert dataclasses.is_dataclass(owner) and hasattr(owner, name), path


# ---- a member's numbers do not depend on the size of its group, to the bit (CPU, one thread) -------------------------
# The C-CHAIN recipe's products (observations 4 → 3 × 256 → 2 logits / 1 value; one env acting, minibatches of 32,
# rollouts of 800) and a twin critic's Q₁ head; K = 4 puts a 2-output head's biases in whole AVX2 vectors, K = 10 some
# in whole vectors and some after them.
LAYER_SHAPES = [(4, 256), (256, 256), (256, 2), (256, 1)]
GROUP_SIZES = (2, 4, 6, 10)


def member_of_group(make, members: int, k: int, seed: int = 7):
    """(member k of a group of `members` built by `make`, the same member built alone): the one-member networks drawn
    from seeds seed, seed + 1, …, so member k of every group is the network that seed + k gives alone."""
    seeds = tuple(range(seed, seed + members))
    return Members(seeds).build(make), Members((seeds[k],)).build(make)


@pytest.mark.parametrize("in_features,out_features", LAYER_SHAPES)
def test_a_members_layer_gives_its_one_seed_outputs_and_gradients_in_any_group(in_features, out_features):
    """EnsembleLinear: member k's outputs, input gradient and weight and bias gradients in a group of K equal, bit for
    bit, those of its layer alone, for batches of 1, 32 and 800 (a one-output layer takes each member's product on its
    own: MKL rounds a one-column product differently in a batch of one matrix and in a larger batch)."""
    for members in GROUP_SIZES:
        k = members - 1
        group, single = member_of_group(lambda n: EnsembleLinear(n, in_features, out_features), members, k)
        for batch in (1, 32, 800):
            x = torch.randn(members, batch, in_features, generator=torch.Generator().manual_seed(batch))
            grad = torch.randn(members, batch, out_features, generator=torch.Generator().manual_seed(batch + 1))
            x_group, x_single = x.clone().requires_grad_(), x[k : k + 1].clone().requires_grad_()
            out_group, out_single = group(x_group), single(x_single)
            (out_group * grad).sum().backward()
            (out_single * grad[k : k + 1]).sum().backward()
            where = f"K={members} batch {batch}"
            assert torch.equal(out_group[k], out_single[0]), f"{where}: outputs"
            assert torch.equal(x_group.grad[k], x_single.grad[0]), f"{where}: input gradient"
            for name in ("weight", "bias"):
                mine, alone = getattr(group, name).grad[k], getattr(single, name).grad[0]
                assert torch.equal(mine, alone), f"{where}: {name} gradient"
            group.zero_grad(), single.zero_grad()


def test_a_members_q1_head_is_its_one_seed_q1_in_any_group():
    """forward_copy (TD3's Q₁ alone) of a twin critic's one-output head: member k's equals its critic alone's."""
    for members in GROUP_SIZES:
        k = members - 1
        group, single = member_of_group(lambda n: EnsembleLinear(2 * n, 256, 1), members, k)
        x = torch.randn(members, 32, 256, generator=torch.Generator().manual_seed(members))
        assert torch.equal(group.forward_copy(0, x)[k], single.forward_copy(0, x[k : k + 1])[0]), f"K={members}"


def adam_steps(members: int, k: int, restart: bool, steps: int = 5) -> tuple[dict, dict]:
    """(member k's parameters and Adam state after `steps` steps in a group of `members`, the same alone), with the
    recipe's parameter shapes and each member's gradients its own; `restart` restarts some entries of every parameter
    after the first step (ReDo/CBP: the per-element step)."""
    make = lambda n: nn.Sequential(*(EnsembleLinear(n, i, o) for i, o in LAYER_SHAPES))
    group, single = member_of_group(make, members, k)
    group_optimizer = adam(group.parameters(), 1e-3, torch.device("cpu"), members=members)
    single_optimizer = adam(single.parameters(), 1e-3, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    for step in range(steps):
        for p, q in zip(group.parameters(), single.parameters()):
            p.grad = torch.randn(p.shape, generator=generator)
            q.grad = p.grad[k : k + 1].clone()
        group_optimizer.step(), single_optimizer.step()
        if restart and step == 0:
            for p, q in zip(group.parameters(), single.parameters()):
                mask = torch.rand(p.shape, generator=generator) < 0.5
                group_optimizer.restart(p, mask)
                single_optimizer.restart(q, mask[k : k + 1])
    mine = {
        name: (p[k], *(v[k] for v in group_optimizer.state[p].values() if v.dim())) for name, p in group.named_parameters()
    }
    alone = {
        name: (p[0], *(v[0] for v in single_optimizer.state[p].values() if v.dim())) for name, p in single.named_parameters()
    }
    return mine, alone


@pytest.mark.parametrize("restart", [False, True], ids=["adam", "restarted-entries"])
def test_a_members_adam_steps_are_its_one_seed_steps_in_any_group(restart):
    """ElementStepAdam: member k's parameters and moments after five steps in a group of K equal, bit for bit, its
    steps alone (torch's CPU kernels run a tensor's whole vectors through vector code and the rest through scalar code,
    so a 2-output head's bias steps member by member)."""
    for members in GROUP_SIZES:
        for k in (0, members - 1):
            mine, alone = adam_steps(members, k, restart)
            for name in mine:
                for i, (a, b) in enumerate(zip(mine[name], alone[name])):
                    assert torch.equal(a, b), f"K={members} member {k} {name} state {i}"


def test_a_members_gradient_norm_is_its_one_seed_norm_in_any_group():
    """clip_grad_norm_per_member: member k's norm over the recipe's twelve-odd parameters (summed along its own row)
    equals, bit for bit, its norm alone."""
    shapes = [(i, o) for i, o in LAYER_SHAPES for _ in range(3)]
    for members in GROUP_SIZES:
        grads = [
            torch.randn(members, i, o, generator=torch.Generator().manual_seed(i * o + n)) for n, (i, o) in enumerate(shapes)
        ]
        together = [nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(together, grads):
            p.grad = g.clone()
        norms = clip_grad_norm_per_member(together, 0.5, members)
        for k in range(members):
            alone = [nn.Parameter(torch.zeros_like(g[k : k + 1])) for g in grads]
            for p, g in zip(alone, grads):
                p.grad = g[k : k + 1].clone()
            assert torch.equal(norms[k], clip_grad_norm_per_member(alone, 0.5, 1)[0]), f"K={members} member {k}"


def test_a_members_penalties_are_its_one_seed_penalties_in_any_group():
    """The L2, L2-init and Parseval penalties (each a sum of per-parameter terms, summed along the member's own row)
    of member k in a group of K equal, bit for bit, its penalties alone."""
    from plasticity.regularizers import l2_init_penalty, l2_penalty, parseval_penalty

    shapes = [(i, o) for i, o in LAYER_SHAPES for _ in range(3)]
    for members in GROUP_SIZES:
        weights = [
            torch.randn(members, i, o, generator=torch.Generator().manual_seed(i * o + n)) for n, (i, o) in enumerate(shapes)
        ]
        initial = [w.flip(0) for w in weights]
        together = (l2_penalty(weights, members), l2_init_penalty(weights, initial, members))
        together += (parseval_penalty([w.transpose(1, 2) for w in weights], 1.0, members=members),)
        for k in range(members):
            mine = [w[k : k + 1] for w in weights]
            alone = (l2_penalty(mine), l2_init_penalty(mine, [w[k : k + 1] for w in initial]))
            alone += (parseval_penalty([w.transpose(1, 2) for w in mine], 1.0),)
            for name, a, b in zip(("l2", "l2-init", "parseval"), together, alone):
                assert torch.equal(a[k], b[0]), f"{name}: K={members} member {k}"


def test_member_generators_resume_from_states_loaded_onto_a_gpu():
    members = Members((3, 4))
    state = members.state_dict()
    expected = members.randint(1000, 5)
    moved = {"members": [{**s, "host": OnTheGpu(s["host"]), "device": OnTheGpu(s["device"])} for s in state["members"]]}
    members.load_state_dict(moved)
    assert torch.equal(members.randint(1000, 5), expected)
