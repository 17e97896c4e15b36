"""The agents' speed switches, `--compile` and `--cudagraphs`: LeanRL's recipe, written once for every agent.

A one-env RL update of 256-wide MLPs is launch-bound on a GPU: hundreds of kernels of a few microseconds each, and
Python takes longer to launch them than the GPU takes to run them. Two switches remove that cost without changing
the math:

- `--compile`: `compiled(fn, True)` is `torch.compile(fn, fullgraph=True)`, used on an agent's *pure* functions:
  its losses ((networks, batch, noise) → loss tensors, remedy penalties included) and its acting step. fullgraph
  makes a graph break an error, so a host sync (`.item()`, `nonzero`, boolean-mask indexing) or a Python branch on
  a tensor's value cannot hide in them; the backward of a compiled loss is compiled too. Zero-grad, backward and
  the optimiser step stay plain PyTorch (dynamo breaks its graph at each of them on torch 2.13; fused Adam is one
  kernel already).
- `--cudagraphs`: `GraphStep(fn, True, watch)` runs a whole step (forward, backward, optimiser step, target update;
  or the acting step) eagerly for `warmup` calls on a side stream, then captures it as a CUDA graph, and from then
  on copies its inputs into the graph's static buffers and replays it: one launch instead of hundreds. With both
  flags the compiled losses are what gets captured.

What a captured step must respect (and what makes `--compile` work too):
- static shapes, no host syncs, no Python decision on a tensor's value;
- state that changes (optimiser moments, targets, remedy statistics and event counters) changes in place, so the
  graph's replays see it and checkpoints read it;
- random numbers are drawn by the caller, outside the step, in the order eager code draws them, and passed in: all
  modes then draw the same numbers (a CPU run keeps its stream), and samplers may use host-side sizes that grow
  every step (the replay's fill level) without those being baked into a graph;
- outputs are the graph's static tensors, overwritten by the next replay: copy what must outlive it.

Recapture rule: a graph holds for one *signature*: the structure of the inputs (None leaves included), their
tensors' shapes, dtypes and devices, their non-tensor leaves, and the identity (`data_ptr`) of every tensor of the
watched modules and optimisers (parameters, buffers, optimiser state entries). When it changes (plasticity injection
adds parameters; a reset drops optimiser state that the next step re-creates; ReDo's first restart adds per-element
Adam counts) the graph is dropped, the step runs eagerly until the signature has held for `warmup` calls, and is
captured again. Editing the same tensors in place (ReDo, shrink-and-perturb, a full reset's weights) needs nothing.

CPU: `--cudagraphs` is refused at start-up (`check_flags`); `--compile` runs there (the torch envs' steps compiled
too, `envs.torch_classic`'s `compile_steps`), ≈ 10–20% faster for a long PPO group once inductor's cache is warm, no
faster on a machine's first run (docs/speed.md), so CPU runs stay eager by default. Without `--cudagraphs`,
`GraphStep` is a plain call.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable

import torch
import torch.nn as nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from envs.errors import UserError

COMPILE_OPTIONS: dict[str, Any] = {}  # extra torch.compile arguments; tests set {"backend": "aot_eager"} (no inductor build)


def compiled(fn: Callable, enabled: bool) -> Callable:
    """`torch.compile(fn, fullgraph=True)` with `--compile`, else `fn` itself."""
    return torch.compile(fn, fullgraph=True, **COMPILE_OPTIONS) if enabled else fn


def tensor_identity(watched: Iterable[nn.Module | torch.optim.Optimizer | torch.Tensor]) -> list:
    """The data_ptr of every tensor a captured graph reads or writes in `watched`; optimiser state entries go with
    their keys, so a dropped or added entry changes the list too."""
    identity: list = []
    for thing in watched:
        if isinstance(thing, torch.optim.Optimizer):
            for group in thing.param_groups:
                for parameter in group["params"]:
                    identity.append(parameter.data_ptr())
                    for key, value in thing.state.get(parameter, {}).items():
                        identity += [key, value.data_ptr() if isinstance(value, torch.Tensor) else value]
        elif isinstance(thing, nn.Module):
            identity += [tensor.data_ptr() for tensor in thing.parameters()]
            identity += [tensor.data_ptr() for tensor in thing.buffers()]
        elif isinstance(thing, torch.Tensor):
            identity.append(thing.data_ptr())
        else:
            raise TypeError(f"GraphStep watches modules, optimisers and tensors, not {type(thing).__name__}")
    return identity


class GraphStep:
    """`step(*inputs)` runs `fn(*inputs)`: a plain call, or with `cudagraphs` a replayed CUDA graph (module docstring)."""

    def __init__(self, fn: Callable, cudagraphs: bool, watch: Iterable = (), warmup: int = 3) -> None:
        self.fn, self.cudagraphs, self.watch, self.warmup = fn, cudagraphs, tuple(watch), warmup
        self.signature: tuple | None = None
        self.calls_with_signature = 0  # eager calls since the signature last changed
        self.graph: Any = None
        self.static_inputs: list[torch.Tensor] = []
        self.static_outputs: Any = None
        self.captures = 0  # how often the step was captured (recaptures included)

    def __call__(self, *inputs: Any) -> Any:
        if not self.cudagraphs:
            return self.fn(*inputs)
        leaves, spec = tree_flatten(inputs)
        signature = self._signature(leaves, spec)
        if signature != self.signature:
            self.release()
            self.signature, self.calls_with_signature = signature, 0
        if self.graph is None and self.calls_with_signature < self.warmup:
            self.calls_with_signature += 1
            return self._run_eagerly(inputs)
        if self.graph is None:
            self._capture(leaves, spec)
        for static, value in zip(self.static_inputs, leaves):
            if static is not None:
                static.copy_(value)
        self._replay()
        return self.static_outputs

    def _signature(self, leaves: list, spec: Any) -> tuple:
        described = [
            (tuple(leaf.shape), leaf.dtype, leaf.device) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves
        ]
        return spec, described, tensor_identity(self.watch)

    def release(self) -> None:
        """Drop the graph (its memory pool goes with it); the next calls warm up and capture again."""
        self.graph, self.static_inputs, self.static_outputs = None, [], None

    def _capture(self, leaves: list, spec: Any) -> None:
        self.static_inputs = [leaf.clone() if isinstance(leaf, torch.Tensor) else None for leaf in leaves]
        static = tree_unflatten([leaf if static is None else static for static, leaf in zip(self.static_inputs, leaves)], spec)
        self.graph, self.static_outputs = self._record(lambda: self.fn(*static))
        self.captures += 1

    # ---- the CUDA parts (tests replace these to check the rules above on CPU) ------------------------------------
    def _run_eagerly(self, inputs: tuple) -> Any:
        """A warm-up call on a side stream, as torch.cuda.graph asks: lazily built state (optimiser moments, cuBLAS
        workspaces, compiled kernels) is created here, never inside a capture."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*capturable=True.*")  # the warm-up steps of a capturable Adam
            outputs = self.fn(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        return outputs

    @staticmethod
    def _record(call: Callable[[], Any]) -> tuple[Any, Any]:
        """(graph, outputs) of `call` captured; capturing launches nothing, so the caller replays once right after."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = call()
        return graph, outputs

    def _replay(self) -> None:
        self.graph.replay()


def compile_problem(device: torch.device) -> str | None:
    """Why inductor, torch.compile's default backend, cannot build kernels for `device` here (None: it can)."""
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "inductor needs triton for CUDA kernels and it is not installed (pip install triton)"
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception as error:  # no C++ compiler on the PATH (or CXX names a missing one)
        return f"inductor needs a C++ compiler for CPU kernels ({type(error).__name__}: {error})"
    return None


def check_flags(args: Any, device: torch.device) -> None:
    """One-line UserError at start-up for a speed flag this machine cannot honour."""
    if getattr(args, "cudagraphs", False) and device.type != "cuda":
        raise UserError(
            f"--cudagraphs captures CUDA graphs and needs a CUDA device; this run is on {device.type} — drop "
            "--cudagraphs (CPU runs are fastest eager: docs/speed.md)"
        )
    if getattr(args, "compile", False):
        problem = compile_problem(device)
        if problem is not None:
            raise UserError(f"--compile: {problem} — drop --compile (eager runs the same math)")
