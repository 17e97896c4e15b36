"""Torch-native batched classic control: thousands of envs as tensor code on CPU or CUDA, no host copies.

CartPole-v1, Pendulum-v1, Acrobot-v1, MountainCar-v0 and MountainCarContinuous-v0 with gymnasium 1.4's
dynamics, rewards, termination rules, reset distributions and time limits (read from gymnasium's source; the
parity tests step both side by side). Differences, by design: single precision (gymnasium integrates in
float64; per-step agreement is ≈1e-6), and our own random stream for reset states (one torch generator per
member, seeded by its seed; every step draws a fresh initial state for each of the member's sub-envs, used where
one finished), so the same seed gives the same episodes here, not gymnasium's episodes.

Every finished sub-env is reset inside `step`: `obs` is the new episode's first observation and `next_obs`
the true final one. Episode statistics are kept on the device in a ring (see `DeviceEpisodeLog`); the only
device→host copy is in `drain_episode_stats`, at logging intervals.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import gymnasium as gym
import torch

from envs.base import EpisodeStats, StepResult, TorchVecEnv
from envs.errors import UserError, did_you_mean


def ring_slots(selected: torch.Tensor, written: torch.Tensor, capacity: int) -> torch.Tensor:
    """Where the `selected` rows of a batch go in a ring of `capacity` rows that has received `written` rows so far,
    in batch order and without a host sync; unselected rows point at the scratch row `capacity` (the ring
    tensors keep one extra row for them)."""
    order = written + torch.cumsum(selected.long(), 0) - 1
    return torch.where(selected, order % capacity, capacity)


class DeviceEpisodeLog:
    """A ring of the last `capacity` finished episodes (return, length, end step, sub-env), written without syncs."""

    def __init__(self, capacity: int, device: torch.device, num_envs: int = 0) -> None:
        self.capacity = capacity
        self.returns = torch.zeros(capacity + 1, device=device)  # the extra slot absorbs writes of unfinished envs
        self.lengths = torch.zeros(capacity + 1, dtype=torch.long, device=device)
        self.end_steps = torch.zeros(capacity + 1, dtype=torch.long, device=device)
        self.envs = torch.zeros(capacity + 1, dtype=torch.long, device=device)
        self.count = torch.zeros((), dtype=torch.long, device=device)
        # 0 … num_envs − 1 (0 unknown: made at the first record)
        self.sub_envs = torch.arange(num_envs, dtype=torch.long, device=device)

    def record(self, returns: torch.Tensor, lengths: torch.Tensor, done: torch.Tensor, end_step: int | torch.Tensor) -> None:
        if len(self.sub_envs) != len(done):
            self.sub_envs = torch.arange(len(done), device=done.device)
        slots = ring_slots(done, self.count, self.capacity)
        self.returns.index_copy_(0, slots, returns.float())
        self.lengths.index_copy_(0, slots, lengths)
        self.end_steps.index_fill_(0, slots, end_step)
        self.envs.index_copy_(0, slots, self.sub_envs)
        self.count += done.sum()

    def drain(self) -> EpisodeStats:
        count = int(self.count)  # the one sync, at logging intervals
        kept = min(count, self.capacity)  # beyond `capacity` episodes per drain, the oldest are dropped
        slots = torch.arange(count - kept, count, device=self.count.device) % self.capacity
        self.count.zero_()
        return EpisodeStats(
            returns=self.returns[slots].tolist(),
            lengths=self.lengths[slots].tolist(),
            end_steps=self.end_steps[slots].tolist(),
            envs=self.envs[slots].tolist(),
        )


class TorchClassicControl(TorchVecEnv):
    """Shared batch machinery; a task defines its state size, initial states, dynamics and observation."""

    state_size: int
    reset_low: tuple[float, ...]
    reset_high: tuple[float, ...]

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | tuple[int, ...],
        device: torch.device,
        episode_log_capacity: int = 65_536,
        max_episode_steps: int = 0,
    ) -> None:
        """`num_envs` sub-envs per member of the group `seed` (one seed, or one per member); `max_episode_steps`
        replaces gymnasium's time limit (0: keep it), as `gym.make(..., max_episode_steps=...)` does."""
        super().__init__(num_envs, seed)
        reference = gym.make(env_id)  # spaces and time limit exactly as gymnasium registers them
        self.env_id, self.device = env_id, device
        self.single_observation_space, self.single_action_space = reference.observation_space, reference.action_space
        self.max_episode_steps = max_episode_steps or int(reference.spec.max_episode_steps)
        reference.close()
        self.generators = [torch.Generator(device=device) for _ in self.seeds]
        self.initial_low = torch.tensor(self.reset_low, device=device)
        self.initial_high = torch.tensor(self.reset_high, device=device)
        self.episode_log = DeviceEpisodeLog(episode_log_capacity, device, self.num_envs)
        self.state = torch.zeros(self.num_envs, self.state_size, device=device)
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.long, device=device)
        self.episode_return = torch.zeros(self.num_envs, device=device)
        self.end_step = torch.zeros((), dtype=torch.long, device=device)  # env_steps, as the episode log reads it
        self.drawn: list[torch.Tensor] = []  # initial-state batches drawn ahead (`draw_ahead`), the next one first
        self.advance = self._advance  # the tensor part of a step; `compile_steps` compiles it

    # --- what a task defines ---------------------------------------------------------------------------
    def dynamics(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(next state, reward, terminated) for a batch."""
        raise NotImplementedError

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.clone()

    # --- the batch --------------------------------------------------------------------------------------
    def initial_states(self) -> torch.Tensor:
        """A fresh initial state for every sub-env, member k's from member k's generator: the next batch drawn ahead,
        or one call per member."""
        if self.drawn:
            return self.drawn.pop()
        return self.draw_initial_states(1)[0]

    def draw_initial_states(self, batches: int) -> torch.Tensor:
        """`batches` successive `initial_states()` batches, (batches, num_envs, state_size), one call per member.
        torch's uniform draws take the same numbers from a generator whatever their size, so this equals `batches`
        calls of `initial_states()` in a row, bit for bit."""
        shape = (batches, self.envs_per_member, self.state_size)
        uniform = [torch.rand(shape, device=self.device, generator=generator) for generator in self.generators]
        uniform = uniform[0] if self.members == 1 else torch.cat(uniform, dim=1)
        return self.initial_low + uniform * (self.initial_high - self.initial_low)

    def draw_ahead(self, steps: int) -> None:
        """Draw the initial states of the next `steps` steps (or resets) now, one call per member instead of one per
        member and step: a rollout of known length saves ≈ 2 µs a member a step. The numbers are the same; the
        generators run ahead until the batches are used, so use them all before a checkpoint."""
        self.drawn = list(self.draw_initial_states(steps).unbind(0))[::-1] + self.drawn

    def compile_steps(self, compiler: Callable[[Callable], Callable]) -> None:
        """Run the tensor part of every step through `compiler(fn)` (e.g. torch.compile): the step's random numbers
        are drawn outside it, and it changes the env's tensors in place."""
        self.advance = compiler(self._advance)

    def reset(self, seed: int | tuple[int, ...] | None = None) -> torch.Tensor:
        self._seed_generators(seed)
        self.drawn = []
        self.state.copy_(self.initial_states())
        self.elapsed.zero_()
        self.episode_return.zero_()
        return self.observe(self.state)

    def step(self, action: torch.Tensor) -> StepResult:
        self._check_action(action)
        fresh = self.initial_states()
        self.env_steps += self.envs_per_member
        self.end_step.fill_(self.env_steps)
        return self.advance(action.to(self.device), fresh)

    def _advance(self, action: torch.Tensor, fresh: torch.Tensor) -> StepResult:
        """One step of every sub-env, those that finish restarting from `fresh`; tensors only, state changed in place."""
        next_state, reward, terminated = self.dynamics(self.state, action)
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps  # as gymnasium's TimeLimit (may coincide with terminated)
        done = terminated | truncated
        next_obs = self.observe(next_state)
        self.state.copy_(torch.where(done[:, None], fresh, next_state))
        self.episode_return += reward
        self.episode_log.record(self.episode_return, self.elapsed, done, self.end_step)
        self.episode_return.masked_fill_(done, 0.0)
        self.elapsed.masked_fill_(done, 0)
        return StepResult(self.observe(self.state), reward, terminated, truncated, next_obs)

    def reset_where(self, mask: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        self.episode_log.record(self.episode_return, self.elapsed, mask, self.env_steps)
        self.state.copy_(torch.where(mask[:, None], self.initial_states(), self.state))
        self.episode_return.masked_fill_(mask, 0.0)
        self.elapsed.masked_fill_(mask, 0)
        return self.observe(self.state)

    def drain_episode_stats(self) -> EpisodeStats:
        return self.episode_log.drain()

    def member_state_dict(self, k: int) -> dict[str, Any]:
        if self.drawn:  # the generators ran ahead of the steps taken: a resumed run would skip these numbers
            raise RuntimeError(f"{self.env_id}: {len(self.drawn)} initial-state batches drawn ahead are unused")
        return super().member_state_dict(k)

    def load_member_state_dicts(self, states: list[dict[str, Any]]) -> None:
        self.drawn = []
        super().load_member_state_dicts(states)

    def _sub_env_arrays(self) -> dict[str, torch.Tensor]:
        return {"state": self.state, "elapsed": self.elapsed, "episode_return": self.episode_return}


class CartPole(TorchClassicControl):
    """Barto, Sutton & Anderson's cart-pole, Euler integration, reward 1 on every step (also the last)."""

    state_size, reset_low, reset_high = 4, (-0.05,) * 4, (0.05,) * 4
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_threshold, x_threshold = 12 * 2 * math.pi / 360, 2.4

    def dynamics(self, state, action):
        x, x_dot, theta, theta_dot = state.unbind(-1)
        total_mass, polemass_length = self.masspole + self.masscart, self.masspole * self.length
        force = torch.where(action == 1, self.force_mag, -self.force_mag)
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + polemass_length * theta_dot.square() * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (self.length * (4.0 / 3.0 - self.masspole * cos.square() / total_mass))
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        next_state = torch.stack(
            [x + self.tau * x_dot, x_dot + self.tau * x_acc, theta + self.tau * theta_dot, theta_dot + self.tau * theta_acc],
            dim=-1,
        )
        terminated = (next_state[:, 0].abs() > self.x_threshold) | (next_state[:, 2].abs() > self.theta_threshold)
        return next_state, torch.ones_like(x), terminated


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


class Pendulum(TorchClassicControl):
    """Torque-limited swing-up; state (θ, θ̇), observation (cos θ, sin θ, θ̇); never terminates."""

    state_size, reset_low, reset_high = 2, (-math.pi, -1.0), (math.pi, 1.0)
    can_terminate = False
    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0  # noqa: E741 (gymnasium's names)

    def dynamics(self, state, action):
        th, thdot = state.unbind(-1)
        u = action[:, 0].clamp(-self.max_torque, self.max_torque)
        costs = angle_normalize(th).square() + 0.1 * thdot.square() + 0.001 * u.square()
        new_thdot = thdot + (3 * self.g / (2 * self.l) * torch.sin(th) + 3.0 / (self.m * self.l**2) * u) * self.dt
        new_thdot = new_thdot.clamp(-self.max_speed, self.max_speed)
        return torch.stack([th + new_thdot * self.dt, new_thdot], dim=-1), -costs, torch.zeros_like(th, dtype=torch.bool)

    def observe(self, state):
        return torch.stack([torch.cos(state[:, 0]), torch.sin(state[:, 0]), state[:, 1]], dim=-1)


class Acrobot(TorchClassicControl):
    """Two-link swing-up ("book" dynamics), RK4 over dt = 0.2 in one step, angles wrapped, speeds bounded."""

    state_size, reset_low, reset_high = 4, (-0.1,) * 4, (0.1,) * 4
    dt, max_vel_1, max_vel_2 = 0.2, 4 * math.pi, 9 * math.pi
    m1 = m2 = l1 = moi = 1.0
    lc1 = lc2 = 0.5
    g = 9.8

    def derivatives(self, s: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
        theta1, theta2, dtheta1, dtheta2 = s.unbind(-1)
        m1, m2, l1, lc1, lc2, moi, g = self.m1, self.m2, self.l1, self.lc1, self.lc2, self.moi, self.g
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + 2 * moi
        d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + moi
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2.square() * torch.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * torch.sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
            + phi2
        )
        ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1.square() * torch.sin(theta2) - phi2) / (
            m2 * lc2**2 + moi - d2.square() / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack([dtheta1, dtheta2, ddtheta1, ddtheta2], dim=-1)

    def dynamics(self, state, action):
        torque = (action - 1).to(state.dtype)
        h = self.dt
        k1 = self.derivatives(state, torque)
        k2 = self.derivatives(state + h / 2 * k1, torque)
        k3 = self.derivatives(state + h / 2 * k2, torque)
        k4 = self.derivatives(state + h * k3, torque)
        s = state + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        next_state = torch.stack(
            [
                angle_normalize_upper(s[:, 0]),
                angle_normalize_upper(s[:, 1]),
                s[:, 2].clamp(-self.max_vel_1, self.max_vel_1),
                s[:, 3].clamp(-self.max_vel_2, self.max_vel_2),
            ],
            dim=-1,
        )
        terminated = -torch.cos(next_state[:, 0]) - torch.cos(next_state[:, 1] + next_state[:, 0]) > 1.0
        return next_state, torch.where(terminated, 0.0, -1.0), terminated

    def observe(self, state):
        return torch.stack(
            [
                torch.cos(state[:, 0]),
                torch.sin(state[:, 0]),
                torch.cos(state[:, 1]),
                torch.sin(state[:, 1]),
                state[:, 2],
                state[:, 3],
            ],
            dim=-1,
        )


def angle_normalize_upper(x: torch.Tensor) -> torch.Tensor:
    """gymnasium's acrobot `wrap(x, −π, π)`: like `angle_normalize` but keeps +π (wrap only moves x > π)."""
    return torch.where((x >= -math.pi) & (x <= math.pi), x, angle_normalize(x))


class MountainCar(TorchClassicControl):
    """Under-powered car in a valley; discrete push left / none / right; reward −1 per step."""

    state_size, reset_low, reset_high = 2, (-0.6, 0.0), (-0.4, 0.0)
    min_position, max_position, max_speed, goal_position, goal_velocity = -1.2, 0.6, 0.07, 0.5, 0.0
    force, gravity = 0.001, 0.0025

    def push(self, action: torch.Tensor) -> torch.Tensor:
        return (action - 1).float() * self.force

    def dynamics(self, state, action):
        position, velocity = state.unbind(-1)
        velocity = (velocity + self.push(action) - self.gravity * torch.cos(3 * position)).clamp(
            -self.max_speed, self.max_speed
        )
        position = (position + velocity).clamp(self.min_position, self.max_position)
        velocity = torch.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        return torch.stack([position, velocity], dim=-1), self.reward(action, terminated), terminated

    def reward(self, action: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
        return torch.full(terminated.shape, -1.0, device=terminated.device)


class MountainCarContinuous(MountainCar):
    """Continuous force in [−1, 1] (power 0.0015); +100 at the goal, −0.1·a² per step (a unclipped, as gymnasium)."""

    goal_position, power = 0.45, 0.0015

    def push(self, action: torch.Tensor) -> torch.Tensor:
        return action[:, 0].clamp(-1.0, 1.0) * self.power

    def reward(self, action: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
        return torch.where(terminated, 100.0, 0.0) - 0.1 * action[:, 0].square()


TASKS: dict[str, type[TorchClassicControl]] = {
    "CartPole-v1": CartPole,
    "Pendulum-v1": Pendulum,
    "Acrobot-v1": Acrobot,
    "MountainCar-v0": MountainCar,
    "MountainCarContinuous-v0": MountainCarContinuous,
}


def task_for(env_id: str) -> type[TorchClassicControl]:
    name = env_id.removeprefix("torch:")
    if name not in TASKS:
        raise UserError(
            f"no torch-native version of '{name}'{did_you_mean(name, list(TASKS))} (torch-native ids: {', '.join(TASKS)})"
        )
    return TASKS[name]


def make_torch_classic(
    env_id: str, num_envs: int, seed: int | tuple[int, ...], device: torch.device, **kwargs: Any
) -> TorchClassicControl:
    return task_for(env_id)(env_id.removeprefix("torch:"), num_envs, seed, device, **kwargs)
