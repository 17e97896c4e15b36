"""--compile and --cudagraphs (cleanrl_plus/speed.py) and TD3, PPO and GTR under them.

On CPU: GraphStep's capture/recapture rules (with the CUDA calls replaced by a stand-in), the agents' compiled steps as
single graphs (fullgraph: no host sync, no Python branch on a tensor), compiled agents against eager ones on real
envs, a resume that switches --compile on, what a captured step needs to stay in place, and the start-up refusals.
Tests marked `cuda` run the real capture and are skipped without a CUDA device (tests/conftest.py).

Tolerance: with the aot_eager backend (the same ATen kernels, no inductor build) a compiled run equals the eager one
bit for bit (measured); the tests allow 1e-6 relative, so that a decomposition that only reorders a sum still passes
while a wrong wiring (a stale target, a dropped remedy term) fails by orders of magnitude more.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
import torch
import torch.nn as nn

import cleanrl_plus.nn as nn_activations
import cleanrl_plus.speed as graphs
from agents import ddqn, gtr, ppo, sac_simba, td3
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.distributional import CriticArgs
from cleanrl_plus.policy import Policy
from cleanrl_plus.speed import GraphStep, tensor_identity
from envs.continual import ContinualArgs
from envs.errors import UserError
from plasticity.architecture import NaPArgs, NetArgs
from plasticity.cchain import CChainArgs
from plasticity.cir import CIRArgs
from plasticity.least import LEASTArgs
from plasticity.optimizers import OptimArgs, adam
from plasticity.regularizers import RegArgs, WeightClipArgs
from plasticity.resets import ResetArgs
from plasticity.swd import SWDArgs

TINY = dict(
    env_id="Pendulum-v1",
    batch_size=32,
    hidden_sizes=(32, 32),
    eval_episodes=1,
    eval_every=0,
    progress=False,
    buffer_size=5_000,
)
LOSS_REMEDIES = dict(
    reg=RegArgs(l2=1e-4, l2_init=1e-3, parseval=1e-3),
    cchain=CChainArgs(enabled=True, warmup=50),
    nap=NaPArgs(enabled=True),
    clip=WeightClipArgs(kappa=3.0),
    optim=OptimArgs(trac=True),
)
NETWORKS = ("actor", "critic", "actor_target", "critic_target")
# FastTD3's many-env flags together (docs/agents/td3.md): C51 critics, 3-step returns, normalised observations, per-env
# exploration noise, AdamW; two envs so that the n-step windows and noise scales are per env
SCALE = dict(
    num_envs=2,
    n_step=3,
    critic=CriticArgs(distributional=True, num_atoms=21, v_min=-200.0, v_max=10.0),
    normalize_obs=True,
    exploration_noise_min=0.05,
    exploration_noise_max=0.4,
    weight_decay=0.1,
    gradient_steps=2,
)


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch):
    # every agent run compiles new closures; dynamo's per-function cache would fill up across tests and fall back to eager
    torch._dynamo.reset()
    # compiled runs are compared with eager ones bit for bit: torch's tanh inside them too (the rational tanh compiled
    # runs use is tested on its own, test_compiled_tanh_*)
    monkeypatch.setattr(nn_activations, "COMPILED_TANH", torch.tanh)
    yield


# ---- GraphStep's rules, with the CUDA calls replaced -------------------------------------------------------------
class SimulatedGraph:
    """Stands in for a CUDA graph: replay() runs the recorded call again and writes into the captured outputs."""

    def __init__(self, call, outputs) -> None:
        self.call, self.outputs = call, outputs

    def replay(self) -> None:
        for static, fresh in zip(torch.utils._pytree.tree_leaves(self.outputs), torch.utils._pytree.tree_leaves(self.call())):
            static.copy_(fresh)


class SimulatedGraphStep(GraphStep):
    def _run_eagerly(self, inputs):
        self.eager_calls = getattr(self, "eager_calls", 0) + 1
        return self.fn(*inputs)

    @staticmethod
    def _record(call):
        outputs = call()
        return SimulatedGraph(call, outputs), outputs


def test_without_cudagraphs_a_step_is_a_plain_call_and_takes_none_leaves():
    step = GraphStep(lambda x, reference: x * 2 if reference is None else x + reference, cudagraphs=False)
    torch.testing.assert_close(step(torch.ones(3), None), torch.full((3,), 2.0))
    assert step.graph is None and step.captures == 0


def test_a_step_is_captured_after_its_warmup_and_replays_on_fresh_inputs():
    weight = torch.tensor(3.0)
    step = SimulatedGraphStep(
        lambda batch, reference: {"y": batch[0] * weight + batch[1]}, cudagraphs=True, watch=[weight], warmup=2
    )
    outputs = [step((torch.full((4,), float(k)), torch.ones(4)), None)["y"].clone() for k in range(5)]
    assert step.eager_calls == 2 and step.captures == 1  # two warm-up calls, then one capture, replayed since
    for k, y in enumerate(outputs):  # the replays read the inputs copied into the static buffers, not the captured ones
        torch.testing.assert_close(y, torch.full((4,), 3.0 * k + 1))
    with torch.no_grad():
        weight.mul_(2)  # an in-place edit (ReDo, shrink-and-perturb) keeps the graph
    torch.testing.assert_close(step((torch.ones(4), torch.zeros(4)), None)["y"], torch.full((4,), 6.0))
    assert step.captures == 1 and step.eager_calls == 2


def test_a_changed_signature_warms_up_and_captures_again():
    layer = nn.Linear(2, 1)
    optimizer = adam(layer.parameters(), 1e-3, torch.device("cpu"))

    def update(x):
        optimizer.zero_grad()
        layer(x).sum().backward()
        optimizer.step()
        return layer.weight.detach().sum()

    step = SimulatedGraphStep(update, cudagraphs=True, watch=[layer, optimizer], warmup=2)
    x = torch.ones(5, 2)
    for _ in range(4):
        step(x)
    # 1st call: no Adam state yet; its step creates the state, so the 2nd call starts the warm-up again
    assert (step.eager_calls, step.captures) == (3, 1)
    optimizer.state.pop(layer.weight)  # a reset drops the optimiser state: the next step re-creates it
    for _ in range(4):
        step(x)
    assert step.captures == 2
    step(torch.ones(7, 2))  # another batch shape
    assert step.graph is None and step.captures == 2  # warming up again
    calls = step.eager_calls
    for _ in range(3):
        step(torch.ones(7, 2))
    assert step.captures == 3 and step.eager_calls == calls + 1


def test_none_and_other_non_tensor_leaves_are_part_of_the_signature():
    step = SimulatedGraphStep(
        lambda x, reference, scale: x * scale if reference is None else x * scale + reference, cudagraphs=True, warmup=1
    )
    for _ in range(3):
        step(torch.ones(2), None, 2.0)
    assert step.captures == 1
    # a changed Python argument is never replayed with the value baked in at capture: warm up, capture again
    torch.testing.assert_close(step(torch.ones(2), None, 5.0), torch.full((2,), 5.0))
    assert step.graph is None
    torch.testing.assert_close(step(torch.full((2,), 2.0), None, 5.0), torch.full((2,), 10.0))
    assert step.captures == 2
    # None → a tensor (C-CHAIN's reference batch) is another structure
    torch.testing.assert_close(step(torch.ones(2), torch.ones(2), 5.0), torch.full((2,), 6.0))
    assert step.graph is None


def test_tensor_identity_sees_replaced_parameters_and_optimiser_state_but_not_in_place_edits():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    optimizer = adam(net.parameters(), 1e-3, torch.device("cpu"))
    net(torch.randn(2, 3)).sum().backward()
    optimizer.step()
    before = tensor_identity([net, optimizer])
    with torch.no_grad():
        net[0].weight.add_(1.0)
        optimizer.state[net[0].weight]["exp_avg"].zero_()
    assert tensor_identity([net, optimizer]) == before
    optimizer.restart(net[0].weight, torch.zeros_like(net[0].weight, dtype=torch.bool))  # adds per-element counts
    assert tensor_identity([net, optimizer]) != before
    before = tensor_identity([net, optimizer])
    net[2] = nn.Linear(4, 1)  # a structural change (plasticity injection swaps the head)
    assert tensor_identity([net, optimizer]) != before


def _tensor_pointers(state) -> list[int]:
    return [leaf.data_ptr() for leaf in torch.utils._pytree.tree_leaves(state) if isinstance(leaf, torch.Tensor)]


def test_remedy_state_changes_in_place_so_a_captured_step_keeps_updating_it():
    """A replayed graph writes into the tensors it captured: every tensor the loss/step remedies keep (C-CHAIN's
    snapshot, means and coefficient, TRAC's tuner, NaP targets, event counters) must stay the same tensor across
    updates, its value changing in place."""
    from plasticity.hooks import RemedyArgs, RemedyHooks
    from plasticity.network import Network

    torch.manual_seed(0)
    critic = td3.TwinCritic(3, 1, (16, 16), norm="layer")
    optimizer = adam(critic.parameters(), 1e-3, torch.device("cpu"))
    flags = RemedyArgs(**{key: value for key, value in LOSS_REMEDIES.items()})
    hooks = RemedyHooks(
        flags, [Network("critic", critic, optimizer, lambda b: critic(b[0], b[1]), lambda: critic, heads=(critic.head,))]
    )
    pointers, values = [], []
    for update in range(6):
        obs, action = torch.randn(1, 32, 3), torch.randn(1, 32, 1)  # one member
        loss = hooks.loss(
            "critic", critic(obs, action).square().mean((1, 2)), reference=(torch.randn(1, 32, 3), torch.randn(1, 32, 1))
        ).sum()
        optimizer.zero_grad()
        loss.backward()
        hooks.step("critic")
        if update >= 2:  # C-CHAIN snapshots at its first update, TRAC takes its reference at its first step
            pointers.append(_tensor_pointers(hooks.state_dict()))
            values.append(
                [
                    leaf.clone()
                    for leaf in torch.utils._pytree.tree_leaves(hooks.state_dict())
                    if isinstance(leaf, torch.Tensor)
                ]
            )
    assert all(p == pointers[0] for p in pointers), "a remedy replaced a state tensor instead of updating it in place"
    changed = [not torch.equal(a, b) for a, b in zip(values[0], values[-1])]
    assert sum(changed) >= 8  # and the state does change (snapshot, means, TRAC's σ/v/s, counters, ...)
    assert int(hooks.acted["cchain"]) == 6 and int(hooks.acted["trac"]) == 6 and int(hooks.acted["clip"]) == 6


def test_a_loaded_optimiser_keeps_this_runs_capturable_setting():
    """torch takes `capturable` from the saved groups: a resume that switches --cudagraphs would keep the old one."""
    from plasticity.optimizers import ElementStepAdam

    parameter = nn.Parameter(torch.zeros(3))
    saved = ElementStepAdam([parameter], lr=1e-3, capturable=True).state_dict()
    fresh = ElementStepAdam([parameter], lr=1e-3)
    fresh.load_state_dict(saved)
    assert fresh.param_groups[0]["capturable"] is False


# ---- TD3 under --compile --------------------------------------------------------------------------------------------
def _state(result: dict) -> dict:
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    return {name: state[name] for name in (*NETWORKS, "critic_optimizer")} | {"obs": state["obs"]}


def _assert_states_close(a: dict, b: dict, rtol: float = 1e-6, atol: float = 1e-7) -> None:
    for (name, x), y in zip(torch.utils._pytree.tree_flatten_with_path(a)[0], torch.utils._pytree.tree_leaves(b)):
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(x, y, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


def _count_compiled_graphs(monkeypatch) -> list:
    """The graphs dynamo hands to the backend from now on (run as they were traced)."""
    graphs_seen = []

    def counting_backend(graph_module, example_inputs):
        graphs_seen.append(graph_module)
        return graph_module.forward

    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", counting_backend)
    return graphs_seen


def test_td3_compiles_its_losses_and_acting_step_as_single_graphs(runs_dir, monkeypatch):
    """fullgraph=True turns any graph break into an error: no .item(), nonzero, boolean-mask indexing or Python branch
    on a tensor in TD3's losses, in the loss remedies (L2, L2-init, Parseval, C-CHAIN) or in the acting step."""
    graphs_seen = _count_compiled_graphs(monkeypatch)
    result = td3.main(
        td3.Args(total_timesteps=260, learning_starts=200, compile=True, runs_dir=runs_dir, **TINY, **LOSS_REMEDIES)
    )
    assert result["num_updates"] == 60
    # critic loss, actor loss, acting step; C-CHAIN's first update (no snapshot yet) is one more graph per loss
    assert len(graphs_seen) == 5


@pytest.mark.parametrize("flags", [LOSS_REMEDIES, SCALE], ids=["loss-remedies", "scale-flags"])
def test_compiled_td3_equals_eager_td3_on_pendulum(flags, runs_dir, monkeypatch):
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    common = dict(total_timesteps=500, learning_starts=200, runs_dir=runs_dir, **TINY, **flags)
    eager = td3.main(td3.Args(exp_name="eager", **common))
    compiled = td3.main(td3.Args(exp_name="compiled", compile=True, **common))
    assert compiled["num_updates"] == 300
    _assert_states_close(_state(eager), _state(compiled))


@pytest.mark.parametrize("remedies", [{}, LOSS_REMEDIES], ids=["scale", "scale-and-loss-remedies"])
def test_td3_scale_flags_compile_as_single_graphs(remedies, runs_dir, monkeypatch):
    """The categorical target (projection by scatter-adds), the n-step batch's discounts, the normaliser and the
    per-env noise scales trace without a graph break."""
    graphs_seen = _count_compiled_graphs(monkeypatch)
    result = td3.main(
        td3.Args(total_timesteps=260, learning_starts=200, compile=True, runs_dir=runs_dir, **TINY, **SCALE, **remedies)
    )
    assert result["num_updates"] == 60
    assert len(graphs_seen) == (5 if remedies else 3)


def test_a_resume_may_switch_compile_on_and_continues_exactly(runs_dir, monkeypatch):
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    common = dict(learning_starts=200, runs_dir=runs_dir, **TINY)
    straight = td3.main(td3.Args(total_timesteps=600, exp_name="straight", **common))
    half = td3.main(td3.Args(total_timesteps=350, exp_name="split", **common))
    resumed = td3.main(td3.Args(total_timesteps=600, exp_name="split", compile=True, resume=half["run_dir"], **common))
    assert resumed["global_step"] == 600
    _assert_states_close(_state(straight), _state(resumed))


ORACLE = dict(
    env_id="continual:obs-offset:Pendulum-v1",
    total_timesteps=600,
    learning_starts=100,
    continual=ContinualArgs(steps_per_task=200, num_tasks=3, oracle=True),
)


def test_compiled_td3_follows_the_oracle_through_task_switches(runs_dir, monkeypatch):
    """The oracle re-initialises every network and drops the optimiser state at each switch (a full reset)."""
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    common = dict(runs_dir=runs_dir, **(TINY | ORACLE))
    eager = td3.main(td3.Args(exp_name="eager", **common))
    compiled = td3.main(td3.Args(exp_name="compiled", compile=True, **common))
    assert [task["task"] for task in compiled["tasks"]] == [0, 1, 2]
    _assert_states_close(_state(eager), _state(compiled))


# ---- SAC+SimBa and Double DQN under --compile ---------------------------------------------------------------------
SAC_TINY = dict(
    env_id="Pendulum-v1",
    batch_size=32,
    actor_width=16,
    critic_width=16,
    critic_blocks=1,
    mlp_hidden_sizes=(16, 16),
    eval_episodes=1,
    eval_every=0,
    progress=False,
    buffer_size=5_000,
)
SAC_STATE = ("actor", "critic", "critic_target", "temperature")  # the observation statistics are inside the networks
# SAC's many-env flags (docs/agents/sac_simba.md): C51 twin critics, 3-step returns over two envs (normalisation is on)
SAC_SCALE = dict(
    num_envs=2, n_step=3, critic=CriticArgs(distributional=True, num_atoms=21, v_min=-200.0, v_max=10.0), clipped_double_q="on"
)
DDQN_TINY = dict(batch_size=32, hidden_sizes=(32, 32), eval_episodes=1, eval_every=0, progress=False, buffer_size=5_000)
DDQN_STATE = ("critic", "critic_target")
# CartPole's recipe (gradient norm clipped at 10) with a learning phase every 2 steps and a target copy every 50
CARTPOLE = dict(
    env_id="CartPole-v1",
    total_timesteps=500,
    learning_starts=200,
    train_frequency=2,
    gradient_steps=2,
    target_network_frequency=50,
)
# Atari frame stacks through FrameStackReplay (Nature CNN): a random evaluation, so that the final game ends fast
BREAKOUT = dict(
    env_id="ALE/Breakout-v5",
    total_timesteps=260,
    learning_starts=200,
    train_frequency=2,
    gradient_steps=1,
    target_network_frequency=20,
    batch_size=16,
    buffer_size=1_000,
    eval_epsilon=1.0,
)


def _checkpoint(result: dict, names: tuple[str, ...], optimizers: tuple[str, ...] = ()) -> dict:
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    return {name: state[name] for name in (*names, *optimizers)} | {"obs": state["obs"], "actions": state["replay"]["actions"]}


def _ddqn_args(recipe: dict, **flags):
    recipe = recipe | flags
    return ddqn.Args.defaults_for(recipe.pop("env_id"), **(DDQN_TINY | recipe))


def test_sac_compiles_its_losses_and_acting_step_as_single_graphs(runs_dir, monkeypatch):
    """As TD3's: SimBa's actor, temperature and critic losses (remedy penalties included) and its acting step (the MLP
    variant traces with fullgraph in the next test)."""
    graphs_seen = []
    monkeypatch.setitem(
        graphs.COMPILE_OPTIONS,
        "backend",
        lambda graph_module, example_inputs: graphs_seen.append(graph_module) or graph_module.forward,
    )
    result = sac_simba.main(
        sac_simba.Args(
            total_timesteps=230,
            learning_starts=200,
            clipped_double_q="on",
            compile=True,
            runs_dir=runs_dir,
            **SAC_TINY,
            **LOSS_REMEDIES,
        )
    )
    assert result["num_updates"] == 60
    # actor, temperature and critic losses, acting step; C-CHAIN's first update is one more graph per network's loss
    assert len(graphs_seen) == 6


def test_sac_scale_flags_compile_as_single_graphs(runs_dir, monkeypatch):
    """The soft categorical target (the entropy-shifted support, projected by scatter-adds) and the n-step batch's
    discounts trace without a graph break, for twin critics and for one."""
    graphs_seen = []
    monkeypatch.setitem(
        graphs.COMPILE_OPTIONS,
        "backend",
        lambda graph_module, example_inputs: graphs_seen.append(graph_module) or graph_module.forward,
    )
    for critics in ("on", "off"):
        torch._dynamo.reset()
        graphs_seen.clear()
        result = sac_simba.main(
            sac_simba.Args(
                total_timesteps=260,
                learning_starts=200,
                compile=True,
                runs_dir=runs_dir,
                exp_name=f"critics-{critics}",
                **(SAC_TINY | SAC_SCALE | dict(clipped_double_q=critics)),
            )
        )
        assert result["num_updates"] == 60
        assert len(graphs_seen) == 4  # actor, temperature and critic losses and the acting step


def test_ddqn_compiles_its_loss_and_acting_step_as_single_graphs(runs_dir, monkeypatch):
    """ε reaches the acting step as a tensor: a Python float would be a constant of the graph, compiled again at every step."""
    graphs_seen = []
    monkeypatch.setitem(
        graphs.COMPILE_OPTIONS,
        "backend",
        lambda graph_module, example_inputs: graphs_seen.append(graph_module) or graph_module.forward,
    )
    result = ddqn.main(_ddqn_args(CARTPOLE, total_timesteps=260, compile=True, runs_dir=runs_dir, **LOSS_REMEDIES))
    assert result["num_updates"] == 60
    assert len(graphs_seen) == 3  # TD loss, acting step, and the TD loss again at C-CHAIN's first update


@pytest.mark.parametrize(
    "flags",
    [
        dict(clipped_double_q="on", least=LEASTArgs(enabled=True, start=0.0, min_history=1)),
        dict(
            network="mlp",
            clipped_double_q="on",
            reuse_batch=True,
            actor_q="mean",
            cir=CIRArgs(critic=True, width=16, convex_lambda=0.3),
            reset=ResetArgs(method="redo", every=100, networks="actor", redo_batch=32),
        ),
        SAC_SCALE | dict(network="mlp", least=LEASTArgs(enabled=True, start=0.0, min_history=1)),
    ],
    ids=["simba-cdq-least", "mlp-cir-reuse-redo", "scale-flags-least"],
)
def test_compiled_sac_equals_eager_sac_on_pendulum(flags, runs_dir, monkeypatch):
    """Updates-per-step 2, the normaliser, the temperature's own Adam; the loss remedies' tracing is TD3's test's."""
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    common = dict(total_timesteps=300, learning_starts=200, runs_dir=runs_dir, **SAC_TINY, **flags)
    eager = sac_simba.main(sac_simba.Args(exp_name="eager", **common))
    compiled = sac_simba.main(sac_simba.Args(exp_name="compiled", compile=True, **common))
    assert compiled["num_updates"] == 200 // flags.get("num_envs", 1)  # two updates per vector step from step 200
    optimizers = ("actor_optimizer", "critic_optimizer", "alpha_optimizer")
    _assert_states_close(_checkpoint(eager, SAC_STATE, optimizers), _checkpoint(compiled, SAC_STATE, optimizers))


@pytest.mark.parametrize(
    "recipe, flags",
    [
        (CARTPOLE, dict()),
        (
            CARTPOLE,
            dict(
                loss="mse",
                reset=ResetArgs(method="redo", every=100, redo_batch=32),
                swd=SWDArgs(enabled=True, decay_steps=100),
            ),
        ),
        (BREAKOUT, dict()),
    ],
    ids=["cartpole-huber-clipped", "cartpole-mse-redo-swd", "breakout-frame-stacks"],
)
def test_compiled_ddqn_equals_eager_ddqn(recipe, flags, runs_dir, monkeypatch):
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    eager = ddqn.main(_ddqn_args(recipe, exp_name="eager", runs_dir=runs_dir, **flags))
    compiled = ddqn.main(_ddqn_args(recipe, exp_name="compiled", compile=True, runs_dir=runs_dir, **flags))
    assert compiled["num_updates"] == (300 if recipe is CARTPOLE else 30)
    _assert_states_close(
        _checkpoint(eager, DDQN_STATE, ("critic_optimizer",)), _checkpoint(compiled, DDQN_STATE, ("critic_optimizer",))
    )


# ---- SAC+SimBa and Double DQN under --cudagraphs, the capture simulated on CPU ---------------------------------------
class ReplayedOnCPU(GraphStep):
    """GraphStep with CUDA's timing of side effects: capturing runs nothing, each replay runs the step once on the static
    input buffers and writes into the outputs of the first replay (SimulatedGraphStep runs the step when recording)."""

    def _run_eagerly(self, inputs):
        self.eager_calls = getattr(self, "eager_calls", 0) + 1
        return self.fn(*inputs)

    @staticmethod
    def _record(call):
        return call, None

    def _replay(self) -> None:
        outputs = self.graph()
        if self.static_outputs is None:
            self.static_outputs = outputs
        for static, fresh in zip(
            torch.utils._pytree.tree_leaves(self.static_outputs), torch.utils._pytree.tree_leaves(outputs)
        ):
            static.copy_(fresh)


def _simulated_cudagraphs(monkeypatch, module) -> list[ReplayedOnCPU]:
    """Let `module` run with --cudagraphs on CPU, its steps replayed by ReplayedOnCPU; returns its steps."""
    import cleanrl_plus.run

    steps = []

    class RecordedStep(ReplayedOnCPU):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            steps.append(self)

    monkeypatch.setattr(module, "GraphStep", RecordedStep)
    monkeypatch.setattr(cleanrl_plus.run, "check_flags", lambda args, device: None)
    return steps


@pytest.mark.parametrize("agent", ["sac_simba", "ddqn"])
def test_each_step_is_captured_once_and_replayed_with_every_input_copied_in(agent, runs_dir, monkeypatch):
    """A step whose signature changes from call to call (a Python number among its inputs, a batch of another shape)
    would be captured again and again on a GPU; a replay that read anything but its inputs' static copies, or an
    output kept past the next replay, would drift from the eager run."""
    cchain = dict(cchain=CChainArgs(enabled=True, warmup=50))  # a reference batch among the update's inputs
    if agent == "sac_simba":
        common = dict(total_timesteps=300, learning_starts=200, runs_dir=runs_dir, **SAC_TINY, **cchain)
        eager = sac_simba.main(sac_simba.Args(exp_name="eager", **common))
        steps = _simulated_cudagraphs(monkeypatch, sac_simba)
        replayed = sac_simba.main(sac_simba.Args(exp_name="graphs", cudagraphs=True, **common))
        names = SAC_STATE
    else:
        eager = ddqn.main(_ddqn_args(CARTPOLE, exp_name="eager", runs_dir=runs_dir, **cchain))
        steps = _simulated_cudagraphs(monkeypatch, ddqn)
        replayed = ddqn.main(_ddqn_args(CARTPOLE, exp_name="graphs", cudagraphs=True, runs_dir=runs_dir, **cchain))
        names = DDQN_STATE
    # the update and the acting step, once each: the update warms up again only after its first call creates Adam's state
    assert [step.captures for step in steps] == [1, 1]
    assert [step.eager_calls for step in steps] == [1 + steps[0].warmup, steps[1].warmup]
    _assert_states_close(_checkpoint(eager, names), _checkpoint(replayed, names))


# ---- PPO and GTR under --compile -----------------------------------------------------------------------------------
# anneal_clip: the clip range, like the lr, is a tensor changed in place every iteration
PPO_TINY = dict(
    num_envs=2,
    num_steps=64,
    num_minibatches=4,
    update_epochs=2,
    hidden_sizes=(16, 16),
    eval_episodes=1,
    eval_every=0,
    progress=False,
    anneal_clip=True,
    threads=1,
)  # one thread: two OpenMP threads crawl on a shared box
ON_POLICY = {"ppo-discrete": (ppo, "CartPole-v1"), "ppo-continuous": (ppo, "Pendulum-v1"), "gtr": (gtr, "Pendulum-v1")}
PPO_STATE = ("agent", "agent_optimizer", "obs_normalizer", "reward_scaler", "trust_region", "plasticity", "obs")


def _run_on_policy(name: str, **flags) -> dict:
    module, env_id = ON_POLICY[name]
    return module.main(module.Args(env_id=env_id, **(PPO_TINY | flags)))


def _ppo_state(result: dict) -> dict:
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    return {name: state[name] for name in PPO_STATE if name in state}


@pytest.mark.parametrize("name", list(ON_POLICY))
def test_ppo_and_gtr_compile_their_loss_and_acting_step_as_single_graphs(name, runs_dir, monkeypatch):
    """fullgraph=True turns any graph break into an error: no sync or Python branch on a tensor in the clipped loss, GTR's
    penalty, the loss remedies or the sampling from noise drawn outside. And a new lr and clip range every iteration
    compile nothing new: they are tensors changed in place, not values a graph would bake in."""
    graphs_seen = []

    def counting_backend(graph_module, example_inputs):
        graphs_seen.append(graph_module)
        return graph_module.forward

    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", counting_backend)
    result = _run_on_policy(name, total_timesteps=640, compile=True, runs_dir=runs_dir, **LOSS_REMEDIES)
    assert result["num_updates"] == 40  # 5 iterations
    # the loss and the acting step; C-CHAIN's first update (no snapshot yet) is one more graph
    assert len(graphs_seen) == 3


@pytest.mark.parametrize("name", list(ON_POLICY))
def test_compiled_ppo_and_gtr_equal_eager_ones(name, runs_dir, monkeypatch):
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    common = dict(total_timesteps=1536, update_epochs=4, runs_dir=runs_dir, **LOSS_REMEDIES)
    eager = _run_on_policy(name, exp_name="eager", **common)
    compiled = _run_on_policy(name, exp_name="compiled", compile=True, **common)
    assert compiled["num_updates"] == 192
    _assert_states_close(_ppo_state(eager), _ppo_state(compiled))


# Atari: the Nature-CNN torso on uint8 frame stacks, CleanRL's recipe shrunk to a few updates
PPO_BREAKOUT = dict(
    total_timesteps=192,
    num_envs=2,
    num_steps=32,
    num_minibatches=2,
    update_epochs=2,
    eval_episodes=1,
    eval_every=0,
    progress=False,
    threads=1,
)


def _run_on_breakout(module, **flags) -> dict:
    return module.main(module.Args.defaults_for("ALE/Breakout-v5", **(PPO_BREAKOUT | flags)))


def test_ppo_on_frames_compiles_its_loss_and_acting_step_as_single_graphs(runs_dir, monkeypatch):
    graphs_seen = _count_compiled_graphs(monkeypatch)
    result = _run_on_breakout(ppo, compile=True, runs_dir=runs_dir)
    assert result["num_updates"] == 12
    assert len(graphs_seen) == 2  # fullgraph: uint8 frames /255 and the shared torso break nothing


@pytest.mark.parametrize("module", [ppo, gtr])
def test_compiled_ppo_and_gtr_on_breakout_equal_eager_ones(module, runs_dir, monkeypatch):
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    eager = _run_on_breakout(module, exp_name="eager", runs_dir=runs_dir)
    compiled = _run_on_breakout(module, exp_name="compiled", compile=True, runs_dir=runs_dir)
    assert compiled["num_updates"] == 12
    _assert_states_close(_ppo_state(eager), _ppo_state(compiled))


def test_a_gtr_resume_may_switch_compile_on_and_continues_exactly(runs_dir, monkeypatch):
    """The resumed run reloads the anchor's policies and points the loaded optimiser at the annealed lr tensor again."""
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    common = dict(runs_dir=runs_dir, reset=ResetArgs(method="shrink-perturb", every=10))
    straight = _run_on_policy("gtr", total_timesteps=640, exp_name="straight", **common)
    half = _run_on_policy("gtr", total_timesteps=128, exp_name="split", **common)  # one rollout: the anneals agree up to here
    resumed = _run_on_policy("gtr", total_timesteps=640, exp_name="split", compile=True, resume=half["run_dir"], **common)
    assert resumed["global_step"] == 640
    _assert_states_close(_ppo_state(straight), _ppo_state(resumed))


@pytest.mark.parametrize("space", [gym.spaces.Discrete(5), gym.spaces.Box(-1.0, 1.0, (3,))], ids=["discrete", "continuous"])
def test_sampling_from_noise_drawn_outside_gives_torchs_own_draws(space):
    """The acting step takes its random numbers as an input (a captured graph draws none): they must turn into the very
    actions torch's samplers draw from the same stream, so CPU runs keep their numbers. The stream is the member's own
    generator (seeded by its seed), which a draw through `Members` leaves where torch's sampler leaves it."""
    from cleanrl_plus.members import Members

    torch.manual_seed(0)
    policy = Policy(1, 4, space, (16,), "tanh")  # one member: observations (1, B, 4)
    with torch.no_grad():
        for parameter in policy.parameters():  # away from the near-uniform initial policy
            parameter.normal_(0.0, 1.0)
    obs = torch.randn(1, 256, 4)
    with torch.no_grad():
        dist = policy.distribution(obs)
        torch.manual_seed(1)
        expected = dist.sample()
        stream_after = torch.get_rng_state()
        global_before = torch.get_rng_state()
        members = Members((1,))  # the member of seed 1: its generator is the stream torch.manual_seed(1) starts
        actions, logprobs = policy.sample(obs, policy.noise(members, 1, 256)[:, 0])
    assert torch.equal(actions, expected) and torch.equal(members.generators[0].get_state(), stream_after)
    assert torch.equal(torch.get_rng_state(), global_before)  # torch's global stream is left alone
    expected_logprobs = dist.log_prob(expected)
    torch.testing.assert_close(logprobs, expected_logprobs.sum(-1) if policy.continuous else expected_logprobs, rtol=0, atol=0)
    assert len(actions[0].unique(dim=0)) > 4  # a policy that samples, not one that always picks the same action


def test_what_a_captured_ppo_step_reads_stays_the_same_tensor(runs_dir, monkeypatch):
    """A replayed graph reads the tensors it captured: the rollout storage (values, advantages, returns, GTR's anchor
    log-probs) and the lr must be written in place every iteration, and GTR's anchor policies too once J are kept."""
    pointers, optimizers, trust_regions = [], [], []
    make_optimizer = ppo.make_optimizer
    monkeypatch.setattr(ppo, "make_optimizer", lambda *a, **k: optimizers.append(make_optimizer(*a, **k)) or optimizers[-1])

    class RecordingTrustRegion(gtr.GaussianTrustRegion):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            trust_regions.append(self)

    class RecordingStorage(ppo.RolloutStorage):
        def gather(self, indices):
            snapshots = trust_regions[0].anchor.snapshots
            anchor = [p.data_ptr() for policy in snapshots for p in policy.parameters()] if len(snapshots) == 2 else []
            lrs = [group["lr"].data_ptr() for group in optimizers[0].param_groups]
            pointers.append((tuple(t.data_ptr() for t in self.flat()), tuple(lrs), tuple(anchor)))
            return super().gather(indices)

    monkeypatch.setattr(ppo, "RolloutStorage", RecordingStorage)
    monkeypatch.setattr(gtr, "GaussianTrustRegion", RecordingTrustRegion)
    _run_on_policy("gtr", total_timesteps=640, runs_dir=runs_dir, gtr=gtr.GTRArgs(anchor_size=2))
    assert len(pointers) == 40
    assert len({storage for storage, _, _ in pointers}) == 1, "a rollout tensor was replaced instead of written in place"
    assert len({lr for _, lr, _ in pointers}) == 1, "the lr tensor was replaced"
    assert len({anchor for _, _, anchor in pointers[8:]}) == 1, "an anchor policy was replaced instead of updated in place"


# ---- refusals at start-up -------------------------------------------------------------------------------------------
def test_cudagraphs_without_cuda_is_one_line_before_anything_is_created(runs_dir):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --cudagraphs is valid here")
    with pytest.raises(UserError, match="--cudagraphs captures CUDA graphs and needs a CUDA device"):
        td3.main(td3.Args(total_timesteps=100, cudagraphs=True, runs_dir=runs_dir, **TINY))
    assert not Path(runs_dir).exists() or not any(Path(runs_dir).iterdir())


def test_compile_without_a_working_inductor_is_one_line(runs_dir, monkeypatch):
    monkeypatch.setattr(graphs, "compile_problem", lambda device: "inductor needs a C++ compiler for CPU kernels (no g++)")
    with pytest.raises(UserError, match="--compile: inductor needs a C\\+\\+ compiler .* drop --compile"):
        td3.main(td3.Args(total_timesteps=100, compile=True, runs_dir=runs_dir, **TINY))


@pytest.mark.parametrize(
    "flags, message",
    [
        (dict(compile=True, optim=OptimArgs(name="kron")), "Kron .* cannot run with --compile"),
        (dict(cudagraphs=True, optim=OptimArgs(name="kron")), "Kron .* cannot run with --cudagraphs"),
        (dict(cudagraphs=True, reset=ResetArgs(method="cbp")), "continual backprop .* cannot run with --cudagraphs"),
    ],
)
def test_the_catalogue_refuses_what_cannot_run_under_the_speed_flags(flags, message):
    from plasticity import catalogue

    with pytest.raises(UserError, match=message):
        catalogue.check("td3", td3.Args(**flags))
    catalogue.check("td3", td3.Args(**{key: value for key, value in flags.items() if key in ("compile", "cudagraphs")}))


def test_ppo_cudagraphs_refuses_a_rollout_that_does_not_split_into_equal_minibatches(runs_dir):
    with pytest.raises(UserError, match="does not split into 32 equal minibatches"):
        ppo.main(ppo.Args(env_id="CartPole-v1", num_steps=100, num_minibatches=32, cudagraphs=True, runs_dir=runs_dir))
    assert not Path(runs_dir).exists() or not any(Path(runs_dir).iterdir())


def test_every_agent_takes_the_speed_flags():
    from plasticity import catalogue

    for agent, args in (
        ("td3", td3.Args),
        ("sac_simba", sac_simba.Args),
        ("ddqn", ddqn.Args),
        ("ppo", ppo.Args),
        ("gtr", gtr.Args),
    ):
        catalogue.check(agent, args(compile=True, cudagraphs=True))


# ---- on a CUDA device ---------------------------------------------------------------------------------------------
CUDA = dict(device="cuda", **TINY)


def _cuda_state(result: dict) -> dict:
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    return {name: state[name] for name in NETWORKS}


def _assert_cuda_close(a: dict, b: dict, rtol: float = 1e-3, atol: float = 1e-4) -> None:
    """Eager CUDA and replayed graphs run the same kernels (and the same fused Adam); the tolerance covers cuBLAS picking
    another algorithm inside a capture and its rounding growing over a few hundred updates. A replay on a stale batch,
    a step that was not captured again after a reset or a lost remedy state is off by far more."""
    for name in a:
        for key in a[name]:
            torch.testing.assert_close(a[name][key], b[name][key], rtol=rtol, atol=atol, msg=lambda m: f"{name}.{key}: {m}")


@pytest.fixture
def captures(monkeypatch) -> list:
    """The CUDA graph captures of the test, in order (GraphStep._record wrapped)."""
    recorded, record = [], GraphStep._record

    def counting_record(call):
        recorded.append(call)
        return record(call)

    monkeypatch.setattr(GraphStep, "_record", staticmethod(counting_record))
    return recorded


@pytest.mark.cuda
def test_a_real_graph_replays_in_place_updates_and_recaptures_on_a_new_parameter():
    weight = torch.zeros(4, device="cuda")
    state = {"bias": torch.ones(4, device="cuda")}

    def step(x):
        weight.add_(x)  # state changed in place: every replay adds again
        return (weight * 2 + state["bias"]).sum()

    graph_step = GraphStep(step, cudagraphs=True, watch=[weight, state["bias"]], warmup=2)
    results = [graph_step(torch.ones(4, device="cuda")).item() for _ in range(5)]
    assert graph_step.captures == 1
    assert results == [2 * 4 * k + 4 for k in range(1, 6)]  # the weight grew by one at every call, replays included
    graph_step.watch = (weight, torch.full((4,), 10.0, device="cuda"))
    state["bias"] = graph_step.watch[1]  # a replaced tensor: the old graph would read the stale one
    assert graph_step(torch.ones(4, device="cuda")).item() == 2 * 4 * 6 + 40
    for _ in range(3):
        graph_step(torch.ones(4, device="cuda"))
    assert graph_step.captures == 2


@pytest.mark.cuda
@pytest.mark.parametrize(
    "flags",
    [dict(), dict(reset=ResetArgs(method="redo", every=100)), LOSS_REMEDIES, SCALE],
    ids=["td3", "redo", "loss-and-step-remedies", "scale-flags"],
)
def test_td3_cudagraphs_follows_eager_td3(flags, runs_dir):
    common = dict(total_timesteps=500, learning_starts=200, runs_dir=runs_dir, **CUDA, **flags)
    eager = td3.main(td3.Args(exp_name="eager", **common))
    captured = td3.main(td3.Args(exp_name="graphs", cudagraphs=True, **common))
    _assert_cuda_close(_cuda_state(eager), _cuda_state(captured))


@pytest.mark.cuda
@pytest.mark.parametrize("method", ["inject", "full"])
def test_td3_cudagraphs_captures_again_after_a_structural_change_or_a_dropped_optimiser_state(method, runs_dir, captures):
    common = dict(
        total_timesteps=600, learning_starts=200, runs_dir=runs_dir, reset=ResetArgs(method=method, every=150), **CUDA
    )
    eager = td3.main(td3.Args(exp_name="eager", **common))
    assert not captures
    captured = td3.main(td3.Args(exp_name="graphs", cudagraphs=True, **common))
    assert len(captures) > 3  # critic update, actor update, acting step, and again after each event
    _assert_cuda_close(_cuda_state(eager), _cuda_state(captured))


@pytest.mark.cuda
def test_td3_cudagraphs_follows_the_oracle_through_task_switches(runs_dir):
    common = dict(runs_dir=runs_dir, **(CUDA | ORACLE))
    eager = td3.main(td3.Args(exp_name="eager", **common))
    captured = td3.main(td3.Args(exp_name="graphs", cudagraphs=True, **common))
    assert [task["task"] for task in captured["tasks"]] == [0, 1, 2]
    _assert_cuda_close(_cuda_state(eager), _cuda_state(captured))


@pytest.mark.cuda
def test_td3_cudagraphs_resumes_exactly(runs_dir):
    common = dict(learning_starts=200, runs_dir=runs_dir, cudagraphs=True, **CUDA)
    straight = td3.main(td3.Args(total_timesteps=600, exp_name="straight", **common))
    half = td3.main(td3.Args(total_timesteps=350, exp_name="split", **common))
    resumed = td3.main(td3.Args(total_timesteps=600, exp_name="split", resume=half["run_dir"], **common))
    # the resumed run warms up (eager) where the straight one replays: equal up to kernel rounding, not bit for bit
    _assert_cuda_close(_cuda_state(straight), _cuda_state(resumed))


def _strict(method, checked: list, ready=lambda *args: True):
    """`method` with torch's sync debug mode set to error (once `ready(self)`); its name goes to `checked` each time."""

    def wrapped(self, *args, **kwargs):
        if not ready(self):
            return method(self, *args, **kwargs)
        torch.cuda.set_sync_debug_mode("error")
        try:
            return method(self, *args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode("default")
            checked.append(method.__name__)

    return wrapped


@pytest.mark.cuda
def test_td3_learning_steps_never_wait_for_the_gpu_once_captured(runs_dir, monkeypatch):
    """torch's sync debug mode turns a host sync into an error: sampling (uniform and SWD) and every replayed step."""
    from cleanrl_plus.normalization import RunningMeanStd
    from cleanrl_plus.replay import NStepReplay, ReplayBuffer

    checked = []
    monkeypatch.setattr(GraphStep, "__call__", _strict(GraphStep.__call__, checked, ready=lambda step: step.graph is not None))
    for cls, method in (
        (ReplayBuffer, "sample"),
        (NStepReplay, "sample"),
        (RunningMeanStd, "update"),
        (td3.ExplorationScales, "redraw"),
    ):
        monkeypatch.setattr(cls, method, _strict(getattr(cls, method), checked))
    for swd in (SWDArgs(), SWDArgs(enabled=True, decay_steps=100), SWDArgs(enabled=True, decay_steps=100, mode="augment")):
        td3.main(
            td3.Args(
                total_timesteps=300,
                learning_starts=200,
                cudagraphs=True,
                runs_dir=runs_dir,
                swd=swd,
                exp_name=f"sync-{swd.enabled}-{swd.mode}",
                **CUDA,
            )
        )
    assert checked.count("__call__") > 100 and checked.count("sample") > 100
    td3.main(
        td3.Args(
            total_timesteps=300,
            learning_starts=200,
            cudagraphs=True,
            runs_dir=runs_dir,
            exp_name="sync-scale",
            **CUDA,
            **SCALE,
        )
    )
    assert checked.count("update") > 100 and checked.count("redraw") > 100


@pytest.mark.cuda
def test_td3_compile_and_cudagraphs_together_follow_eager(runs_dir):
    """inductor's kernels round differently from eager ones: fewer updates, a looser tolerance than the replay above."""
    common = dict(total_timesteps=300, learning_starts=200, runs_dir=runs_dir, **CUDA)
    eager = td3.main(td3.Args(exp_name="eager", **common))
    fast = td3.main(td3.Args(exp_name="fast", compile=True, cudagraphs=True, **common))
    _assert_cuda_close(_cuda_state(eager), _cuda_state(fast), rtol=1e-2, atol=1e-3)


# ---- SAC+SimBa and Double DQN on a CUDA device ---------------------------------------------------------------------
SAC_CUDA = dict(device="cuda", **SAC_TINY)
CUDA_TOLERANCE = dict(rtol=1e-3, atol=1e-4)  # _assert_cuda_close's: cuBLAS rounding inside a capture, not a stale input


def _networks(result: dict, names: tuple[str, ...]) -> dict:
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    return {name: state[name] for name in names}


def _run_sac_or_ddqn(agent: str, runs_dir: str, **flags) -> tuple[dict, tuple[str, ...]]:
    """A short CUDA run of SAC (Pendulum, 200 updates) or DDQN (CartPole, 300 updates) and the names of its networks."""
    if agent == "sac_simba":
        return sac_simba.main(
            sac_simba.Args(**(dict(total_timesteps=300, learning_starts=200, runs_dir=runs_dir, **SAC_CUDA) | flags))
        ), SAC_STATE
    return ddqn.main(_ddqn_args(CARTPOLE, device="cuda", runs_dir=runs_dir, **flags)), DDQN_STATE


@pytest.mark.cuda
@pytest.mark.parametrize(
    "flags",
    [
        dict(),
        dict(network="mlp", clipped_double_q="on", reset=ResetArgs(method="redo", every=100, redo_batch=32)),
        dict(clipped_double_q="on", **LOSS_REMEDIES),
        dict(least=LEASTArgs(enabled=True, start=0.0, min_history=1), swd=SWDArgs(enabled=True, decay_steps=100)),
        SAC_SCALE,
        SAC_SCALE | dict(clipped_double_q="off", network="mlp"),
    ],
    ids=["simba", "mlp-cdq-redo", "loss-and-step-remedies", "least-swd", "scale-flags", "scale-flags-one-critic"],
)
def test_sac_cudagraphs_follows_eager_sac(flags, runs_dir):
    eager, names = _run_sac_or_ddqn("sac_simba", runs_dir, exp_name="eager", **flags)
    captured, _ = _run_sac_or_ddqn("sac_simba", runs_dir, exp_name="graphs", cudagraphs=True, **flags)
    _assert_states_close(_networks(eager, names), _networks(captured, names), **CUDA_TOLERANCE)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "recipe, flags",
    [
        (CARTPOLE, dict()),
        (CARTPOLE, dict(reset=ResetArgs(method="redo", every=100, redo_batch=32))),
        (CARTPOLE, LOSS_REMEDIES),
        (BREAKOUT, dict(swd=SWDArgs(enabled=True, decay_steps=50))),
    ],
    ids=["cartpole", "redo", "loss-and-step-remedies", "breakout-frame-stacks-swd"],
)
def test_ddqn_cudagraphs_follows_eager_ddqn(recipe, flags, runs_dir):
    """The hard target copy every 50 (CartPole) or 20 (Breakout) steps lands in the tensors the captured update reads."""
    eager = ddqn.main(_ddqn_args(recipe, exp_name="eager", device="cuda", runs_dir=runs_dir, **flags))
    captured = ddqn.main(_ddqn_args(recipe, exp_name="graphs", cudagraphs=True, device="cuda", runs_dir=runs_dir, **flags))
    _assert_states_close(_networks(eager, DDQN_STATE), _networks(captured, DDQN_STATE), **CUDA_TOLERANCE)


@pytest.mark.cuda
@pytest.mark.parametrize("agent", ["sac_simba", "ddqn"])
@pytest.mark.parametrize("method", ["inject", "full"])
def test_sac_and_ddqn_cudagraphs_capture_again_after_a_structural_change_or_a_dropped_optimiser_state(
    agent, method, runs_dir, captures
):
    # SAC's actor has two output layers (mean and log σ): injection goes into its critic
    reset = ResetArgs(method=method, every=120, networks="critic" if (agent, method) == ("sac_simba", "inject") else "both")
    eager, names = _run_sac_or_ddqn(agent, runs_dir, exp_name="eager", reset=reset)
    assert not captures
    captured, _ = _run_sac_or_ddqn(agent, runs_dir, exp_name="graphs", cudagraphs=True, reset=reset)
    assert len(captures) > 2  # the update and the acting step, and the update again after each event
    _assert_states_close(_networks(eager, names), _networks(captured, names), **CUDA_TOLERANCE)


@pytest.mark.cuda
def test_sac_resumed_with_cudagraphs_switched_on_follows_the_straight_run(runs_dir):
    """The temperature's Adam keeps this run's `capturable` and finds its step count on the GPU after the resume."""
    common = dict(learning_starts=200, runs_dir=runs_dir, **SAC_CUDA)
    straight = sac_simba.main(sac_simba.Args(total_timesteps=400, exp_name="straight", **common))
    half = sac_simba.main(sac_simba.Args(total_timesteps=300, exp_name="split", **common))
    resumed = sac_simba.main(
        sac_simba.Args(total_timesteps=400, exp_name="split", cudagraphs=True, resume=half["run_dir"], **common)
    )
    assert resumed["global_step"] == 400
    _assert_states_close(_networks(straight, SAC_STATE), _networks(resumed, SAC_STATE), **CUDA_TOLERANCE)


@pytest.mark.cuda
def test_sac_and_ddqn_learning_steps_never_wait_for_the_gpu_once_captured(runs_dir, monkeypatch):
    """As TD3's, with SAC's observation statistics (updated at every acting step) and DDQN's frame-stack replay."""
    from cleanrl_plus.normalization import RunningMeanStd
    from cleanrl_plus.replay import NStepReplay, ReplayBuffer

    checked = []
    monkeypatch.setattr(GraphStep, "__call__", _strict(GraphStep.__call__, checked, ready=lambda step: step.graph is not None))
    monkeypatch.setattr(ReplayBuffer, "sample", _strict(ReplayBuffer.sample, checked))
    monkeypatch.setattr(RunningMeanStd, "update", _strict(RunningMeanStd.update, checked))
    _run_sac_or_ddqn("sac_simba", runs_dir, cudagraphs=True, swd=SWDArgs(enabled=True, decay_steps=100))
    assert checked.count("update") == 300 and checked.count("sample") == 200 and checked.count("__call__") > 250
    checked.clear()  # the n-step replay's sampling and the C51 update
    monkeypatch.setattr(NStepReplay, "sample", _strict(NStepReplay.sample, checked))
    _run_sac_or_ddqn("sac_simba", runs_dir, cudagraphs=True, exp_name="sync-scale", **SAC_SCALE)
    assert checked.count("update") == 150 and checked.count("sample") == 100 and checked.count("__call__") > 120
    for recipe in (CARTPOLE, BREAKOUT):
        checked.clear()
        ddqn.main(_ddqn_args(recipe, exp_name=f"sync-{recipe['env_id']}", device="cuda", cudagraphs=True, runs_dir=runs_dir))
        assert checked.count("sample") > 25 and checked.count("__call__") > 80


@pytest.mark.cuda
@pytest.mark.parametrize("agent", ["sac_simba", "ddqn"])
def test_sac_and_ddqn_compile_and_cudagraphs_together_follow_eager(agent, runs_dir):
    """As TD3's: inductor's kernels round differently from eager ones, hence the looser tolerance."""
    eager, names = _run_sac_or_ddqn(agent, runs_dir, exp_name="eager")
    fast, _ = _run_sac_or_ddqn(agent, runs_dir, exp_name="fast", compile=True, cudagraphs=True)
    _assert_states_close(_networks(eager, names), _networks(fast, names), rtol=1e-2, atol=1e-3)


# PPO and GTR: the acting step, GAE and the minibatch update are captured (the update after 3 calls, the acting step
# after 3 env steps, GAE after 3 rollouts); 6 rollouts of 128 steps replay all three. Discrete runs stay short: an
# action sampled near a tie may flip on kernel rounding, and the trajectories then part.
def _ppo_cuda_state(result: dict) -> dict:
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    return {"agent": state["agent"]}


@pytest.mark.cuda
@pytest.mark.parametrize(
    "name, flags",
    [
        ("ppo-discrete", dict()),
        ("ppo-continuous", dict()),
        ("gtr", dict()),
        ("ppo-continuous", LOSS_REMEDIES),
        ("ppo-continuous", dict(net=NetArgs(activation="relu"), reset=ResetArgs(method="redo", every=20))),
    ],
    ids=["discrete", "continuous", "gtr", "loss-and-step-remedies", "redo"],
)
def test_ppo_and_gtr_cudagraphs_follow_eager_ones(name, flags, runs_dir):
    common = dict(total_timesteps=768, runs_dir=runs_dir, device="cuda", **flags)
    eager = _run_on_policy(name, exp_name="eager", **common)
    captured = _run_on_policy(name, exp_name="graphs", cudagraphs=True, **common)
    assert captured["num_updates"] == 48
    _assert_cuda_close(_ppo_cuda_state(eager), _ppo_cuda_state(captured))


@pytest.mark.cuda
@pytest.mark.parametrize("module", [ppo, gtr])
def test_ppo_and_gtr_cudagraphs_on_breakout_follow_eager_ones(module, runs_dir):
    common = dict(runs_dir=runs_dir, device="cuda", total_timesteps=384)
    eager = _run_on_breakout(module, exp_name="eager", **common)
    captured = _run_on_breakout(module, exp_name="graphs", cudagraphs=True, **common)
    assert captured["num_updates"] == 24
    _assert_cuda_close(_ppo_cuda_state(eager), _ppo_cuda_state(captured))


@pytest.mark.cuda
@pytest.mark.parametrize("method", ["inject", "full"])
def test_ppo_cudagraphs_captures_again_after_a_structural_change_or_a_dropped_optimiser_state(method, runs_dir, captures):
    common = dict(total_timesteps=1024, runs_dir=runs_dir, device="cuda", reset=ResetArgs(method=method, every=20))
    eager = _run_on_policy("ppo-continuous", exp_name="eager", **common)
    assert not captures
    captured = _run_on_policy("ppo-continuous", exp_name="graphs", cudagraphs=True, **common)
    assert len(captures) > 3  # update, acting step, GAE, and again after the event
    _assert_cuda_close(_ppo_cuda_state(eager), _ppo_cuda_state(captured))


@pytest.mark.cuda
def test_ppo_cudagraphs_follows_the_oracle_through_task_switches(runs_dir):
    common = dict(
        env_id="continual:obs-offset:Pendulum-v1",
        total_timesteps=768,
        runs_dir=runs_dir,
        device="cuda",
        continual=ContinualArgs(steps_per_task=256, num_tasks=3, oracle=True),
    )
    eager = ppo.main(ppo.Args(exp_name="eager", **(PPO_TINY | common)))
    captured = ppo.main(ppo.Args(exp_name="graphs", cudagraphs=True, **(PPO_TINY | common)))
    assert [task["task"] for task in captured["tasks"]] == [0, 1, 2]
    _assert_cuda_close(_ppo_cuda_state(eager), _ppo_cuda_state(captured))


@pytest.mark.cuda
def test_gtr_cudagraphs_resumes_exactly(runs_dir):
    common = dict(runs_dir=runs_dir, device="cuda", cudagraphs=True)
    straight = _run_on_policy("gtr", total_timesteps=768, exp_name="straight", **common)
    half = _run_on_policy("gtr", total_timesteps=128, exp_name="split", **common)  # one rollout: the anneals agree up to here
    resumed = _run_on_policy("gtr", total_timesteps=768, exp_name="split", resume=half["run_dir"], **common)
    # the resumed run warms up (eager) where the straight one replays: equal up to kernel rounding, not bit for bit
    _assert_cuda_close(_ppo_cuda_state(straight), _ppo_cuda_state(resumed))


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["ppo-discrete", "gtr"])
def test_ppo_and_gtr_never_wait_for_the_gpu_between_env_steps_once_captured(name, runs_dir, monkeypatch):
    """torch's sync debug mode turns a host sync into an error: the replayed steps, the noise, the normalisers, the
    rollout storage and the minibatch permutation (the env itself copies to the host: gymnasium steps on the CPU)."""
    from cleanrl_plus.normalization import ObservationNormalizer, RewardScaler

    checked = []
    monkeypatch.setattr(GraphStep, "__call__", _strict(GraphStep.__call__, checked, ready=lambda step: step.graph is not None))
    for cls, method in (
        (Policy, "noise"),
        (ObservationNormalizer, "forward"),
        (RewardScaler, "forward"),
        (ppo.RolloutStorage, "add"),
        (ppo.RolloutStorage, "minibatch_indices"),
        (ppo.RolloutStorage, "gather"),
    ):
        monkeypatch.setattr(cls, method, _strict(getattr(cls, method), checked))
    _run_on_policy(
        name, total_timesteps=768, runs_dir=runs_dir, device="cuda", cudagraphs=True, cchain=CChainArgs(enabled=True)
    )
    # 6 iterations × 2 epochs, each drawing the training permutation and C-CHAIN's reference pass (plasticity/wiring.py);
    # the reference pass's 4 gathers an epoch run outside the graphs
    assert checked.count("__call__") > 300 and checked.count("minibatch_indices") == 24 and checked.count("gather") >= 48


@pytest.mark.cuda
def test_ppo_compile_and_cudagraphs_together_follow_eager(runs_dir):
    common = dict(total_timesteps=512, runs_dir=runs_dir, device="cuda")
    eager = _run_on_policy("ppo-continuous", exp_name="eager", **common)
    fast = _run_on_policy("ppo-continuous", exp_name="fast", compile=True, cudagraphs=True, **common)
    _assert_cuda_close(_ppo_cuda_state(eager), _ppo_cuda_state(fast), rtol=1e-2, atol=1e-3)


def test_runs_are_eager_unless_asked_and_the_cuda_marker_is_registered():
    import tomllib

    assert td3.Args().compile is False and td3.Args().cudagraphs is False
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert any(marker.startswith("cuda:") for marker in pyproject["tool"]["pytest"]["ini_options"]["markers"])


# ---- the C-CHAIN setting compiled on the CPU: rectifiers, groups ---------------------------------------------------
@pytest.mark.parametrize("activation", [nn_activations.ReLU, nn_activations.LeakyReLU])
def test_compiled_rectifiers_give_eager_gradients_and_keep_no_bool_mask(activation):
    """Inside torch.compile ReLU and LeakyReLU read the sign from their output in backward: the same gradient bit for bit
    (at ±0 and tiny inputs too: y > 0 exactly where x > 0), and the forward graph hands backward no bool mask, whose store
    inductor's CPU kernels write ~100× slower than a float (docs/speed.md): only y, which the next layer's weight gradient
    needs anyway."""
    from functorch.compile import make_boxed_func
    from torch._inductor.compile_fx import compile_fx

    forward_graphs = []  # inductor's own decompositions and forward/backward split, run as traced (no C++ build)

    def keep_graph(graph_module, example_inputs, **kwargs):
        forward_graphs.append(graph_module)
        return make_boxed_func(graph_module.forward)

    backend = lambda graph_module, example_inputs: compile_fx(graph_module, example_inputs, inner_compile=keep_graph)  # noqa: E731
    layer = activation()
    x = torch.tensor([[-2.0, -1e-30, -0.0, 0.0], [1e-30, 3.0, -7.5, 0.25]])
    first = torch.eye(4, requires_grad=True)  # a hidden layer: its pre-activations are x exactly (±0 and tiny ones)
    second = torch.linspace(-1.0, 2.0, 12).reshape(4, 3).requires_grad_()
    grad = torch.linspace(-1.0, 2.0, 6).reshape(2, 3)
    mlp = lambda x, first, second: layer(x @ first) @ second  # noqa: E731
    z_eager, z_compiled = mlp(x, first, second), torch.compile(mlp, backend=backend, fullgraph=True)(x, first, second)
    assert torch.equal(z_eager, z_compiled)
    for expected, got in zip(*(torch.autograd.grad(z, (first, second), grad) for z in (z_eager, z_compiled))):
        assert torch.equal(expected, got)
    saved = [node.meta["val"] for node in forward_graphs[0].graph.find_nodes(op="output")[0].args[0][1:]]
    assert saved and all(value.dtype != torch.bool for value in saved), [value.dtype for value in saved]


CCHAIN_TINY = dict(total_timesteps=256, num_steps=64, num_minibatches=4, update_epochs=2, hidden_sizes=(32, 32, 32))
# a warm-up of 2 of the 4 iterations: the coefficient is rescaled on the compiled path too, not only at its c₀
CCHAIN_TINY |= dict(progress=False, threads=1, cchain=CChainArgs(enabled=True, warmup=2))


def _cchain_cartpole(**flags) -> dict:
    return ppo.main(ppo.Args.defaults_for("continual:cchain-cartpole", **(CCHAIN_TINY | flags)))


def test_a_compiled_cchain_group_member_is_its_compiled_one_seed_run(runs_dir, monkeypatch):
    """The C-CHAIN reproduction's recipe (LeakyReLU MLPs, one Adam, no clipping) with C-CHAIN on, compiled: member 7 of a
    group is the compiled one-seed run of seed 7 within the groups' tolerance, and compiled equals eager."""
    from test_groups import assert_close_states

    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    group = _cchain_cartpole(seeds=(3, 7), exp_name="group", compile=True, runs_dir=runs_dir)["members"][1]
    single = _cchain_cartpole(seed=7, exp_name="single", compile=True, runs_dir=runs_dir)
    eager = _cchain_cartpole(seed=7, exp_name="eager", runs_dir=runs_dir)
    assert single["num_updates"] == 32
    group_state, single_state = _ppo_state(group), _ppo_state(single)
    assert float(single_state["plasticity"]["remedies"]["networks"]["agent"]["churn"]["coef"]) != 1.0, "c stayed c₀"
    assert_close_states(group_state, single_state, "compiled group member 7")
    _assert_states_close(single_state, _ppo_state(eager))


@pytest.mark.slow
def test_inductor_compiled_cchain_ppo_stays_within_rounding_of_eager(runs_dir):
    """Inductor's own kernels (C++ on the CPU) round differently from eager's, and nothing more: after 32 updates the
    compiled run's weights and Adam moments are eager's within the groups' tolerance."""
    from test_groups import assert_close_states

    compiled = _cchain_cartpole(seed=7, exp_name="compiled", compile=True, runs_dir=runs_dir)
    eager = _cchain_cartpole(seed=7, exp_name="eager", runs_dir=runs_dir)
    assert_close_states(_ppo_state(compiled), _ppo_state(eager), "inductor against eager")


def test_a_cchain_group_resume_may_switch_compile_on_and_continues_exactly(runs_dir, monkeypatch):
    """A group of the C-CHAIN recipe stopped after two iterations and resumed with --compile ends where the straight eager
    group ends: the compiled rectifiers and the loss take the checkpoint's weights, Adam moments and C-CHAIN's state."""
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    common = dict(seeds=(3, 7), runs_dir=runs_dir)
    straight = _cchain_cartpole(exp_name="straight", **common)["members"]
    half = _cchain_cartpole(total_timesteps=128, exp_name="split", **common)["members"]
    epochs = []

    class CountingStorage(ppo.RolloutStorage):
        def minibatch_indices(self, num_minibatches):
            epochs.append(num_minibatches)
            return super().minibatch_indices(num_minibatches)

    monkeypatch.setattr(ppo, "RolloutStorage", CountingStorage)
    resumed = _cchain_cartpole(exp_name="split", compile=True, resume=half[0]["run_dir"], **common)["members"]
    assert [member["global_step"] for member in resumed] == [256, 256]
    # each epoch draws two passes: the training minibatches and C-CHAIN's reference batches
    assert len(epochs) == 2 * 2 * CCHAIN_TINY["update_epochs"], "the resumed group ran from the start, not from its checkpoint"
    for straight_member, resumed_member in zip(straight, resumed):
        _assert_states_close(_ppo_state(straight_member), _ppo_state(resumed_member))
