"""Edit the copies of CleanRL's and LeanRL's scripts in a folder (.gpukit/peers) so that they run on this project's
stack: gymnasium 1.x, envpool 1.x, numpy 2, no W&B. Runs on the CPU machine, called by tools/gpu/stage.sh.

Only what these versions require is changed; each edit below names its files, the exact text it replaces and why.
A text that is not found stops the script, so a newer upstream commit cannot be patched silently. The peers' code
itself is never committed. LeanRL calls wandb.init/wandb.log unconditionally: tools/gpu/stubs/wandb.py stands in
for W&B (on PYTHONPATH when side_by_side.sh runs them), so no edit is needed for that.

Usage: python3 tools/gpu/patch_peers.py .gpukit/peers
"""

from __future__ import annotations

import sys
from pathlib import Path

GYM_VECTOR = [
    "cleanrl/td3_continuous_action.py",
    "cleanrl/sac_continuous_action.py",
    "cleanrl/ppo_continuous_action.py",
    "cleanrl/dqn_atari.py",
    "leanrl/td3_continuous_action_torchcompile.py",
    "leanrl/sac_continuous_action_torchcompile.py",
    "leanrl/ppo_continuous_action_torchcompile.py",
]
FINAL_OBS = [
    "cleanrl/td3_continuous_action.py",
    "cleanrl/sac_continuous_action.py",
    "cleanrl/dqn_atari.py",
    "leanrl/td3_continuous_action_torchcompile.py",
    "leanrl/sac_continuous_action_torchcompile.py",
]
PPO_CONTINUOUS = ["cleanrl/ppo_continuous_action.py", "leanrl/ppo_continuous_action_torchcompile.py"]
ENVPOOL = ["cleanrl/ppo_atari_envpool.py", "leanrl/ppo_atari_envpool_torchcompile.py"]

# gymnasium 1.x's vector API for scripts written for 0.29, (why, old text, new text); benchmarks/peers/run.py patches
# CleanRL's ppo.py with these two as well
SAME_STEP_AUTORESET = (
    "gymnasium 1.x resets a finished env on the NEXT step by default (a step of no reward after every episode, which "
    "the scripts would learn from); SAME_STEP restores the 0.29 behaviour they were written for (reset within the step, "
    "final observation and info in `infos`)",
    "gym.vector.SyncVectorEnv(",
    "gym.vector.SyncVectorEnv(autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, env_fns=",
)
FINAL_INFO_AS_LIST = (
    "gymnasium 1.x gives infos['final_info'] as one dict of per-env arrays (mask '_episode'), not a list of "
    "per-env dicts: rebuild the list of finished envs' {'episode': {...}} that the loop body reads",
    'for info in infos["final_info"]:',
    'for info in [{"episode": {k: v[i] for k, v in infos["final_info"]["episode"].items()}}'
    ' for i in np.flatnonzero(infos["final_info"].get("_episode", []))]:',
)

# (why, files, old text, new text)
EDITS = [
    (SAME_STEP_AUTORESET[0], GYM_VECTOR, *SAME_STEP_AUTORESET[1:]),
    (
        "gymnasium 1.x renamed infos['final_observation'] to infos['final_obs']",
        FINAL_OBS,
        '"final_observation"]',
        '"final_obs"]',
    ),
    (
        "the same rename; and LeanRL assigns the final observations selected by the truncation mask whenever an episode "
        "ends, which fails on a termination (Hopper falls; its default HalfCheetah never terminates): only on truncation",
        ["leanrl/td3_continuous_action_torchcompile.py"],
        '"final_observation" in infos',
        '"final_obs" in infos and truncations.any()',
    ),
    (FINAL_INFO_AS_LIST[0], GYM_VECTOR, *FINAL_INFO_AS_LIST[1:]),
    (
        "gymnasium 1.x TransformObservation takes the new observation space as a third argument",
        PPO_CONTINUOUS,
        "gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10))",
        "gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)",
    ),
    (
        "gymnasium 1.x no longer registers the ALE ids by itself: ale-py must be registered",
        ["cleanrl/dqn_atari.py"],
        "import gymnasium as gym\n",
        "import gymnasium as gym\nimport ale_py\n\ngym.register_envs(ale_py)\n",
    ),
    (
        "gymnasium 1.x renamed GrayScaleObservation to GrayscaleObservation",
        ["cleanrl/dqn_atari.py"],
        "gym.wrappers.GrayScaleObservation(env)",
        "gym.wrappers.GrayscaleObservation(env)",
    ),
    (
        "gymnasium 1.x renamed FrameStack to FrameStackObservation",
        ["cleanrl/dqn_atari.py"],
        "gym.wrappers.FrameStack(env, 4)",
        "gym.wrappers.FrameStackObservation(env, 4)",
    ),
    (
        "envpool 1.x speaks gymnasium only (env_type 'gym' is gone; gym 0.x does not import with numpy 2)",
        ENVPOOL,
        "\nimport gym\n",
        "\nimport gymnasium as gym\n",
    ),
    ("envpool 1.x speaks gymnasium only", ENVPOOL, 'env_type="gym",', 'env_type="gymnasium",'),
    (
        "envpool 1.x envs are gymnasium VectorEnvs whose num_envs and single spaces are read-only properties already",
        ENVPOOL,
        "    envs.num_envs = args.num_envs\n    envs.single_action_space = envs.action_space\n"
        "    envs.single_observation_space = envs.observation_space\n",
        "",
    ),
    (
        "gymnasium 1.x wrappers forward no unknown attributes (single_action_space, ...); a VectorWrapper forwards "
        "those of a vector env, and its num_envs is read-only",
        ENVPOOL,
        "class RecordEpisodeStatistics(gym.Wrapper):",
        "class RecordEpisodeStatistics(gym.vector.VectorWrapper):",
    ),
    (
        "(same edit: num_envs comes from the VectorWrapper)",
        ENVPOOL,
        '        self.num_envs = getattr(env, "num_envs", 1)\n',
        "",
    ),
    (
        "a gymnasium reset returns (obs, info); the script's wrapper keeps returning obs alone",
        ENVPOOL,
        "observations = super().reset(**kwargs)",
        "observations, _ = super().reset(**kwargs)",
    ),
    (
        "a gymnasium step returns terminated and truncated apart; the script's wrapper keeps its 4-tuple with done = either",
        ENVPOOL,
        "observations, rewards, dones, infos = super().step(action)",
        "observations, rewards, terminations, truncations, infos = super().step(action)\n"
        "        dones = terminations | truncations",
    ),
    (
        "LeanRL's policy module returns (action, log_prob, mean) under one out_key; tensordict >= 0.10 refuses more "
        "outputs than out_keys (older versions kept the first): hand it the action alone, as before",
        ["leanrl/sac_continuous_action_torchcompile.py"],
        'TensorDictModule(actor_detach.get_action, in_keys=["observation"], out_keys=["action"])',
        'TensorDictModule(lambda obs: actor_detach.get_action(obs)[0], in_keys=["observation"], out_keys=["action"])',
    ),
    (
        "LeanRL replaces Categorical.logits/probs by read-only properties to work around a torch bug of 2024 (its PR "
        "138080); current torch's Categorical assigns them in __init__, which the read-only property refuses",
        ["leanrl/ppo_atari_envpool_torchcompile.py"],
        'Categorical.logits = property(Categorical.__dict__["logits"].wrapped)\n'
        'Categorical.probs = property(Categorical.__dict__["probs"].wrapped)\n',
        "",
    ),
]


def main(root: Path) -> None:
    for why, files, old, new in EDITS:
        for name in files:
            path = root / name
            text = path.read_text()
            if old not in text:
                sys.exit(f"patch_peers: {name}: text not found, upstream changed? {old!r}")
            path.write_text(text.replace(old, new))
        print(f"{', '.join(Path(name).stem for name in files)}: {why}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
