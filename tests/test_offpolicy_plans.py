"""The off-policy plans of benchmarks/ against their authors' settings (docs/benchmarks.md, "Off-policy against published
curves"): each plan, read as `cleanrl-plus sweep` reads it, gives every run flags whose parsed Args equal one table of
the authors' values, each value beside the file it was read from, plus a table of the values we chose (each said in
the plan). A plan that drifts from its table fails here: a planted change of one flag is caught for each plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from cleanrl_plus.config import parse_args
from commands import sweep
from commands.agent_modules import agent_module
from plasticity.architecture import torso_settings

# ---- TD3: sfujim/TD3 @bc98e626 ("Camera-ready cleanup"), the code that made learning_curves/ ------------------------
TD3_AUTHORS = {
    "hidden_sizes": (400, 300),  # TD3.py: Actor and Critic l1 → 400, l2 → 300, ReLU
    "learning_rate": 1e-3,  # TD3.py: torch.optim.Adam(parameters()), torch's default lr
    "weight_decay": 0.0,  # TD3.py: plain Adam
    "batch_size": 100,  # main.py --batch_size
    "gamma": 0.99,  # main.py --discount
    "tau": 0.005,  # main.py --tau
    "exploration_noise": 0.1,  # main.py --expl_noise
    "policy_noise": 0.2,  # main.py --policy_noise
    "noise_clip": 0.5,  # main.py --noise_clip
    "policy_frequency": 2,  # main.py --policy_freq
    "n_step": 1,  # TD3.py: target_Q = reward + done·discount·min(Q̄₁, Q̄₂)
    "normalize_obs": False,  # main.py: raw observations
    "reuse_batch": False,  # TD3.py train(): a fresh replay_buffer.sample per iteration
    "critic.distributional": False,  # TD3.py: scalar Q
    "eval_every": 5_000,  # main.py --eval_freq
    "eval_episodes": 10,  # main.py evaluate_policy(eval_episodes=10)
}
TD3_TORSO = ("none", "relu")  # TD3.py: F.relu, no normalisation
TD3_RANDOM_STEPS = {"HalfCheetah-v5": 10_000, "Hopper-v5": 1_000, "Walker2d-v5": 1_000}  # run_experiments.sh
TD3_CHOSEN = {  # benchmarks/td3-fujimoto.toml says why, one line each
    "total_timesteps": 300_000,
    "buffer_size": 1_000_000,
    "learning_starts": 1_000,
    "gradient_steps": 1,
    "checkpoint_every": 25_000,
    "threads": 1,
}


def value(args: Any, path: str) -> Any:
    """args.<path> for a dotted path ("critic.distributional")."""
    for part in path.split("."):
        args = getattr(args, part)
    return args


def differences(args: Any, table: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{field: (ours, theirs)} for every field of `table` that `args` holds otherwise."""
    return {path: (value(args, path), want) for path, want in table.items() if value(args, path) != want}


def plan_runs(plan: Path) -> dict[tuple[str, str], Any]:
    """{(env id, configuration): the parsed Args of its first seed's run}, the plan read as `cleanrl-plus sweep` reads
    it: its manifest's flags (common, the env's, the configuration's) through the agent's own parser."""
    runs = {}
    for spec in sweep.manifest(sweep.parse([str(plan)])):
        if (spec.env_id, spec.config) not in runs:
            argv = [*spec.flags, "--env-id", spec.env_id, "--seed", str(spec.seed)]
            runs[spec.env_id, spec.config] = parse_args(agent_module(spec.agent).Args, argv)
    return runs


def planted(tmp_path: Path, plan: str, old: str, new: str) -> Path:
    """A copy of a plan with one flag changed."""
    text = (REPO / "benchmarks" / plan).read_text()
    assert old in text, f"{old!r} is not in {plan}"
    copy = tmp_path / plan
    copy.write_text(text.replace(old, new, 1))
    return copy


def td3_differences(plan: Path) -> dict[str, dict[str, tuple[Any, Any]]]:
    found = {}
    for (env_id, _), args in plan_runs(plan).items():
        table = TD3_AUTHORS | TD3_CHOSEN | {"random_steps": TD3_RANDOM_STEPS[env_id]}
        differing = differences(args, table)
        if torso_settings(args.net, args.nap) != TD3_TORSO:
            differing["torso"] = (torso_settings(args.net, args.nap), TD3_TORSO)
        if differing:
            found[env_id] = differing
    return found


def test_td3_plan_runs_the_camera_ready_settings_on_each_env():
    plan = REPO / "benchmarks" / "td3-fujimoto.toml"
    assert td3_differences(plan) == {}
    assert {env_id for env_id, _ in plan_runs(plan)} == set(TD3_RANDOM_STEPS)
    settings = sweep.parse([str(plan)])
    assert len(settings.seeds) >= 5 and settings.members_per_process == len(settings.seeds)


@pytest.mark.parametrize(
    "old, new, field",
    [
        ("--batch-size 100", "--batch-size 256", "batch_size"),
        ('HalfCheetah-v5 = "--random-steps 10000"', 'HalfCheetah-v5 = "--random-steps 1000"', "random_steps"),
        ("--hidden-sizes 400 300", "--hidden-sizes 256 256", "hidden_sizes"),
    ],
)
def test_a_td3_plan_that_drifts_from_the_authors_fails(tmp_path, old, new, field):
    found = td3_differences(planted(tmp_path, "td3-fujimoto.toml", old, new))
    assert found and all(field in differing for differing in found.values())
