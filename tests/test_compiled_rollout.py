"""The compiled CPU path of a group's rollout (issue #37): random numbers drawn a rollout at a time, the torch envs'
steps compiled, and the rational tanh that compiled networks use. Every test here runs without inductor's C++ build
(aot_eager, or a backend that runs the traced graph), except the one marked slow."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import cleanrl_plus.nn as nn_activations
import cleanrl_plus.speed as graphs
import envs
from agents import ppo
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.members import Members
from cleanrl_plus.policy import Policy
from envs.torch_classic import TASKS

SEEDS = (3, 7, 11)


def _random_actions(env, generator: torch.Generator) -> torch.Tensor:
    space = env.single_action_space
    if isinstance(space, gym.spaces.Discrete):
        return torch.randint(int(space.n), (env.num_envs,), generator=generator)
    return 2 * torch.rand(env.num_envs, *space.shape, generator=generator) - 1


def _steps(env, count: int, draw_ahead: bool = False, cut_at: int = -1) -> list[torch.Tensor]:
    """Every tensor `count` random-action steps return (and one early reset at step `cut_at`)."""
    generator, seen = torch.Generator().manual_seed(0), []
    obs = env.reset()
    if draw_ahead:
        env.draw_ahead(count + (cut_at >= 0))
    for t in range(count):
        step = env.step(_random_actions(env, generator))
        seen += list(step)
        obs = step.obs
        if t == cut_at:
            obs = env.reset_where(torch.arange(env.num_envs) % 2 == 0, obs)
            seen.append(obs)
    return seen


@pytest.mark.parametrize("env_id", [f"torch:{name}" for name in TASKS])
def test_initial_states_drawn_ahead_are_the_ones_drawn_step_by_step(env_id):
    """A rollout's initial states drawn at once (one call per member) take the very numbers the step-by-step draws take,
    resets in between included, and leave each member's generator where stepping would."""
    stepwise = envs.make(env_id, num_envs=2, members=SEEDS)
    ahead = envs.make(env_id, num_envs=2, members=SEEDS)
    # 200 steps: CartPole's, Acrobot's and MountainCar's episodes end and restart from drawn states
    for expected, got in zip(_steps(stepwise, 200, cut_at=50), _steps(ahead, 200, draw_ahead=True, cut_at=50), strict=True):
        assert torch.equal(expected, got)
    for expected, got in zip(stepwise.generators, ahead.generators):
        assert torch.equal(expected.get_state(), got.get_state())
    assert ahead.drawn == []  # all used: the draws were the steps' own


def test_a_checkpoint_with_initial_states_drawn_ahead_and_unused_is_refused_and_reset_drops_them():
    env = envs.make("torch:CartPole-v1", num_envs=2, members=SEEDS)
    env.reset()
    env.draw_ahead(3)
    env.step(torch.zeros(6, dtype=torch.long))
    with pytest.raises(RuntimeError, match="2 initial-state batches drawn ahead are unused"):
        env.state_dict()
    for _ in range(2):
        env.step(torch.zeros(6, dtype=torch.long))
    assert env.state_dict()["members"][0]["env_steps"] == 6  # 3 steps of 2 envs
    env.draw_ahead(4)
    env.reset()
    assert env.drawn == []


@pytest.mark.parametrize("env_id", [f"torch:{name}" for name in TASKS] + ["continual:obs-offset:torch:CartPole-v1"])
def test_compiled_env_steps_are_one_graph_and_equal_eager_steps(env_id):
    """`compile_steps` compiles the tensor part of a step as one graph (fullgraph: no host sync or Python branch on a
    tensor), traced once for the whole run, whose steps and episode log equal the eager env's bit for bit."""
    graphs_seen = []

    def counting_backend(graph_module, example_inputs):
        graphs_seen.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    eager, compiled = (envs.make(env_id, num_envs=2, members=SEEDS) for _ in range(2))
    compiled.compile_steps(lambda fn: torch.compile(fn, fullgraph=True, backend=counting_backend))
    for expected, got in zip(_steps(eager, 300, cut_at=40), _steps(compiled, 300, cut_at=40), strict=True):
        assert torch.equal(expected, got)
    assert len(graphs_seen) == 1
    expected, got = eager.drain_episode_stats(), compiled.drain_episode_stats()
    assert len(expected) > 0 and expected == got


def test_host_envs_take_draw_ahead_and_compile_steps_as_no_ops():
    env = envs.make("CartPole-v1", num_envs=2, members=SEEDS)
    env.draw_ahead(5)
    env.compile_steps(lambda fn: pytest.fail("a gymnasium env has no tensor step to compile"))
    env.reset()
    env.step(torch.zeros(6, dtype=torch.long))


@pytest.mark.parametrize("space", [gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,))], ids=["discrete", "box"])
def test_a_rollouts_action_noise_drawn_at_once_is_the_step_by_step_noise(space):
    """PPO draws a rollout's action noise before its first step: the same numbers, in the same order, as one draw per
    step, and every member's generator ends where it would."""
    policy = Policy(len(SEEDS), 4, space, (8,), "tanh")
    stepwise, at_once = Members(SEEDS), Members(SEEDS)
    expected = torch.cat([policy.noise(stepwise, 1, 5) for _ in range(16)], dim=1)
    got = policy.noise(at_once, 16, 5)
    assert got.shape == (len(SEEDS), 16, 5, policy.outputs)
    assert torch.equal(expected, got)
    for a, b in zip(stepwise.generators, at_once.generators):
        assert torch.equal(a.get_state(), b.get_state())


# ---- the rational tanh of compiled networks ---------------------------------------------------------------------
def _ulps(value: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """|value − reference| in units of float32's spacing at the reference."""
    magnitude = reference.float().abs()
    spacing = torch.nextafter(magnitude, torch.tensor(float("inf"))) - magnitude
    return (value.double() - reference).abs() / spacing.double()


def test_rational_tanh_is_within_7_float32_ulps_of_tanh_and_never_beyond_one():
    x = torch.cat([torch.linspace(-12.0, 12.0, 240_001), torch.logspace(-30, 1, 3001), -torch.logspace(-30, 1, 3001)])
    x = torch.cat([x, torch.tensor([0.0, -0.0, 0.0004, 9.0, float("inf"), -float("inf")])])
    y = nn_activations.rational_tanh(x)
    assert _ulps(y, torch.tanh(x.double())).max() <= 7.0
    assert y.abs().max() <= 1.0
    assert torch.equal(y, -nn_activations.rational_tanh(-x))  # odd
    tiny = x.abs() < 0.0004
    assert torch.equal(y[tiny], x[tiny])


def test_tanh_is_torchs_eager_and_the_rational_one_compiled_with_gradient_one_minus_y_squared():
    layer = nn_activations.Tanh()
    x = torch.linspace(-6.0, 6.0, 1001)
    assert torch.equal(layer(x), torch.tanh(x))
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    x = x.clone().requires_grad_()
    y = compiled(x)
    assert torch.equal(y, nn_activations.rational_tanh(x.detach()))
    (gradient,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.equal(gradient, 1 - y.detach() * y.detach())


# ---- PPO on torch:CartPole-v1 compiled -------------------------------------------------------------------------
TINY = dict(env_id="torch:CartPole-v1", num_envs=2, num_steps=32, num_minibatches=2, update_epochs=2)
TINY |= dict(hidden_sizes=(16, 16), eval_episodes=1, eval_every=0, progress=False, threads=1, total_timesteps=320)


def _state(result: dict) -> dict:
    state = load_checkpoint(result["run_dir"] + "/checkpoint.pt")
    return {name: state[name] for name in ("agent", "agent_optimizer", "env", "obs")}


def test_compiled_ppo_on_torch_cartpole_is_three_graphs(runs_dir, monkeypatch):
    """The loss, the acting step and the env's step, each one graph with the rational tanh inside: nothing in them
    breaks a graph or changes from step to step (the episode log's end step is a tensor, not a baked-in number)."""
    graphs_seen = []

    def counting_backend(graph_module, example_inputs):
        graphs_seen.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", counting_backend)
    result = ppo.main(ppo.Args(compile=True, runs_dir=runs_dir, **TINY))
    assert result["num_updates"] == 20
    assert len(graphs_seen) == 3


def test_a_compiled_group_member_on_torch_cartpole_is_its_compiled_one_seed_run(runs_dir, monkeypatch):
    """Drawn ahead and compiled, member 7 of a group is the compiled one-seed run of seed 7 (the groups' tolerance), and
    a compiled run with torch's tanh equals the eager run bit for bit: the compiled env and the noise drawn at once
    change no number."""
    from test_groups import assert_close_states

    torch._dynamo.reset()
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    group = ppo.main(ppo.Args(seeds=(3, 7), compile=True, exp_name="group", runs_dir=runs_dir, **TINY))["members"][1]
    single = ppo.main(ppo.Args(seed=7, compile=True, exp_name="single", runs_dir=runs_dir, **TINY))
    assert_close_states(_state(group), _state(single), "compiled group member 7")
    monkeypatch.setattr(nn_activations, "COMPILED_TANH", torch.tanh)
    torch._dynamo.reset()
    compiled = ppo.main(ppo.Args(seed=7, compile=True, exp_name="torch-tanh", runs_dir=runs_dir, **TINY))
    eager = ppo.main(ppo.Args(seed=7, exp_name="eager", runs_dir=runs_dir, **TINY))
    for expected, got in zip(
        torch.utils._pytree.tree_leaves(_state(eager)), torch.utils._pytree.tree_leaves(_state(compiled))
    ):
        if isinstance(expected, torch.Tensor):
            assert torch.equal(expected, got)
