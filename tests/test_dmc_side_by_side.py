"""benchmarks/dmc_side_by_side.py on stand-ins of the authors' env files (git repositories with the paths it reads):
for SimBa a plain gymnasium adapter of a real dm-control walker-walk whose Dict observation sorts its keys as
gymnasium's does, and the two wrappers; for CIR an old-gym-style env over a real walker-walk with train_dmc.py's
episode length; for resets an old-gym-style package (continuous_control/utils.py importing its wrappers package)
whose env marks a time-limit end in info, as their DMCEnv does. The same env must compare equal at every step and
both boundaries; a planted difference (a third action repeat, a reward off by a little, the keys unsorted by our
reorder, an episode a step short, a time-limit end not marked) must show."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("dmc_side_by_side", ROOT / "benchmarks" / "dmc_side_by_side.py")
side_by_side = importlib.util.module_from_spec(spec)
spec.loader.exec_module(side_by_side)

STAND_IN_DMC = """import gymnasium as gym
import numpy as np
from dm_control import suite


class Adapter(gym.Env):
    def __init__(self, env):
        self.env = env
        spec = env.observation_spec()
        box = lambda shape: gym.spaces.Box(-np.inf, np.inf, (int(np.prod(shape)),), np.float64)
        self.observation_space = gym.spaces.Dict({key: box(value.shape) for key, value in spec.items()})  # sorted
        action = env.action_spec()
        self.action_space = gym.spaces.Box(action.minimum, action.maximum, action.shape, np.float64)

    def flat(self, time_step):
        return np.concatenate([np.ravel(time_step.observation[key]) for key in self.observation_space.spaces])

    def reset(self, seed=None, options=None):
        return self.flat(self.env.reset()), {}

    def step(self, action):
        time_step = self.env.step(action)
        return self.flat(time_step), REWARD(time_step.reward), False, time_step.last(), {}


def make_dmc_env(env_name, seed, flatten=True):
    domain, task = env_name.split("-")
    return Adapter(suite.load(domain, task, task_kwargs={"random": seed}))
"""

STAND_IN_REPEAT = """import gymnasium as gym


class RepeatAction(gym.Wrapper):
    def __init__(self, env, action_repeat=4):
        super().__init__(env)
        self._action_repeat = action_repeat + EXTRA

    def step(self, action):
        total = 0.0
        for _ in range(self._action_repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info
"""

STAND_IN_SCALE = """import gymnasium as gym


class ScaleReward(gym.Wrapper):
    def __init__(self, env, reward_scale=1.0):
        super().__init__(env)
"""


STAND_IN_CIR = """from types import SimpleNamespace

import numpy as np
from dm_control import suite


class Env:
    def __init__(self, env, repeat):
        self.env, self.repeat, self.t = env, repeat, 0
        self.action_space = SimpleNamespace(shape=env.action_spec().shape)

    def flat(self, time_step):
        return np.concatenate([np.ravel(value) for value in time_step.observation.values()])

    def reset(self):
        self.t = 0
        return self.flat(self.env.reset())

    def step(self, action):
        self.t += 1
        total = 0.0
        for _ in range(self.repeat + EXTRA):
            time_step = self.env.step(action.astype(np.float32))
            total += REWARD(time_step.reward)
            if time_step.last():
                break
        return self.flat(time_step), total, time_step.last() or self.t == 1000 // self.repeat - SHORT, {}


def make_env(task, seed, pixel=False):
    domain, name = task.split("-")
    return Env(suite.load(domain, name, task_kwargs={"random": seed}), 2), 2
"""


STAND_IN_RESETS_ENV = """import numpy as np
from dm_control import suite
from types import SimpleNamespace


class DMCEnv:
    def __init__(self, domain_name, task_name, task_kwargs):
        self._env = suite.load(domain_name, task_name, task_kwargs=task_kwargs)
        self.unwrapped = self
        self.observation_space = SimpleNamespace(spaces=dict(self._env.observation_spec()))  # dm-control's order
        self.action_space = SimpleNamespace(shape=self._env.action_spec().shape)

    def flat(self, time_step):
        return np.concatenate([np.ravel(value) for value in time_step.observation.values()]).astype(np.float32)

    def reset(self):
        return self.flat(self._env.reset())

    def step(self, action):
        total = 0.0
        for _ in range(1 + EXTRA):
            time_step = self._env.step(action)
            total += REWARD(time_step.reward)
            if time_step.last():
                break
        info = {"TimeLimit.truncated": True} if time_step.last() and MARKED else {}
        return self.flat(time_step), total, time_step.last(), info
"""

STAND_IN_RESETS_UTILS = """from continuous_control import wrappers


def make_env(env_name, seed, save_folder=None, action_repeat=1):
    domain_name, task_name = env_name.split("-")
    return wrappers.DMCEnv(domain_name=domain_name, task_name=task_name, task_kwargs={"random": seed})
"""


def stand_in_checkout(
    path: Path, reward: str = "float", extra: int = 0, short: int = 0, upstream: str = "simba", marked: bool = True
) -> Path:
    if upstream == "resets":
        files = {
            "continuous_control/__init__.py": "",
            "continuous_control/utils.py": STAND_IN_RESETS_UTILS,
            "continuous_control/wrappers/__init__.py": "from continuous_control.wrappers.dmc_env import DMCEnv\n",
            "continuous_control/wrappers/dmc_env.py": STAND_IN_RESETS_ENV.replace("REWARD", reward)
            .replace("EXTRA", str(extra))
            .replace("MARKED", str(marked)),
        }
    elif upstream == "cir":
        files = {
            "dmc/dmc.py": STAND_IN_CIR.replace("REWARD", reward).replace("EXTRA", str(extra)).replace("SHORT", str(short))
        }
    else:
        files = {
            "scale_rl/envs/dmc.py": STAND_IN_DMC.replace("REWARD", reward),
            "scale_rl/envs/wrappers/repeat_action.py": STAND_IN_REPEAT.replace("EXTRA", str(extra)),
            "scale_rl/envs/wrappers/scale_reward.py": STAND_IN_SCALE,
        }
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "stand-in"], check=True)
    return path


@pytest.mark.parametrize("upstream", ["simba", "cir", "resets"])
def test_the_same_env_compares_equal_across_both_boundaries(tmp_path, upstream):
    checkout = stand_in_checkout(tmp_path / upstream, upstream=upstream)
    episode = 1000 // side_by_side.UPSTREAMS[upstream].action_repeat
    rows, _ = side_by_side.step_side_by_side(checkout, "walker-walk", 1, 2 * episode + 2, upstream)
    assert len(rows) == 2 * episode + 3 and rows[0][0] == 0
    assert [row[0] for row in rows[1:] if row[6]] == [episode, 2 * episode] == [row[0] for row in rows[1:] if row[5]]
    assert not any(row[3] or row[4] for row in rows[1:])
    assert max(abs(row[1] - row[2]) for row in rows[1:]) < 1e-6 and max(row[7] for row in rows) < 1e-5


@pytest.mark.parametrize("upstream", ["simba", "cir", "resets"])
@pytest.mark.parametrize(
    "planted",
    [
        {"extra": 1},  # a third control step per agent step: other states, episodes end at 333 and 666
        {"reward": "1.001 * float"},  # rewards a little off
    ],
)
def test_a_planted_difference_shows(tmp_path, planted, upstream):
    checkout = stand_in_checkout(tmp_path / upstream, upstream=upstream, **planted)
    rows, _ = side_by_side.step_side_by_side(checkout, "walker-walk", 1, 40, upstream)
    assert max(abs(row[1] - row[2]) for row in rows[1:]) > 1e-4


def test_their_episode_a_step_short_shows_as_a_termination(tmp_path):
    """CIR's done_bool is 1 for a done before step 500: an episode cut at 499 is a termination there, and shows."""
    rows, _ = side_by_side.step_side_by_side(
        stand_in_checkout(tmp_path / "cir", upstream="cir", short=1), "walker-walk", 1, 501, "cir"
    )
    assert [row[0] for row in rows[1:] if row[4]] == [499] and [row[0] for row in rows[1:] if row[5]] == [500]


def test_their_time_limit_end_without_the_mark_shows_as_a_termination(tmp_path):
    """train_dense.py bootstraps through a done only when info has 'TimeLimit.truncated' (their DMCEnv sets it when
    dm-control's last step has discount 1): without the mark, the end at step 1000 is a termination there."""
    rows, _ = side_by_side.step_side_by_side(
        stand_in_checkout(tmp_path / "resets", upstream="resets", marked=False), "walker-walk", 1, 1000, "resets"
    )
    assert [row[0] for row in rows[1:] if row[4]] == [1000] and [row[0] for row in rows[1:] if row[5]] == [1000]
    assert not any(row[6] for row in rows[1:])


def test_their_package_is_imported_afresh_from_each_checkout(tmp_path):
    """The resets package is imported from a scratch folder and taken off sys.modules again: a second checkout with
    other rewards is read as itself, not as the first one's cached modules."""
    first = stand_in_checkout(tmp_path / "first", upstream="resets")
    second = stand_in_checkout(tmp_path / "second", upstream="resets", reward="2.0 * float")
    equal, _ = side_by_side.step_side_by_side(first, "walker-walk", 1, 5, "resets")
    planted, _ = side_by_side.step_side_by_side(second, "walker-walk", 1, 5, "resets")
    assert max(abs(row[1] - row[2]) for row in equal[1:]) < 1e-6 < max(abs(row[1] - row[2]) for row in planted[1:])
    assert "continuous_control" not in sys.modules


def test_their_sorted_keys_are_put_in_our_order(tmp_path, monkeypatch):
    """walker's dict is orientations, height, velocity; gymnasium's Dict sorts it (height first). Without the
    reorder the observations differ from the first step."""
    assert [key for key, _ in side_by_side.our_order("walker-walk")] == ["orientations", "height", "velocity"]
    monkeypatch.setattr(side_by_side, "our_order", lambda task: [("height", 1), ("orientations", 14), ("velocity", 9)])
    rows, _ = side_by_side.step_side_by_side(stand_in_checkout(tmp_path / "simba"), "walker-walk", 1, 3)
    assert rows[0][7] > 1e-2


@pytest.mark.parametrize("upstream", ["simba", "cir", "resets"])
def test_a_checkout_without_their_files_is_refused_in_one_line(tmp_path, capsys, upstream):
    subprocess.run(["git", "init", "-q", str(tmp_path / "empty")], check=True)
    with pytest.raises(SystemExit) as exit_info:
        side_by_side.main([str(tmp_path / "empty"), "--upstream", upstream])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and error.startswith("error: ") and error.count("\n") == 1, error
