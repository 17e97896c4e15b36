"""The agents learn on real tasks. Seeds run two at a time, one torch thread each (CI has 2 cores).

Threshold: docs/testing.md (TD3 Pendulum-v1 ≥ −300 by 20k steps, ≥ 2 of 3
seeds); we ask for it by 10k steps. CleanRL's defaults except a shorter random warm-up (1k steps instead of
25k) so that the budget is spent learning. Measured (eval every 2k, 10 episodes): seed 1 −1459, −1205, −408,
−337, −199; seed 2 −1486, −1224, −617, −222, −267; seed 3 −1528, −1250, −427, −429, −188.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

import pytest

from cleanrl_plus.distributional import CriticArgs


def _train(
    agent: str, env_id: str, seed: int, total_timesteps: int, eval_every: int, runs_dir: str, overrides: dict
) -> list[tuple[int, float]]:
    import importlib

    module = importlib.import_module(f"agents.{agent}")
    settings = dict(
        seed=seed,
        total_timesteps=total_timesteps,
        eval_every=eval_every,
        eval_episodes=10,
        threads=1,
        runs_dir=runs_dir,
        progress=False,
        checkpoint_every=0,
    )
    args = module.Args.defaults_for(env_id, **(settings | overrides))
    return module.main(args)["eval_history"]


def seeds_passing(
    agent: str,
    env_id: str,
    total_timesteps: int,
    eval_every: int,
    threshold: float,
    runs_dir: str,
    overrides: dict | None = None,
    needed: int = 2,
    seeds=(1, 2, 3),
) -> dict:
    """Train seeds two at a time; start the next seed only while `needed` passes are still open and reachable."""
    results: dict[int, list[tuple[int, float]]] = {}
    waiting = list(seeds)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        running: dict = {}
        while True:
            passed = _count_passing(results, threshold)
            still_possible = passed + len(running) + len(waiting) >= needed
            if passed >= needed or not still_possible:
                break
            while waiting and len(running) < 2 and passed + len(running) < needed:
                seed = waiting.pop(0)
                running[pool.submit(_train, agent, env_id, seed, total_timesteps, eval_every, runs_dir, overrides or {})] = (
                    seed
                )
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                results[running.pop(future)] = future.result()
        for future in running:
            results[running[future]] = future.result()  # never leave a worker behind
    for seed, history in sorted(results.items()):
        print(f"{agent} {env_id} seed {seed}: " + ", ".join(f"{step}: {ret:.0f}" for step, ret in history))
    return results


def _count_passing(results: dict, threshold: float) -> int:
    return sum(max(r for _, r in history) >= threshold for history in results.values())


@pytest.mark.slow  # 151 s in the default suite on the 2-core box (2026-11-28): above its 20-minute budget
def test_td3_reaches_minus_300_on_pendulum_within_10k_steps(tmp_path):
    results = seeds_passing("td3", "Pendulum-v1", 10_000, 2_000, -300.0, str(tmp_path), dict(learning_starts=1_000))
    assert _count_passing(results, -300.0) >= 2, results


@pytest.mark.slow  # 311 s in the default suite on the 2-core box (2026-11-28): above its 20-minute budget
def test_sac_simba_reaches_minus_300_on_pendulum_within_6k_steps(tmp_path):
    """SimBa's SAC recipe (UTD 2, AdamW, α₀ = 0.01, one critic on a never-terminating task, RSNorm) with a
    smaller critic (128 wide × 1 block instead of 512 × 2) so that it fits CI's CPU budget.
    Measured (eval every 1k): seed 1 −1503, −1007, −1070, −850, −196, −203; seed 2 −1471, −432, −222, −190, −210, −207."""
    results = seeds_passing(
        "sac_simba",
        "Pendulum-v1",
        6_000,
        1_000,
        -300.0,
        str(tmp_path),
        dict(critic_width=128, critic_blocks=1, learning_starts=1_000),
    )
    assert _count_passing(results, -300.0) >= 2, results


# TD3's many-env recipe (docs/agents/td3.md) at CPU scale: 32 torch Pendulum envs, 2 updates of 512 per vector step,
# τ 0.1, 3-step returns, C51 on [−1200, 0], normalised observations, per-env noise, AdamW; 64-64 networks for CI
TD3_MANY_ENVS = dict(
    num_envs=32,
    batch_size=512,
    gradient_steps=2,
    learning_starts=320,
    tau=0.1,
    buffer_size=100_000,
    n_step=3,
    critic=CriticArgs(distributional=True, v_min=-1200.0, v_max=0.0),
    normalize_obs=True,
    exploration_noise_min=0.001,
    exploration_noise_max=0.4,
    weight_decay=0.1,
    hidden_sizes=(64, 64),
)


def test_td3_many_env_recipe_with_n_step_and_c51_reaches_minus_300_on_pendulum_within_32k_steps(tmp_path):
    """Measured (eval every 4k, 10 episodes; ≥ −300 first at): seeds 1, 2, 3 at 32k, 24k, 24k (−269, −230, −279).
    The same recipe by 32k (best eval) with C51 but 1-step returns: −966, −324, −1077; with 3-step returns but scalar
    critics: −1205, −1137, −1405; with neither: −969, −1135 (seeds 1, 2). So the gate fails if either path stops
    helping. Gate: ≥ −300 within 32k steps in 2 of 3 seeds."""
    results = seeds_passing("td3", "torch:Pendulum-v1", 32_000, 4_000, -300.0, str(tmp_path), TD3_MANY_ENVS)
    assert _count_passing(results, -300.0) >= 2, results


# SAC's many-env recipe (docs/agents/sac_simba.md) at CPU scale: 32 torch Pendulum envs, 2 updates of 512 per vector step,
# τ 0.1, lr 1e-3 (actor, critic, temperature), 3-step returns, C51 on [−1200, 0], normalised observations, AdamW 1e-2;
# plain SAC's MLP at 64-64 for CI (one critic: Pendulum never terminates)
SAC_MANY_ENVS = dict(
    num_envs=32,
    batch_size=512,
    updates_per_step=2,
    learning_starts=320,
    tau=0.1,
    buffer_size=100_000,
    n_step=3,
    critic=CriticArgs(distributional=True, v_min=-1200.0, v_max=0.0),
    network="mlp",
    mlp_hidden_sizes=(64, 64),
    learning_rate=1e-3,
    alpha_learning_rate=1e-3,
)


@pytest.mark.slow  # 46–52 s on the contended 2-core box (two seeds of ≈ 20 s CPU each), above the default suite's 40 s
def test_sac_many_env_recipe_with_c51_reaches_minus_300_on_pendulum_within_24k_steps(tmp_path):
    """Measured (eval every 4k, 10 episodes; ≥ −300 first at): seeds 1, 2, 3 at 24k, 8k, 12k (−282, −222, −181). By 32k
    (best eval) with scalar critics and 3-step returns: −725, −691, −708; with neither: −695, −851, −804; with C51 and
    1-step returns: ≥ −300 at 16k in all three. So C51 is what SAC needs at this scale, n-step returns are not; the gate
    fails if C51 stops helping. Gate: ≥ −300 within 24k steps in 2 of 3 seeds."""
    results = seeds_passing("sac_simba", "torch:Pendulum-v1", 24_000, 4_000, -300.0, str(tmp_path), SAC_MANY_ENVS)
    assert _count_passing(results, -300.0) >= 2, results


# rl-zoo's PPO CartPole-v1 recipe (docs/agents/ppo.md): 8 envs × 32 steps, one
# minibatch of 256, 20 epochs, γ 0.98, λ 0.8, lr 1e-3 and clip 0.2 both annealed to 0, no value clipping,
# no normalisation; eval 20 episodes.
PPO_CARTPOLE = dict(
    num_envs=8,
    num_steps=32,
    num_minibatches=1,
    update_epochs=20,
    gae_lambda=0.8,
    gamma=0.98,
    learning_rate=1e-3,
    anneal_clip=True,
    clip_vloss=False,
    normalize_obs=False,
    normalize_reward=False,
    eval_episodes=20,
)


def test_ppo_reaches_475_on_cartpole_within_50k_steps_in_2_of_3_seeds(tmp_path):
    """On the AMD box every seed reached 475 by 50k (the gate was 3 of 3 there). On a Xeon, whose kernels round differently
    (a run's trajectory follows): seed 1 166, 216, 500, 500, 500; seed 2 peaks at 440 (20k) and ends at 442. Gate:
    ≥ 475 within 50k steps in 2 of 3 seeds, as the other gates of this file."""
    results = seeds_passing("ppo", "CartPole-v1", 50_000, 10_000, 475.0, str(tmp_path), PPO_CARTPOLE)
    assert _count_passing(results, 475.0) >= 2, results


def test_gtr_reaches_475_on_cartpole_within_50k_steps_in_all_3_seeds(tmp_path):
    """GTR's defaults (σ 0.2, β 1, J 4, η 0.5, penalty added to the clip) on the same recipe. Measured:
    seed 1 351, 425, 500, 500, 500; seed 2 237, 353, 448, 500, 500; seed 3 300, 397, 498, 500, 500."""
    results = seeds_passing("gtr", "CartPole-v1", 50_000, 10_000, 475.0, str(tmp_path), PPO_CARTPOLE, needed=3)
    assert _count_passing(results, 475.0) == 3, results


@pytest.mark.slow  # 72 s in the default suite on the 2-core box (2026-11-28): above its 20-minute budget
def test_ppo_balances_inverted_pendulum_within_32k_steps():
    """CleanRL's continuous-control defaults unchanged (1 env, 2048-step rollouts, obs/reward normalisation).
    Measured with this 32,768-step budget (eval at 10k, 20k, 30k, end): seed 1 84, 1000, 1000, 1000; seed 2 181,
    1000, 1000, 1000. With a 100k budget (slower lr annealing) all 3 seeds hold 1000 from 20–30k to 100k.
    Gate: ≥ 950 by 32,768 steps in 2 of 3 seeds."""
    import tempfile

    with tempfile.TemporaryDirectory() as runs_dir:
        results = seeds_passing("ppo", "InvertedPendulum-v5", 32_768, 10_000, 950.0, runs_dir)
    assert _count_passing(results, 950.0) >= 2, results


def test_ppo_learns_torch_native_cartpole(tmp_path):
    """The torch-native CartPole (envs/torch_classic.py) with the same rl-zoo recipe. Measured (eval at 10k, 20k,
    30k): seed 1 353, 281, 500; seed 2 151, 495, 500. Gate: ≥ 475 within 30k steps in 2 of 3 seeds."""
    results = seeds_passing("ppo", "torch:CartPole-v1", 30_000, 10_000, 475.0, str(tmp_path), PPO_CARTPOLE)
    assert _count_passing(results, 475.0) >= 2, results


# PPO's many-env CartPole recipe (docs/agents/ppo.md, "Many envs"): 256 torch envs × 16 steps, 4 epochs × 4 minibatches
# of 1,024, lr 3e-3 annealed, CleanRL's other defaults; evaluated once, at the end of a 65,536-step budget (16 iterations)
PPO_CARTPOLE_MANY_ENVS = dict(num_envs=256, num_steps=16, num_minibatches=4, update_epochs=4, learning_rate=3e-3)


def test_ppo_many_env_recipe_solves_torch_cartpole_within_65k_steps(tmp_path):
    """Measured (2026-11-24, CPU, final evaluation at 65,536 steps): seeds 1–4 all 500, 3.0–3.3 s a run. Gate: ≥ 475 in
    2 of 2 seeds. It fails when a path that only many envs exercise breaks: the normalisers' batched variance update,
    the reward scaler's per-env restart (tools/mutation/mutations.toml)."""
    results = seeds_passing("ppo", "torch:CartPole-v1", 65_536, 0, 475.0, str(tmp_path), PPO_CARTPOLE_MANY_ENVS, seeds=(1, 2))
    assert _count_passing(results, 475.0) == 2, results
