"""The JAX arms of benchmarks/peers/run.py: one process trains every seed at once, `jax.jit(jax.vmap(train))(keys)`,
and writes each seed's return to a JSON file. run.py starts it under /usr/bin/time with the JAX interpreter
(--jax-python); it needs jax and the peer, not this project.

    python benchmarks/peers/jax_arm.py rejax --seeds 1 2 3 --steps 99840 --out returns.json
    python benchmarks/peers/jax_arm.py purejaxrl --script /tmp/peers/purejaxrl/ppo.py --seeds 1 2 3 --steps 99840 --out r.json

rejax: its PPO on gymnax's CartPole-v1 with its config set to the recipe where it has a setting (run.py's README lists
what it cannot set); the return is its own evaluation at the end (128 episodes of the sampled policy), averaged.
PureJaxRL: `make_train(config)` of its ppo.py with the recipe as config; the return is the mean of the last 10
training episodes (its LogWrapper's returned_episode_returns).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import LAST_EPISODES, RECIPE  # noqa: E402  (stdlib only: the recipe every arm follows)


def train_rejax(seeds: list[int], steps: int) -> list[float]:
    import jax
    import numpy as np
    from rejax import PPO

    iterations = steps // (RECIPE["num_envs"] * RECIPE["num_steps"])
    updates_per_iteration = RECIPE["update_epochs"] * RECIPE["num_minibatches"]
    # CleanRL's annealing, lr·(1 − (i − 1)/I) per iteration, as an optax schedule over minibatch updates: rejax's
    # learning_rate reaches optax.adam unchanged, which takes a schedule as readily as a number
    schedule = lambda count: RECIPE["learning_rate"] * (1 - (count // updates_per_iteration) / iterations)
    algo = PPO.create(
        env="CartPole-v1",
        total_timesteps=steps,
        eval_freq=steps,  # one evaluation, at the end
        skip_initial_evaluation=True,
        num_envs=RECIPE["num_envs"],
        num_steps=RECIPE["num_steps"],
        num_minibatches=RECIPE["num_minibatches"],
        num_epochs=RECIPE["update_epochs"],
        learning_rate=schedule,
        gamma=RECIPE["gamma"],
        gae_lambda=RECIPE["gae_lambda"],
        clip_eps=RECIPE["clip_coef"],
        ent_coef=RECIPE["ent_coef"],
        vf_coef=RECIPE["vf_coef"],
        max_grad_norm=RECIPE["max_grad_norm"],  # rejax clips each gradient element (optax.clip), not the norm
        normalize_observations=False,
        normalize_rewards=False,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)},
    )
    keys = jax.numpy.stack([jax.random.PRNGKey(seed) for seed in seeds])
    _, (lengths, returns) = jax.block_until_ready(jax.jit(jax.vmap(algo.train))(keys))
    assert np.asarray(returns).shape[:2] == (len(seeds), 1), np.asarray(returns).shape  # (seed, evaluation, episode)
    return np.asarray(returns)[:, -1].mean(axis=1).tolist()


def train_purejaxrl(script: Path, seeds: list[int], steps: int) -> list[float]:
    import jax
    import numpy as np

    sys.path.insert(0, str(script.parent))  # its ppo.py imports `wrappers` from beside it
    for name in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training", "navix"):
        try:  # wrappers.py imports Brax and Navix at the top for other tasks; CartPole needs neither
            importlib.import_module(name)
        except ImportError:
            stub = sys.modules[name] = types.ModuleType(name)
            stub.envs = stub.EpisodeWrapper = stub.AutoResetWrapper = None
    spec = importlib.util.spec_from_file_location("purejaxrl_ppo", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = {
        "LR": RECIPE["learning_rate"],
        "NUM_ENVS": RECIPE["num_envs"],
        "NUM_STEPS": RECIPE["num_steps"],
        "TOTAL_TIMESTEPS": steps,
        "UPDATE_EPOCHS": RECIPE["update_epochs"],
        "NUM_MINIBATCHES": RECIPE["num_minibatches"],
        "GAMMA": RECIPE["gamma"],
        "GAE_LAMBDA": RECIPE["gae_lambda"],
        "CLIP_EPS": RECIPE["clip_coef"],
        "ENT_COEF": RECIPE["ent_coef"],
        "VF_COEF": RECIPE["vf_coef"],
        "MAX_GRAD_NORM": RECIPE["max_grad_norm"],
        "ACTIVATION": "tanh",
        "ENV_NAME": "CartPole-v1",
        "ANNEAL_LR": True,
        "DEBUG": False,
    }
    keys = jax.numpy.stack([jax.random.PRNGKey(seed) for seed in seeds])
    metrics = jax.block_until_ready(jax.jit(jax.vmap(module.make_train(config)))(keys))["metrics"]
    ended = np.asarray(metrics["returned_episode"]).reshape(len(seeds), -1)  # (seed, iteration · step · env), in order
    returns = np.asarray(metrics["returned_episode_returns"]).reshape(len(seeds), -1)
    return [float(seed_returns[seed_ended][-LAST_EPISODES:].mean()) for seed_returns, seed_ended in zip(returns, ended)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("peer", choices=("rejax", "purejaxrl"))
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--script", type=Path, help="PureJaxRL's ppo.py, wrappers.py beside it")
    args = parser.parse_args()
    if args.peer == "rejax":
        returns = train_rejax(args.seeds, args.steps)
    else:
        returns = train_purejaxrl(args.script, args.seeds, args.steps)
    args.out.write_text(json.dumps({"returns": returns}))


if __name__ == "__main__":
    main()
