"""Each remedy against its authors' definition, computed here independently of plasticity/ (issue #27).

Parseval (wechu/parseval_reg `agent.py`), weight clipping (mohmdelsayed/weight-clipping `rl_experiments/weight_clipping.py`),
C-CHAIN on PPO (bluecontra/C-CHAIN `crl_dmc/crl_run_ppo_c_chain_dmc.py`, `crl_gym_classic_control/basic_utils.py`),
Normalize-and-Project (Lyle et al. 2024), the SAC reset (evgenii-nikishin/rl_with_resets `train_dense.py`), ReGraMa
(rippl-svg/grad-based-plasticity-metrics `utils/ReDo.py`, `main.py`), CBP's RL optimiser (shibhansh/loss-of-plasticity
`lop/rl/cfg/ant/cbp.yml`) and TRAC (ComputationalRobotics/TRAC `package/src/trac_optimizer/trac.py`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import scipy.special
import torch
import torch.nn as nn

from agents import ppo, td3
from cleanrl_plus.nn import EnsembleLinear, MemberConv2d, NormedEnsembleLinear, NormedLinear, NormedMemberConv2d, frozen
from cleanrl_plus.policy import ActorCritic, make_actor_critic
from plasticity.actor_critic import actor_critic_network
from plasticity.architecture import NormProjector
from plasticity.cchain import AUTHORS, CChainArgs, ChurnReducer, policy_churn
from plasticity.hooks import RemedyArgs, RemedyHooks
from plasticity.network import Network
from plasticity.optimizers import TRAC, adam
from plasticity.regularizers import RegArgs, WeightClipper
from plasticity.resets import PreactivationGradients, ResetArgs, Resetter, full_reset, reset_last_layers

CPU = torch.device("cpu")


def _ppo_agent(space: gym.Space, hidden=(32, 32), seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return make_actor_critic(1, (4,), space, hidden, "tanh")  # one member: its observations are (1, B, 4)


def _torch_layout(layer: EnsembleLinear) -> tuple[torch.Tensor, torch.Tensor]:
    """The one member's weight (out, in) and bias (out,) of an ensemble layer, as nn.Linear holds them (views)."""
    return layer.weight[0].t(), layer.bias[0, 0]


def _ppo_network(agent: ActorCritic, optimizer, updates_per_iteration: int = 4) -> Network:
    rebuild, rebuild_policy = lambda: copy.deepcopy(agent), lambda: copy.deepcopy(agent.policy)
    return actor_critic_network(agent, optimizer, rebuild, rebuild_policy, "tanh", updates_per_iteration)


# ---- Parseval ----------------------------------------------------------------------------------------------------
def _authors_parseval(networks: list[nn.Sequential], width: int, reg: float) -> torch.Tensor:
    """agent.py: for actor_mean and critic, Σ over the hidden 'linear_orthog' weights of ‖W Wᵀ − 2·I‖²_F (no init gain
    given: scale 2), times parseval_reg·(64/net_width)²."""
    total = 0
    for net in networks:
        for layer in [m for m in net if isinstance(m, EnsembleLinear)][:-1]:  # the output layer is 'linear_output'
            w, _ = _torch_layout(layer)
            total = total + reg * (64 / width) ** 2 * torch.norm(w @ w.t() - 2 * torch.eye(w.shape[0]), p="fro") ** 2
    return total


def test_parseval_on_ppo_is_the_authors_penalty_and_gradient_with_the_width_factor():
    agent = _ppo_agent(gym.spaces.Discrete(3))
    reference = copy.deepcopy(agent)
    optimizer = adam(agent.parameters(), 1e-3, CPU)
    hooks = RemedyHooks(RemedyArgs(reg=RegArgs(parseval=1e-3)), [_ppo_network(agent, optimizer)])
    ours = hooks.loss("agent", torch.zeros(1))  # one loss per member
    theirs = _authors_parseval([reference.policy.net, reference.critic], width=32, reg=1e-3)
    torch.testing.assert_close(ours, theirs.reshape(1))
    ours.sum().backward()
    theirs.backward()
    for (name, p), q in zip(agent.named_parameters(), reference.parameters()):
        expected = q.grad if q.grad is not None else torch.zeros_like(p)  # biases, heads and log σ get no penalty
        torch.testing.assert_close(p.grad if p.grad is not None else torch.zeros_like(p), expected, msg=name)
    assert agent.policy.net[-1].weight.grad is None or not agent.policy.net[-1].weight.grad.any()


def test_parseval_without_the_width_factor_and_with_another_scale():
    agent = _ppo_agent(gym.spaces.Discrete(3), hidden=(16, 16))
    hooks = RemedyHooks(
        RemedyArgs(reg=RegArgs(parseval=1.0, parseval_scale=1.0, parseval_width_scaling=False)),
        [_ppo_network(agent, adam(agent.parameters(), 1e-3, CPU))],
    )
    expected = sum(
        torch.norm(_torch_layout(m)[0] @ _torch_layout(m)[0].t() - torch.eye(16)) ** 2
        for net in (agent.policy.net, agent.critic)
        for m in list(net)[:-1]
        if isinstance(m, EnsembleLinear)
    )
    torch.testing.assert_close(hooks.loss("agent", torch.zeros(1)), expected.reshape(1))


# ---- weight clipping ----------------------------------------------------------------------------------------------
def _authors_clip(parameters: list[torch.Tensor], kappa: float) -> None:
    """weight_clipping.py's InitBounds: a weight's bound is 1/√fan_in, a bias takes the bound of the weight before it;
    every parameter of the optimiser is clamped to ±κ·bound (clip_last_layer on)."""
    previous = None
    for p in parameters:
        if p.dim() != 1:
            previous = p
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(previous)
        p.data.clamp_(-kappa / math.sqrt(fan_in), kappa / math.sqrt(fan_in))


def test_weight_clipping_bounds_are_the_authors_per_layer_bounds_not_the_initial_weights():
    agent = _ppo_agent(gym.spaces.Discrete(3))  # orthogonal init (gain √2, heads 0.01 and 1): max|W₀| ≠ 1/√fan_in
    clipper = WeightClipper(agent, kappa=3.0)
    assert clipper.bounds == pytest.approx([3 / math.sqrt(4), 3 / math.sqrt(32), 3 / math.sqrt(32)] * 2)
    with torch.no_grad():
        for p in agent.parameters():
            p.normal_(0, 2.0)  # far outside every bound
    reference = copy.deepcopy(agent)
    clipper.clip()
    linears = [m for m in reference.modules() if isinstance(m, EnsembleLinear)]  # in parameter order
    assert sum(p.numel() for m in linears for p in m.parameters()) == sum(p.numel() for p in reference.parameters())
    _authors_clip([p for m in linears for p in _torch_layout(m)], 3.0)  # their code on nn.Linear's layout
    for (name, p), q in zip(agent.named_parameters(), reference.parameters()):
        assert torch.equal(p, q), name


def test_weight_clipping_clamps_ppos_log_std_as_the_authors_optimiser_clamps_every_parameter():
    """ppo_continuous_action_clipped.py hands all of agent.parameters() to WeightClipping: the (1, A) actor_logstd is a
    2-D tensor of fan-in A, clipped to ±κ/√A like a weight (InitBounds)."""
    agent = _ppo_agent(gym.spaces.Box(-1, 1, (3,)))
    clipper = WeightClipper(agent, kappa=3.0)
    with torch.no_grad():
        for p in agent.parameters():
            p.normal_(0, 4.0)
    reference = copy.deepcopy(agent)
    clipper.clip()
    linears = [m for m in reference.modules() if isinstance(m, EnsembleLinear)]
    theirs = [p for m in linears for p in _torch_layout(m)] + [reference.policy.log_std]  # one member's (1, A), as theirs
    assert sum(p.numel() for p in theirs) == sum(p.numel() for p in reference.parameters())
    _authors_clip(theirs, 3.0)
    for (name, p), q in zip(agent.named_parameters(), reference.parameters()):
        assert torch.equal(p, q), name
    assert float(agent.policy.log_std.detach().abs().max()) == pytest.approx(3 / math.sqrt(3))


def test_weight_clipping_bounds_of_ensemble_and_conv_layers_use_each_members_fan_in():
    critic = td3.TwinCritic(3, 1, (8, 8))
    conv = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 3 * 3, 1))
    assert WeightClipper(critic, 1.0).bounds == pytest.approx([1 / math.sqrt(4), 1 / math.sqrt(8), 1 / math.sqrt(8)])
    assert WeightClipper(conv, 2.0).bounds == pytest.approx([2 / math.sqrt(2 * 9), 2 / math.sqrt(36)])


# ---- C-CHAIN on PPO ---------------------------------------------------------------------------------------------
class _AuthorsCChain:
    """crl_run_ppo_c_chain_dmc.py's C-CHAIN for one task, or for a categorical policy control_train_aligned_c_chain.py's
    (its divergence, floor, and per-iteration values: the means over the iteration's updates): a history of deep copies
    after every update, the churn against the copy one update back, c₀ until `warmup` iterations, then
    c = max(ρ·mean|pg_loss of each of the last W iterations| / (mean of their churn losses + 1e-8), floor) after each
    iteration."""

    def __init__(self, policy: nn.Module, rho: float, c0: float, warmup: int, window: int, floor: float, probabilities: bool):
        self.history = [copy.deepcopy(policy)]
        self.rho, self.coef, self.warmup, self.window, self.floor = rho, c0, warmup, window, floor
        self.probabilities = probabilities
        self.pg_losses, self.churn_losses, self.iteration = [], [], 0

    def churn(self, policy: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        if len(self.history) <= 2:  # both scripts: `if len(his_..._list) <= 2:` no churn term (the first two updates)
            return torch.zeros(())
        current, previous = policy(obs), self.history[-2](obs).detach()
        if self.probabilities:
            return (-torch.softmax(previous, -1) * torch.log(torch.softmax(current, -1) + 1e-8)).sum(-1).mean()
        return ((current - previous) ** 2).mean()

    def after_update(self, policy: nn.Module) -> None:
        self.history.append(copy.deepcopy(policy))

    def after_iteration(self, pg_loss: float, churn: float) -> None:
        self.iteration += 1
        self.pg_losses.append(pg_loss)
        self.churn_losses.append(churn)
        if self.iteration >= self.warmup:
            relative = (
                self.rho
                * np.mean(np.abs(self.pg_losses[-self.window :]))
                / (np.mean(self.churn_losses[-self.window :]) + 1e-8)
            )
            self.coef = max(relative, self.floor)


def _authors_policy_terms(outputs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """crl_gym_classic_control/networks.py: PolicyNetwork.forward ends in F.softmax, evaluate_actions builds
    Categorical(y) from those probabilities and returns (log_prob, entropy)."""
    dist = torch.distributions.Categorical(torch.nn.functional.softmax(outputs, dim=-1))
    return dist.log_prob(actions), dist.entropy()


def test_the_cchain_recipes_policy_saturates_as_the_authors_softmax_does():
    """At a logit gap of 17 torch's clamp of the authors' probabilities to [ε, 1 − ε] stops the gradient of log π of
    both actions (with Categorical(logits=…) the rarely sampled one's is ≈ 1): where a collapsed policy stays collapsed."""
    args = ppo.Args.defaults_for("continual:cchain-cartpole")
    assert args.categorical_from == "probs" and ppo.Args(env_id="CartPole-v1").categorical_from == "logits"
    actions = torch.tensor([[0, 1, 1]])
    rows = [[17.0, 0.0], [17.0, 0.0], [0.3, -0.2]]
    gradients = {}
    for form in ("probs", "logits"):
        policy = ppo.make_policy(1, (4,), gym.spaces.Discrete(2), dataclasses.replace(args, categorical_from=form))
        outputs = torch.tensor([rows], requires_grad=True)
        log_prob, entropy = policy.log_prob_from(outputs, actions)
        log_prob.sum().backward()
        gradients[form] = outputs.grad[0]
        if form == "probs":
            theirs = torch.tensor(rows, requires_grad=True)
            their_log_prob, their_entropy = _authors_policy_terms(theirs, actions[0])
            their_log_prob.sum().backward()
            assert torch.equal(log_prob[0], their_log_prob) and torch.equal(entropy[0], their_entropy)
            assert torch.equal(gradients[form], theirs.grad)
    assert (gradients["probs"][:2] == 0).all() and (gradients["probs"][2] != 0).all()
    assert gradients["logits"][1].tolist() == pytest.approx([-1.0, 1.0])  # the rarely sampled action still learns there


@pytest.mark.parametrize("space", [gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3)], ids=["gaussian", "categorical"])
def test_cchain_on_ppo_follows_the_authors_loss_and_coefficient_over_iterations(space):
    continuous = isinstance(space, gym.spaces.Box)
    kind = "policy mean" if continuous else "probabilities"
    assert (
        AUTHORS["policy mean"].relative_scale,
        AUTHORS["policy mean"].initial_coef,
        AUTHORS["policy mean"].warmup,
        AUTHORS["policy mean"].window,
    ) == (0.05, 100.0, 50, 100)  # crl_run_ppo_c_chain_dmc.py
    assert (
        AUTHORS["probabilities"].relative_scale,
        AUTHORS["probabilities"].initial_coef,
        AUTHORS["probabilities"].min_coef,
        AUTHORS["probabilities"].window,
    ) == (1e4, 1.0, 1.0, 50)  # control_train_aligned_c_chain.py
    rho = (
        1e-4 if continuous else 20.0
    )  # smaller than the authors' (0.05, 1e4), so that c stays moderate in float32 over a few steps
    settings = CChainArgs(enabled=True, relative_scale=rho, warmup=2, window=2)  # c₀ and the floor stay the authors'
    agent = _ppo_agent(space, hidden=(16, 16))
    mirror = copy.deepcopy(agent)
    ours = ChurnReducer(settings, agent, policy_churn(lambda obs: agent.policy.net(obs), continuous, updates_per_iteration=3))
    schedule = AUTHORS[kind]
    theirs = _AuthorsCChain(mirror.policy.net, rho, schedule.initial_coef, 2, 2, schedule.min_coef, not continuous)
    opt_ours, opt_theirs = torch.optim.SGD(agent.parameters(), lr=0.05), torch.optim.SGD(mirror.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1)
    coefficients = []
    for iteration in range(4):
        iteration_pg, iteration_churn = [], []
        for update in range(3):
            # one member's batches, (1, 8, ...), and its losses, (1,)
            obs, reference = torch.randn(1, 8, 4, generator=generator), torch.randn(1, 8, 4, generator=generator)
            target = torch.randn(1, 8, agent.policy.outputs, generator=generator)
            pg_ours, pg_theirs = (
                ((net.policy.net(obs) - target) ** 2).mean((1, 2)) - 0.3 for net in (agent, mirror)
            )  # a signed "policy loss"
            value_loss = mirror.value(obs).square().mean(1)  # in the total loss but not what c is scaled against
            coef_before = theirs.coef
            churn_theirs = theirs.churn(mirror.policy.net, reference)
            total_theirs = pg_theirs + value_loss + coef_before * churn_theirs
            total_ours = (
                pg_ours
                + agent.value(obs).square().mean(1)
                + ours.loss(pg_ours + value_loss.detach(), reference, scale_against=pg_ours)
            )
            torch.testing.assert_close(total_ours, total_theirs, rtol=1e-4, atol=1e-6)
            for optimizer, total in ((opt_ours, total_ours), (opt_theirs, total_theirs)):
                optimizer.zero_grad()
                total.sum().backward()
                optimizer.step()
            ours.after_step()
            theirs.after_update(mirror.policy.net)
            iteration_pg.append(float(pg_theirs))
            iteration_churn.append(float(churn_theirs))
        if continuous:  # the DMC script records the iteration's last minibatch
            theirs.after_iteration(iteration_pg[-1], iteration_churn[-1])
        else:  # the classic-control script the iteration's means (train_combined_networks_with_chain's train_stats_dict)
            theirs.after_iteration(float(np.mean(iteration_pg)), float(np.mean(iteration_churn)))
        coefficients.append(theirs.coef)
        torch.testing.assert_close(ours.coef, torch.tensor([theirs.coef], dtype=torch.float32), rtol=1e-4, atol=0)
    assert (
        coefficients[0] == schedule.initial_coef and coefficients[1] != schedule.initial_coef
    )  # the warm-up ended after iteration 2
    for p, q in zip(agent.parameters(), mirror.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


def test_cchain_on_ppo_restarts_its_schedule_at_a_task_switch_and_a_value_network_does_not():
    agent = _ppo_agent(gym.spaces.Box(-1, 1, (2,)))
    network = _ppo_network(agent, adam(agent.parameters(), 1e-3, CPU), updates_per_iteration=1)
    value_net = nn.Linear(4, 1)
    hooks = RemedyHooks(
        RemedyArgs(cchain=CChainArgs(enabled=True, warmup=1)),
        [
            network,
            Network(
                "critic", value_net, adam(value_net.parameters(), 1e-3, CPU), lambda b: value_net(b.obs), lambda: value_net
            ),
        ],
    )
    batch = SimpleNamespace(obs=torch.randn(1, 8, 4))  # one member's

    def update(name: str, **scale) -> torch.Tensor:
        loss = hooks.loss(name, torch.tensor([1.0], requires_grad=True), batch, **scale)
        hooks.networks[name].net.optimizer.zero_grad()
        loss.sum().backward()
        hooks.step(name)
        return loss

    for _ in range(4):
        update("agent", scale_against=torch.tensor([0.5]))
        update("critic")
    policy, critic = hooks.networks["agent"].churn, hooks.networks["critic"].churn
    assert float(policy.coef) != 100.0 and int(critic.points) == 4
    assert int(policy.churn_points) == 2 and int(critic.churn_points) == 3  # the run's first two / first update skipped
    hooks.on_task_switch()
    assert float(policy.coef) == 100.0 and int(policy.points) == 0 and int(policy.skips_left) == 2
    assert int(critic.points) == 4  # DDQN's C-CHAIN keeps its statistics across tasks
    # the DMC script's new history per task: no churn term at the first two updates after the switch, none recorded…
    for points in (1, 2):
        assert float(update("agent", scale_against=torch.tensor([0.5]))) == 1.0
        assert int(policy.churn_points) == 0 and int(policy.points) == points
    update("agent", scale_against=torch.tensor([0.5]))
    assert int(policy.churn_points) == 1  # … then again


def test_cchain_on_a_categorical_policy_skips_the_runs_first_two_updates_and_none_at_a_switch():
    """control_train_aligned_c_chain.py keeps one history of copies for the whole run (`len(...) <= 2`: no churn term)
    and at a level switch only restarts its coefficient and loss lists."""
    agent = _ppo_agent(gym.spaces.Discrete(3))
    network = _ppo_network(agent, adam(agent.parameters(), 1e-3, CPU), updates_per_iteration=1)
    hooks = RemedyHooks(RemedyArgs(cchain=CChainArgs(enabled=True, warmup=1)), [network])
    batch = SimpleNamespace(obs=torch.randn(1, 8, 4))
    policy = hooks.networks["agent"].churn

    def churn_term() -> float:
        loss = hooks.loss("agent", torch.tensor([1.0], requires_grad=True), batch, scale_against=torch.tensor([0.5]))
        network.optimizer.zero_grad()
        loss.sum().backward()
        hooks.step("agent")
        return float(loss) - 1.0

    assert [churn_term() == 0.0 for _ in range(3)] == [True, True, False]
    hooks.on_task_switch()
    assert float(policy.coef) == 1.0 and int(policy.points) == 0
    assert churn_term() != 0.0 and int(policy.churn_points) == 1


@pytest.mark.parametrize(
    "env_id, minibatches, epochs, ent_coef",
    [("Pendulum-v1", 2, 2, 0.0), ("CartPole-v1", 1, 1, 0.5)],
    ids=["gaussian-last-minibatch", "categorical-with-entropy"],
)
def test_ppo_scales_cchain_against_its_policy_loss(runs_dir, env_id, minibatches, epochs, ent_coef):
    """With a window of one iteration the logged coefficient is ρ·|policy loss|/churn: a Gaussian policy's of the
    iteration's last update (the DMC script's rule); a categorical policy's of the iteration's means (one update per
    iteration here, so the logged values are those means), its policy loss the clipped surrogate minus c_H·entropy
    (basic_utils.py's `policy_loss`)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = ppo.Args(
        env_id=env_id,
        total_timesteps=256,
        num_steps=64,
        num_minibatches=minibatches,
        update_epochs=epochs,
        ent_coef=ent_coef,
        hidden_sizes=(8, 8),
        eval_every=0,
        eval_episodes=1,
        log_every=64,
        runs_dir=runs_dir,
        progress=False,
        cchain=CChainArgs(enabled=True, warmup=1, window=1, relative_scale=0.5, min_coef=0.0),
    )
    events = EventAccumulator(ppo.main(args)["run_dir"]).Reload()
    tags = ("remedies/agent_cchain_coef", "losses/policy_loss", "losses/entropy", "remedies/agent_cchain_loss")
    last = {tag: events.Scalars(tag)[-1].value for tag in tags}
    policy_loss = last["losses/policy_loss"] - ent_coef * last["losses/entropy"]
    expected = 0.5 * abs(policy_loss) / (last["remedies/agent_cchain_loss"] + 1e-8)
    assert last["remedies/agent_cchain_coef"] == pytest.approx(expected, rel=1e-4)


# ---- Normalize-and-Project --------------------------------------------------------------------------------------
def _scale_invariant(module: nn.Module, layer: nn.Module, forward) -> bool:
    """The output does not change when the layer's weight and bias are scaled: a norm follows the layer."""
    before = forward().detach()
    with torch.no_grad():
        layer.weight.mul_(3.0)
        layer.bias.mul_(3.0)
    after = forward().detach()
    with torch.no_grad():
        layer.weight.div_(3.0)
        layer.bias.div_(3.0)
    return torch.allclose(before, after, rtol=1e-4, atol=1e-5)


def test_nap_puts_a_norm_before_every_nonlinearity_of_every_torso():
    from agents import ddqn, sac_simba
    from plasticity.architecture import NaPArgs

    torch.manual_seed(0)
    frames = ddqn.QNetwork(1, "nature-cnn", (4, 84, 84), 3, (), "layer")  # each of one member
    grids = ddqn.QNetwork(1, "minatar-cnn", (10, 10, 4), 3, (), "layer")
    args = sac_simba.Args(nap=NaPArgs(enabled=True), critic_width=8, critic_blocks=2)
    simba = sac_simba.make_critic(1, args, 3, 1, 2)
    mlp = td3.TwinCritic(3, 1, (8, 8), norm="layer")
    obs, action, images, boards = (  # one member's batches
        torch.randn(1, 5, 3),
        torch.randn(1, 5, 1),
        torch.rand(1, 2, 4, 84, 84) * 255,
        torch.rand(1, 2, 10, 10, 4),
    )
    cases = [
        (frames, [m for m in frames.torso.convs if isinstance(m, MemberConv2d)] + [frames.torso.fc], lambda: frames(images)),
        (grids, [grids.torso.conv, grids.torso.fc], lambda: grids(boards)),
        (simba, [block.expand for block in simba.encoder.blocks], lambda: simba(obs, action)),
        (mlp, list(mlp.layers[:-1]), lambda: mlp(obs, action)),
    ]
    for module, normalised, forward in cases:
        assert all(isinstance(layer, (NormedMemberConv2d, NormedLinear, NormedEnsembleLinear)) for layer in normalised)
        for layer in normalised:
            assert _scale_invariant(module, layer, forward), f"{type(module).__name__}: {layer} is not followed by a norm"
    assert not _scale_invariant(frames, frames.head, lambda: frames(images))  # heads carry none


def test_nap_projects_every_normalised_weight_matrix_to_its_initial_norm_and_leaves_heads_biases_and_norms_free():
    from agents import sac_simba
    from plasticity.architecture import NaPArgs

    torch.manual_seed(0)
    critic = sac_simba.make_critic(1, sac_simba.Args(nap=NaPArgs(enabled=True), critic_width=8, critic_blocks=1), 3, 1, 2)
    # two members' convolutions (one grouped convolution), then a plain linear layer
    frames = nn.Sequential(NormedMemberConv2d(2, 2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4 * 4, 2))
    ensemble = (EnsembleLinear, MemberConv2d)  # one matrix per entry along the leading dimension

    def norms(m: nn.Module) -> torch.Tensor:
        return (
            torch.linalg.vector_norm(m.weight.flatten(1), dim=1)
            if isinstance(m, ensemble)
            else torch.linalg.vector_norm(m.weight)
        )

    for net, heads, forward in (
        (critic, critic.layout().heads, lambda: critic(torch.randn(1, 16, 3), torch.randn(1, 16, 1)).square().mean()),
        (frames, (frames[3],), lambda: frames(torch.randn(8, 2 * 2, 6, 6)).square().mean()),
    ):
        matrices = [m for m in net.modules() if isinstance(m, (nn.Linear, nn.Conv2d, *ensemble)) and m not in heads]
        initial, head_norms = [norms(m) for m in matrices], [norms(m) for m in heads]
        projector = NormProjector(net, heads)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
        free = [
            p for name, p in net.named_parameters() if not name.endswith("weight") or ".norm." in name or "final_norm" in name
        ]
        for _ in range(3):
            optimizer.zero_grad()
            forward().backward()
            optimizer.step()
            free_before = [p.detach().clone() for p in free]
            projector.project()
            assert all(torch.equal(p, q) for p, q in zip(free, free_before))  # biases and norm scale/shift: untouched
        for m, norm in zip(matrices, initial):
            torch.testing.assert_close(norms(m), norm)
        assert all(not torch.allclose(norms(m), norm) for m, norm in zip(heads, head_norms))  # the heads moved freely


def test_nap_on_tanh_ppo_leaves_the_policy_head_free_to_fit_its_mean():
    """The paper projects the weights that a normalisation follows (its scale invariance); PPO's policy head starts at
    ‖W‖ ≈ 0.01, and pinned there μ could not reach ±0.8 (the issue measured an MSE of 0.52)."""
    from plasticity.architecture import NaPArgs

    torch.manual_seed(0)
    agent = make_actor_critic(1, (4,), gym.spaces.Box(-1, 1, (1,)), (16, 16), "tanh", norm="layer")
    optimizer = adam(agent.parameters(), 1e-2, CPU)
    hooks = RemedyHooks(RemedyArgs(nap=NaPArgs(enabled=True)), [_ppo_network(agent, optimizer)])
    linears = [m for m in agent.policy.net.modules() if isinstance(m, EnsembleLinear)]
    hidden, head = linears[:-1], linears[-1]
    initial = [torch.linalg.vector_norm(m.weight) for m in hidden]
    head_initial = torch.linalg.vector_norm(head.weight)
    obs = torch.cat([torch.ones(1, 8, 4), -torch.ones(1, 8, 4)], dim=1) + 0.1 * torch.randn(1, 16, 4)
    targets = torch.cat([torch.full((1, 8, 1), 0.8), torch.full((1, 8, 1), -0.8)], dim=1)
    for _ in range(300):
        loss = hooks.loss("agent", (agent.policy.net(obs) - targets).square().mean().reshape(1))
        optimizer.zero_grad()
        loss.sum().backward()
        hooks.step("agent")
    assert float((agent.policy.net(obs) - targets).square().mean()) < 0.01
    for m, norm in zip(hidden, initial):
        torch.testing.assert_close(torch.linalg.vector_norm(m.weight), norm)
    assert torch.linalg.vector_norm(head.weight) > 10 * head_initial


# ---- SAC reset (Nikishin et al. 2022) ---------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["full", "layers"])
def test_sac_reset_starts_the_temperature_and_its_adam_afresh(method, runs_dir):
    """train_dense.py builds a completely new SACLearner at a reset: new actor, critic, target critic and temperature,
    each with a fresh Adam (train_pixels.py: new heads and temperature)."""
    from agents import sac_simba
    from cleanrl_plus.checkpoint import load_checkpoint

    common = dict(
        env_id="Pendulum-v1",
        total_timesteps=120,
        learning_starts=100,
        batch_size=16,
        actor_width=8,
        critic_width=8,
        critic_blocks=1,
        eval_every=0,
        eval_episodes=1,
        runs_dir=runs_dir,
        progress=False,
        initial_alpha=0.3,
        alpha_learning_rate=0.05,
    )
    last_step = common["total_timesteps"]  # the reset lands after the run's last update
    result = sac_simba.main(sac_simba.Args(exp_name="reset", reset=ResetArgs(method=method, every=last_step), **common))
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    torch.testing.assert_close(state["temperature"]["log_alpha"], torch.tensor([math.log(0.3)]))  # one member's
    assert state["alpha_optimizer"]["state"] == {}
    if method == "full":
        assert state["actor_optimizer"]["state"] == {} and state["critic_optimizer"]["state"] == {}
        for key, value in state["critic"].items():
            assert torch.equal(value, state["critic_target"][key]), key
    kept = sac_simba.main(
        sac_simba.Args(exp_name="kept", reset=ResetArgs(method=method, every=last_step, networks="critic"), **common)
    )
    kept_state = load_checkpoint(Path(kept["run_dir"]) / "checkpoint.pt")
    assert kept_state["alpha_optimizer"]["state"] != {}  # only the critic was reset: α goes on


def _authors_reset_steps(total_steps: int, reset_interval: int) -> list[int]:
    """train_dense.py: `for i in range(1, max_steps + 1)`: step, store, the step's updates, then a completely new agent
    when i % reset_interval == 0, however many updates came before."""
    return [i for i in range(1, total_steps + 1) if i % reset_interval == 0]


@pytest.mark.parametrize("method", ["full", "layers"])
@pytest.mark.parametrize("updates_per_step", [1, 2])
def test_sac_resets_land_on_the_authors_environment_steps_not_on_counts_of_updates(method, updates_per_step):
    """SAC's loop (agents/sac_simba.py): the environment step, then `updates_per_step` updates once learning has
    started, each followed by after_update(num_updates, …, global_step, last_of_step), then the session's after_step
    (its evaluation, then at_step_end); the reset falls due after the step's last update and lands at the step's end,
    as the authors' follows step i's updates and evaluation."""
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    network = Network(
        "critic", net, adam(net.parameters(), 1e-3, CPU), lambda b: net(b), lambda: copy.deepcopy(net), heads=(net[2],)
    )
    resetter = Resetter(ResetArgs(method=method, every=40), [network])
    logged: list[tuple[int, int]] = []
    num_updates = 0
    logger = SimpleNamespace(scalars=lambda values, step: logged.append((step, num_updates)))
    for global_step in range(1, 131):
        if global_step > 10:  # learning starts
            for update_index in range(updates_per_step):
                num_updates += 1
                resetter.after_update(num_updates, None, logger, global_step, update_index == updates_per_step - 1)
        assert not logged or logged[-1][0] < global_step  # nothing reset before the step's evaluation
        resetter.at_step_end(num_updates, logger, global_step)
    authors = _authors_reset_steps(130, 40)
    assert authors == [40, 80, 120]
    assert logged == [(step, (step - 10) * updates_per_step) for step in authors]  # after the step's last update
    state = resetter.state_dict()
    resumed = Resetter(ResetArgs(method=method, every=40), [network])
    resumed.load_state_dict(state)
    resumed.after_update(num_updates + 1, None, logger, 130)  # a resumed run does not reset again at the same multiple
    assert len(logged) == 3


def test_full_and_layer_resets_run_what_the_network_restarts_with():
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    restarted = []
    network = Network(
        "actor",
        net,
        adam(net.parameters(), 1e-3, CPU),
        lambda b: net(b),
        lambda: copy.deepcopy(net),
        heads=(net[2],),
        restarts_with=(lambda: restarted.append(True),),
    )
    full_reset(network)
    reset_last_layers(network, 1)
    assert restarted == [True, True]


# ---- ReGraMa -----------------------------------------------------------------------------------------------------
def _mean_abs_preactivation_gradients(layers: list[nn.Module], rows: int, sample_loss) -> list[torch.Tensor]:
    """E_x|∂ℓ(x)/∂zᵢ(x)| per unit: each sample's own loss ℓ(x) = sample_loss(row), differentiated with respect to each
    layer's output z (its units' pre-activations) on that sample alone."""
    totals = [0.0 for _ in layers]
    for row in range(rows):
        outputs = []
        handles = [layer.register_forward_hook(lambda module, inputs, output: outputs.append(output)) for layer in layers]
        loss = sample_loss(row)
        for handle in handles:
            handle.remove()
        totals = [total + grad.abs().sum(dim=-2) for total, grad in zip(totals, torch.autograd.grad(loss, outputs))]
    return [total / rows for total in totals]


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_grama_scores_are_mean_absolute_preactivation_gradients_over_the_layer_mean(norm):
    torch.manual_seed(0)
    net = nn.Sequential(
        NormedLinear(3, 6) if norm == "layer" else nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 2)
    )
    layers = [net[0], net[2]]
    x, y = torch.randn(16, 3), torch.randn(16, 2)
    gradients = PreactivationGradients(layers)
    (net(x) - y).square().sum(-1).mean().backward()  # the training update the hooks read: L = mean_x ℓ(x)
    expected = _mean_abs_preactivation_gradients(
        layers, 16, lambda row: (net(x[row : row + 1]) - y[row : row + 1]).square().sum()
    )
    for layer, magnitude in zip(layers, expected):
        torch.testing.assert_close(gradients.scores(layer), magnitude / magnitude.mean())


def test_grama_scores_of_twin_critics_are_per_member_and_ignore_forwards_that_do_not_train():
    torch.manual_seed(0)
    critic = td3.TwinCritic(3, 1, (6, 6))
    layers = list(critic.layers[:-1])
    gradients = PreactivationGradients(layers)
    obs, action, target = torch.randn(1, 12, 3), torch.randn(1, 12, 1), torch.randn(1, 1, 12)  # one member, two critics
    (critic(obs, action) - target).square().mean(-1).sum().backward()  # one MSE per member, summed
    with frozen(critic):  # an actor loss through the critic: its units do not train here
        critic(obs, action.clone().requires_grad_()).sum().backward()
    with torch.no_grad():
        critic(obs, action)
    expected = _mean_abs_preactivation_gradients(
        layers,
        12,
        lambda row: (critic(obs[:, row : row + 1], action[:, row : row + 1]) - target[..., row : row + 1]).square().sum(),
    )
    for layer, magnitude in zip(layers, expected):
        torch.testing.assert_close(gradients.scores(layer), magnitude / magnitude.mean(dim=-1, keepdim=True))


def test_regrama_resetter_scores_the_layers_feeding_units_from_the_training_backward():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    network = Network(
        "critic",
        net,
        adam(net.parameters(), 1e-3, CPU),
        lambda b: net(b.obs),
        lambda: copy.deepcopy(net),
        hidden=[net[0], net[2]],
        heads=(net[4],),
    )
    resetter = Resetter(ResetArgs(method="regrama", every=1, regrama_score="preactivations"), [network])
    assert list(resetter.gradients["critic"].sums) == [net[0], net[2]]
    net(torch.randn(4, 3)).sum().backward()
    assert all(sums.any() for sums in resetter.gradients["critic"].sums.values())
    state = copy.deepcopy(resetter.state_dict())
    resetter.after_update(1, None, SimpleNamespace(scalars=lambda *a: None), 1)
    assert not any(sums.any() for sums in resetter.gradients["critic"].sums.values())
    resetter.load_state_dict(state)
    assert all(sums.any() for sums in resetter.gradients["critic"].sums.values())


# ---- CBP's optimiser in the authors' RL runs --------------------------------------------------------------------
def test_cbp_authors_adam_with_weight_decay_is_ours_with_their_betas_and_half_the_l2():
    """lop/rl/cfg/ant/cbp.yml: torch Adam, β = (0.99, 0.99), weight_decay 1e-4 (added to the gradient: the gradient of
    ½·1e-4·Σθ²), eps 1e-8. Ours with --adam-betas 0.99 0.99 --adam-eps 1e-8 --reg.l2 5e-5 takes the same steps."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
    mirror = copy.deepcopy(net)
    ours = adam(net.parameters(), 1e-2, CPU, eps=1e-8, betas=(0.99, 0.99))
    hooks = RemedyHooks(RemedyArgs(reg=RegArgs(l2=5e-5)), [Network("agent", net, ours, lambda b: net(b), lambda: net)])
    theirs = torch.optim.Adam(mirror.parameters(), lr=1e-2, betas=(0.99, 0.99), eps=1e-8, weight_decay=1e-4)
    for _ in range(5):
        x = torch.randn(16, 3)
        for module, optimizer, regularise in ((net, ours, True), (mirror, theirs, False)):
            loss = module(x).square().mean()
            if regularise:
                loss = hooks.loss("agent", loss)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    for p, q in zip(net.parameters(), mirror.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)


# ---- ReGraMa as its official code ---------------------------------------------------------------------------------
def _authors_gradient_redo_masks(layers: list[nn.Linear], tau: float) -> list[torch.Tensor]:
    """utils/ReDo.py GradientReDo._get_redo_masks: for every nn.Linear of one Q-network, each output unit's mean |grad|
    over its incoming weights, over (the layer's mean + 1e-9); True where ≤ τ."""
    masks = []
    for layer in layers:
        magnitude = layer.weight.grad.abs().mean(dim=1)
        masks.append(magnitude / (magnitude.mean() + 1e-9) <= tau)
    return masks


def _twin_as_linears(critic: td3.TwinCritic, twin: int) -> list[nn.Linear]:
    """One twin of our (one-member) critic as the authors' separate Q-network of nn.Linear layers, gradients included."""
    linears = []
    for layer in critic.layers:
        linear = nn.Linear(layer.weight.shape[1], layer.weight.shape[2])
        with torch.no_grad():
            linear.weight.copy_(layer.weight[twin].t())
            linear.bias.copy_(layer.bias[twin, 0])
        linear.weight.grad = layer.weight.grad[twin].t().clone()
        linears.append(linear)
    return linears


@pytest.mark.parametrize("tau", [0.0, 0.5])
def test_regrama_recycles_the_units_the_official_gradient_redo_picks_and_nothing_else(tau):
    """main.py: after the critic's backward, one GradientReDo per Q-network picks units by their incoming weights'
    gradients in every layer (the output layer too) and re-draws their incoming weights and bias (PyTorch's default
    initialisation, their networks' own); no optimiser is passed, so Adam's state is untouched, and outgoing weights
    stay. τ = 0 picks exactly the units whose gradient vanished, such as a ReLU unit with a bias of −100."""
    torch.manual_seed(0)
    critic, fresh = td3.TwinCritic(3, 1, (8, 8)), td3.TwinCritic(3, 1, (8, 8))
    with torch.no_grad():
        critic.layers[0].bias[0, 0, 3] = -100.0  # twin 0, first hidden layer, unit 3: never active
    optimizer = adam(critic.parameters(), 1e-3, CPU)
    network = Network("critic", critic, optimizer, lambda b: critic(*b), lambda: copy.deepcopy(fresh))
    actor_net = nn.Linear(3, 1)
    actor = Network("actor", actor_net, adam(actor_net.parameters(), 1e-3, CPU), lambda b: actor_net(b), lambda: actor_net)
    resetter = Resetter(ResetArgs(method="regrama", regrama_tau=tau), [network, actor])
    assert list(resetter.networks) == ["critic"] and resetter.every == 1000  # the critics only, every 1,000 updates
    obs, action, target = torch.randn(1, 32, 3), torch.randn(1, 32, 1), torch.randn(1, 1, 32)
    optimizer.zero_grad()
    (critic(obs, action) - target).square().mean(-1).sum().backward()
    optimizer.step()  # ours recycles after the step, from the gradients the step kept
    masks = [_authors_gradient_redo_masks(_twin_as_linears(critic, twin), tau) for twin in (0, 1)]
    before = copy.deepcopy(critic.state_dict())
    moments = {k: v.clone() for k, v in optimizer.state[critic.layers[1].weight].items()}
    logged = []
    resetter.after_update(1000, None, SimpleNamespace(scalars=lambda values, step: logged.append(values)), 1000)
    chosen_units = 0
    for index, (layer, fresh_layer) in enumerate(zip(critic.layers, fresh.layers)):
        for twin in (0, 1):
            mask = masks[twin][index]
            chosen_units += int(mask.sum())
            old_weight, old_bias = before[f"layers.{index}.weight"][twin], before[f"layers.{index}.bias"][twin, 0]
            expected_weight = torch.where(mask, fresh_layer.weight[twin], old_weight)  # columns: units of (in, out)
            expected_bias = torch.where(mask, fresh_layer.bias[twin, 0], old_bias)
            assert torch.equal(layer.weight[twin], expected_weight), (index, twin)
            assert torch.equal(layer.bias[twin, 0], expected_bias), (index, twin)
    assert bool(masks[0][0][3]) and 0 < chosen_units < (40 if tau == 0.0 else 80)  # the silenced unit among them
    for key, value in optimizer.state[critic.layers[1].weight].items():
        assert torch.equal(value, moments[key]), key  # no optimiser reset
    total_units = sum(layer.weight.shape[2] for layer in critic.layers) * 2
    torch.testing.assert_close(logged[-1]["plasticity/critic_recycled_fraction"], torch.tensor([chosen_units / total_units]))


# ---- TRAC as its official code ----------------------------------------------------------------------------------
class _AuthorsTRAC:
    """trac.py's _step around torch.optim.Adam (start_trac(Base=Adam), betas (0.9, …, 0.999999), s_prev 1e-8, eps
    1e-8): references at the first step; Δ = (θ − θ_ref)/(Σs + eps); h = Σ⟨Δ, g⟩; Δ += base update; v ← β²v + h²,
    σ ← βσ − h; s = s_prev/erfi(1/√2)·erfi(σ/(√2·√v + eps)); θ = θ_ref + max(Σs, 0)·Δ. Its scalars are kept in
    float64 here (theirs float32, whose rounding erfi amplifies)."""

    def __init__(self, parameters: list[torch.Tensor], lr: float) -> None:
        self.parameters, self.base = parameters, torch.optim.Adam(parameters, lr=lr)
        self.betas = torch.tensor((0.9, 0.99, 0.999, 0.9999, 0.99999, 0.999999), dtype=torch.float64)
        self.s, self.variance = torch.zeros(6, dtype=torch.float64), torch.zeros(6, dtype=torch.float64)
        self.sigma = torch.full((6,), 1e-8, dtype=torch.float64)
        self.reference = None

    @torch.no_grad()
    def step(self) -> None:
        played = [p.detach().clone() for p in self.parameters]
        grads = [p.grad.clone() for p in self.parameters]
        self.base.step()
        self.reference = self.reference or played
        deltas = [(theta - ref) / (float(self.s.sum()) + 1e-8) for theta, ref in zip(played, self.reference)]
        h = sum(float(torch.dot(d.flatten(), g.flatten())) for d, g in zip(deltas, grads))
        deltas = [d + (p - theta) for d, p, theta in zip(deltas, self.parameters, played)]
        self.variance = self.variance * self.betas**2 + h**2
        self.sigma = self.sigma * self.betas - h
        argument = (self.sigma / (math.sqrt(2) * self.variance.sqrt() + 1e-8)).numpy()
        self.s = torch.as_tensor(1e-8 / scipy.special.erfi(1 / math.sqrt(2)) * scipy.special.erfi(argument))
        for p, ref, delta in zip(self.parameters, self.reference, deltas):
            p.copy_(ref + delta * max(float(self.s.sum()), 0.0))


def test_trac_follows_the_official_update_on_adam_over_sixty_steps():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    mirror = copy.deepcopy(net)
    initial = [p.detach().clone() for p in net.parameters()]
    x, y = torch.randn(32, 3), torch.randn(32, 1)
    ours, theirs = TRAC(adam(net.parameters(), 1e-2, CPU)), _AuthorsTRAC(list(mirror.parameters()), 1e-2)
    for step in range(60):
        for module, optimizer in ((net, ours), (mirror, theirs)):
            for p in module.parameters():
                p.grad = None
            (module(x) - y).square().mean().backward()
            optimizer.step()
        assert float(ours.scale) == pytest.approx(float(theirs.s.sum().clamp_min(0)), rel=1e-3), step
        for p, q in zip(net.parameters(), mirror.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-4)
    assert float(ours.scale) > 0.1  # the tuner has grown the scale from 1e-8: the trajectories moved
    assert max(float((p - p0).abs().max()) for p, p0 in zip(net.parameters(), initial)) > 0.05
