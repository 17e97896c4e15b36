"""DeepMind Control Suite backend, built on dm-control directly: ids `dmc:<domain>-<task>` (e.g. dmc:cheetah-run).

- Observations: the task's observation dict flattened in its own key order, float32.
- Actions: the agent acts in [-1, 1]^|A|; they are mapped affinely onto the task's action bounds.
- Action repeat (`action_repeat=k`): each agent step applies the action for k physics control steps and sums
  the rewards. `frames` counts control steps, `env_steps` counts agent steps (a group: a member's, as every counter).
- Episodes: suite tasks end at their time limit (1000 control steps) with discount 1: that is a *truncation*
  and the target bootstraps. An end with discount 0 (no suite task does this today) is a termination.
- Seeding: sub-env i uses `task_kwargs={"random": seed + i}` (a group: member k's env n, seeds[k] + n); later
  episodes continue that RandomState.
"""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from envs.base import StepResult, TorchVecEnv, generator_seed
from envs.errors import UserError, did_you_mean

PREFIX = "dmc:"

# Without a display, dm-control's default GL backend (GLFW) warns "DISPLAY missing" at every import, though stepping
# needs no GL. Silence that one warning rather than set MUJOCO_GL here: the variable is process-wide, and a backend
# that suits dm-control (EGL on this image) fails gymnasium's MuJoCo renderer (--capture-video picks its own).
warnings.filterwarnings("ignore", message=r".*DISPLAY environment variable is missing")


def parse_dmc_id(env_id: str) -> tuple[str, str]:
    from dm_control import suite

    name = env_id[len(PREFIX) :]
    known = [f"{domain}-{task}" for domain, task in suite.ALL_TASKS]
    domain, _, task = name.partition("-")
    if (domain, task) not in suite.ALL_TASKS:
        suggestion = did_you_mean(name, known)
        suggestion = suggestion.replace("did you mean '", f"did you mean '{PREFIX}") if suggestion else ""
        raise UserError(f"unknown env id '{env_id}'{suggestion or ' — dm-control ids look like dmc:cheetah-run'}")
    return domain, task


def _flatten(observation: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(v, dtype=np.float32).ravel() for v in observation.values()])


class DMCVecEnv(TorchVecEnv):
    def __init__(
        self, env_id: str, num_envs: int, seed: int | tuple[int, ...], device: torch.device, action_repeat: int = 1
    ) -> None:
        """`num_envs` sub-envs per member of the group `seed` (one seed, or one per member)."""
        super().__init__(num_envs, seed)
        from absl import logging as absl_logging
        from dm_control import suite

        absl_logging.set_verbosity(absl_logging.ERROR)  # dm-control's XML deprecation notes are not the user's business
        domain, task = parse_dmc_id(env_id)
        if action_repeat < 1:
            raise UserError(f"action_repeat must be >= 1, got {action_repeat}")
        self.env_id, self.device = env_id, device
        self.domain, self.task, self.action_repeat = domain, task, action_repeat
        self.envs = [suite.load(domain, task, task_kwargs={"random": generator_seed(s)}) for s in self.sub_env_seeds()]
        spec = self.envs[0].action_spec()
        self._action_low, self._action_high = spec.minimum.astype(np.float64), spec.maximum.astype(np.float64)
        obs_dim = sum(int(np.prod(s.shape)) for s in self.envs[0].observation_spec().values())
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, spec.shape, np.float32)
        self.can_terminate = False  # suite tasks only end at their time limit
        self.member_frames = np.zeros(self.members, dtype=np.int64)  # control steps of each member's sub-envs

    @property
    def frames(self) -> int:  # a member's (the members' mean where episodes of different lengths made them differ)
        return int(self.member_frames.sum()) // self.members

    def reset(self, seed: int | tuple[int, ...] | None = None) -> torch.Tensor:
        seeds = self.reset_seeds(seed)
        if seeds != self.seeds:
            from dm_control import suite

            self.seeds = seeds
            self.envs = [
                suite.load(self.domain, self.task, task_kwargs={"random": generator_seed(s)}) for s in self.sub_env_seeds()
            ]
        self._reset_episode_tracking()
        return self._to_torch(np.stack([_flatten(env.reset().observation) for env in self.envs]))

    def step(self, action: torch.Tensor) -> StepResult:
        self._check_action(action)
        unit = np.clip(action.detach().cpu().numpy().astype(np.float64), -1.0, 1.0)
        scaled = self._action_low + (unit + 1.0) * 0.5 * (self._action_high - self._action_low)
        obs, next_obs = [], []
        reward = np.zeros(self.num_envs, dtype=np.float32)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        for i, env in enumerate(self.envs):
            for _ in range(self.action_repeat):
                time_step = env.step(scaled[i])
                reward[i] += time_step.reward or 0.0
                self.member_frames[i // self.envs_per_member] += 1
                if time_step.last():
                    break
            final = _flatten(time_step.observation)
            next_obs.append(final)
            if time_step.last():
                terminated[i] = time_step.discount == 0.0
                truncated[i] = not terminated[i]
                obs.append(_flatten(self._reset_sub_env(i).observation))
            else:
                obs.append(final)
        self._track_episodes(reward, terminated | truncated)
        return StepResult(
            obs=self._to_torch(np.stack(obs)),
            reward=self._to_torch(reward),
            terminated=self._to_torch(terminated, torch.bool),
            truncated=self._to_torch(truncated, torch.bool),
            next_obs=self._to_torch(np.stack(next_obs)),
        )

    def _reset_sub_env(self, i: int):
        return self.envs[i].reset()

    def render(self, height: int = 240, width: int = 320, camera_id: int = 0) -> np.ndarray:
        """RGB frame of sub-env 0 (needs a MuJoCo GL backend, e.g. MUJOCO_GL=egl on a headless GPU box)."""
        return self.envs[0].physics.render(height=height, width=width, camera_id=camera_id)

    def member_state_dict(self, k: int) -> dict[str, Any]:
        # dm-control environments pickle whole (physics, task RNG, step counter): ~12 MB each.
        envs = self.envs[self.member_rows(k)]
        return super().member_state_dict(k) | {
            "frames": int(self.member_frames[k]),
            "pickled_envs": [pickle.dumps(env) for env in envs],
        }

    def load_member_state_dicts(self, states: list[dict[str, Any]]) -> None:
        super().load_member_state_dicts(states)
        self.member_frames[:] = [state["frames"] for state in states]
        self.envs = [pickle.loads(blob) for state in states for blob in state["pickled_envs"]]


class DMCTaskChainVecEnv(DMCVecEnv):
    """Tasks of one body in sequence (continual DMC: walker stand→walk→run). A sub-env moves to `pending_task`
    (set by envs/continual.py) when its episode ends: its simulator is rebuilt for the new task, seeded from
    (its seed, task). Observation and action spaces are the body's, so they never change."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | tuple[int, ...],
        device: torch.device,
        tasks: tuple[str, ...],
        action_repeat: int = 1,
    ) -> None:
        super().__init__(env_id, num_envs, seed, device, action_repeat)
        from dm_control import suite

        for task in tasks:
            if (self.domain, task) not in suite.ALL_TASKS:
                raise UserError(f"dm-control has no task '{self.domain}-{task}' for the chain {tasks}")
        self.tasks, self.pending_task = tasks, 0
        self.sub_env_tasks = [0] * self.num_envs  # each sub-env's position in the chain (switch index)

    def _load(self, i: int, switch: int):
        from dm_control import suite

        self.sub_env_tasks[i] = switch
        task = self.tasks[switch % len(self.tasks)]
        sub_env_seed = self.sub_env_seeds()[i]
        return suite.load(self.domain, task, task_kwargs={"random": generator_seed(sub_env_seed + 100_003 * switch)})

    def _reset_sub_env(self, i: int):
        if self.sub_env_tasks[i] != self.pending_task:
            self.envs[i] = self._load(i, self.pending_task)
        return self.envs[i].reset()

    def reset(self, seed: int | tuple[int, ...] | None = None) -> torch.Tensor:
        self.seeds = self.reset_seeds(seed)
        self.envs = [self._load(i, self.pending_task) for i in range(self.num_envs)]
        self._reset_episode_tracking()
        return self._to_torch(np.stack([_flatten(env.reset().observation) for env in self.envs]))

    def member_state_dict(self, k: int) -> dict[str, Any]:
        return super().member_state_dict(k) | {"sub_env_tasks": self.sub_env_tasks[self.member_rows(k)]}

    def load_member_state_dicts(self, states: list[dict[str, Any]]) -> None:
        super().load_member_state_dicts(states)
        self.sub_env_tasks = [task for state in states for task in state["sub_env_tasks"]]
