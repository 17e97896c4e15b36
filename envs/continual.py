"""Continual / non-stationary settings: one env id, a seeded piecewise-constant task schedule, every agent unchanged.

Ids (docs/continual.md lists them, with each schedule's source):
- named presets `continual:<preset>` (the published schedules; `-small` variants are CPU-sized), listed in PRESETS;
- any shift on any env, `continual:<shift>:<env id>` (e.g. `continual:friction:Hopper-v5`,
  `continual:obs-offset:torch:CartPole-v1`), with SHIFTS' schedule defaults.
`--continual.steps-per-task` / `--continual.num-tasks` override a schedule (flags in `ContinualArgs`).

How a switch happens (as in Dohare et al.'s slippery Ant):
- Task k is scheduled from env step k·T (T = steps per task; the last task stays). A sub-env changes task only
  when its current episode ends after that point: its next episode runs entirely under the new task.
- Shifts (envs/shifts.py) of what the agent sees or does (observation offset / permutation, action permutation, reward sign)
  are tensor ops on the device, indexed by each sub-env's task. Simulator shifts (friction, gravity, mass,
  damping, DMC task chains, game sequences) are applied by each sub-env at its next reset. On MuJoCo Warp
  (`continual:friction:warp:Hopper-v5`, or a preset with `backend="warp"`) the physics shifts edit per-world copies
  of the same model fields on the device, for the worlds that start an episode (envs/warp_backend.py's WorldPhysics).
- Every step exposes `env.task_id` and `env.switch_index` (one per sub-env, on the device) and `env.scheduled_task`
  (host int): agents do not read them unless a flag asks (the oracle resets); per-task metrics do.
- Schedules are drawn once from `(preset, schedule seed)` with their own numpy generator (never the global RNG);
  the schedule seed defaults to the run's seed. Observation and action spaces never change at a switch
  (MinAtar games are padded to 10 channels and use the full 6-action set).
- A group of members (envs/base.py) draws one schedule per member, from the member's own schedule seed (its seed by
  default), as a one-seed run of it would; the switch times are common, as the members step together.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Annotated, Any, Callable

import gymnasium as gym
import numpy as np
import torch

from envs.base import EpisodeStats, StepResult, TorchVecEnv, generator_seed
from envs.errors import UserError, did_you_mean
from envs.ranges import SEED_MAX, Count, Range
from envs.shifts import (
    SHIFTS,
    ActionPermutation,
    MemberShifts,
    ObservationOffset,
    ObservationPermutation,
    PhysicsShift,
    Sequence,
    Shift,
)

PREFIX = "continual:"


@dataclasses.dataclass
class ContinualArgs:
    steps_per_task: Count = 0
    """continual ids only: env steps per task (0 = the preset's schedule)"""
    num_tasks: Count = 0
    """continual ids only: number of tasks in the sequence (0 = the preset's); the last task stays after its turn"""
    schedule_seed: Annotated[int, Range(ge=-1, le=SEED_MAX)] = -1
    """seed of the task schedule (offsets, frictions, permutations); -1 = the run's --seed (each member's, with --seeds)"""
    reset_obs_norm: bool = False
    """at each switch, reset observation/reward normalisation statistics (C-CHAIN/Plasticine rebuild the env: True)"""
    reset_replay: bool = False
    """at each switch, empty the replay buffer (C-CHAIN's continual MinAtar keeps it: False)"""
    reset_exploration: bool = False
    """at each switch, restart exploration schedules (random warm-up steps, ε decay) from the task's start"""
    random_steps_per_task: Annotated[int, Range(ge=-1)] = -1
    """off-policy agents: the first N steps of every task act uniformly at random and make no updates (C-CHAIN's
    INIT_RANDOM_STEPS: 10k at each MinAtar game); -1 = the preset's (10k for minatar3/minatar-saf, else 0)"""
    oracle: bool = False
    """fresh agent per task: at each switch re-initialise networks, optimisers, targets, replay, normalisers and
    exploration (the reference learner that plasticity is measured against)"""

    @property
    def restarts_exploration(self) -> bool:
        """Whether exploration schedules (random warm-up steps, ε decay) count from each task's start."""
        return self.oracle or self.reset_exploration


# Named presets: the published schedules, and CPU-sized variants
# --------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Preset:
    env_id: str  # the base env (the first member for sequences)
    make_shift: Callable[[], Shift]
    steps_per_task: int
    num_tasks: int
    source: str
    random_steps_per_task: int = 0
    max_episode_steps: int = 0  # replaces the base env's time limit (0: keep it)
    # the schedule drawn as the authors' scripts draw it: numpy.random.seed(seed), then one normal(0, σ, dim) per level
    # (level 0's then zeroed), so seed s meets the offsets of their --seed s; otherwise the suite's own generator
    numpy_seeded_draw: bool = False


def _minatar(*games: str) -> tuple[str, ...]:
    return tuple(f"MinAtar/{game}-v0" for game in games)  # -v0: the full 6-action set


PRESETS: dict[str, Preset] = {
    "cartpole-offset": Preset(
        "CartPole-v1",
        ObservationOffset,
        160_000,
        10,
        "TRAC/C-CHAIN: N(0, 2²) observation offset per level, 200 PPO iterations × 800 steps per level",
    ),
    "cartpole-offset-small": Preset(
        "CartPole-v1", ObservationOffset, 60_000, 5, "CPU-sized continual CartPole (docs/continual.md): 5 levels × 60k"
    ),
    "acrobot-offset": Preset("Acrobot-v1", ObservationOffset, 160_000, 10, "TRAC/C-CHAIN continual Acrobot"),
    # C-CHAIN's continual Gym Control (Tang et al. 2025, Table 1; bluecontra/C-CHAIN crl_gym_classic_control/
    # control_train_aligned_*.py, after TRAC's main.ipynb): a N(0, σ²) offset on every observation dimension per level
    # (level 0 clean), 200 PPO iterations × 800 steps per level, episodes cut at 400 steps (`max_timesteps`; the scripts
    # ignore gym's own truncation flag, so MountainCar's 200-step limit does not apply either). Agent side: the PPO
    # recipe these ids pick (cleanrl_plus/recipes/ppo-cchain-control.toml).
    "cchain-cartpole": Preset(
        "torch:CartPole-v1",
        ObservationOffset,
        160_000,
        10,
        "C-CHAIN Table 1 C-CartPole",
        max_episode_steps=400,
        numpy_seeded_draw=True,
    ),
    "cchain-acrobot": Preset(
        "torch:Acrobot-v1",
        ObservationOffset,
        160_000,
        10,
        "C-CHAIN Table 1 C-Acrobot",
        max_episode_steps=400,
        numpy_seeded_draw=True,
    ),
    "cchain-lunarlander": Preset(
        "LunarLander-v3",
        ObservationOffset,
        160_000,
        10,
        "C-CHAIN Table 1 C-LunarLander (their LunarLander-v2 is gymnasium's v3; needs box2d)",
        max_episode_steps=400,
        numpy_seeded_draw=True,
    ),
    # the curves' label in the repository's assets/curves_for_crl_gym_control.png: `MountainCar-v0_ls400_on0.02`,
    # 400 iterations per level, offset σ 0.02, 2,000 iterations in all
    "cchain-mountaincar": Preset(
        "torch:MountainCar-v0",
        lambda: ObservationOffset(sigma=0.02),
        320_000,
        5,
        "C-CHAIN Table 1 C-MountainCar (schedule from the figure label ls400_on0.02)",
        max_episode_steps=400,
        numpy_seeded_draw=True,
    ),
    "cartpole-permute": Preset(
        "CartPole-v1", ObservationPermutation, 60_000, 5, "observation permutation per task [our default schedule]"
    ),
    "cartpole-shuffle": Preset(
        "CartPole-v1", ActionPermutation, 60_000, 5, "action permutation per task [our default schedule]"
    ),
    "slippery-ant": Preset(
        "Ant-v5", SHIFTS["friction"], 2_000_000, 10, "Dohare et al. 2024: friction log-uniform in [0.02, 2] every 2M steps"
    ),
    "slippery-hopper": Preset(
        "Hopper-v5",
        SHIFTS["friction"],
        200_000,
        10,
        "CPU-sized slippery Hopper, after Dohare et al. 2024's slippery Ant [untested schedule]",
    ),
    "slippery-halfcheetah": Preset(
        "HalfCheetah-v5",
        SHIFTS["friction"],
        200_000,
        10,
        "CPU-sized slippery HalfCheetah, after Dohare et al. 2024's slippery Ant [untested schedule]",
    ),
    "dmc-walker": Preset(
        "dmc:walker-stand",
        lambda: Sequence("dmc", ("stand", "walk", "run")),
        1_000_000,
        3,
        "C-CHAIN/Plasticine walker stand→walk→run, 1M per task",
    ),
    "dmc-quadruped": Preset(
        "dmc:quadruped-walk", lambda: Sequence("dmc", ("walk", "run", "walk")), 1_000_000, 3, "C-CHAIN quadruped walk→run→walk"
    ),
    "dmc-dog": Preset(
        "dmc:dog-stand",
        lambda: Sequence("dmc", ("stand", "walk", "run", "trot")),
        1_000_000,
        4,
        "C-CHAIN dog stand→walk→run→trot",
    ),
    "minatar3": Preset(
        _minatar("SpaceInvaders")[0],
        lambda: Sequence("games", _minatar("SpaceInvaders", "Asterix", "Seaquest")),
        2_000_000,
        3,
        "C-CHAIN continual MinAtar: space_invaders→asterix→seaquest, 2M per game, 10 channels, 6 actions, "
        "10k random steps at each game's start",
        random_steps_per_task=10_000,
    ),
    "atari-switch": Preset(
        "ALE/Alien-v5",
        lambda: Sequence("games", tuple(f"ALE/{g}-v5" for g in ("Alien", "Atlantis", "Boxing", "Breakout", "Centipede"))),
        2_500_000,
        5,
        "Abbas et al. 2023 Switching ALE: Alien→Atlantis→Boxing→Breakout→Centipede, full 18 actions; "
        "10M frames per game [our default: the paper's frames per game are unverified]; --continual.num-tasks 10 cycles twice",
    ),
    "minatar-saf": Preset(
        _minatar("SpaceInvaders")[0],
        lambda: Sequence("games", _minatar("SpaceInvaders", "Asterix", "Freeway")),
        2_000_000,
        3,
        "C-CHAIN variant: space_invaders→asterix→freeway",
        random_steps_per_task=10_000,
    ),
}


@dataclasses.dataclass
class Setting:
    """A parsed continual id: the base env, the shift, and the schedule."""

    env_id: str
    shift: Shift
    steps_per_task: int
    num_tasks: int
    random_steps_per_task: int = 0
    max_episode_steps: int = 0  # the preset's time limit (0: the base env's)
    numpy_seeded_draw: bool = False  # the preset's (Preset.numpy_seeded_draw)

    def schedule_generator(self, env_id: str, schedule_seed: int) -> np.random.RandomState | np.random.Generator:
        """The generator a member's schedule is drawn from: it depends on (benchmark, schedule seed) only (zlib.crc32
        is stable across processes, hash() is not), or, for the authors' presets, on the seed alone as numpy's."""
        if self.numpy_seeded_draw:
            return np.random.RandomState(schedule_seed)
        return np.random.default_rng([zlib.crc32(env_id.encode()), schedule_seed])

    def task_at(self, env_step: int) -> int:
        """The task scheduled at env step `env_step` (a sub-env takes it at its next episode end)."""
        return min(max(env_step, 0) // self.steps_per_task, self.num_tasks - 1)

    @property
    def total_steps(self) -> int:
        return self.steps_per_task * self.num_tasks


def is_continual(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def parse(env_id: str, settings: ContinualArgs | None = None) -> Setting:
    """`continual:<preset>` or `continual:<shift>:<env id>` → Setting (one-line UserError for anything else)."""
    name = env_id[len(PREFIX) :]
    settings = settings or ContinualArgs()
    if name in PRESETS:
        preset = PRESETS[name]
        base, shift, steps, tasks = preset.env_id, preset.make_shift(), preset.steps_per_task, preset.num_tasks
        random_steps, time_limit, numpy_draw = preset.random_steps_per_task, preset.max_episode_steps, preset.numpy_seeded_draw
    else:
        shift_name, _, base = name.partition(":")
        if base and shift_name not in SHIFTS:
            hint = did_you_mean(shift_name, list(SHIFTS)) or f" — shifts: {', '.join(SHIFTS)} (continual:friction:<env id>)"
            raise UserError(f"unknown shift '{shift_name}' in '{env_id}'{hint}")
        if not base:
            hint = did_you_mean(env_id, [PREFIX + p for p in PRESETS]) or (
                f" — presets: {', '.join(PRESETS)}; or continual:<shift>:<env id> with a shift in {', '.join(SHIFTS)}"
            )
            raise UserError(f"unknown continual id '{env_id}'{hint}")
        shift = SHIFTS[shift_name]()
        steps, tasks, random_steps, time_limit, numpy_draw = shift.default_steps, shift.default_tasks, 0, 0, False
    steps = settings.steps_per_task or steps
    tasks = settings.num_tasks or tasks
    if steps < 1 or tasks < 1:
        raise UserError(f"--continual.steps-per-task and --continual.num-tasks must be positive, got {steps} and {tasks}")
    random_steps = settings.random_steps_per_task if settings.random_steps_per_task >= 0 else random_steps
    return Setting(base, shift, steps, tasks, random_steps, time_limit, numpy_draw)


def base_env_id(env_id: str) -> str:
    """The env a continual id is built on (its first member for sequences); other ids are returned as they are."""
    return parse(env_id).env_id if is_continual(env_id) else env_id


def validate(env_id: str) -> None:
    import envs

    setting = parse(env_id)
    envs.validate_env_id(setting.env_id)
    if isinstance(setting.shift, Sequence) and setting.shift.name == "games":
        for game in setting.shift.members:
            envs.validate_env_id(game)


# --------------------------------------------------------------------------------------------------------------
# Simulator-side switching: each sub-env takes its pending task at its next reset
# --------------------------------------------------------------------------------------------------------------
class TaskSwitchingEnv(gym.Wrapper):
    """Applies `pending_task` (set by ContinualVecEnv before each step) when the episode resets."""

    def __init__(self, env: gym.Env, configure: Callable[[gym.Env, int], None]) -> None:
        super().__init__(env)
        self.configure, self.pending_task, self.task = configure, 0, -1

    def reset(self, **kwargs: Any):
        # an Atari life loss ends a learning episode, not the game: the game switches only when it is over
        mid_game = getattr(self.env, "mid_game", None)
        if self.pending_task != self.task and not (mid_game is not None and mid_game()):
            self.configure(self.env, self.pending_task)
            self.task = self.pending_task
        return self.env.reset(**kwargs)

    def __getstate__(self) -> dict[str, Any]:
        # the configure hook is a bound method of the shift; the env pickles without it and gets it back on load
        return {k: v for k, v in self.__dict__.items() if k != "configure"}


class GameSequenceEnv(gym.Env):
    """Several games behind one env, one shared action set; observations of fewer channels (MinAtar) are zero-padded
    on the last axis to the largest count. `active_game` is the game being played."""

    def __init__(self, make_games: list[Callable[[], gym.Env]], names: tuple[str, ...]) -> None:
        self.games, self.names = [make() for make in make_games], names
        spaces = [game.observation_space for game in self.games]
        channels = max(space.shape[-1] for space in spaces)
        if len({space.shape[:-1] for space in spaces}) != 1:
            raise UserError(
                f"games {names} have observation shapes {[s.shape for s in spaces]} that differ beyond their channels"
            )
        high = 1 if spaces[0].dtype == np.bool_ else spaces[0].high.max().item()
        self.observation_space = gym.spaces.Box(0, high, (*spaces[0].shape[:-1], channels), spaces[0].dtype)
        actions = {game.action_space.n for game in self.games}
        if len(actions) != 1:
            raise UserError(
                f"games {names} have different action sets {actions} — use the full action set (MinAtar -v0, ALE "
                "full_action_space)"
            )
        self.action_space = self.games[0].action_space
        self.active = 0

    @property
    def active_game(self) -> gym.Env:
        return self.games[self.active]

    def mid_game(self) -> bool:
        """Whether the active game goes on after this reset (Atari training envs end learning episodes at a lost life)."""
        env = self.active_game
        while isinstance(env, gym.Wrapper):
            if hasattr(env, "ended_game"):
                return not env.ended_game
            env = env.env
        return False

    def select(self, index: int) -> None:
        self.active = index

    def _pad(self, obs: np.ndarray) -> np.ndarray:
        if obs.shape == self.observation_space.shape:
            return obs
        padded = np.zeros(self.observation_space.shape, self.observation_space.dtype)
        padded[..., : obs.shape[-1]] = obs
        return padded

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:  # every game gets its own stream from the one seed
            for i, game in enumerate(self.games):
                game.reset(seed=generator_seed(seed + 7919 * i))
        obs, info = self.active_game.reset()
        return self._pad(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.active_game.step(action)
        return self._pad(obs), reward, terminated, truncated, info


def _game_makers(games: tuple[str, ...], training: bool) -> list[Callable[[], gym.Env]]:
    """MinAtar games through gym.make (-v0: full action set); ALE games with the DQN preprocessing and the full
    18-action set, so one Q-head serves every game (Abbas et al.'s Switching ALE)."""
    from functools import partial

    from envs.atari_backend import make_atari_env
    from envs.gymnasium_backend import make_single_env, register_optional_ids

    for game in games:
        register_optional_ids(game)
    if games[0].startswith("ALE/"):
        return [partial(make_atari_env, game, training, full_action_space=True) for game in games]
    return [partial(make_single_env, game) for game in games]


# --------------------------------------------------------------------------------------------------------------
# The batched env
# --------------------------------------------------------------------------------------------------------------
class ContinualVecEnv(TorchVecEnv):
    """Wraps any backend's batched env with a task schedule (see the module docstring).

    Training envs follow the schedule; evaluation envs (`training=False`) stay on the task they are given with
    `set_task` (the session evaluates on the training env's current task). A group's member k has its own drawn shift
    (`shifts[k]`); the tensor hooks run once for all sub-envs (`shift`: MemberShifts)."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | tuple[int, ...],
        device: torch.device,
        training: bool = True,
        continual: ContinualArgs | None = None,
        backend: str = "auto",
        schedule_seeds: tuple[int, ...] | None = None,
        **env_kwargs: Any,
    ) -> None:
        """`schedule_seeds`: the members' schedule seeds where `--continual.schedule-seed` is -1, if not their env seeds
        (an evaluation env draws the schedules its training env draws)."""
        super().__init__(num_envs, seed)
        settings = continual or ContinualArgs()
        self.setting = parse(env_id, settings)  # member 0's shift; the others' are parsed alike
        self.shifts = [self.setting.shift] + [parse(env_id, settings).shift for _ in self.seeds[1:]]
        self.env_id, self.device, self.follow_schedule = env_id, device, training
        self.world_physics = None  # warp: per-world copies of what a physics shift scales (envs/warp_backend.py)
        if self.setting.max_episode_steps:
            env_kwargs = env_kwargs | {"max_episode_steps": self.setting.max_episode_steps}
        self.inner = self._build_inner(num_envs, self.seeds, device, training, backend, env_kwargs)
        for attribute in ("single_observation_space", "single_action_space", "can_terminate", "max_episode_steps"):
            setattr(self, attribute, getattr(self.inner, attribute))
        schedule_seeds = self.seeds if schedule_seeds is None else schedule_seeds
        if len(schedule_seeds) != self.members:
            raise UserError(f"{env_id}: {len(schedule_seeds)} schedule seeds for a group of {self.members}")
        for shift, member_seed in zip(self.shifts, schedule_seeds):
            schedule_seed = settings.schedule_seed if settings.schedule_seed >= 0 else member_seed
            shift.draw(self.setting.schedule_generator(env_id, schedule_seed), self.setting.num_tasks, self)
        self.shift = (
            self.shifts[0] if self.members == 1 else MemberShifts(self.shifts, num_envs, self.setting.num_tasks, device)
        )
        self._bind_sub_envs()
        if self.world_physics is not None:  # (tasks, worlds): a world's factor per task, from its member's draws
            factors = np.stack([shift.factors for shift in self.shifts]).repeat(num_envs, axis=0).T
            self.world_factors = torch.as_tensor(factors, dtype=torch.float32, device=device)
            self.inner.on_episode_start = self._start_world_physics
        self.switch_index = torch.zeros(self.num_envs, dtype=torch.long, device=device)
        self.pending = 0  # the task sub-envs take at their next reset
        self._unsettled = False  # host-side shifts: some sub-env still runs an older task than `pending`
        self.fixed_task = 0  # evaluation envs: the task set by set_task

    def _build_inner(self, num_envs, seed, device, training, backend, env_kwargs) -> TorchVecEnv:
        import envs
        from envs.gymnasium_backend import GymnasiumVecEnv, make_single_env

        shift, base = self.setting.shift, self.setting.env_id
        if not shift.host_side:
            return envs.make(base, num_envs, device=device, backend=backend, training=training, members=seed, **env_kwargs)
        if isinstance(shift, Sequence) and shift.name == "dmc":
            from envs.dmc_backend import DMCTaskChainVecEnv

            return DMCTaskChainVecEnv(base, num_envs, seed, device, shift.members, **env_kwargs)
        game_sequence = isinstance(shift, Sequence) and shift.name == "games"
        if isinstance(shift, PhysicsShift) and (envs.backend_for(base) if backend == "auto" else backend) == "warp":
            from envs.warp_backend import WorldPhysics

            inner = envs.make(base, num_envs, device=device, backend="warp", training=training, members=seed, **env_kwargs)
            self.world_physics = WorldPhysics(inner, shift.name)  # before any step: graphs capture the per-world arrays
            return inner
        if (envs.backend_for(base) != "gymnasium" and not game_sequence) or backend not in ("auto", "gymnasium", "atari"):
            raise UserError(
                f"the '{shift.name}' shift edits the simulator; it runs on gymnasium and warp: envs, not '{base}' — pick one "
                "of those ids"
            )
        # the sub-envs' configure hooks are their members' shifts' (_bind_sub_envs, once they are drawn)
        if isinstance(shift, Sequence):
            makers = _game_makers(shift.members, training)
            make_env = lambda: TaskSwitchingEnv(GameSequenceEnv(makers, shift.members), shift.configure)
            if base.startswith("ALE/"):  # life-loss episodes, clipped rewards and full-game statistics as for one game
                from envs.atari_backend import AtariVecEnv

                return AtariVecEnv(base, num_envs, seed, device, training=training, make_env=make_env)
        else:
            make_env = lambda: TaskSwitchingEnv(make_single_env(base, **env_kwargs), shift.configure)
        return GymnasiumVecEnv(base, num_envs, seed, device, make_env=make_env)

    # --- the schedule ---------------------------------------------------------------------------------------
    @property
    def env_steps(self) -> int:  # the inner env counts steps; the base class's attribute is routed to it
        return self.inner.env_steps if "inner" in self.__dict__ else 0

    @env_steps.setter
    def env_steps(self, value: int) -> None:
        if "inner" in self.__dict__:
            self.inner.env_steps = value

    @property
    def frames(self) -> int | None:
        return getattr(self.inner, "frames", None)

    @property
    def frame_stack(self) -> int:  # Atari sequences: DDQN stores frames once (FrameStackReplay)
        return getattr(self.inner, "frame_stack", 0)

    @property
    def scheduled_task(self) -> int:
        """The task new episodes start in now (host int, no device sync; every member's)."""
        return self._task_scheduled_at(self.env_steps)

    def _task_scheduled_at(self, env_step: int) -> int:
        """The task an episode starting at `env_step` plays: the schedule's, or the evaluation's fixed task."""
        return self.setting.task_at(env_step) if self.follow_schedule else self.fixed_task

    @property
    def task_id(self) -> torch.Tensor:
        """Each sub-env's task (for sequences: the member index; else the switch index)."""
        if isinstance(self.setting.shift, Sequence):
            return self.switch_index % len(self.setting.shift.members)
        return self.switch_index

    def set_task(self, task: int) -> None:
        """Evaluation envs: play `task` from the next reset on."""
        self.fixed_task = min(max(task, 0), self.setting.num_tasks - 1)

    def describe(self, member: int = 0) -> list[dict[str, Any]]:
        """The whole schedule of member `member`, for its run log (what a one-seed run of its seed describes)."""
        return [
            {"task": k, "start_step": k * self.setting.steps_per_task} | self.shifts[member].describe(k)
            for k in range(self.setting.num_tasks)
        ]

    def _bind_sub_envs(self) -> None:
        """Host-side shifts: every sub-env configures its simulator with its own member's shift."""
        for i, sub_env in enumerate(self._switching_sub_envs()):
            sub_env.configure = self.shifts[i // self.envs_per_member].configure

    @property
    def _switches_on_host(self) -> bool:
        """Whether the simulators (gymnasium sub-envs, DMC chains, games) apply a switch and report it; else the tasks
        are tracked on the device (tensor shifts, and physics shifts on warp worlds)."""
        return self.setting.shift.host_side and self.world_physics is None

    def _start_world_physics(self, starting: torch.Tensor) -> None:
        """Warp physics shifts: the worlds in `starting` begin an episode in the pending task, so they take its
        physics (where a world stays in its task this rewrites the values it has)."""
        self.world_physics.scale(self.world_factors[self.pending], starting)

    def _push_pending(self, env_step: int | None = None) -> None:
        """Make the task scheduled at `env_step` (default: now) the one sub-envs take at their next reset."""
        task = self._task_scheduled_at(self.env_steps if env_step is None else env_step)
        if task == self.pending:
            return
        self.pending, self._unsettled = task, True
        for sub_env in self._switching_sub_envs():
            sub_env.pending_task = task
        if hasattr(self.inner, "pending_task"):  # DMC task chains switch inside their own step
            self.inner.pending_task = task

    def _read_host_tasks(self) -> None:
        """Copy the sub-envs' tasks to `switch_index`, only while some sub-env has not yet taken the pending task."""
        if not self._unsettled:
            return
        tasks = [sub_env.task for sub_env in self._switching_sub_envs()] or list(getattr(self.inner, "sub_env_tasks", []))
        self.switch_index = torch.as_tensor(tasks, dtype=torch.long).to(self.device)
        self._unsettled = any(task != self.pending for task in tasks)

    def _switching_sub_envs(self) -> list[TaskSwitchingEnv]:
        """The gymnasium sub-envs that apply simulator shifts at reset (none for tensor-only shifts)."""
        if not self.setting.shift.host_side or not hasattr(self.inner, "vec"):
            return []
        return list(self.inner.vec.envs)

    # --- TorchVecEnv interface ----------------------------------------------------------------------------
    def reset(self, seed: int | tuple[int, ...] | None = None) -> torch.Tensor:
        self.pending = -1
        self._push_pending()
        self.switch_index.fill_(self.pending)
        obs = self.inner.reset(seed=seed)
        self._unsettled = False  # every sub-env has just taken the pending task
        return self.shift.observation(obs, self.switch_index)

    def step(self, action: torch.Tensor) -> StepResult:
        self._check_action(action)
        # an episode that ends in this step restarts in the task of the step after it: one ending on a task's last
        # step starts the next task's first (C-CHAIN's scripts start every episode of a level under its offset)
        self._push_pending(self.env_steps + self.envs_per_member)
        shift, task = self.shift, self.switch_index
        step = self.inner.step(shift.action(action, task))
        reward, next_obs = shift.reward(step.reward, task), shift.observation(step.next_obs, task)
        if self._switches_on_host:  # the simulators know when they switched (an Atari game, not a lost life)
            self._read_host_tasks()
        else:
            self.switch_index = torch.where(step.terminated | step.truncated, self.pending, task)
        obs = shift.observation(step.obs, self.switch_index)
        return StepResult(obs, reward, step.terminated, step.truncated, next_obs)

    def cut_episodes(self, mask: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """reset_where at a rollout's end: the new episodes start in the task scheduled now, so a switch due at the
        boundary (C-CHAIN's levels: every 200 iterations) takes effect with the next rollout's first step."""
        self._push_pending()
        return self.reset_where(mask, obs)

    def reset_where(self, mask: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        fresh = self.inner.reset_where(mask, obs)
        if fresh is obs:
            return obs
        if self._switches_on_host:
            self._unsettled = True
            self._read_host_tasks()
        else:
            self.switch_index = torch.where(mask, self.pending, self.switch_index)
        return torch.where(mask.view(-1, *[1] * (obs.dim() - 1)), self.shift.observation(fresh, self.switch_index), obs)

    def drain_episode_stats(self) -> EpisodeStats:
        """The inner env's episodes, each labelled with its task: the task scheduled at its first step (a sub-env
        takes the pending task at the reset that starts the episode, which `step` pushes for the step after it)."""
        stats = self.inner.drain_episode_stats()
        n = self.envs_per_member  # end steps count a member's env steps
        for length, end_step in zip(stats.lengths, stats.end_steps):
            task = self.setting.task_at(end_step - length * n) if self.follow_schedule else self.fixed_task
            stats.task_ids.append(task)
        members = [self.shifts[env // n] for env in stats.envs]
        stats.returns = [shift.episode_return(r, k) for shift, r, k in zip(members, stats.returns, stats.task_ids)]
        return stats

    def member_state_dict(self, k: int) -> dict[str, Any]:
        rows = self.member_rows(k)
        return {
            "inner": self.inner.member_state_dict(k),
            "switch_index": self.switch_index[rows].clone(),
            "pending": self.pending,
            "fixed_task": self.fixed_task,
            "sub_env_tasks": [sub_env.task for sub_env in self._switching_sub_envs()[rows]],
        }

    def load_member_state_dicts(self, states: list[dict[str, Any]]) -> None:
        self.inner.load_member_state_dicts([state["inner"] for state in states])
        self.switch_index = torch.cat([state["switch_index"] for state in states]).to(self.device)
        self.pending, self.fixed_task = states[0]["pending"], states[0]["fixed_task"]
        self._unsettled = bool((self.switch_index != self.pending).any())
        # re-apply each sub-env's task to its restored simulator (MuJoCo restores the state, not the model edits)
        self._bind_sub_envs()
        sub_env_tasks = [task for state in states for task in state["sub_env_tasks"]]
        for sub_env, task in zip(self._switching_sub_envs(), sub_env_tasks):
            sub_env.pending_task, sub_env.task = self.pending, task
            if task >= 0:
                sub_env.configure(sub_env.env, task)
        if hasattr(self.inner, "pending_task"):
            self.inner.pending_task = self.pending
        if self.world_physics is not None:  # the warp state holds no model fields: each world's task gives its physics
            factors = self.world_factors.gather(0, self.switch_index[None])[0]
            self.world_physics.scale(factors, torch.ones_like(self.switch_index, dtype=torch.bool))

    def close(self) -> None:
        self.inner.close()

    def draw_ahead(self, steps: int) -> None:
        self.inner.draw_ahead(steps)

    def compile_steps(self, compiler: Any) -> None:
        self.inner.compile_steps(compiler)
