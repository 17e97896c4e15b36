"""How often does a policy trained on C-CartPole's level 0 survive a fresh level's offset, and can it still learn there?

For each saved run (its checkpoint: the policy at the run's end), M offsets ε ~ N(0, σ²I) (σ = 2, the setting's), one
sampled episode each from the policy on CartPole-v1 observing o + ε (capped at 400 steps, as the setting cuts
episodes). Prints per run the share of offsets under which the episode lasts ≥ 100 steps (the pole kept up) and the
share whose first state already has a saturated softmax (entropy < 1e-6: a policy whose clipped surrogate, entropy
bonus and churn term have no gradient left), and per group their means. Run it on runs stopped at the end of level 0:

    python agents/ppo.py --env-id continual:cchain-cartpole --seeds 1 2 3 4 5 6 --total-timesteps 160000 \
        --runs-dir runs/level0 --exp-name ppo
    python benchmarks/cchain_offset_survival.py runs/level0 --offsets 200
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents import ppo  # noqa: E402
from cleanrl_plus.checkpoint import CHECKPOINT_NAME, load_checkpoint  # noqa: E402
from cleanrl_plus.config import load_saved_args  # noqa: E402
from cleanrl_plus.normalization import ObservationNormalizer  # noqa: E402
from cleanrl_plus.policy import make_actor_critic  # noqa: E402

SURVIVES = 100  # steps: the pole kept up, against the 9–10 steps of a policy that pushes one way
SATURATED = 1e-6  # entropy (nats) below which the softmax is 0/1 for PPO's gradients


def survival(run_dir: Path, offsets: np.ndarray, env_seed: int, cap: int = 400) -> tuple[float, float]:
    """(share of offsets with an episode ≥ SURVIVES steps, share whose first state's entropy < SATURATED)."""
    args = load_saved_args(ppo.Args, run_dir)
    state = load_checkpoint(run_dir / CHECKPOINT_NAME, map_location=torch.device("cpu"))
    shape, space = (offsets.shape[1],), gym.spaces.Discrete(2)
    agent = make_actor_critic(1, shape, space, args.hidden_sizes, *reversed(ppo.network_settings(args)), args.init)
    ppo.rebuild_injected_heads(agent, state["agent"]).load_state_dict(state["agent"])
    normalizer = ObservationNormalizer(shape, args.normalize_obs)
    normalizer.load_state_dict(state["obs_normalizer"])
    env = gym.make_vec("CartPole-v1", num_envs=len(offsets), vectorization_mode="sync", max_episode_steps=cap)
    obs, _ = env.reset(seed=env_seed)
    alive, length, first_entropy = np.ones(len(offsets), bool), np.zeros(len(offsets), int), None
    generator = torch.Generator().manual_seed(env_seed)
    with torch.no_grad():
        for _ in range(cap):
            logits = agent.policy.net(normalizer(torch.as_tensor(obs + offsets, dtype=torch.float32)[None]))[0]
            probabilities = torch.softmax(logits, dim=-1)
            if first_entropy is None:
                first_entropy = torch.distributions.Categorical(probs=probabilities).entropy().numpy()
            actions = torch.multinomial(probabilities, 1, generator=generator)[:, 0].numpy()
            obs, _, terminated, truncated, _ = env.step(actions)
            length += alive
            alive &= ~(terminated | truncated)  # only each env's first episode counts
            if not alive.any():
                break
    env.close()
    return float((length >= SURVIVES).mean()), float((first_entropy < SATURATED).mean())


def main(argv: list[str] | None = None) -> dict[str, list[tuple[str, float, float]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir", type=Path, help="folder of PPO runs on continual:cchain-cartpole with checkpoints")
    parser.add_argument("--offsets", type=int, default=200, help="offsets drawn per run (the same for every run)")
    parser.add_argument("--sigma", type=float, default=2.0, help="the offsets' standard deviation (the setting's 2)")
    parser.add_argument("--seed", type=int, default=12345, help="seed of the offsets, the starts and the actions")
    options = parser.parse_args(argv)
    runs = sorted(p for p in options.runs_dir.glob("continual-cchain-cartpole__*") if (p / CHECKPOINT_NAME).is_file())
    if not runs or options.offsets < 1:
        parser.exit(2, f"error: no runs with a checkpoint in {options.runs_dir} (or --offsets < 1) — pass runs/level0\n")
    offsets = np.random.default_rng(options.seed).normal(0.0, options.sigma, (options.offsets, 4)).astype(np.float32)
    groups: dict[str, list[tuple[str, float, float]]] = {}
    for run_dir in runs:
        survived, saturated = survival(run_dir, offsets, options.seed)
        groups.setdefault(run_dir.name.split("__")[1], []).append((run_dir.name, survived, saturated))
        print(f"{run_dir.name}: survives {survived:.3f} of offsets, saturated at the first state {saturated:.3f}")
    for group, rows in groups.items():
        survived = float(np.mean([row[1] for row in rows]))
        print(
            f"{group}: {len(rows)} runs, mean share survived {survived:.3f}, saturated "
            f"{np.mean([row[2] for row in rows]):.3f}; P(no run of 6 survives one level) ≈ {(1 - survived) ** 6:.2f}"
        )
    return groups


if __name__ == "__main__":
    main()
