"""MuJoCo Warp backend: gymnasium's v5 locomotion tasks as thousands of worlds on one device, tensors never leave it.

`warp:Hopper-v5`, `warp:HalfCheetah-v5`, `warp:Walker2d-v5`, `warp:Ant-v5`, `warp:Humanoid-v5` load gymnasium's own
XML files and step them with MuJoCo Warp (`mujoco_warp.step`, `nworld = num_envs`, frame skip 4 / 5 / 4 / 5 / 5 as
gymnasium). Observations, rewards and terminations are torch code on zero-copy views of the simulator's arrays
(`wp.to_torch`), following gymnasium 1.4's `*_v5.py` sources:

- observation: qpos without the root's x (Ant: x, y), then qvel (Hopper and Walker2d clip qvel to ±10), then
  for Ant the external contact forces `cfrc_ext` of bodies 1.. clipped to ±1 (105-d; 27-d with
  `include_cfrc_ext_in_observation=False`, as gymnasium's flag); Humanoid's 348-d one adds, of bodies 1..,
  cinert, cvel, then qfrc_actuator without the root's 6 dofs, then unclipped cfrc_ext (mj_forward's values
  after a reset, as gymnasium's `set_state`);
- reward: forward velocity (root x difference over dt = timestep · frame_skip) + healthy reward (given only
  while healthy, the v5 rule) − ctrl_cost_weight·|a|² on the unclipped action (MuJoCo clamps the control
  itself) − for Ant contact_cost_weight·|clip(cfrc_ext, ±1)|², for Humanoid min(contact_cost_weight·|cfrc_ext|²,
  10) (its velocity weighs 1.25, being healthy 5). Ant's x is the torso's `xpos`, Humanoid's the mass-weighted mean
  of `xipos`; after `mj_step` both are one substep stale in gymnasium and here alike (both read them after the
  step's last forward);
- termination: leaving the healthy ranges (Hopper: z > 0.7, |angle| < 0.2, |qpos[2:], qvel| < 100;
  Walker2d: 0.8 < z < 2, |angle| < 1; Ant: finite state and 0.2 ≤ z ≤ 1; Humanoid: 1 < z < 2); HalfCheetah never
  terminates; truncation at 1000 steps (`max_episode_steps=` overrides it);
- reset: qpos0 + U(±s) on qpos; qvel U(±s) (Hopper, Walker2d, s = 0.005; Humanoid, s = 0.01) or s·N(0, 1)
  (HalfCheetah, Ant, s = 0.1), like `mj_resetData` + `set_state` (solver warm start, ctrl, time and contact forces
  zeroed; Humanoid then runs `mujoco_warp.forward`, on every world, for the quantities its observation reads).

Differences, by design: single precision (MuJoCo Warp computes in float32; gymnasium in float64), so
trajectories from the same state drift apart slowly (tests/test_warp.py measures how far); and our own random
stream for reset noise (one torch generator per member seeded by its seed), so the same seed gives the same
episodes here, not gymnasium's episodes. By MuJoCo Warp: humanoid.xml asks for the PGS solver, which MuJoCo Warp
lacks; Newton solves the same convex problem (tests/test_warp.py: agreement with gymnasium's PGS as close as on the
other tasks). Every finished world is reset inside `step`; `obs` is its new first observation and `next_obs` the
true final one. Episode statistics stay on the device (`DeviceEpisodeLog`).

The physics of one agent step (frame_skip × `mujoco_warp.step`, plus Ant's and Humanoid's `rne_postconstraint`
for contact forces) and Humanoid's reset `forward` are each captured once as a Warp graph and replayed: a CUDA graph
on GPUs, Warp's C++ replay of the recorded launches on CPU (bit-identical to eager launches there, ~100× faster
because MuJoCo Warp issues hundreds of small kernel launches per physics step). `use_graph=False` runs the launches
eagerly.

CUDA streams: the torch ops on the zero-copy views run on torch's current stream, so every Warp launch (a graph
replay or an eager launch) goes to that same stream, looked up at each launch; a CUDA graph is captured on Warp's
own stream (the legacy default stream, torch's usual one, cannot be captured) after a device synchronisation, and a
capture executes nothing. MuJoCo Warp sums some quantities with float atomics, whose order varies between GPU runs:
`deterministic=True` sets its `opt.deterministic` (all determinism features), which the bit-for-bit tests on CUDA
use; on CPU the kernels run serially and are deterministic either way.

Continual physics shifts (`continual:friction:warp:Hopper-v5`; gravity, mass, damping alike): `WorldPhysics` gives
every world its own copy of the fields gymnasium's path edits (`expand_per_world`: MuJoCo Warp's kernels read a model
field with a leading "*" axis at `worldid % shape[0]`; `opt.gravity` is such a field in mujoco-warp 3.17.0), then
scales the worlds that start an episode in place with torch ops on zero-copy views (`on_episode_start`), so the
captured graphs stay valid and nothing goes through the host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import warnings
from typing import Any, Callable

import gymnasium as gym
import mujoco
import torch

from envs.base import EpisodeStats, StepResult, TorchVecEnv
from envs.errors import UserError, did_you_mean
from envs.torch_classic import DeviceEpisodeLog

PREFIX = "warp:"
INSTALL_HINT = "pip install mujoco-warp==3.17.0 (or pip install -e . in the repository)"


def import_warp() -> tuple[Any, Any]:
    """(warp, mujoco_warp), imported on first use so that validating an id stays cheap."""
    try:
        import mujoco_warp
        import warp
    except ImportError as error:
        raise UserError(f"the warp backend needs MuJoCo Warp ({error.name} is missing): {INSTALL_HINT}") from None
    # one line per loaded kernel module (hundreds per model) would drown the run's log; warnings still show
    warp.config.log_level = max(warp.config.log_level, warp.LOG_WARNING)
    if torch.cuda.is_available():
        warp.init()  # idempotent; device lookups need the runtime
    else:
        with _stderr_silenced():  # Warp's C runtime warns that it found no CUDA driver: expected on a CPU machine
            warp.init()
    return warp, mujoco_warp


@contextlib.contextmanager
def _stderr_silenced():
    """Point file descriptor 2 at /dev/null (C code writes there directly, past sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class WarpLocomotionVecEnv(TorchVecEnv):
    """Shared batch machinery; a task defines its reward weights, healthy rule, observation and reset noise."""

    gymnasium_id: str
    ctrl_cost_weight: float
    reset_noise_scale: float
    forward_reward_weight = 1.0
    healthy_reward = 1.0  # per healthy step (not for HalfCheetah, which has no healthy rule)
    qvel_noise = "uniform"  # "uniform": U(±s); "normal": s·N(0, 1)
    qvel_clip: float | None = 10.0
    needs_contact_forces = False  # run rne_postconstraint after the step (fills cfrc_ext)
    observes_forward = False  # the observation reads mj_forward's outputs (cinert, ...): run forward on reset

    def __init__(
        self,
        num_envs: int,
        seed: int | tuple[int, ...],
        device: torch.device,
        max_episode_steps: int | None = None,
        use_graph: bool = True,
        nconmax: int | None = None,
        njmax: int | None = None,
        episode_log_capacity: int = 65_536,
        deterministic: bool = False,
    ) -> None:
        """`num_envs` worlds per member of the group `seed` (one seed, or one per member); `max_episode_steps`: time
        limit (default gymnasium's 1000); `use_graph`: replay the captured physics (False: eager launches); `nconmax` /
        `njmax`: MuJoCo Warp's per-world contact / constraint-row capacity (default its heuristic, 48 / 64 here, far
        above the ≤ 6 contacts / 22 rows gymnasium reaches on these models); `deterministic`: MuJoCo Warp's run-to-run
        determinism on GPUs (module docstring)."""
        super().__init__(num_envs, seed)
        num_envs = self.num_envs  # the worlds of all members
        warp, mujoco_warp = import_warp()
        self.warp, self.mjw = warp, mujoco_warp
        self.env_id, self.device = PREFIX + self.gymnasium_id, torch.device(device)
        reference = gym.make(
            self.gymnasium_id, **self.gymnasium_kwargs()
        )  # spaces, XML file, frame skip and time limit as registered
        self.single_observation_space, self.single_action_space = reference.observation_space, reference.action_space
        self.max_episode_steps = int(max_episode_steps or reference.spec.max_episode_steps)
        self.frame_skip, model_path = reference.unwrapped.frame_skip, reference.unwrapped.fullpath
        reference.close()

        host_model = mujoco.MjModel.from_xml_path(model_path)
        if host_model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:  # humanoid.xml's; MuJoCo Warp has no PGS
            host_model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON  # the same convex problem, solved in the primal
        host_data = mujoco.MjData(host_model)
        self.host_model = host_model  # the XML's values: what physics shifts scale
        self.dt = float(host_model.opt.timestep) * self.frame_skip
        self.warp_device = warp.device_from_torch(self.device)
        with warp.ScopedDevice(self.warp_device):
            self.model = mujoco_warp.put_model(host_model)
            self.data = mujoco_warp.put_data(host_model, host_data, nworld=num_envs, nconmax=nconmax, njmax=njmax)
            if deterministic:
                self.model.opt.deterministic = int(mujoco_warp.DeterminismType.ALL)
            warp.synchronize_device(self.warp_device)  # the copies ran on Warp's stream; torch reads the views next
        # Zero-copy views: writing them writes the simulator's state, and they always show its latest values.
        view = warp.to_torch
        self.qpos, self.qvel, self.ctrl = view(self.data.qpos), view(self.data.qvel), view(self.data.ctrl)
        self.time, self.qacc_warmstart = view(self.data.time), view(self.data.qacc_warmstart)
        self.xpos, self.cfrc_ext = view(self.data.xpos), view(self.data.cfrc_ext)
        self.init_qpos = torch.as_tensor(host_model.qpos0, dtype=torch.float32, device=self.device)

        self.use_graph, self.graphs = use_graph, {}  # launch method name → its graph, captured at its first call
        # called with the mask of worlds about to start an episode, before their state is set (continual physics)
        self.on_episode_start: Callable[[torch.Tensor], None] | None = None
        self.warp_streams: dict[int, Any] = {}  # torch stream handle → its Warp wrapper (created once per stream)
        self.generators = [torch.Generator(device=self.device) for _ in self.seeds]
        self.episode_log = DeviceEpisodeLog(episode_log_capacity, self.device)
        self.elapsed = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.episode_return = torch.zeros(num_envs, device=self.device)
        self.x_before = self.qpos[:, 0].clone()  # the root's x before the coming step

    # --- what a task defines ---------------------------------------------------------------------------
    def gymnasium_kwargs(self) -> dict[str, Any]:
        """Options of gymnasium's env that change its spaces (Ant's contact forces in the observation)."""
        return {}

    def observe(self) -> torch.Tensor:
        velocity = self.qvel if self.qvel_clip is None else self.qvel.clamp(-self.qvel_clip, self.qvel_clip)
        return torch.cat([self.qpos[:, 1:], velocity], dim=1)

    def is_healthy(self) -> torch.Tensor:
        raise NotImplementedError

    def root_x(self) -> torch.Tensor:
        """Right after a step: the x whose change over dt is the forward velocity (the root's slide joint)."""
        return self.qpos[:, 0]

    def contact_cost(self) -> torch.Tensor:
        return torch.zeros((), device=self.device)

    # --- physics ----------------------------------------------------------------------------------------
    def _physics(self) -> None:
        for _ in range(self.frame_skip):
            self.mjw.step(self.model, self.data)
        if self.needs_contact_forces:  # gymnasium calls mj_rnePostConstraint after mj_step for the same reason
            self.mjw.rne_postconstraint(self.model, self.data)

    def _forward(self) -> None:
        self.mjw.forward(self.model, self.data)

    def _launch(self, launches: str) -> None:
        """Run the Warp launches of the method named `launches` (`_physics`, `_forward`): replay its graph,
        captured at the first call."""
        wp = self.warp
        if self.use_graph and launches not in self.graphs:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the capture runs on Warp's own stream (it executes nothing)
            try:
                with wp.ScopedDevice(self.warp_device), wp.ScopedCapture() as capture:
                    getattr(self, launches)()
                self.graphs[launches] = capture.graph
            except Exception as error:  # e.g. a CUDA driver without conditional graph nodes (the solver's while loop)
                warnings.warn(f"{self.env_id}: graph capture failed ({error}); stepping with eager launches instead")
                self.use_graph = False
        stream = self._torch_stream()
        if launches in self.graphs:
            wp.capture_launch(self.graphs[launches], stream=stream)  # on torch's current stream: ordered with torch ops
            return
        with wp.ScopedDevice(self.warp_device), wp.ScopedStream(stream):  # no stream (CPU): no-op
            getattr(self, launches)()

    def _torch_stream(self) -> Any:
        """torch's current CUDA stream as a Warp stream (None on CPU)."""
        if self.device.type != "cuda":
            return None
        current = torch.cuda.current_stream(self.device)
        if current.cuda_stream not in self.warp_streams:
            self.warp_streams[current.cuda_stream] = self.warp.stream_from_torch(current)
        return self.warp_streams[current.cuda_stream]

    # --- per-world model parameters (continual physics shifts) ---------------------------------------
    def _bind_model_views(self) -> None:
        """Views of model fields that the task reads; rebound when a field becomes per-world (a new array)."""

    def expand_per_world(self, field: str) -> torch.Tensor:
        """Give every world its own copy of model field `field` (`opt.gravity` for an option) and return a zero-copy
        view (num_envs, ...). The copy is a new array, so captured graphs, which hold the old address, are dropped
        (captured again at the next launch); later edits must write the view in place."""
        require_per_world(field)
        owner, name = (self.model.opt, field.removeprefix("opt.")) if field.startswith("opt.") else (self.model, field)
        shared = getattr(owner, name)
        if shared.shape[0] != self.num_envs:
            wp = self.warp
            with wp.ScopedStream(self._torch_stream()):  # a stream-ordered allocation: on the stream torch writes it
                per_world = wp.empty((self.num_envs, *shared.shape[1:]), dtype=shared.dtype, device=shared.device)
            values = wp.to_torch(per_world)
            values.copy_(wp.to_torch(shared).expand_as(values))  # every world starts from the shared values
            per_world._is_batched = True  # as put_model marks the fields it batches
            setattr(owner, name, per_world)
            self.graphs.clear()
            self._bind_model_views()
        return self.warp.to_torch(getattr(owner, name))

    # --- the batch --------------------------------------------------------------------------------------
    def _initial_states(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh qpos, qvel for every world (drawn for all, used where a world starts an episode: no host sync), member
        k's from member k's generator."""
        qpos, qvel = zip(*(self._member_noise(generator) for generator in self.generators))
        qpos, qvel = (parts[0] if self.members == 1 else torch.cat(parts) for parts in (qpos, qvel))
        return self.init_qpos + self.reset_noise_scale * qpos, self.reset_noise_scale * qvel

    def _member_noise(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """One member's unscaled reset noise on qpos and qvel, qpos's drawn first."""
        n = self.envs_per_member
        qpos = 2 * torch.rand(n, self.qpos.shape[1], device=self.device, generator=generator) - 1
        if self.qvel_noise == "normal":
            return qpos, torch.randn(n, self.qvel.shape[1], device=self.device, generator=generator)
        return qpos, 2 * torch.rand(n, self.qvel.shape[1], device=self.device, generator=generator) - 1

    def set_state(self, qpos: torch.Tensor, qvel: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Start the worlds in `mask` (all by default) from (qpos, qvel) as `mj_resetData` + gymnasium's `set_state`
        would; returns the observations of all worlds."""
        mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device) if mask is None else mask
        rows = mask[:, None]
        self.qpos.copy_(torch.where(rows, qpos.to(self.device, torch.float32), self.qpos))
        self.qvel.copy_(torch.where(rows, qvel.to(self.device, torch.float32), self.qvel))
        self.qacc_warmstart.masked_fill_(rows, 0.0)
        self.ctrl.masked_fill_(rows, 0.0)
        self.time.masked_fill_(mask, 0.0)
        self.cfrc_ext.masked_fill_(mask[:, None, None], 0.0)  # mj_forward does not compute them: 0 until the first step
        if self.observes_forward:  # on every world (no host sync); harmless to the others: their next step redoes it
            self._launch("_forward")
            self.x_before = torch.where(mask, self.root_x(), self.x_before)
        else:
            self.x_before = torch.where(mask, self.qpos[:, 0], self.x_before)  # every root x is qpos[0] after mj_forward
        return self.observe()

    def _start_episodes(self, mask: torch.Tensor | None = None) -> torch.Tensor:
        """New episodes in the worlds in `mask` (all by default) from fresh initial states; the observations of all."""
        if self.on_episode_start is not None:  # before set_state: Humanoid's forward there reads the masses
            self.on_episode_start(torch.ones(self.num_envs, dtype=torch.bool, device=self.device) if mask is None else mask)
        return self.set_state(*self._initial_states(), mask=mask)

    def reset(self, seed: int | tuple[int, ...] | None = None) -> torch.Tensor:
        self._seed_generators(seed)
        self.elapsed.zero_()
        self.episode_return.zero_()
        return self._start_episodes()

    def step(self, action: torch.Tensor) -> StepResult:
        self._check_action(action)
        action = action.to(self.device, torch.float32)
        self.ctrl.copy_(action)
        self._launch("_physics")
        x_after = self.root_x().clone()
        forward_velocity = (x_after - self.x_before) / self.dt
        healthy = self.is_healthy()
        # r = w·ẋ + healthy_reward·[healthy] − c·|a|² (− Ant's contact cost)
        reward = (
            self.forward_reward_weight * forward_velocity
            + self.healthy_reward * healthy
            - self.ctrl_cost_weight * action.square().sum(dim=1)
            - self.contact_cost()
        )
        terminated = ~healthy
        next_obs = self.observe()
        self.x_before = x_after
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps  # as gymnasium's TimeLimit (may coincide with terminated)
        done = terminated | truncated
        self.env_steps += self.envs_per_member
        self.episode_return += reward
        self.episode_log.record(self.episode_return, self.elapsed, done, self.env_steps)
        self.episode_return.masked_fill_(done, 0.0)
        self.elapsed.masked_fill_(done, 0)
        obs = torch.where(done[:, None], self._start_episodes(done), next_obs)
        return StepResult(obs, reward, terminated, truncated, next_obs)

    def reset_where(self, mask: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        mask = mask.to(self.device)
        self.episode_log.record(self.episode_return, self.elapsed, mask, self.env_steps)
        self.episode_return.masked_fill_(mask, 0.0)
        self.elapsed.masked_fill_(mask, 0)
        return torch.where(mask[:, None], self._start_episodes(mask), obs)

    def drain_episode_stats(self) -> EpisodeStats:
        return self.episode_log.drain()

    def _sub_env_arrays(self) -> dict[str, torch.Tensor]:
        # loaded in place: the simulator (and its captured graph) owns this memory. The warm start makes resumed solver
        # iterations bit-identical.
        names = ("qpos", "qvel", "qacc_warmstart", "time", "x_before", "elapsed", "episode_return")
        return {name: getattr(self, name) for name in names}

    def close(self) -> None:
        self.graphs.clear()


# What each physics shift scales, as PhysicsShift.configure does on a gymnasium env's MjModel (envs/shifts.py):
# shift → (mujoco_warp Model field, the column of its last axis scaled or None for all of it), ...
PHYSICS_FIELDS: dict[str, tuple[tuple[str, int | None], ...]] = {
    "friction": (("geom_friction", 0),),  # the sliding coefficient; torsional and rolling friction stay
    "gravity": (("opt.gravity", None),),
    "mass": (("body_mass", None), ("body_inertia", None)),  # together, so that every body stays consistent
    "damping": (("dof_damping", None),),
}


def require_per_world(field: str) -> None:
    """One-line UserError unless this MuJoCo Warp lets `field` (`opt.<name>` for an option) differ between worlds:
    its spec then has a leading "*" axis, which every kernel indexes by world (`worldid % shape[0]`)."""
    _, mujoco_warp = import_warp()
    owner, name = (mujoco_warp.Option, field.removeprefix("opt.")) if field.startswith("opt.") else (mujoco_warp.Model, field)
    spec = {f.name: f.type for f in dataclasses.fields(owner)}.get(name)
    if getattr(spec, "shape", ())[:1] != ("*",):
        raise UserError(
            f"MuJoCo Warp shares `{field}` between all worlds, so a shift of it cannot differ per sub-env on "
            f"'warp:' envs — use the gymnasium id (e.g. continual:<shift>:Hopper-v5)"
        )


class WorldPhysics:
    """The model fields one physics shift scales, a copy per world, with the XML's values as defaults (build it on a
    fresh env: they are read from world 0).

    `scale(factor, worlds)` sets the worlds in the mask `worlds` to default × factor (one factor per world, or one for
    all) with torch ops on zero-copy views, in place: the captured graphs keep reading the same arrays."""

    def __init__(self, env: WarpLocomotionVecEnv, shift: str) -> None:
        self.parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (per-world values, default, unscaled part)
        for field, column in PHYSICS_FIELDS[shift]:
            values = env.expand_per_world(field)
            if column is not None:
                values = values[..., column]
            default = values[0].clone()
            unscaled = torch.zeros_like(default)
            if field == "dof_damping":  # put_model folds actuator damping in; gymnasium scales the joints' own only
                default = torch.as_tensor(env.host_model.dof_damping, dtype=torch.float32, device=env.device)
                unscaled = values[0] - default
            self.parts.append((values, default, unscaled))

    def scale(self, factor: torch.Tensor, worlds: torch.Tensor) -> None:
        for values, default, unscaled in self.parts:
            per_world = factor.reshape(-1, *[1] * default.dim())  # (num_envs or 1, 1, ...)
            rows = worlds.view(-1, *[1] * default.dim())
            values.copy_(torch.where(rows, unscaled + default * per_world, values))


def _in_range(values: torch.Tensor, low: float, high: float) -> torch.Tensor:
    return (values > low) & (values < high)


class Hopper(WarpLocomotionVecEnv):
    """One-legged hopper; healthy while z > 0.7, |torso angle| < 0.2 and every qpos[2:], qvel entry within ±100."""

    gymnasium_id, ctrl_cost_weight, reset_noise_scale = "Hopper-v5", 1e-3, 5e-3

    def is_healthy(self):
        state = torch.cat([self.qpos[:, 2:], self.qvel], dim=1)
        return _in_range(state, -100.0, 100.0).all(dim=1) & (self.qpos[:, 1] > 0.7) & _in_range(self.qpos[:, 2], -0.2, 0.2)


class Walker2d(WarpLocomotionVecEnv):
    """Two-legged walker; healthy while 0.8 < z < 2 and |torso angle| < 1."""

    gymnasium_id, ctrl_cost_weight, reset_noise_scale = "Walker2d-v5", 1e-3, 5e-3

    def is_healthy(self):
        return _in_range(self.qpos[:, 1], 0.8, 2.0) & _in_range(self.qpos[:, 2], -1.0, 1.0)


class HalfCheetah(WarpLocomotionVecEnv):
    """Planar cheetah; no healthy rule, no healthy reward, never terminates; unclipped qvel in the observation."""

    gymnasium_id, ctrl_cost_weight, reset_noise_scale = "HalfCheetah-v5", 0.1, 0.1
    healthy_reward, qvel_noise, qvel_clip = 0.0, "normal", None
    can_terminate = False

    def is_healthy(self):
        return torch.ones(self.num_envs, dtype=torch.bool, device=self.device)


class Ant(WarpLocomotionVecEnv):
    """Quadruped with a free root; healthy while the state is finite and 0.2 ≤ z ≤ 1; pays for contact forces."""

    gymnasium_id, ctrl_cost_weight, reset_noise_scale = "Ant-v5", 0.5, 0.1
    qvel_noise, qvel_clip, needs_contact_forces = "normal", None, True
    contact_cost_weight, contact_force_range, torso = 5e-4, (-1.0, 1.0), 1  # torso = gymnasium's main_body

    def __init__(self, *args: Any, include_cfrc_ext_in_observation: bool = True, **kwargs: Any) -> None:
        self.include_cfrc_ext_in_observation = include_cfrc_ext_in_observation
        super().__init__(*args, **kwargs)

    def gymnasium_kwargs(self):
        return {"include_cfrc_ext_in_observation": self.include_cfrc_ext_in_observation}

    def contact_forces(self) -> torch.Tensor:
        return self.cfrc_ext.clamp(*self.contact_force_range)

    def observe(self):
        parts = [self.qpos[:, 2:], self.qvel]
        if self.include_cfrc_ext_in_observation:
            parts.append(self.contact_forces()[:, 1:].flatten(1))  # body 0 is the world
        return torch.cat(parts, dim=1)

    def is_healthy(self):
        finite = torch.isfinite(self.qpos).all(dim=1) & torch.isfinite(self.qvel).all(dim=1)
        return finite & (self.qpos[:, 2] >= 0.2) & (self.qpos[:, 2] <= 1.0)

    def root_x(self):
        # gymnasium reads data.body(main_body).xpos after mj_step: computed before the last substep's integration.
        return self.xpos[:, self.torso, 0]

    def contact_cost(self):
        return self.contact_cost_weight * self.contact_forces().square().sum(dim=(1, 2))


class Humanoid(WarpLocomotionVecEnv):
    """3-D humanoid; healthy while 1 < z < 2; the reward's velocity is the centre of mass's; pays for contact forces
    (the cost capped at 10). 348-d observation: qpos[2:], qvel, then of bodies 1.. cinert, cvel, cfrc_ext, with
    qfrc_actuator of the non-root dofs before cfrc_ext. Solver: Newton, not humanoid.xml's PGS (none in MuJoCo Warp)."""

    gymnasium_id, ctrl_cost_weight, reset_noise_scale = "Humanoid-v5", 0.1, 1e-2
    forward_reward_weight, healthy_reward, qvel_clip = 1.25, 5.0, None
    needs_contact_forces, observes_forward = True, True
    contact_cost_weight, contact_cost_max = 5e-7, 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        view = self.warp.to_torch
        self.xipos, self.cinert, self.cvel = view(self.data.xipos), view(self.data.cinert), view(self.data.cvel)
        self.qfrc_actuator = view(self.data.qfrc_actuator)
        self._bind_model_views()

    def _bind_model_views(self):
        self.body_mass = self.warp.to_torch(self.model.body_mass)  # (1 or num_envs, nbody): per world under a mass shift

    def observe(self):
        return torch.cat(
            [
                self.qpos[:, 2:],
                self.qvel,
                self.cinert[:, 1:].flatten(1),
                self.cvel[:, 1:].flatten(1),
                self.qfrc_actuator[:, 6:],
                self.cfrc_ext[:, 1:].flatten(1),
            ],
            dim=1,
        )

    def is_healthy(self):
        return _in_range(self.qpos[:, 2], 1.0, 2.0)

    def root_x(self):
        # gymnasium's mass_center: mass-weighted xipos, after mj_step computed at the last RK4 stage, here alike
        return (self.body_mass * self.xipos[:, :, 0]).sum(dim=1) / self.body_mass.sum(dim=1)

    def contact_cost(self):
        return (self.contact_cost_weight * self.cfrc_ext.square().sum(dim=(1, 2))).clamp(max=self.contact_cost_max)


TASKS: dict[str, type[WarpLocomotionVecEnv]] = {
    task.gymnasium_id: task for task in (Hopper, HalfCheetah, Walker2d, Ant, Humanoid)
}


def task_for(env_id: str) -> type[WarpLocomotionVecEnv]:
    name = env_id.removeprefix(PREFIX)
    if name not in TASKS:
        ids = ", ".join(PREFIX + known for known in TASKS)
        raise UserError(f"no MuJoCo Warp version of '{name}'{did_you_mean(name, list(TASKS))} (warp ids: {ids})")
    return TASKS[name]


def make_warp_env(
    env_id: str, num_envs: int, seed: int | tuple[int, ...], device: torch.device, **kwargs: Any
) -> WarpLocomotionVecEnv:
    return task_for(env_id)(num_envs, seed, device, **kwargs)
