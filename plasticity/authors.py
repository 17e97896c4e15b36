"""The authors' runs: for each remedy, the setting of its authors' experiments in our flags, where
each value was read, and what of that setting our suite does not reproduce.

`RUNS` is the one place these settings live. Each "As the authors run it" line of docs/remedies/*.md
is `markdown(run)` of one entry, and tests/test_authors.py parses every such documented command with
its agent's own parser and checks each value below on the parsed flags, so a renamed flag, a value
parsed differently or an edited docs line fails a test. Every value is passed explicitly, so a later
change of an agent's defaults does not change these commands.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any


@dataclasses.dataclass(frozen=True)
class AuthorsRun:
    remedy: str  # its name in plasticity.catalogue.REMEDIES
    setting: str  # which of the authors' experiments
    agent: str
    env_id: str  # "" where the suite has no task like the authors' (then only the flags are shown)
    # attribute path of the agent's Args ("reset.every") → the authors' value
    settings: dict[str, Any]
    source: str  # the repository and files (or the paper's section) each value was read from
    # what of the authors' run the command does not reproduce ("" = nothing we know of)
    differs: str = ""

    def flags(self) -> str:
        return " ".join(_flag(path, value) for path, value in self.settings.items())

    def command(self) -> str:
        return f"python agents/{self.agent}.py --env-id {self.env_id} {self.flags()}"


def _flag(path: str, value: Any) -> str:
    *nest, name = path.split(".")
    if isinstance(value, bool):
        return "--" + ".".join([*nest, name if value else f"no-{name}"]).replace("_", "-")
    flag = "--" + path.replace("_", "-")
    if isinstance(value, tuple):
        return f"{flag} {' '.join(_value(v) for v in value)}"
    return f"{flag} {_value(value)}"


def _value(value: Any) -> str:
    if isinstance(value, str):
        return shlex.quote(value)
    if isinstance(value, int) or (value == int(value) and abs(value) < 1e6):
        return str(int(value))
    mantissa, exponent = f"{value:e}".split("e")
    if -2 <= int(exponent) < 6:
        return f"{value:g}"
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def markdown(run: AuthorsRun) -> str:
    """The docs text of one entry; docs/remedies/*.md hold it verbatim, up to line breaks."""
    head = f"As the authors run it ({run.setting}; {run.source})"
    if not run.env_id:
        return (
            f"{head}: not reproducible here. {run.differs} Their values in our flags: "
            f"`{run.flags()}`."
        )
    text = f"{head}:\n\n```bash\n{run.command()}\n```"
    return f"{text}\n\nWhat differs: {run.differs}" if run.differs else text


# CleanRL's ppo_continuous_action networks
_CLEANRL_PPO_TANH_64 = {"hidden_sizes": (64, 64), "net.activation": "tanh"}

RUNS: tuple[AuthorsRun, ...] = (
    AuthorsRun(
        "full reset",
        "SAC on DMC, the official README's example",
        "sac_simba",
        "dmc:quadruped-run",
        {
            "network": "mlp",
            "mlp_hidden_sizes": (256, 256),
            "action_repeat": 1,
            "total_timesteps": 2_000_000,
            "learning_starts": 10_000,
            "updates_per_step": 3,
            "batch_size": 256,
            "learning_rate": 3e-4,
            "weight_decay": 0.0,
            "alpha_learning_rate": 3e-4,
            "initial_alpha": 1.0,
            "target_entropy_scale": 0.5,
            "clipped_double_q": "on",
            "normalize_obs": False,
            "reset.method": "full",
            "reset.networks": "both",
            "reset.every": 200_000,
        },
        "evgenii-nikishin/rl_with_resets, README's `train_dense.py` command, `configs/sac.py` "
        "(`reset_interval` 2·10⁵ environment steps), target entropy −|A|/2 in "
        "`continuous_control/agents/sac/sac_learner.py`",
    ),
    AuthorsRun(
        "ReGraMa",
        "SAC on MuJoCo, the official README's GraMa example",
        "sac_simba",
        "HalfCheetah-v5",
        {
            "network": "mlp",
            "mlp_hidden_sizes": (256, 256),
            "total_timesteps": 3_000_000,
            "learning_starts": 5_000,
            "updates_per_step": 1,
            "batch_size": 256,
            "learning_rate": 1e-3,
            "weight_decay": 0.0,
            "alpha_learning_rate": 1e-3,
            "initial_alpha": 1.0,
            "target_entropy_scale": 1.0,
            "clipped_double_q": "on",
            "normalize_obs": False,
            "reset.method": "regrama",
            "reset.networks": "critic",
            "reset.every": 1_000,
            "reset.regrama_tau": 0.1,
        },
        "rippl-svg/grad-based-plasticity-metrics, README's `main.py --exp-name grad_redo` command, "
        "`SAC/configs.py`, `main.py`",
        "Their SAC is CleanRL's, whose actor learns at 3e-4 and takes two steps every second "
        "update (ours: one `--learning-rate` for both networks, one actor step per update); "
        "HalfCheetah-v4 there.",
    ),
    AuthorsRun(
        "continual backprop (CBP)",
        "PPO on slippery Ant",
        "ppo",
        "continual:slippery-ant",
        {
            "total_timesteps": 20_000_000,
            "net.activation": "relu",
            "hidden_sizes": (256, 256),
            "num_envs": 1,
            "num_steps": 2048,
            "num_minibatches": 16,
            "update_epochs": 10,
            "learning_rate": 1e-4,
            "anneal_lr": False,
            "adam_betas": (0.99, 0.99),
            "adam_eps": 1e-8,
            "reg.l2": 5e-5,
            "gamma": 0.99,
            "gae_lambda": 0.95,
            "clip_coef": 0.2,
            "clip_vloss": False,
            "vf_coef": 2.0,
            "ent_coef": 0.0,
            "max_grad_norm": 1e9,
            "normalize_obs": False,
            "normalize_reward": False,
            "reset.method": "cbp",
            "reset.cbp_replacement_rate": 1e-4,
            "reset.cbp_maturity": 10_000,
        },
        "shibhansh/loss-of-plasticity, `lop/rl/cfg/sant/cbp.yml` and `lop/rl/run_ppo.py`",
        "Slippery Ant-v3 (mujoco-py) there, Ant-v5 here; their frictions come from the "
        "repository's `cfg/frictions` file per seed, ours are drawn from the task seed; their "
        "networks start from LeCun's initialisation, ours from PPO's orthogonal one.",
    ),
    AuthorsRun(
        "Parseval",
        "PPO on CARL LunarLander task sequences",
        "ppo",
        "",
        {
            **_CLEANRL_PPO_TANH_64,
            "num_envs": 1,
            "num_steps": 128,
            "num_minibatches": 4,
            "update_epochs": 4,
            "ent_coef": 1e-4,
            "reg.parseval": 1e-4,
        },
        "wechu/parseval_reg, the per-environment settings in `parseval_reg/main.py`",
        "The suite has no CARL contexts (theirs give LunarLander a new context every 500k steps, "
        "for 10M).",
    ),
    AuthorsRun(
        "Parseval",
        "PPO on the nine-rooms gridworld",
        "ppo",
        "",
        {
            **_CLEANRL_PPO_TANH_64,
            "num_envs": 1,
            "learning_rate": 2.5e-4,
            "num_steps": 128,
            "num_minibatches": 4,
            "update_epochs": 4,
            "ent_coef": 0.01,
            "reg.parseval": 1e-3,
        },
        "wechu/parseval_reg, `parseval_reg/main.py`",
        "The suite has no gridworld (theirs changes its task every 40k steps, for 800k).",
    ),
    AuthorsRun(
        "Parseval",
        "PPO on MetaWorld and CARL DMC-quadruped task sequences",
        "ppo",
        "",
        {**_CLEANRL_PPO_TANH_64, "num_envs": 1, "reg.parseval": 1e-3},
        "wechu/parseval_reg, `parseval_reg/main.py`: λ = 1e-3 on MetaWorld, 1e-4 on the quadruped",
        "The suite has neither benchmark. Their `main.py` asks for RPO there (`rpo_alpha` 0.5, its "
        "default) and, for Parseval on MetaWorld, per-unit diagonal layers (`add_diag_layer`), but "
        "its `ppo_agent` branch passes neither setting on to the agent (neither is in its key "
        "list), so the released code trains plain PPO, as ours would.",
    ),
    AuthorsRun(
        "weight clipping",
        "PPO on MuJoCo",
        "ppo",
        "HalfCheetah-v5",
        {
            **_CLEANRL_PPO_TANH_64,
            "total_timesteps": 1_000_000,
            "num_envs": 1,
            "num_steps": 2048,
            "learning_rate": 3e-4,
            "anneal_lr": True,
            "clip.kappa": 3.0,
        },
        "mohmdelsayed/weight-clipping, `rl_experiments/ppo_continuous_action_clipped.py`: "
        "CleanRL's PPO with κ = 3, the output layers clipped",
        "HalfCheetah-v4 there.",
    ),
    AuthorsRun(
        "C-CHAIN",
        "PPO on the DMC walker stand → walk → run chain",
        "ppo",
        "continual:dmc-walker",
        {
            "total_timesteps": 3_000_000,
            "net.activation": "relu",
            "hidden_sizes": (256, 256),
            "num_envs": 1,
            "num_steps": 2048,
            "num_minibatches": 32,
            "update_epochs": 10,
            "learning_rate": 3e-4,
            "anneal_lr": False,
            "ent_coef": 0.0,
            "continual.reset_obs_norm": True,
            "cchain.enabled": True,
        },
        "bluecontra/C-CHAIN, `crl_dmc/crl_run_ppo_c_chain_dmc.py` and `AgentReLU` in "
        "`crl_dmc/utils/basic_utils.py`",
    ),
    AuthorsRun(
        "C-CHAIN",
        "Double DQN on the MinAtar space_invaders → asterix → seaquest sequence",
        "ddqn",
        "continual:minatar3",
        {
            "total_timesteps": 6_000_000,
            "network": "minatar-cnn",
            "learning_starts": 10_000,
            "learning_rate": 3e-4,
            "loss": "mse",
            "max_grad_norm": 0.0,
            "buffer_size": 100_000,
            "batch_size": 32,
            "gamma": 0.99,
            "target_network_frequency": 1_000,
            "tau": 1.0,
            "train_frequency": 1,
            "start_e": 1.0,
            "end_e": 0.1,
            "continual.reset_replay": False,
            "continual.reset_exploration": False,
            "cchain.enabled": True,
        },
        "bluecontra/C-CHAIN, `crl_minatar/crl_run_double_dqn_c_chain.py` and "
        "`crl_minatar/agents/double_dqn_c_chain.py`",
        "Their ε falls from 1 to 0.1 over the first 100k steps that follow the first game's 10k "
        "random ones; ours over `--exploration-fraction` of the whole run.",
    ),
    AuthorsRun(
        "C-CHAIN",
        "PPO on continual CartPole, a new observation offset every 200 iterations (their Table 1)",
        "ppo",
        "continual:cchain-cartpole",
        {
            "total_timesteps": 1_600_000,
            "net.activation": "leaky-relu",
            "init": "default",
            "hidden_sizes": (256, 256, 256),
            "categorical_from": "probs",
            "num_envs": 1,
            "num_steps": 800,
            "restart_episodes": True,
            "num_minibatches": 25,
            "update_epochs": 5,
            "learning_rate": 1e-3,
            "anneal_lr": False,
            "adam_eps": 1e-8,
            "max_grad_norm": 0.0,
            "clip_vloss": False,
            "ent_coef": 0.01,
            "vf_coef": 1.0,
            "value_lambda": 1.0,
            "norm_adv_over": "rollout",
            "reward_scale": 0.05,
            "normalize_obs": False,
            "normalize_reward": False,
            "cchain.enabled": True,
        },
        "bluecontra/C-CHAIN, `crl_gym_classic_control/control_train_aligned_c_chain.py`, "
        "`basic_utils.py` and `networks.py`",
        "Ours draws its random numbers from its own generators, not theirs; the rest is theirs, "
        "the reference minibatches (a second shuffled pass) and the updates without a churn term "
        "(the run's first two) included. The id `continual:cchain-cartpole` picks these values "
        "by itself (docs/agents/ppo.md).",
    ),
    AuthorsRun(
        "Normalize-and-Project (NaP)",
        "value-based agents on the Arcade Learning Environment",
        "ddqn",
        "ALE/Breakout-v5",
        {"nap.enabled": True},
        "Lyle et al. 2024, arXiv 2407.01800; no official code",
        "With no code public, only `--nap.enabled` is theirs: the agent and its settings are our "
        "Double DQN's Atari recipe, not those of the paper's Atari experiments.",
    ),
    AuthorsRun(
        "CIR",
        "SAC on DMC",
        "sac_simba",
        "dmc:cheetah-run",
        {
            "network": "mlp",
            "mlp_hidden_sizes": (512, 512),
            "action_repeat": 2,
            "total_timesteps": 500_000,
            "learning_starts": 2_500,
            "batch_size": 256,
            "learning_rate": 3e-4,
            "weight_decay": 0.0,
            "alpha_learning_rate": 3e-4,
            "initial_alpha": 1.0,
            "target_entropy_scale": 1.0,
            "clipped_double_q": "on",
            "normalize_obs": False,
            "updates_per_step": 2,
            "reuse_batch": True,
            "actor_q": "mean",
            "cir.critic": True,
            "cir.width": 512,
            "cir.convex_lambda": 0.3,
        },
        "dmksjfl/CIR, README's `train_dmc.py --policy cir --smr --ratio 2` command, "
        "`dmc/train_dmc.py`, `dmc/algo/cir.py` and `dmc/dmc.py`: action repeat 2, 1M frames, the "
        "first 5k random",
    ),
)
