"""Several seeds in one process: the members of a group, each an ordinary, independent run.

A group of K members trains K seeds at once. Every tensor of the agent carries the members first: a network's
parameters are K stacked copies (member-major: K blocks of the one-member network's leading dimension), a batch is
(K, B, ...), a loss is one value per member, summed before the backward pass (the sum keeps each member's gradient its
own; a mean would scale them by 1/K). Nothing may reduce over the members: a global gradient norm, a statistic over
all parameters or a `.mean()` without a member axis silently mixes seeds.

Each member draws its random numbers from its own generators, seeded by its own seed, in the order a one-seed run
draws them — initialisation, exploration, sampling, minibatch order — so member k's streams never depend on K or on
the other members, and a one-seed run is a group of one. `Members` holds those generators, draws (K, ...) tensors
from them and builds networks member by member (`build`). `member_state` / `group_state` cut a group's checkpointed
state into one member's — what a one-seed run of that seed saves — and stack the members' back.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn

from cleanrl_plus.nn import EnsembleLinear
from cleanrl_plus.normalization import with_normalizer


@contextlib.contextmanager
def drawing_from(generator: torch.Generator) -> Iterator[None]:
    """Run the block with torch's global CPU generator in `generator`'s state, and leave `generator` where the block
    left it: code that draws from the global RNG (nn.init, the layers' constructors) draws from `generator`."""
    saved = torch.random.get_rng_state()
    torch.random.set_rng_state(generator.get_state())
    try:
        yield
    finally:
        generator.set_state(torch.random.get_rng_state())
        torch.random.set_rng_state(saved)


class Members:
    """The seeds of a group, and per member a CPU generator (initialisation, host-side draws) and one on `device` (the
    draws of the loop); on a CPU device they are the same."""

    def __init__(self, seeds: tuple[int, ...], device: torch.device | str = "cpu") -> None:
        self.seeds, self.device = tuple(int(seed) for seed in seeds), torch.device(device)
        self.host = [torch.Generator().manual_seed(seed) for seed in self.seeds]
        self.generators = (
            self.host
            if self.device.type == "cpu"
            else [torch.Generator(device=self.device).manual_seed(seed) for seed in self.seeds]
        )

    def __len__(self) -> int:
        return len(self.seeds)

    # ---- draws: row k from member k's generator ---------------------------------------------------------------
    def randn(self, *shape: int) -> torch.Tensor:
        """(K, *shape) standard normal numbers."""
        return torch.stack([torch.randn(shape, generator=g, device=self.device) for g in self.generators])

    def rand(self, *shape: int) -> torch.Tensor:
        """(K, *shape) uniform numbers in [0, 1)."""
        return torch.stack([torch.rand(shape, generator=g, device=self.device) for g in self.generators])

    def randint(self, high: int, *shape: int) -> torch.Tensor:
        """(K, *shape) integers in [0, high)."""
        return torch.stack([torch.randint(0, high, shape, generator=g, device=self.device) for g in self.generators])

    def randperm(self, n: int) -> torch.Tensor:
        """(K, n): a permutation of range(n) per member."""
        return torch.stack([torch.randperm(n, generator=g, device=self.device) for g in self.generators])

    def exponential(self, *shape: int) -> torch.Tensor:
        """(K, *shape) Exp(1) numbers (the race torch.multinomial runs for one draw)."""
        return torch.stack([torch.empty(shape, device=self.device).exponential_(generator=g) for g in self.generators])

    # ---- networks -------------------------------------------------------------------------------------------
    def build(self, factory: Callable[[int], nn.Module]) -> nn.Module:
        """The K-member network `factory(K)` whose member k is `factory(1)` built with member k's generator: every
        parameter and buffer whose leading dimension is K times the one-member network's holds the members' blocks in
        order, the others (shared, e.g. an action scale) are the members' common value."""
        singles = []
        for generator in self.host:
            with drawing_from(generator):
                singles.append(factory(1))
        if len(singles) == 1:
            return singles[0]
        with torch.random.fork_rng():  # the group's own initialisation is overwritten: it must not move any stream
            group = factory(len(singles))
        for module in group.modules():  # layers that take some products member by member
            if isinstance(module, EnsembleLinear):
                module.members = len(singles)
        group._shared_keys = set()
        with torch.no_grad():
            for name, tensor in _tensors(group):
                parts = [dict(_tensors(single))[name] for single in singles]
                if member_major(tensor, parts[0], len(singles)):
                    tensor.copy_(torch.cat(parts))
                else:
                    tensor.copy_(parts[0])
                    group._shared_keys.add(name)
        return group

    # ---- checkpoints: one entry per member, what a one-seed run of its seed saves -----------------------------
    def member_state_dict(self, k: int) -> dict[str, Any]:
        return {"seed": self.seeds[k], "host": self.host[k].get_state(), "device": self.generators[k].get_state()}

    def load_member_state_dicts(self, states: list[dict[str, Any]]) -> None:
        # .cpu(): a checkpoint loaded onto a GPU (map_location=device) brings the states there, and set_state takes
        # a CPU ByteTensor only, for a CUDA generator too
        for host, device, state in zip(self.host, self.generators, states):
            host.set_state(state["host"].cpu())
            device.set_state(state["device"].cpu())

    def state_dict(self) -> dict[str, Any]:
        return (
            self.member_state_dict(0) if len(self) == 1 else {"members": [self.member_state_dict(k) for k in range(len(self))]}
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_member_state_dicts(state["members"] if "members" in state else [state])


class MemberEnvs:
    """A group's vector env (envs.make with members=: K·N sub-envs, member-major) seen as K members of N envs:
    observations, rewards and flags come as (K, N, ...), actions go in as (K, N, ...). Everything else is the env's."""

    def __init__(self, env: Any, members: int) -> None:
        self.env, self.members = env, members

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(self.members, -1, *x.shape[1:])

    def reset(self, seed: Any = None) -> torch.Tensor:
        return self.split(self.env.reset(seed=seed))

    def step(self, actions: torch.Tensor) -> Any:
        return type(step := self.env.step(actions.flatten(0, 1)))(*(self.split(x) for x in step))

    def reset_where(self, mask: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return self.split(self.env.reset_where(mask.flatten(0, 1), obs.flatten(0, 1)))

    def cut_episodes(self, mask: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return self.split(self.env.cut_episodes(mask.flatten(0, 1), obs.flatten(0, 1)))

    def state_dict(self) -> dict[str, Any]:
        return self.env.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.load_state_dict(state)


def _tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return list(module.state_dict(keep_vars=True).items())


def member_major(group_tensor: torch.Tensor, single_tensor: torch.Tensor, count: int) -> bool:
    """Whether a group's tensor holds its members' blocks along its leading dimension, as the one-member tensor shows."""
    return group_tensor.dim() > 0 and tuple(group_tensor.shape) == (count * single_tensor.shape[0], *single_tensor.shape[1:])


def shared_keys(module: nn.Module) -> set[str]:
    """The state-dict keys of a group's network that all members share (set by `Members.build`; none by default)."""
    return getattr(module, "_shared_keys", set())


def member_state(state: Any, k: int, count: int, shared: set[str] = frozenset(), prefix: str = "") -> Any:
    """Member k's part of a group's state, what a one-seed run of its seed holds: every tensor with a leading dimension
    is member-major (K blocks, member k's is kept), except those named in `shared` (dotted paths), which all members
    hold alike; scalars, numbers and strings are shared too."""
    if isinstance(state, torch.Tensor):
        if state.dim() == 0 or prefix in shared or count == 1:
            return state
        block = state.shape[0] // count
        return state[k * block : (k + 1) * block].clone()
    if isinstance(state, dict):
        return {
            key: member_state(value, k, count, shared, f"{prefix}.{key}" if prefix else str(key))
            for key, value in state.items()
        }
    if isinstance(state, (list, tuple)):
        return type(state)(
            member_state(v, k, count, shared, f"{prefix}.{i}" if prefix else str(i)) for i, v in enumerate(state)
        )
    return state


def group_state(states: list[Any], shared: set[str] = frozenset(), prefix: str = "") -> Any:
    """The group's state from its members' states (the inverse of `member_state`)."""
    first = states[0]
    if isinstance(first, torch.Tensor):
        if first.dim() == 0 or prefix in shared or len(states) == 1:
            return first
        return torch.cat(states)
    if isinstance(first, dict):
        return {key: group_state([s[key] for s in states], shared, f"{prefix}.{key}" if prefix else str(key)) for key in first}
    if isinstance(first, (list, tuple)):
        return type(first)(
            group_state([s[i] for s in states], shared, f"{prefix}.{i}" if prefix else str(i)) for i in range(len(first))
        )
    return first


@dataclasses.dataclass(eq=False)
class GroupNetwork:
    """Called, a fresh network of every member: `make(members)` built member by member from each member's generator
    (`Members.build`) on `device`, reading its inputs through `normalizer` where given. The agent builds its networks
    with it, and the resets rebuild them with it."""

    members: Members
    make: Callable[[int], nn.Module]
    device: torch.device
    normalizer: nn.Module | None = None

    def __call__(self) -> nn.Module:
        module = self.members.build(self.make).to(self.device)
        return module if self.normalizer is None else with_normalizer(module, self.normalizer)
