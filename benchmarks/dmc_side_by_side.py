"""Our DMC env beside SimBa's, stepped on one seed with one action sequence across episode boundaries.

Theirs: SonyResearch/simba at 7d0358b, scale_rl/envs/dmc.py `make_dmc_env` (dm-control's suite.load with
task_kwargs={"random": seed}, shimmy's DmControlCompatibilityV0, gymnasium's FlattenObservation) wrapped as
scale_rl/envs/__init__.py `create_vec_env` wraps it for configs/env/dmc_em.yaml: RescaleAction(-1, 1),
TimeLimit(1000), scale_rl/envs/wrappers/repeat_action.py RepeatAction(2), ScaleReward(1). Their vector env resets an
ended episode without a seed, so the task's RandomState carries on, as a plain `env.reset()` does here.
Ours: envs/dmc_backend.py DMCVecEnv(action_repeat=2), one sub-env.

    python benchmarks/dmc_side_by_side.py CHECKOUT --task walker-walk --seed 1 --steps 1100

CHECKOUT is a git checkout (or bare mirror) of SonyResearch/simba; its three files are read with `git show` into a
scratch folder and never copied into this repository. Needs shimmy (`pip install --no-deps --target DIR shimmy`,
then PYTHONPATH=DIR). Writes benchmarks/results/dmc-side-by-side/<task>__seed<s>.csv: one row per agent step, both
envs' reward, termination and truncation, and the largest difference between the two observations, theirs put in
our order first (gymnasium's Dict space sorts the keys, dm-control's observation dict keeps the task's order).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cchain_released import machine, now, write_csv  # noqa: E402
from cleanrl_plus.errors import exit_with  # noqa: E402
from envs.errors import UserError  # noqa: E402

UPSTREAM = "SonyResearch/simba"
THEIR_FILES = ("scale_rl/envs/dmc.py", "scale_rl/envs/wrappers/repeat_action.py", "scale_rl/envs/wrappers/scale_reward.py")
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


def load_their_modules(checkout: Path, scratch: Path) -> tuple[dict, str]:
    """Their three files as modules (by file, so their package's other imports are not needed), and the commit."""
    found = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    if found.returncode != 0:
        raise UserError(f"{checkout} is not a git checkout — fetch {UPSTREAM} and pass its folder")
    modules = {}
    for name in THEIR_FILES:
        shown = subprocess.run(["git", "-C", str(checkout), "show", f"HEAD:{name}"], capture_output=True, text=True)
        if shown.returncode != 0:
            raise UserError(f"{checkout} has no {name} — pass a checkout of {UPSTREAM}")
        path = scratch / Path(name).name
        path.write_text(shown.stdout)
        spec = importlib.util.spec_from_file_location(Path(name).stem, path)
        modules[Path(name).stem] = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(modules[Path(name).stem])
        except ModuleNotFoundError as error:
            raise UserError(
                f"their {name} needs {error.name}: pip install --no-deps --target DIR {error.name}, then PYTHONPATH=DIR"
            ) from None
    return modules, found.stdout.strip()


def their_env(modules: dict, task: str, seed: int, action_repeat: int):
    """create_vec_env's make_one_env for env_type 'dmc' (scale_rl/envs/__init__.py), one env."""
    from gymnasium.wrappers import RescaleAction, TimeLimit

    env = modules["dmc"].make_dmc_env(task, seed)
    env = TimeLimit(RescaleAction(env, -1.0, 1.0), 1000)  # dmc_em.yaml: rescale_action true, max_episode_steps 1000
    return modules["scale_reward"].ScaleReward(modules["repeat_action"].RepeatAction(env, action_repeat), 1.0)


def our_order(task: str) -> list[tuple[str, int]]:
    """(key, size) of the task's observation dict in dm-control's order, which ours flattens in."""
    from dm_control import suite

    domain, name = task.split("-", 1)
    spec = suite.load(domain, name).observation_spec()
    return [(key, int(np.prod(value.shape))) for key, value in spec.items()]


def step_side_by_side(checkout: Path, task: str, seed: int, steps: int, action_repeat: int = 2) -> tuple[list, str]:
    import torch
    from absl import logging as absl_logging

    from envs.dmc_backend import DMCVecEnv

    absl_logging.set_verbosity(absl_logging.ERROR)  # dm-control's XML deprecation notes
    with tempfile.TemporaryDirectory() as scratch:
        modules, commit = load_their_modules(checkout, Path(scratch))
        theirs = their_env(modules, task, seed, action_repeat)
    ours = DMCVecEnv(f"dmc:{task}", 1, seed, torch.device("cpu"), action_repeat=action_repeat)
    order = our_order(task)
    their_keys = list(theirs.unwrapped.observation_space.spaces)  # the Dict space FlattenObservation flattens
    sizes = dict(order)
    starts = np.cumsum([0] + [sizes[key] for key in their_keys])
    position = {key: slice(starts[i], starts[i + 1]) for i, key in enumerate(their_keys)}

    def reordered(their_obs: np.ndarray) -> np.ndarray:
        return np.concatenate([their_obs[position[key]] for key, _ in order])

    actions = np.random.default_rng(seed).uniform(-1.0, 1.0, (steps, *theirs.action_space.shape)).astype(np.float32)
    their_obs, _ = theirs.reset()
    our_obs = ours.reset()[0].numpy()
    rows = [[0, "", "", "", "", "", "", float(np.abs(reordered(their_obs) - our_obs).max())]]
    for t in range(steps):
        their_next, their_reward, their_terminated, their_truncated, _ = theirs.step(actions[t])
        result = ours.step(torch.as_tensor(actions[t])[None])
        difference = np.abs(reordered(their_next) - result.next_obs[0].numpy()).max()
        if their_terminated or their_truncated:  # their vector env's autoreset: a fresh episode, no seed
            their_next, _ = theirs.reset()
            difference = max(difference, np.abs(reordered(their_next) - result.obs[0].numpy()).max())
        rows.append(
            [
                t + 1,
                float(result.reward[0]),
                float(their_reward),
                int(result.terminated[0]),
                int(their_terminated),
                int(result.truncated[0]),
                int(their_truncated),
                float(difference),
            ]
        )
    return rows, commit


def versions() -> str:
    from importlib.metadata import version

    ours = ", ".join(f"{name} {version(name)}" for name in ("dm-control", "mujoco", "shimmy"))
    return f"{ours} (their deps/requirements.txt pins dm-control 1.0.20, mujoco 3.1.6, Shimmy 2.0.0, gymnasium 1.0.0a2)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help=f"a git checkout (or bare mirror) of {UPSTREAM}")
    parser.add_argument("--task", default="walker-walk", help="a DMC task, domain-task (dmc_em.yaml's names)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1100, help="agent steps (500 an episode at action repeat 2)")
    parser.add_argument("--out", type=Path)
    options = parser.parse_args(argv)
    try:
        if options.steps < 1 or options.seed < 0:
            raise UserError("--steps must be ≥ 1 and --seed ≥ 0")
        rows, commit = step_side_by_side(options.checkout, options.task, options.seed, options.steps)
        header = {
            "theirs": f"{UPSTREAM} at {commit}: {', '.join(THEIR_FILES)} (unchanged), wrapped as create_vec_env does",
            "ours": "envs/dmc_backend.py DMCVecEnv, action_repeat 2",
            "command": f"python benchmarks/dmc_side_by_side.py CHECKOUT --task {options.task} --seed {options.seed} "
            f"--steps {options.steps}",
            "actions": f"numpy default_rng({options.seed}).uniform(-1, 1), float32, one per agent step",
            "row_0": "the reset observation; a row where an episode ended also compares the next episode's first one",
            "machine": machine(),
            "versions": versions(),
            "date": now(),
        }
        out = options.out or OUT_DIR / f"{options.task}__seed{options.seed}.csv"
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
