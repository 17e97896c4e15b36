"""Recipes (cleanrl_plus/recipes/*.toml) give each id the defaults the agents' Python dicts gave before they moved
there, bit for bit; a flag still wins; an id no recipe takes keeps the field defaults; --help names the file."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents import ddqn, gtr, ppo
from cleanrl_plus import recipes
from cleanrl_plus.config import parse_args
from plasticity.architecture import NetArgs

ROOT = Path(__file__).resolve().parents[1]

# The dicts as agents/ppo.py (ATARI_DEFAULTS, CCHAIN_CONTROL_DEFAULTS) and agents/ddqn.py (FAMILY_DEFAULTS) held them
# at 13a6c48, copied literally: the expected table.
PPO_ATARI = dict(
    total_timesteps=10_000_000,
    num_envs=8,
    num_steps=128,
    learning_rate=2.5e-4,
    num_minibatches=4,
    update_epochs=4,
    clip_coef=0.1,
    ent_coef=0.01,
    normalize_obs=False,
    normalize_reward=False,
    hidden_sizes=(),
    eval_epsilon=0.05,
    eval_every=250_000,
    checkpoint_every=1_000_000,
)
PPO_CCHAIN_CONTROL = dict(
    total_timesteps=1_600_000,
    num_envs=1,
    num_steps=800,
    num_minibatches=25,
    update_epochs=5,
    learning_rate=1e-3,
    anneal_lr=False,
    adam_eps=1e-8,
    max_grad_norm=0.0,
    clip_coef=0.2,
    clip_vloss=False,
    ent_coef=0.01,
    vf_coef=1.0,
    gamma=0.99,
    gae_lambda=0.95,
    value_lambda=1.0,
    norm_adv_over="rollout",
    normalize_obs=False,
    normalize_reward=False,
    reward_scale=1 / 20,
    restart_episodes=True,
    hidden_sizes=(256, 256, 256),
    init="default",
    net=NetArgs(activation="leaky-relu"),
    categorical_from="probs",
    eval_every=0,
)
DDQN_MINATAR = dict(
    total_timesteps=5_000_000,
    learning_rate=2.5e-4,
    buffer_size=100_000,
    target_network_frequency=1_000,
    end_e=0.1,
    exploration_fraction=0.02,
    learning_starts=5_000,
    max_grad_norm=10.0,
    eval_epsilon=0.0,
    eval_every=50_000,
    checkpoint_every=250_000,
)
DDQN_CLASSIC = dict(
    total_timesteps=50_000,
    learning_rate=2.3e-3,
    buffer_size=100_000,
    batch_size=64,
    target_network_frequency=10,
    end_e=0.04,
    exploration_fraction=0.16,
    learning_starts=1_000,
    train_frequency=256,
    gradient_steps=128,
    max_grad_norm=10.0,
    eval_epsilon=0.0,
    eval_every=5_000,
    checkpoint_every=50_000,
)
EXPECTED = [
    (ppo, "CartPole-v1", {}, None),
    (ppo, "Hopper-v5", {}, None),
    (ppo, "ALE/Breakout-v5", PPO_ATARI, "ppo-atari"),
    (ppo, "continual:atari-switch", PPO_ATARI, "ppo-atari"),  # a continual id: the recipe of the env it is built on
    (ppo, "continual:cchain-acrobot", PPO_CCHAIN_CONTROL, "ppo-cchain-control"),
    (ppo, "continual:cchain-cartpole", PPO_CCHAIN_CONTROL, "ppo-cchain-control"),
    (ppo, "continual:obs-offset:torch:CartPole-v1", {}, None),
    (ppo, "MinAtar/Breakout-v1", {}, None),
    (gtr, "ALE/Breakout-v5", PPO_ATARI, "ppo-atari"),
    (gtr, "continual:cchain-cartpole", PPO_CCHAIN_CONTROL, "ppo-cchain-control"),
    (ddqn, "ALE/Breakout-v5", {}, None),  # the field defaults are CleanRL's dqn_atari.py
    (ddqn, "continual:atari-switch", {}, None),
    (ddqn, "MinAtar/Breakout-v1", DDQN_MINATAR, "ddqn-minatar"),
    (ddqn, "continual:minatar3", DDQN_MINATAR, "ddqn-minatar"),
    (ddqn, "CartPole-v1", DDQN_CLASSIC, "ddqn-classic"),
    (ddqn, "continual:cchain-cartpole", DDQN_CLASSIC, "ddqn-classic"),
    (ddqn, "Acrobot-v1", DDQN_CLASSIC, "ddqn-classic"),
]


def fields_with_types(args) -> list[tuple[str, object, type]]:
    """Every field, nested ones included, with its value's type: 10 and 10.0, () and [] tell apart here."""
    flat = []
    for field in dataclasses.fields(args):
        value = getattr(args, field.name)
        if dataclasses.is_dataclass(value):
            flat += [(f"{field.name}.{name}", v, t) for name, v, t in fields_with_types(value)]
        else:
            flat.append((field.name, value, type(value)))
    return flat


@pytest.mark.parametrize("module, env_id, old, name", EXPECTED, ids=[f"{m.__name__}-{i}" for m, i, _, _ in EXPECTED])
def test_every_id_gets_the_defaults_the_old_dicts_gave(module, env_id, old, name):
    assert fields_with_types(module.Args.defaults_for(env_id)) == fields_with_types(module.Args(env_id=env_id, **old))
    recipe = recipes.find(module.__name__.split(".")[-1], env_id, module.Args)
    assert (recipe.name if recipe else None) == name


def test_a_flag_overrides_a_recipe_value_and_leaves_the_others():
    args = ppo.Args.defaults_for("ALE/Breakout-v5", learning_rate=1e-3, net=NetArgs(activation="tanh"))
    assert (args.learning_rate, args.net.activation, args.num_steps) == (1e-3, "tanh", 128)
    parsed = parse_args(ppo.Args, ["--env-id", "continual:cchain-cartpole", "--learning-rate", "0.01", "--num-envs", "2"])
    assert (parsed.learning_rate, parsed.num_envs, parsed.num_steps, parsed.net.activation) == (0.01, 2, 800, "leaky-relu")
    assert parse_args(ddqn.Args, ["--env-id", "CartPole-v1", "--batch-size", "16"]).batch_size == 16


def test_an_id_no_recipe_takes_keeps_the_field_defaults():
    assert recipes.find("ppo", "Hopper-v5", ppo.Args) is None
    assert recipes.find("td3", "ALE/Breakout-v5", ppo.Args) is None  # no agent but those named
    assert ppo.Args.defaults_for("Hopper-v5") == ppo.Args(env_id="Hopper-v5")


def test_the_matchers_of_an_applies_table():
    ale = {"agents": ["ppo"], "base_id_prefix": "ALE/"}
    assert recipes.applies(ale, "ppo", "continual:atari-switch")
    assert not recipes.applies(ale, "gtr", "ALE/Pong-v5")
    cchain = {"agents": ["ppo"], "id_prefix": "continual:cchain-"}
    assert not recipes.applies(cchain, "ppo", "torch:CartPole-v1")  # the id itself, not the env it is built on
    others = {"agents": ["ddqn"], "base_id_not_prefix": ["ALE/", "MinAtar/"]}
    assert recipes.applies(others, "ddqn", "Pendulum-v1")
    assert not recipes.applies(others, "ddqn", "continual:obs-offset:MinAtar/Breakout-v1")


def test_two_recipes_for_one_id_are_refused_and_values_take_the_fields_types(tmp_path):
    applies = '[applies]\nagents = ["ppo"]\nid_prefix = "X"\n'
    text = applies + '[values]\nvf_coef = 1\nhidden_sizes = [8]\n[values.net]\nnorm = "layer"\n'
    (tmp_path / "a.toml").write_text(text)
    recipe = recipes.find("ppo", "X-v0", ppo.Args, tmp_path)
    assert recipe.values == {"vf_coef": 1.0, "hidden_sizes": (8,), "net": NetArgs(norm="layer")}
    assert type(recipe.values["vf_coef"]) is float and recipe.shown == "cleanrl_plus/recipes/a.toml"
    (tmp_path / "b.toml").write_text(text)
    with pytest.raises(ValueError, match="a.toml.*b.toml"):
        recipes.find("ppo", "X-v0", ppo.Args, tmp_path)
    (tmp_path / "b.toml").write_text(text.replace("vf_coef", "vf_coeff").replace('"X"', '"Y"'))
    with pytest.raises(ValueError, match="no field 'vf_coeff'"):
        recipes.find("ppo", "Y", ppo.Args, tmp_path)


def test_every_recipe_names_its_sources_and_is_package_data():
    for path in sorted(recipes.FOLDER.glob("*.toml")):
        opening = path.read_text().split("[applies]")[0]
        assert opening.strip().startswith("#") and len(opening.splitlines()) >= 3, f"{path.name}: no sources"
    assert '"cleanrl_plus.recipes" = ["*.toml"]' in (ROOT / "pyproject.toml").read_text()


def help_of(agent: str, env_id: str) -> str:
    command = [sys.executable, f"agents/{agent}.py", "--env-id", env_id, "--help"]
    environment = os.environ | {"COLUMNS": "100", "PYTHONPATH": "."}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=environment)
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())  # the box wraps lines; its borders are │


def test_help_shows_a_recipe_value_and_the_file_it_comes_from():
    text = help_of("ppo", "ALE/Breakout-v5").replace("│ ", "").replace(" │", "")
    assert "(default: 0.00025, from cleanrl_plus/recipes/ppo-atari.toml)" in text
    assert "(default: 0.5)" in text  # vf_coef: no recipe sets it
    text = help_of("ppo", "continual:cchain-cartpole").replace("│ ", "").replace(" │", "")
    assert "(default: leaky-relu, from cleanrl_plus/recipes/ppo-cchain-control.toml)" in text


def test_a_run_names_its_recipe_at_the_start_and_in_its_summary(tmp_path, capsys):
    tiny = dict(total_timesteps=40, learning_starts=20, batch_size=8, buffer_size=100, eval_every=0, eval_episodes=1)
    summary = ddqn.main(ddqn.Args.defaults_for("CartPole-v1", **tiny, progress=False, runs_dir=str(tmp_path)))
    assert "recipe: ddqn-classic (cleanrl_plus/recipes/ddqn-classic.toml)" in capsys.readouterr().out
    assert summary["recipe"] == "ddqn-classic"
    summary = ddqn.main(ddqn.Args.defaults_for("ALE/Breakout-v5", **tiny, progress=False, runs_dir=str(tmp_path)))
    assert "recipe:" not in capsys.readouterr().out and summary["recipe"] is None
