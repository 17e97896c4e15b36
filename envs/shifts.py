"""What changes between the tasks of a continual env (envs/continual.py): observation, action and reward shifts
(tensor ops on the device, indexed by each sub-env's task), simulator shifts (friction, gravity, mass, damping; edited at
a sub-env's reset, or per MuJoCo Warp world) and sequences of tasks or games. `SHIFTS` names the ones a
`continual:<shift>:<env id>` id can ask for."""

from __future__ import annotations

import copy
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from envs.base import TorchVecEnv
from envs.errors import UserError


class Shift:
    """One kind of change. `draw` fixes the per-task parameters; the tensor hooks run on the device, indexed by each
    sub-env's task, and read only the per-task `tables` (so that MemberShifts can run a group's members in one batch);
    `configure` edits a simulator at a sub-env's reset (host-side shifts only)."""

    name = ""
    host_side = False  # True: the simulator changes (configure); False: only tensors change
    default_steps, default_tasks = 100_000, 10  # [our default] for `continual:<shift>:<env id>` ids
    tables: tuple[str, ...] = ()  # the tensors the hooks index by task (one row per task)

    def draw(self, rng: np.random.Generator, num_tasks: int, env: TorchVecEnv) -> None:
        pass

    def observation(self, obs: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        return obs

    def action(self, action: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        return action

    def reward(self, reward: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        return reward

    def episode_return(self, episodic_return: float, task: int) -> float:
        return episodic_return

    def configure(self, env: gym.Env, task: int) -> None:
        pass

    def describe(self, task: int) -> dict[str, Any]:
        """The parameter values of `task`, for the run log."""
        return {}


class ObservationOffset(Shift):
    """o + ε_k with ε_k ~ N(0, σ²I), σ = 2, level 0 unperturbed (TRAC / C-CHAIN continual Gym control)."""

    name = "obs-offset"
    tables = ("offsets",)

    def __init__(self, sigma: float = 2.0) -> None:
        self.sigma = sigma

    def draw(self, rng, num_tasks, env):
        _require_float_vector(env, self.name)
        offsets = rng.normal(0.0, self.sigma, (num_tasks, *env.single_observation_space.shape))
        offsets[0] = 0.0
        self.offsets = torch.as_tensor(offsets, dtype=torch.float32, device=env.device)

    def observation(self, obs, task):
        return obs + self.offsets[task]

    def describe(self, task):
        return {"offset": [round(v, 4) for v in self.offsets[task].flatten().tolist()]}


class ObservationPermutation(Shift):
    """o[π_k]: a new random permutation of the flattened observation per task, identity first (Juliani & Ash 2024)."""

    name = "obs-permute"
    tables = ("perms",)

    def draw(self, rng, num_tasks, env):
        size = int(np.prod(env.single_observation_space.shape))
        perms = [np.arange(size)] + [rng.permutation(size) for _ in range(num_tasks - 1)]
        self.perms = torch.as_tensor(np.stack(perms), dtype=torch.long, device=env.device)

    def observation(self, obs, task):
        return obs.flatten(1).gather(1, self.perms[task]).view_as(obs)

    def describe(self, task):
        return {"permutation": self.perms[task].tolist()}


class ActionPermutation(Shift):
    """Discrete: a ↦ σ_k(a); continuous: the action axes permuted and sign-flipped (Juliani & Ash's `shuffle`).
    Task 0 is the identity."""

    name = "action-permute"
    tables = ("perms", "signs")

    def draw(self, rng, num_tasks, env):
        space = env.single_action_space
        size = int(space.n) if isinstance(space, gym.spaces.Discrete) else int(np.prod(space.shape))
        if isinstance(space, gym.spaces.Box) and not np.allclose(space.low, -space.high):
            raise UserError(
                f"action-permute flips action signs, so it needs symmetric action bounds; {env.env_id} has {space}"
            )
        perms = [np.arange(size)] + [rng.permutation(size) for _ in range(num_tasks - 1)]
        signs = [np.ones(size)] + [rng.choice([-1.0, 1.0], size) for _ in range(num_tasks - 1)]
        self.perms = torch.as_tensor(np.stack(perms), dtype=torch.long, device=env.device)
        self.signs = torch.as_tensor(np.stack(signs), dtype=torch.float32, device=env.device)
        self.discrete = isinstance(space, gym.spaces.Discrete)

    def action(self, action, task):
        if self.discrete:
            return self.perms[task].gather(1, action.long().unsqueeze(1)).squeeze(1).to(action.dtype)
        return action.gather(1, self.perms[task]) * self.signs[task]

    def describe(self, task):
        return {"permutation": self.perms[task].tolist()} | ({} if self.discrete else {"signs": self.signs[task].tolist()})


class RewardSignFlip(Shift):
    """r ↦ (−1)^k·r: odd tasks reward the opposite behaviour."""

    name = "reward-flip"
    tables = ("signs",)

    def draw(self, rng, num_tasks, env):
        self.signs = torch.tensor([1.0 - 2 * (k % 2) for k in range(num_tasks)], device=env.device)

    def reward(self, reward, task):
        return reward * self.signs[task]

    def episode_return(self, episodic_return, task):
        return -episodic_return if task % 2 else episodic_return

    def describe(self, task):
        return {"reward_sign": -1 if task % 2 else 1}


class PhysicsShift(Shift):
    """Scale a simulator parameter by a per-task factor (every task drawn, as in Dohare's slippery Ant).

    MuJoCo (gymnasium): friction → `geom_friction[:, 0]`, gravity → `opt.gravity`, mass → `body_mass` and
    `body_inertia` together (so the bodies stay physically consistent), damping → `dof_damping`; the edit is on
    the live model and takes effect at the next `mj_step`. MuJoCo Warp: the same fields, one copy per world
    (warp_backend.PHYSICS_FIELDS), edited on the device by ContinualVecEnv. Classic control: CartPole and Pendulum
    gravity and masses.
    """

    host_side = True

    def __init__(
        self, name: str, low: float, high: float, log_uniform: bool, default_steps: int = 100_000, default_tasks: int = 10
    ) -> None:
        self.name, self.low, self.high, self.log_uniform = name, low, high, log_uniform
        self.default_steps, self.default_tasks = default_steps, default_tasks

    def draw(self, rng, num_tasks, env):
        if self.log_uniform:
            self.factors = np.exp(rng.uniform(np.log(self.low), np.log(self.high), num_tasks))
        else:
            self.factors = rng.uniform(self.low, self.high, num_tasks)

    def configure(self, env, task):
        base = env.unwrapped
        factor = float(self.factors[task])
        defaults = getattr(base, "_continual_defaults", None)
        if defaults is None:  # remember the untouched values once, so factors never compound
            defaults = base._continual_defaults = _physics_defaults(base)
        if "model" in defaults:
            model, saved = base.model, defaults["model"]
            if self.name == "friction":
                model.geom_friction[:, 0] = saved["geom_friction"] * factor
            elif self.name == "gravity":
                model.opt.gravity[:] = saved["gravity"] * factor
            elif self.name == "mass":
                model.body_mass[:] = saved["body_mass"] * factor
                model.body_inertia[:] = saved["body_inertia"] * factor
            elif self.name == "damping":
                model.dof_damping[:] = saved["dof_damping"] * factor
            return
        attributes = CLASSIC_PHYSICS.get(type(base).__name__, {}).get(self.name)
        if attributes is None:
            raise UserError(
                f"the '{self.name}' shift needs a MuJoCo env (or CartPole/Pendulum for gravity and mass); "
                f"got {base.spec.id if base.spec else type(base).__name__}"
            )
        for attribute in attributes:
            setattr(base, attribute, defaults[attribute] * factor)
        if type(base).__name__ == "CartPoleEnv":  # derived constants of gymnasium's CartPole
            base.total_mass = base.masspole + base.masscart
            base.polemass_length = base.masspole * base.length

    def describe(self, task):
        return {f"{self.name}_factor": float(self.factors[task])}


# attributes scaled on gymnasium's classic-control envs (class name → shift → attributes)
CLASSIC_PHYSICS = {
    "CartPoleEnv": {"gravity": ("gravity",), "mass": ("masscart", "masspole")},
    "PendulumEnv": {"gravity": ("g",), "mass": ("m",)},
}


def _physics_defaults(base: gym.Env) -> dict[str, Any]:
    model = getattr(base, "model", None)
    if model is not None and hasattr(model, "geom_friction"):
        return {
            "model": {
                "geom_friction": model.geom_friction[:, 0].copy(),
                "gravity": model.opt.gravity.copy(),
                "body_mass": model.body_mass.copy(),
                "body_inertia": model.body_inertia.copy(),
                "dof_damping": model.dof_damping.copy(),
            }
        }
    names = {a for shift in CLASSIC_PHYSICS.get(type(base).__name__, {}).values() for a in shift}
    return {name: getattr(base, name) for name in names}


class Sequence(Shift):
    """A sequence of tasks of one body (DMC chains) or of games (MinAtar); task k runs sequence[k mod len]."""

    host_side = True

    def __init__(self, name: str, members: tuple[str, ...]) -> None:
        self.name, self.members = name, members
        self.default_tasks = len(members)

    def member(self, task: int) -> str:
        return self.members[task % len(self.members)]

    def configure(self, env, task):
        env.select(task % len(self.members))

    def describe(self, task):
        return {"task": self.member(task)}


class MemberShifts(Shift):
    """The tensor hooks of a group's shifts (one drawn per member, T tasks each) for its K·N sub-envs, member-major, in
    one batch: the members' tables stacked, member k's task t at row k·T + t."""

    def __init__(self, shifts: list[Shift], envs_per_member: int, num_tasks: int, device: torch.device) -> None:
        self.stacked = copy.copy(shifts[0])
        for name in self.stacked.tables:
            setattr(self.stacked, name, torch.cat([getattr(shift, name) for shift in shifts]))
        member = torch.arange(len(shifts) * envs_per_member, device=device) // envs_per_member
        self.first_row = member * num_tasks  # each sub-env's member's task 0

    def observation(self, obs, task):
        return self.stacked.observation(obs, self.first_row + task)

    def action(self, action, task):
        return self.stacked.action(action, self.first_row + task)

    def reward(self, reward, task):
        return self.stacked.reward(reward, self.first_row + task)


def _require_float_vector(env: TorchVecEnv, shift: str) -> None:
    space = env.single_observation_space
    if not (isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating)):
        raise UserError(f"the '{shift}' shift adds to float observations; {env.env_id} observes {space} — use obs-permute")


SHIFTS: dict[str, Callable[[], Shift]] = {
    "obs-offset": ObservationOffset,
    "obs-permute": ObservationPermutation,
    "action-permute": ActionPermutation,
    "reward-flip": RewardSignFlip,
    "friction": lambda: PhysicsShift("friction", 0.02, 2.0, log_uniform=True),  # Dohare 2024: log-uniform [0.02, 2]
    "gravity": lambda: PhysicsShift("gravity", 0.5, 1.5, log_uniform=False),  # [our default]
    "mass": lambda: PhysicsShift("mass", 0.5, 2.0, log_uniform=True),  # [our default]
    "damping": lambda: PhysicsShift("damping", 0.5, 2.0, log_uniform=True),  # [our default]
}
