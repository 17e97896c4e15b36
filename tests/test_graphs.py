"""--compile and --cudagraphs (cleanrl_plus/graphs.py) and TD3 under them.

On CPU: GraphStep's capture/recapture rules (with the CUDA calls replaced by a stand-in), TD3's compiled steps as
single graphs (fullgraph: no host sync, no Python branch on a tensor), compiled TD3 against eager TD3 on Pendulum,
a resume that switches --compile on, and the start-up refusals. Tests marked `cuda` run the real capture and are
skipped without a CUDA device (tests/conftest.py).

Tolerance: with the aot_eager backend (the same ATen kernels, no inductor build) a compiled run equals the eager one
bit for bit (measured); the tests allow 1e-6 relative, so that a decomposition that only reorders a sum still passes
while a wrong wiring (a stale target, a dropped remedy term) fails by orders of magnitude more.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn

import cleanrl_plus.graphs as graphs
from agents import td3
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.distributional import CriticArgs
from cleanrl_plus.errors import UserError
from cleanrl_plus.graphs import GraphStep, tensor_identity
from cleanrl_plus.nn import adam
from envs.continual import ContinualArgs
from plasticity.architecture import NaPArgs
from plasticity.cchain import CChainArgs
from plasticity.optimizers import OptimArgs
from plasticity.regularizers import RegArgs, WeightClipArgs
from plasticity.resets import ResetArgs

TINY = dict(env_id="Pendulum-v1", batch_size=32, hidden_sizes=(32, 32), eval_episodes=1, eval_every=0, progress=False,
            buffer_size=5_000)
LOSS_REMEDIES = dict(reg=RegArgs(l2=1e-4, l2_init=1e-3, parseval=1e-3), cchain=CChainArgs(enabled=True, warmup_updates=50),
                     nap=NaPArgs(enabled=True), clip=WeightClipArgs(kappa=3.0), optim=OptimArgs(trac=True))
NETWORKS = ("actor", "critic", "actor_target", "critic_target")
# FastTD3's many-env flags together (docs/agents/td3.md): C51 critics, 3-step returns, normalised observations, per-env
# exploration noise, AdamW; two envs so that the n-step windows and noise scales are per env
SCALE = dict(num_envs=2, n_step=3, critic=CriticArgs(distributional=True, num_atoms=21, v_min=-200.0, v_max=10.0), normalize_obs=True,
             exploration_noise_min=0.05, exploration_noise_max=0.4, weight_decay=0.1, gradient_steps=2)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # every agent run compiles new closures; dynamo's per-function cache would fill up across tests and fall back to eager
    torch._dynamo.reset()
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
    step = SimulatedGraphStep(lambda batch, reference: {"y": batch[0] * weight + batch[1]}, cudagraphs=True, watch=[weight], warmup=2)
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
    step = SimulatedGraphStep(lambda x, reference, scale: x * scale if reference is None else x * scale + reference,
                              cudagraphs=True, warmup=1)
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
    from plasticity.hooks import RemedyArgs, RemedyHooks, Trained

    torch.manual_seed(0)
    critic = td3.TwinCritic(3, 1, (16, 16), norm="layer")
    optimizer = adam(critic.parameters(), 1e-3, torch.device("cpu"))
    flags = RemedyArgs(**{key: value for key, value in LOSS_REMEDIES.items()})
    hooks = RemedyHooks(flags, critic=Trained(critic, optimizer, lambda b: critic(b[0], b[1]), (critic.head,)))
    pointers, values = [], []
    for update in range(6):
        obs, action = torch.randn(32, 3), torch.randn(32, 1)
        loss = hooks.loss("critic", critic(obs, action).square().mean(), reference=(torch.randn(32, 3), torch.randn(32, 1)))
        optimizer.zero_grad()
        loss.backward()
        hooks.step("critic")
        if update >= 2:  # C-CHAIN snapshots at its first update, TRAC takes its reference at its first step
            pointers.append(_tensor_pointers(hooks.state_dict()))
            values.append([leaf.clone() for leaf in torch.utils._pytree.tree_leaves(hooks.state_dict()) if isinstance(leaf, torch.Tensor)])
    assert all(p == pointers[0] for p in pointers), "a remedy replaced a state tensor instead of updating it in place"
    changed = [not torch.equal(a, b) for a, b in zip(values[0], values[-1])]
    assert sum(changed) >= 8  # and the state does change (snapshot, means, TRAC's σ/v/s, counters, ...)
    assert int(hooks.acted["cchain"]) == 6 and int(hooks.acted["trac"]) == 6 and int(hooks.acted["clip"]) == 6


def test_a_loaded_optimiser_keeps_this_runs_capturable_setting():
    """torch takes `capturable` from the saved groups: a resume that switches --cudagraphs would keep the old one."""
    from cleanrl_plus.nn import ElementStepAdam

    parameter = nn.Parameter(torch.zeros(3))
    saved = ElementStepAdam([parameter], lr=1e-3, capturable=True).state_dict()
    fresh = ElementStepAdam([parameter], lr=1e-3)
    fresh.load_state_dict(saved)
    assert fresh.param_groups[0]["capturable"] is False


# ---- TD3 under --compile --------------------------------------------------------------------------------------------
def _state(result: dict) -> dict:
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    return {name: state[name] for name in (*NETWORKS, "critic_optimizer")} | {"obs": state["obs"]}


def _assert_states_close(a: dict, b: dict) -> None:
    for (name, x), y in zip(torch.utils._pytree.tree_flatten_with_path(a)[0], torch.utils._pytree.tree_leaves(b)):
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-7, msg=lambda m: f"{name}: {m}")


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
    result = td3.main(td3.Args(total_timesteps=260, learning_starts=200, compile=True, runs_dir=runs_dir, **TINY, **LOSS_REMEDIES))
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
    result = td3.main(td3.Args(total_timesteps=260, learning_starts=200, compile=True, runs_dir=runs_dir, **TINY, **SCALE, **remedies))
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


ORACLE = dict(env_id="continual:obs-offset:Pendulum-v1", total_timesteps=600, learning_starts=100,
              continual=ContinualArgs(steps_per_task=200, num_tasks=3, oracle=True))


def test_compiled_td3_follows_the_oracle_through_task_switches(runs_dir, monkeypatch):
    """The oracle re-initialises every network and drops the optimiser state at each switch (a full reset)."""
    monkeypatch.setitem(graphs.COMPILE_OPTIONS, "backend", "aot_eager")
    common = dict(runs_dir=runs_dir, **(TINY | ORACLE))
    eager = td3.main(td3.Args(exp_name="eager", **common))
    compiled = td3.main(td3.Args(exp_name="compiled", compile=True, **common))
    assert [task["task"] for task in compiled["tasks"]] == [0, 1, 2]
    _assert_states_close(_state(eager), _state(compiled))


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


@pytest.mark.parametrize("flags, message", [
    (dict(compile=True, optim=OptimArgs(name="kron")), "Kron .* cannot run with --compile"),
    (dict(cudagraphs=True, optim=OptimArgs(name="kron")), "Kron .* cannot run with --cudagraphs"),
    (dict(cudagraphs=True, reset=ResetArgs(method="cbp")), "continual backprop .* cannot run with --cudagraphs"),
])
def test_the_catalogue_refuses_what_cannot_run_under_the_speed_flags(flags, message):
    from plasticity import catalogue

    with pytest.raises(UserError, match=message):
        catalogue.check("td3", td3.Args(**flags))
    catalogue.check("td3", td3.Args(**{key: value for key, value in flags.items() if key in ("compile", "cudagraphs")}))


def test_agents_without_the_speed_machinery_refuse_the_flags():
    from agents import sac_simba
    from plasticity import catalogue

    with pytest.raises(UserError, match="--compile is not wired into agents/sac_simba.py yet"):
        catalogue.check("sac_simba", sac_simba.Args(compile=True))


# ---- on a CUDA device ---------------------------------------------------------------------------------------------
CUDA = dict(device="cuda", **TINY)


def _cuda_state(result: dict) -> dict:
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    return {name: state[name] for name in NETWORKS}


def _assert_cuda_close(a: dict, b: dict, rtol: float = 1e-3, atol: float = 1e-4) -> None:
    """Eager CUDA and replayed graphs run the same kernels (and the same fused Adam); the tolerance covers cuBLAS picking
    another algorithm inside a capture and its rounding growing over a few hundred updates. A replay on a stale batch,
    a step that was not captured again after a reset or a lost remedy state is off by far more."""
    for name in NETWORKS:
        for key in a[name]:
            torch.testing.assert_close(a[name][key], b[name][key], rtol=rtol, atol=atol, msg=lambda m: f"{name}.{key}: {m}")


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
@pytest.mark.parametrize("flags", [dict(), dict(reset=ResetArgs(method="redo", every=100)), LOSS_REMEDIES, SCALE],
                         ids=["td3", "redo", "loss-and-step-remedies", "scale-flags"])
def test_td3_cudagraphs_follows_eager_td3(flags, runs_dir):
    common = dict(total_timesteps=500, learning_starts=200, runs_dir=runs_dir, **CUDA, **flags)
    eager = td3.main(td3.Args(exp_name="eager", **common))
    captured = td3.main(td3.Args(exp_name="graphs", cudagraphs=True, **common))
    _assert_cuda_close(_cuda_state(eager), _cuda_state(captured))


@pytest.mark.cuda
@pytest.mark.parametrize("method", ["inject", "full"])
def test_td3_cudagraphs_captures_again_after_a_structural_change_or_a_dropped_optimiser_state(method, runs_dir, monkeypatch):
    captures = []
    record = GraphStep._record

    def counting_record(call):
        captures.append(call)
        return record(call)

    monkeypatch.setattr(GraphStep, "_record", staticmethod(counting_record))
    common = dict(total_timesteps=600, learning_starts=200, runs_dir=runs_dir, reset=ResetArgs(method=method, every=150), **CUDA)
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


@pytest.mark.cuda
def test_td3_learning_steps_never_wait_for_the_gpu_once_captured(runs_dir, monkeypatch):
    """torch's sync debug mode turns a host sync into an error: sampling (uniform and SWD) and every replayed step."""
    from cleanrl_plus.normalization import RunningMeanStd
    from cleanrl_plus.replay import NStepReplay, ReplayBuffer
    from plasticity.swd import SWDArgs

    call, sample = GraphStep.__call__, ReplayBuffer.sample
    checked = []

    def strict(function, ready=lambda *args: True):
        def wrapped(self, *args):
            if not ready(self):
                return function(self, *args)
            torch.cuda.set_sync_debug_mode("error")
            try:
                return function(self, *args)
            finally:
                torch.cuda.set_sync_debug_mode("default")
                checked.append(function.__name__)
        return wrapped

    monkeypatch.setattr(GraphStep, "__call__", strict(call, ready=lambda step: step.graph is not None))
    monkeypatch.setattr(ReplayBuffer, "sample", strict(sample))
    monkeypatch.setattr(NStepReplay, "sample", strict(NStepReplay.sample))
    monkeypatch.setattr(RunningMeanStd, "update", strict(RunningMeanStd.update))
    monkeypatch.setattr(td3.ExplorationScales, "redraw", strict(td3.ExplorationScales.redraw))
    for swd in (SWDArgs(), SWDArgs(enabled=True, decay_steps=100), SWDArgs(enabled=True, decay_steps=100, mode="augment")):
        td3.main(td3.Args(total_timesteps=300, learning_starts=200, cudagraphs=True, runs_dir=runs_dir, swd=swd,
                          exp_name=f"sync-{swd.enabled}-{swd.mode}", **CUDA))
    assert checked.count("__call__") > 100 and checked.count("sample") > 100
    td3.main(td3.Args(total_timesteps=300, learning_starts=200, cudagraphs=True, runs_dir=runs_dir, exp_name="sync-scale", **CUDA, **SCALE))
    assert checked.count("update") > 100 and checked.count("redraw") > 100


@pytest.mark.cuda
def test_td3_compile_and_cudagraphs_together_follow_eager(runs_dir):
    """inductor's kernels round differently from eager ones: fewer updates, a looser tolerance than the replay above."""
    common = dict(total_timesteps=300, learning_starts=200, runs_dir=runs_dir, **CUDA)
    eager = td3.main(td3.Args(exp_name="eager", **common))
    fast = td3.main(td3.Args(exp_name="fast", compile=True, cudagraphs=True, **common))
    _assert_cuda_close(_cuda_state(eager), _cuda_state(fast), rtol=1e-2, atol=1e-3)


def test_runs_are_eager_unless_asked_and_the_cuda_marker_is_registered():
    import tomllib

    assert td3.Args().compile is False and td3.Args().cudagraphs is False
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert any(marker.startswith("cuda:") for marker in pyproject["tool"]["pytest"]["ini_options"]["markers"])
