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
# run_experiments.sh --start_timesteps (uniform random actions) and main.py's schedule: trained at each episode's end
# as many times as the episode had steps, from the first; HalfCheetah's episodes are all 1,000 steps, so that is
# --update-every 1000 from step 0; on Hopper and Walker2d (episodes of any length) one update per step from step 1,000
# is our choice (the plan says why)
TD3_PER_ENV = {
    "HalfCheetah-v5": {"random_steps": 10_000, "update_every": 1_000, "learning_starts": 0},
    "Hopper-v5": {"random_steps": 1_000, "update_every": 1, "learning_starts": 1_000},
    "Walker2d-v5": {"random_steps": 1_000, "update_every": 1, "learning_starts": 1_000},
}
TD3_CHOSEN = {  # benchmarks/td3-fujimoto.toml says why, one line each
    "total_timesteps": 300_000,
    "buffer_size": 1_000_000,
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
        table = TD3_AUTHORS | TD3_CHOSEN | TD3_PER_ENV[env_id]
        differing = differences(args, table)
        if torso_settings(args.net, args.nap) != TD3_TORSO:
            differing["torso"] = (torso_settings(args.net, args.nap), TD3_TORSO)
        if differing:
            found[env_id] = differing
    return found


def test_td3_plan_runs_the_camera_ready_settings_on_each_env():
    plan = REPO / "benchmarks" / "td3-fujimoto.toml"
    assert td3_differences(plan) == {}
    assert {env_id for env_id, _ in plan_runs(plan)} == set(TD3_PER_ENV)
    settings = sweep.parse([str(plan)])
    assert len(settings.seeds) >= 5 and settings.members_per_process == len(settings.seeds)


@pytest.mark.parametrize(
    "old, new, field",
    [
        ("--batch-size 100", "--batch-size 256", "batch_size"),
        ('HalfCheetah-v5 = "--random-steps 10000', 'HalfCheetah-v5 = "--random-steps 1000', "random_steps"),
        ('10000 --update-every 1000 --learning-starts 0"', '10000 --learning-starts 0"', "update_every"),
        ("--hidden-sizes 400 300", "--hidden-sizes 256 256", "hidden_sizes"),
    ],
)
def test_a_td3_plan_that_drifts_from_the_authors_fails(tmp_path, old, new, field):
    found = td3_differences(planted(tmp_path, "td3-fujimoto.toml", old, new))
    assert found and all(field in differing for differing in found.values())


# ---- SAC and SAC+SimBa on DMC: SonyResearch/simba @7d0358b1 -----------------------------------------------------------
SIMBA_COMMON = {
    "action_repeat": 2,  # configs/env/dmc_em.yaml action_repeat
    "updates_per_step": 2,  # configs/base.yaml updates_per_interaction_step
    "reuse_batch": False,  # run.py: buffer.sample() for every update
    "batch_size": 256,  # configs/buffer/numpy_uniform.yaml sample_batch_size
    "buffer_size": 1_000_000,  # numpy_uniform.yaml max_length
    "learning_starts": 5_000,  # numpy_uniform.yaml min_length: transitions = agent steps with num_train_envs 1
    "gamma": 0.99,  # base.yaml: max(min((500/5 − 1)/(500/5), 0.995), 0.95), eff_episode_len = 1000 / action repeat 2
    "tau": 0.005,  # configs/agent/sac.yaml, sac_simba.yaml target_tau
    "n_step": 1,  # base.yaml n_step
    "actor_q": "min",  # scale_rl/agents/sac/sac_update.py: jnp.minimum(q1, q2) under critic_use_cdq
    "eval_every": 25_000,  # base.yaml evaluation_per_interaction_step (agent steps: 50k frames)
    "eval_episodes": 10,  # base.yaml num_eval_episodes
}
SIMBA_AGENTS = {
    "sac": {  # configs/agent/sac.yaml
        "network": "mlp",  # actor_block_type / critic_block_type 'mlp'
        "mlp_hidden_sizes": (256, 256),  # hidden_dim 256; MLPBlock (scale_rl/networks/layers.py): two Dense layers
        "mlp_init": "orthogonal",  # MLPBlock: orthogonal_init(√2)
        "learning_rate": 3e-4,  # actor_learning_rate, critic_learning_rate
        "weight_decay": 0.0,  # actor_weight_decay, critic_weight_decay
        "alpha_learning_rate": 3e-4,  # temp_learning_rate
        "initial_alpha": 1.0,  # temp_initial_value
        "target_entropy_scale": 1.0,  # temp_target_entropy_coef −1.0
        "clipped_double_q": "on",  # critic_use_cdq: true
        "normalize_obs": False,  # normalize_observation: false
    },
    "simba": {  # configs/agent/sac_simba.yaml
        "network": "simba",  # block_type 'residual'
        "actor_width": 128,  # actor_hidden_dim
        "actor_blocks": 1,  # actor_num_blocks
        "critic_width": 512,  # critic_hidden_dim
        "critic_blocks": 2,  # critic_num_blocks
        "learning_rate": 1e-4,  # actor_learning_rate, critic_learning_rate
        "weight_decay": 1e-2,  # actor_weight_decay, critic_weight_decay
        "alpha_learning_rate": 1e-4,  # temp_learning_rate
        "initial_alpha": 0.01,  # temp_initial_value
        "target_entropy_scale": 0.5,  # temp_target_entropy_coef −0.5
        "clipped_double_q": "off",  # critic_use_cdq: ${env.episodic}, false in configs/env/dmc_em.yaml
        "normalize_obs": True,  # normalize_observation: true
    },
}
SIMBA_CHOSEN = {"total_timesteps": 50_000, "checkpoint_every": 12_500, "threads": 1}  # said in sac-simba-dmc.toml

# ---- CIR on DMC: dmksjfl/CIR @e0d8d901 ---------------------------------------------------------------------------------
CIR_AUTHORS = {
    "action_repeat": 2,  # dmc/dmc.py make_env: action_repeat = 2
    "learning_starts": 2_500,  # dmc/train_dmc.py --start-steps 5e3 frames / action repeat 2
    "batch_size": 256,  # train_dmc.py --batch-size
    "buffer_size": 1_000_000,  # dmc/utils.py ReplayBuffer max_size
    "gamma": 0.99,  # train_dmc.py --discount
    "tau": 0.005,  # train_dmc.py --tau
    "network": "mlp",  # dmc/algo/cir.py Policy: MLPNetwork
    "mlp_hidden_sizes": (512, 512),  # README's --hidden-sizes 512,512
    "mlp_init": "default",  # cir.py: nn.Linear's own
    "learning_rate": 3e-4,  # train_dmc.py --actor-lr, --critic-lr
    "weight_decay": 0.0,  # cir.py: torch.optim.Adam
    "alpha_learning_rate": 3e-4,  # cir.py: temp_optimizer with actor_lr
    "initial_alpha": 1.0,  # cir.py: log_alpha = zeros
    "target_entropy_scale": 1.0,  # cir.py: −action_dim
    "clipped_double_q": "on",  # cir.py DoubleQFunc: two critics
    "normalize_obs": False,  # train_dmc.py: raw observations
    "updates_per_step": 2,  # README's --smr --ratio 2
    "reuse_batch": True,  # cir.py train(): SMR samples once for the ratio's updates
    "actor_q": "mean",  # cir.py update_policy_and_temp: (q_b1 + q_b2) / 2
    "cir.critic": True,  # README's --policy cir
    "cir.width": 512,  # --hidden-sizes 512,512 → DoubleQFunc(hidden_size=512)
    "cir.shared_layer_norm": True,  # cir.py: one self.layernorm for every site of Q1 and Q2
    "cir.convex_lambda": 0.3,  # cir.py: 0.3 · min + 0.7 · max
    "eval_episodes": 10,  # train_dmc.py eval_policy(eval_episodes=10)
}
CIR_CHOSEN = {"total_timesteps": 50_000, "eval_every": 12_500, "checkpoint_every": 12_500, "threads": 1}  # cir-dmc.toml

# ---- resets: evgenii-nikishin/rl_with_resets @502ec521 ------------------------------------------------------------------
RESETS_AUTHORS = {
    "action_repeat": 1,  # continuous_control/utils.py make_env(action_repeat=1), train_dense.py passes none
    "network": "mlp",  # continuous_control/networks/common.py MLP
    "mlp_hidden_sizes": (256, 256),  # configs/sac.py hidden_dims
    "mlp_init": "orthogonal",  # common.py default_init: orthogonal(√2)
    "learning_starts": 10_000,  # train_dense.py --start_training
    "updates_per_step": 1,  # configs/sac.py updates_per_step
    "reuse_batch": False,  # train_dense.py: replay_buffer.sample per update
    "batch_size": 256,  # train_dense.py --batch_size
    "buffer_size": 1_000_000,  # configs/sac.py replay_buffer_size
    "learning_rate": 3e-4,  # configs/sac.py actor_lr, critic_lr
    "weight_decay": 0.0,  # sac_learner.py: optax.adam
    "alpha_learning_rate": 3e-4,  # configs/sac.py temp_lr
    "initial_alpha": 1.0,  # configs/sac.py init_temperature
    "target_entropy_scale": 0.5,  # sac_learner.py: target_entropy None → −action_dim / 2
    "clipped_double_q": "on",  # sac_learner.py DoubleCritic; critic.py jnp.minimum(next_q1, next_q2)
    "actor_q": "min",  # agents/sac/actor.py: jnp.minimum(q1, q2)
    "normalize_obs": False,  # train_dense.py: raw observations
    "gamma": 0.99,  # configs/sac.py discount
    "tau": 0.005,  # configs/sac.py tau
    "eval_every": 5_000,  # train_dense.py --eval_interval
    "eval_episodes": 10,  # train_dense.py --eval_episodes
}
RESETS_PREFIX = "runs/resets-dmc/dmc-cheetah-run__sac_simba-sac-rr1-prefix__1"  # both arms fork from its step 199,999
RESETS_CONFIGS = {
    "sac-rr1-prefix": {"reset.method": "off", "total_timesteps": 199_999, "fork_from": ""},
    "sac-rr1": {"reset.method": "off", "fork_from": RESETS_PREFIX},  # train_dense.py without --resets
    # train_dense.py --resets: a new SACLearner every --reset_interval 2e5 steps, the replay buffer kept
    "sac-rr1-reset": {"reset.method": "full", "reset.networks": "both", "reset.every": 200_000, "fork_from": RESETS_PREFIX},
}
RESETS_CHOSEN = {"total_timesteps": 300_000, "checkpoint_every": 25_000, "threads": 1}  # said in resets-dmc.toml

DMC_TABLES = {
    "sac-simba-dmc.toml": lambda config: SIMBA_COMMON | SIMBA_AGENTS[config] | SIMBA_CHOSEN,
    "cir-dmc.toml": lambda config: CIR_AUTHORS | CIR_CHOSEN,
    "resets-dmc.toml": lambda config: RESETS_AUTHORS | RESETS_CHOSEN | RESETS_CONFIGS[config],
}
DMC_CONFIGS = {"sac-simba-dmc.toml": {"sac", "simba"}, "cir-dmc.toml": {"cir"}, "resets-dmc.toml": set(RESETS_CONFIGS)}


def dmc_differences(plan: Path, table_of) -> dict[tuple[str, str], dict[str, tuple[Any, Any]]]:
    found = {}
    for (env_id, config), args in plan_runs(plan).items():
        differing = differences(args, table_of(config))
        if differing:
            found[env_id, config] = differing
    return found


@pytest.mark.parametrize("plan", sorted(DMC_TABLES))
def test_dmc_plans_run_their_authors_settings(plan):
    path = REPO / "benchmarks" / plan
    assert dmc_differences(path, DMC_TABLES[plan]) == {}
    assert {config for _, config in plan_runs(path)} == DMC_CONFIGS[plan]
    settings = sweep.parse([str(path)])
    assert len(settings.seeds) >= 5 and settings.members_per_process == len(settings.seeds)


@pytest.mark.parametrize(
    "plan, old, new, field",
    [
        ("sac-simba-dmc.toml", "--initial-alpha 0.01", "--initial-alpha 1", "initial_alpha"),
        ("sac-simba-dmc.toml", "--batch-size 256", "--batch-size 100", "batch_size"),
        ("cir-dmc.toml", "--learning-starts 2500", "--learning-starts 5000", "learning_starts"),
        ("cir-dmc.toml", "--actor-q mean", "--actor-q min", "actor_q"),
        ("resets-dmc.toml", "--reset.every 200000", "--reset.every 100000", "reset.every"),
        ("resets-dmc.toml", "--action-repeat 1", "--action-repeat 2", "action_repeat"),
    ],
)
def test_a_dmc_plan_that_drifts_from_the_authors_fails(tmp_path, plan, old, new, field):
    found = dmc_differences(planted(tmp_path, plan, old, new), DMC_TABLES[plan])
    assert found and all(field in differing for differing in found.values())
