"""Our DMC env beside an author's own, stepped on one seed with one action sequence across episode boundaries.

    python benchmarks/dmc_side_by_side.py CHECKOUT --upstream simba --task walker-walk --seed 1 --steps 1100

--upstream simba: SonyResearch/simba at 7d0358b, scale_rl/envs/dmc.py `make_dmc_env` (dm-control's suite.load with
task_kwargs={"random": seed}, shimmy's DmControlCompatibilityV0, gymnasium's FlattenObservation) wrapped as
scale_rl/envs/__init__.py `create_vec_env` wraps it for configs/env/dmc_em.yaml: RescaleAction(-1, 1),
TimeLimit(1000), scale_rl/envs/wrappers/repeat_action.py RepeatAction(2), ScaleReward(1). Their vector env resets an
ended episode without a seed, so the task's RandomState carries on, as a plain `env.reset()` does here. Needs shimmy.
--upstream cir: dmksjfl/CIR at e0d8d90, dmc/dmc.py `make_env(task, seed)` (suite.load with task_kwargs={"random":
seed}, float32 actions, ActionRepeatWrapper(2) summing rewards, action_scale to [-1, 1], the old gym API with done at
1000 // 2 agent steps). Their terminated is train_dmc.py's `done_bool` (done before step 500 of an episode), their
truncated the rest of their done; train_dmc.py resets with a plain `env.reset()`. Needs gym 0.26.
--upstream resets: evgenii-nikishin/rl_with_resets at 502ec52, continuous_control/utils.py `make_env(task, seed)` as
train_dense.py calls it (their DMCEnv over suite.load with task_kwargs={"random": seed}, FlattenObservation,
EpisodeMonitor, RescaleAction(-1, 1), SinglePrecision, `env.seed(seed)`; action repeat 1). Their terminated is a done
without info['TimeLimit.truncated'] (train_dense.py's mask 0), their truncated one with it; train_dense.py resets with a
plain `env.reset()`. Their package is imported from the scratch folder as their code imports it. Needs the old gym API
with `Env.seed` and `registry.all()`: gym 0.23.1 (their pin 0.20.0 does not build with today's setuptools).
Ours: envs/dmc_backend.py DMCVecEnv with the upstream's action repeat (2, 2, 1), one sub-env.

CHECKOUT is a git checkout (or bare mirror) of the upstream; its files are read with `git show` into a scratch
folder and never copied into this repository. A missing package: `pip install --no-deps --target DIR PACKAGE`, then
PYTHONPATH=DIR. Writes benchmarks/results/dmc-side-by-side/<upstream>__<task>__seed<s>.csv: one row per agent step,
both envs' reward, termination and truncation, and the largest difference between the two observations, theirs put in
our order first (gymnasium's Dict space sorts the keys, dm-control's observation dict keeps the task's order).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import commit_of, file_at, machine, now, write_csv  # noqa: E402
from cleanrl_plus.errors import exit_with  # noqa: E402
from envs.errors import UserError  # noqa: E402

OUT_DIR = ROOT / "benchmarks" / "results" / "dmc-side-by-side"
COLUMNS = [
    "step",
    "our_reward",
    "their_reward",
    "our_terminated",
    "their_terminated",
    "our_truncated",
    "their_truncated",
    "max_abs_obs_difference",
]


def their_files(upstream: Upstream, checkout: Path) -> list[str]:
    """upstream.files with each folder (a name ending in "/") replaced by the files git holds under it."""
    names = []
    for name in upstream.files:
        if not name.endswith("/"):
            names.append(name)
            continue
        listed = subprocess.run(
            ["git", "-C", str(checkout), "ls-tree", "-r", "--name-only", "HEAD", "--", name],
            capture_output=True,
            text=True,
        )
        names += [found for found in listed.stdout.split() if found.endswith(".py")] or [name]  # none: refused below
    return names


def load_their_modules(upstream: Upstream, checkout: Path, scratch: Path) -> tuple[dict, str]:
    """Their files as modules, and the commit. Each file is written to its own path under scratch; a standalone file
    is loaded by itself (so their package's other imports are not needed), a package (upstream.imports) is imported
    from scratch as their code imports it, then taken off sys.path and sys.modules again."""
    commit = commit_of(checkout)
    if commit is None:
        raise UserError(f"{checkout} is not a git checkout — fetch {upstream.repo} and pass its folder")
    modules = {}
    for name in their_files(upstream, checkout):
        text = file_at(checkout, commit, name)
        if text is None:
            raise UserError(f"{checkout} has no {name} — pass a checkout of {upstream.repo}")
        path = scratch / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if upstream.imports is None:
            spec = importlib.util.spec_from_file_location(path.stem, path)
            modules[path.stem] = importlib.util.module_from_spec(spec)
            with their_missing_packages_refused(name):
                spec.loader.exec_module(modules[path.stem])
    if upstream.imports is not None:
        package = upstream.imports.split(".")[0]
        sys.path.insert(0, str(scratch))
        try:
            with their_missing_packages_refused(upstream.imports):
                module = importlib.import_module(upstream.imports)
            modules[upstream.imports.rsplit(".", 1)[-1]] = module
        finally:
            sys.path.remove(str(scratch))
            for loaded in [key for key in sys.modules if key == package or key.startswith(package + ".")]:
                del sys.modules[loaded]
    return modules, commit


@contextmanager
def their_missing_packages_refused(name: str):
    try:
        yield
    except ModuleNotFoundError as error:
        raise UserError(
            f"their {name} needs {error.name}: pip install --no-deps --target DIR {error.name}, then PYTHONPATH=DIR"
        ) from None


class SimbaEnv:
    """create_vec_env's make_one_env for env_type 'dmc' (scale_rl/envs/__init__.py), one env."""

    def __init__(self, modules: dict, task: str, seed: int, action_repeat: int):
        from gymnasium.wrappers import RescaleAction, TimeLimit

        env = modules["dmc"].make_dmc_env(task, seed)
        env = TimeLimit(RescaleAction(env, -1.0, 1.0), 1000)  # dmc_em.yaml: rescale_action true, max_episode_steps 1000
        self.env = modules["scale_reward"].ScaleReward(modules["repeat_action"].RepeatAction(env, action_repeat), 1.0)
        self.keys = list(self.env.unwrapped.observation_space.spaces)  # the Dict space FlattenObservation flattens
        self.action_shape = self.env.action_space.shape

    def reset(self) -> np.ndarray:
        return self.env.reset()[0]

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return obs, float(reward), bool(terminated), bool(truncated)


class CirEnv:
    """dmc/dmc.py make_env, stepped as dmc/train_dmc.py steps it."""

    def __init__(self, modules: dict, task: str, seed: int, action_repeat: int):
        self.env, their_repeat = modules["dmc"].make_env(task, seed)
        if their_repeat != action_repeat:
            raise UserError(f"their make_env repeats actions {their_repeat} times, not {action_repeat}")
        self.episode_length = 1000 // action_repeat
        self.keys = None  # they concatenate the observation dict in dm-control's order
        self.action_shape = self.env.action_space.shape

    def reset(self) -> np.ndarray:
        self.episode_timesteps = 0
        return np.asarray(self.env.reset())

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        self.episode_timesteps += 1
        obs, reward, done, _ = self.env.step(action)
        done_bool = bool(done) and self.episode_timesteps < self.episode_length  # train_dmc.py's bootstrap cut
        return np.asarray(obs), float(reward), done_bool, bool(done) and not done_bool


class ResetsEnv:
    """continuous_control/utils.py make_env(task, seed) as train_dense.py calls it (action repeat 1), stepped as its
    loop steps it: a done with 'TimeLimit.truncated' in info is a truncation (their mask 1), any other a termination."""

    def __init__(self, modules: dict, task: str, seed: int, action_repeat: int):
        self.env = modules["utils"].make_env(task, seed)
        self.keys = list(self.env.unwrapped.observation_space.spaces)  # the Dict space FlattenObservation flattens
        self.action_shape = self.env.action_space.shape

    def reset(self) -> np.ndarray:
        return np.asarray(self.env.reset())

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        obs, reward, done, info = self.env.step(action)
        truncated = bool(done) and "TimeLimit.truncated" in info
        return np.asarray(obs), float(reward), bool(done) and not truncated, truncated


class Upstream(NamedTuple):
    repo: str
    files: tuple[str, ...]  # a name ending in "/" is every .py file git holds under that folder
    wrapped_as: str
    pins: str
    env: type  # builds their env and steps it as their training loop does
    action_repeat: int  # the one their training script uses on DMC
    imports: str | None = None  # a package: the module imported (files loaded one by one when None)


UPSTREAMS = {
    "simba": Upstream(
        "SonyResearch/simba",
        ("scale_rl/envs/dmc.py", "scale_rl/envs/wrappers/repeat_action.py", "scale_rl/envs/wrappers/scale_reward.py"),
        "wrapped as create_vec_env does for dmc_em.yaml",
        "their deps/requirements.txt pins dm-control 1.0.20, mujoco 3.1.6, Shimmy 2.0.0, gymnasium 1.0.0a2",
        SimbaEnv,
        2,
    ),
    "cir": Upstream(
        "dmksjfl/CIR",
        ("dmc/dmc.py",),
        "make_env as dmc/train_dmc.py calls it; terminated is its done_bool",
        "their README names no versions; dmc/dmc.py imports gym",
        CirEnv,
        2,
    ),
    "resets": Upstream(
        "evgenii-nikishin/rl_with_resets",
        ("continuous_control/__init__.py", "continuous_control/utils.py", "continuous_control/wrappers/"),
        "make_env as train_dense.py calls it (action repeat 1); terminated is a done without TimeLimit.truncated",
        "their continuous_control_requirements.txt pins gym 0.20.0, dm-control 1.0.2, mujoco 2.1.5",
        ResetsEnv,
        1,
        "continuous_control.utils",
    ),
}


def our_order(task: str) -> list[tuple[str, int]]:
    """(key, size) of the task's observation dict in dm-control's order, which ours flattens in."""
    from dm_control import suite

    domain, name = task.split("-", 1)
    spec = suite.load(domain, name).observation_spec()
    return [(key, int(np.prod(value.shape))) for key, value in spec.items()]


def step_side_by_side(checkout: Path, task: str, seed: int, steps: int, upstream: str = "simba") -> tuple[list, str]:
    import torch
    from absl import logging as absl_logging

    from envs.dmc_backend import DMCVecEnv

    absl_logging.set_verbosity(absl_logging.ERROR)  # dm-control's XML deprecation notes
    action_repeat = UPSTREAMS[upstream].action_repeat
    with tempfile.TemporaryDirectory() as scratch:
        modules, commit = load_their_modules(UPSTREAMS[upstream], checkout, Path(scratch))
        theirs = UPSTREAMS[upstream].env(modules, task, seed, action_repeat)
    ours = DMCVecEnv(f"dmc:{task}", 1, seed, torch.device("cpu"), action_repeat=action_repeat)
    order = our_order(task)
    sizes = dict(order)
    their_keys = theirs.keys or [key for key, _ in order]
    starts = np.cumsum([0] + [sizes[key] for key in their_keys])
    position = {key: slice(starts[i], starts[i + 1]) for i, key in enumerate(their_keys)}

    def reordered(their_obs: np.ndarray) -> np.ndarray:
        return np.concatenate([their_obs[position[key]] for key, _ in order])

    actions = np.random.default_rng(seed).uniform(-1.0, 1.0, (steps, *theirs.action_shape)).astype(np.float32)
    their_obs = theirs.reset()
    our_obs = ours.reset()[0].numpy()
    rows = [[0, "", "", "", "", "", "", float(np.abs(reordered(their_obs) - our_obs).max())]]
    for t in range(steps):
        their_next, their_reward, their_terminated, their_truncated = theirs.step(actions[t])
        result = ours.step(torch.as_tensor(actions[t])[None])
        difference = np.abs(reordered(their_next) - result.next_obs[0].numpy()).max()
        if their_terminated or their_truncated:  # a fresh episode, no seed, as their training loops reset
            their_next = theirs.reset()
            difference = max(difference, np.abs(reordered(their_next) - result.obs[0].numpy()).max())
        rows.append(
            [
                t + 1,
                float(result.reward[0]),
                their_reward,
                int(result.terminated[0]),
                int(their_terminated),
                int(result.truncated[0]),
                int(their_truncated),
                float(difference),
            ]
        )
    return rows, commit


def versions(upstream: Upstream) -> str:
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return f"{name} {version(name)}"
        except PackageNotFoundError:
            return f"{name} absent"

    ours = ", ".join(installed(name) for name in ("dm-control", "mujoco", "shimmy", "gym"))
    return f"{ours} ({upstream.pins})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a git checkout (or bare mirror) of the upstream")
    parser.add_argument("--upstream", choices=sorted(UPSTREAMS), default="simba", help="whose env files CHECKOUT holds")
    parser.add_argument("--task", default="walker-walk", help="a DMC task, domain-task (the authors' names)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, help="agent steps (default: across two episode ends and 100 more)")
    parser.add_argument("--out", type=Path)
    options = parser.parse_args(argv)
    upstream = UPSTREAMS[options.upstream]
    if options.steps is None:
        options.steps = 2 * (1000 // upstream.action_repeat) + 100
    try:
        if options.steps < 1 or options.seed < 0:
            raise UserError("--steps must be ≥ 1 and --seed ≥ 0")
        rows, commit = step_side_by_side(options.checkout, options.task, options.seed, options.steps, options.upstream)
        header = {
            "theirs": f"{upstream.repo} at {commit}: {', '.join(upstream.files)} (unchanged), {upstream.wrapped_as}",
            "ours": f"envs/dmc_backend.py DMCVecEnv, action_repeat {upstream.action_repeat}",
            "command": f"python benchmarks/dmc_side_by_side.py CHECKOUT --upstream {options.upstream} "
            f"--task {options.task} --seed {options.seed} --steps {options.steps}",
            "actions": f"numpy default_rng({options.seed}).uniform(-1, 1), float32, one per agent step",
            "row_0": "the reset observation; a row where an episode ended also compares the next episode's first one",
            "machine": machine(),
            "versions": versions(upstream),
            "date": now(),
        }
        out = options.out or OUT_DIR / f"{options.upstream}__{options.task}__seed{options.seed}.csv"
        write_csv(out, header, COLUMNS, rows)
        ends = [row[0] for row in rows[1:] if row[5] or row[6]]
        reward = max(abs(row[1] - row[2]) for row in rows[1:])
        print(
            f"{out}: episodes ended at agent steps {ends}; largest reward difference {reward:.3g}, observation "
            f"difference {max(row[7] for row in rows):.3g}"
        )
    except UserError as error:
        exit_with(error)


if __name__ == "__main__":
    main()
