"""gymnasium backend: a SyncVectorEnv in SAME_STEP autoreset mode, speaking torch.

gymnasium 1.x defaults to NEXT_STEP autoreset (the step after `done` is a dummy reset step). We use
SAME_STEP instead: the vector env resets a finished sub-env inside the same `step`, returns the reset
observation to act on, and hands us the true final observation in `info["final_obs"]`, which we splice
into `next_obs` so that replay stores (s, a, r, s_final) and never (s, a, r, s_reset).
"""

from __future__ import annotations

import pickle
import warnings
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from envs.base import StepResult, TorchVecEnv, generator_seed
from envs.errors import UserError, did_you_mean
from envs.upstream import show_mujoco_warnings_once

# Tasks whose episodes only end at the time limit (no termination condition in gymnasium's source).
NEVER_TERMINATE = {"Pendulum-v1", "HalfCheetah-v5", "HalfCheetah-v4", "Swimmer-v5", "Reacher-v5", "Pusher-v5"}


def registered_ids() -> list[str]:
    return list(gym.registry.keys())


def register_optional_ids(env_id: str) -> None:
    """Atari (`ALE/<Game>-v5`) and MinAtar (`MinAtar/<Game>-v0|v1`) ids exist once their packages registered them."""
    if env_id.startswith("ALE/"):
        import ale_py

        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no emulator banner on every start-up
        gym.register_envs(ale_py)
    elif env_id.startswith("MinAtar/") and "MinAtar/Breakout-v1" not in gym.registry:
        import minatar.gym

        minatar.gym.register_envs()


def check_env_id(env_id: str) -> None:
    register_optional_ids(env_id)
    if env_id not in gym.registry:
        raise UserError(f"unknown env id '{env_id}'{did_you_mean(env_id, registered_ids())}")


class GymnasiumVecEnv(TorchVecEnv):
    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | tuple[int, ...],
        device: torch.device,
        make_env: Callable[[], gym.Env] | None = None,
        **env_kwargs: Any,
    ) -> None:
        """`num_envs` sub-envs per member of the group `seed` (one seed, or one per member)."""
        super().__init__(num_envs, seed)
        check_env_id(env_id)
        self.env_id, self.device = env_id, device
        make_env = make_env or (lambda: make_single_env(env_id, **env_kwargs))
        self.vec = SyncVectorEnv([make_env for _ in range(self.num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
        self.single_observation_space = self.vec.single_observation_space
        self.single_action_space = self.vec.single_action_space
        self.can_terminate = env_id not in NEVER_TERMINATE
        spec = getattr(self.vec.envs[0], "spec", None)
        self.max_episode_steps = int(getattr(spec, "max_episode_steps", None) or 0)
        # Float observations become float32 (MuJoCo emits float64); images and boolean grids (MinAtar) become
        # uint8 to keep replay small.
        obs_dtype = self.single_observation_space.dtype
        self.obs_dtype = torch.uint8 if obs_dtype in (np.uint8, np.bool_) else torch.float32
        if isinstance(self.single_action_space, gym.spaces.Box):
            self._np_action_dtype = self.single_action_space.dtype
        else:
            self._np_action_dtype = np.int64

    def reset(self, seed: int | tuple[int, ...] | None = None) -> torch.Tensor:
        obs, _ = self.vec.reset(seed=[generator_seed(s) for s in self.sub_env_seeds(self.reset_seeds(seed))])
        self._reset_episode_tracking()
        return self._to_torch(obs, self.obs_dtype)

    def reset_where(self, mask: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        stop = mask.cpu().numpy()
        if not stop.any():
            return obs
        fresh, _ = self.vec.reset(options={"reset_mask": stop})  # no seed: the sub-envs' RNG streams continue
        self._end_episodes(stop)
        return self._to_torch(fresh, self.obs_dtype)

    def step(self, action: torch.Tensor) -> StepResult:
        self._check_action(action)
        action_np = action.detach().cpu().numpy().astype(self._np_action_dtype, copy=False)
        obs, reward, terminated, truncated, info = self.vec.step(action_np)
        next_obs = obs
        done = terminated | truncated
        if done.any():
            next_obs = obs.copy()
            for i in np.flatnonzero(info["_final_obs"]):
                next_obs[i] = info["final_obs"][i]
        reward = self._learning_reward(reward, terminated, truncated)
        return StepResult(
            obs=self._to_torch(obs, self.obs_dtype),
            reward=self._to_torch(reward, torch.float32),
            terminated=self._to_torch(terminated, torch.bool),
            truncated=self._to_torch(truncated, torch.bool),
            next_obs=self._to_torch(next_obs, self.obs_dtype),
        )

    def _learning_reward(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """Record episode statistics and return the reward the agent learns from (Atari overrides both)."""
        self._track_episodes(reward, terminated | truncated)
        return reward

    # --- checkpointing: the exact mid-episode state of every sub-env ---------------------------------------
    def member_state_dict(self, k: int) -> dict[str, Any]:
        return super().member_state_dict(k) | {"sub_envs": [_sub_env_state(env) for env in self.vec.envs[self.member_rows(k)]]}

    def load_member_state_dicts(self, states: list[dict[str, Any]]) -> None:
        super().load_member_state_dicts(states)
        for i, sub_state in enumerate(sub_state for state in states for sub_state in state["sub_envs"]):
            self.vec.envs[i] = _restore_sub_env(self.vec.envs[i], sub_state)

    def close(self) -> None:
        self.vec.close()


class NoRewardTimeout(gym.Wrapper):
    """Truncate an episode once it has run `steps` steps with a return still below `min_return`: C-CHAIN's fix for
    MinAtar Seaquest, where a policy that never dives never ends its episode (a greedy evaluation would never
    return). A truncation, so the last transition still bootstraps."""

    def __init__(self, env: gym.Env, steps: int = 1000, min_return: float = 0.1) -> None:
        super().__init__(env)
        self.steps, self.min_return = steps, min_return
        self.episode_steps, self.episode_return = 0, 0.0

    def reset(self, **kwargs: Any):
        self.episode_steps, self.episode_return = 0, 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_steps += 1
        self.episode_return += float(reward)
        if self.episode_steps >= self.steps and self.episode_return < self.min_return and not terminated:
            truncated = True
        return obs, reward, terminated, truncated, info


NO_REWARD_TIMEOUT_IDS = {"MinAtar/Seaquest-v0", "MinAtar/Seaquest-v1"}  # C-CHAIN applies it to Seaquest only


OPTIONAL_PACKAGES = {"Box2D": "box2d"}  # what gymnasium says is missing → this project's extra that installs it


def make_single_env(env_id: str, **env_kwargs: Any) -> gym.Env:
    """gym.make, plus the no-reward timeout on the ids that need it (NO_REWARD_TIMEOUT_IDS). An env whose package is
    not installed (LunarLander's Box2D) is one UserError naming the extra to install. MuJoCo's warnings about a model
    are shown once per process, not once per env (envs/upstream.py)."""
    if "mujoco" in str(gym.registry[env_id].entry_point if env_id in gym.registry else ""):
        show_mujoco_warnings_once()
    try:
        env = gym.make(env_id, **env_kwargs)
    except gym.error.DependencyNotInstalled as error:
        missing = next((name for name in OPTIONAL_PACKAGES if name in str(error)), None)
        fix = f'pip install -e ".[{OPTIONAL_PACKAGES[missing]}]"' if missing else "install the package gymnasium names"
        raise UserError(f"{env_id} needs {missing or 'a package'} that is not installed ({error}) — {fix}") from None
    env = NoRewardTimeout(env) if env_id in NO_REWARD_TIMEOUT_IDS else env
    return ReplayedEpisode(env) if _pickles_as_constructor_args(env.unwrapped) else env


def _pickles_as_constructor_args(base: gym.Env) -> bool:
    """gymnasium's EzPickle envs pickle as 'rebuild from constructor args'; MuJoCo's and ALE's state is saved apart
    (_sub_env_state), which leaves Box2D's (LunarLander, BipedalWalker, CarRacing), whose simulator cannot be read out."""
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

    return isinstance(base, gym.utils.EzPickle) and not isinstance(base, MujocoEnv) and not hasattr(base, "ale")


# Box2D envs whose reset builds a new world (gymnasium's lunar_lander.py `reset`, after Gymnasium issue #728): their
# episode is all their state. BipedalWalker and CarRacing keep one world for life, and its broad phase orders new
# contacts by the history of every earlier episode, which no checkpoint holds.
NEW_WORLD_EACH_EPISODE = {"LunarLander"}


class ReplayedEpisode(gym.Wrapper):
    """Keeps what rebuilds the running episode: the reset's arguments, the env's generator state before it, and every
    action since. A pickled Box2D env comes back new and never reset; a resumed run replays its episode into it
    (Box2D is deterministic) and checks that the replay lands on the observation and generator state it left. Exact
    for the envs in NEW_WORLD_EACH_EPISODE; the others resume from the checkpointed state but warn that they may part
    from a straight run by float rounding (contact order)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.reset_kwargs: dict[str, Any] = {}
        self.generator_before_reset: dict[str, Any] | None = None
        self.actions: list[np.ndarray] = []
        self.last_obs: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        generator = self.env.unwrapped._np_random  # None before the first seeding: reading np_random would seed one
        self.generator_before_reset = None if generator is None else generator.bit_generator.state
        self.reset_kwargs = {"seed": seed, "options": None if options is None else dict(options)}
        self.actions = []
        obs, info = self.env.reset(**self.reset_kwargs)
        self.last_obs = obs
        return obs, info

    def step(self, action):
        self.actions.append(np.array(action, copy=True))  # the vector env hands a view of its batch
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.last_obs = obs
        return obs, reward, terminated, truncated, info

    def replay(self, generator_after: dict[str, Any] | None) -> None:
        """Rebuild the episode in this (unpickled, never reset) env; raise if it does not end where it was saved."""
        if self.last_obs is None:  # saved before its first reset: nothing to rebuild
            return
        if self.generator_before_reset is not None:
            self.env.unwrapped.np_random.bit_generator.state = self.generator_before_reset
        obs, _ = self.env.reset(**self.reset_kwargs)
        for action in self.actions:
            obs = self.env.step(action)[0]
        name, generator = type(self.env.unwrapped).__name__, self.env.unwrapped._np_random
        if not np.array_equal(obs, self.last_obs) or generator.bit_generator.state != generator_after:
            raise RuntimeError(
                f"resuming {name}: replaying its episode's {len(self.actions)} actions did "
                "not reproduce the checkpointed state (a nondeterministic simulator?)"
            )
        if name not in NEW_WORLD_EACH_EPISODE:
            warnings.warn(
                f"{name} resumes from its checkpointed state, but its Box2D world's contact order depends on earlier "
                "episodes: the run may part from a straight run by float rounding"
            )


def _find_wrapper(env: gym.Env, wrapper_type: type) -> gym.Wrapper | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_type):
            return env
        env = env.env
    return None


def _sub_env_state(env: gym.Env) -> dict[str, Any]:
    """MuJoCo envs pickle as 'rebuild from constructor args', so their physics state is saved explicitly."""
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

    base = env.unwrapped
    time_limit = _find_wrapper(env, gym.wrappers.TimeLimit)
    # None where the env never seeded its own generator (MinAtar draws from another): reading `np_random` would seed
    # one at random, in the checkpoint and in the live env
    generator = base._np_random
    state: dict[str, Any] = {
        "elapsed_steps": getattr(time_limit, "_elapsed_steps", None),
        "np_random": None if generator is None else generator.bit_generator.state,
    }
    if isinstance(base, MujocoEnv):
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        physics = np.empty(mujoco.mj_stateSize(base.model, spec))
        mujoco.mj_getState(base.model, base.data, physics, spec)
        state["mujoco_state"] = physics
        return state
    try:
        state["pickled_env"] = pickle.dumps(env)
    except Exception as error:  # an env we cannot snapshot resumes from a fresh episode instead
        warnings.warn(f"{type(base).__name__} cannot be pickled ({error}); resume will start a fresh episode")
    if hasattr(base, "ale"):  # a pickled ale-py env restarts its emulator's RNG (sticky actions): its full state is cloned
        state["ale_state"] = pickle.dumps(base.ale.cloneState(include_rng=True))
    return state


def _restore_sub_env(env: gym.Env, state: dict[str, Any]) -> gym.Env:
    if "pickled_env" in state:
        restored = pickle.loads(state["pickled_env"])
        if "ale_state" in state:  # ale-py pickles neither its emulator's RNG nor the env's own (no-op starts)
            restored.unwrapped.ale.restoreState(pickle.loads(state["ale_state"]))
            restored.unwrapped.np_random.bit_generator.state = state["np_random"]
        replayed = _find_wrapper(restored, ReplayedEpisode)
        if replayed is not None:
            replayed.replay(state["np_random"])
        elif _pickles_as_constructor_args(restored.unwrapped):
            raise UserError(
                f"this checkpoint holds a {type(restored.unwrapped).__name__} saved without its episode (written before "
                "resume replayed Box2D episodes) and cannot resume exactly — start the run again without --resume"
            )
        return restored
    base = env.unwrapped
    base.np_random.bit_generator.state = state["np_random"]
    time_limit = _find_wrapper(env, gym.wrappers.TimeLimit)
    if time_limit is not None and state["elapsed_steps"] is not None:
        time_limit._elapsed_steps = state["elapsed_steps"]
    if "mujoco_state" in state:
        import mujoco

        mujoco.mj_setState(base.model, base.data, state["mujoco_state"], mujoco.mjtState.mjSTATE_INTEGRATION)
    return env
