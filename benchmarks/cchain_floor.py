"""The least CPU time a group's updates can take in the C-CHAIN setting, from this machine's matrix-product and Adam
speeds: the floor under issue 37's 20-CPU-minute target.

A C-CHAIN group's update (cleanrl_plus/recipes/ppo-cchain-control.toml: one env per member, 800 steps per iteration, 25
minibatches of 32 × 5 epochs, separate 3 × 256 policy and value MLPs) is a batched product per layer forward, and two
backward (∂W, and ∂X for every layer but the first), then one fused Adam step over every member's parameters. This
times each of those products at the group's shapes and the fused Adam step on its parameter count, one thread, and
multiplies by the run's update count. What it leaves out (elementwise work, the losses, acting, the env, GAE) only adds,
so a measured run can approach the printed floor, never beat it.

    python benchmarks/cchain_floor.py --members 6 --env-id continual:cchain-acrobot
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import envs  # noqa: E402
from agents import ppo  # noqa: E402
from cleanrl_plus import recipes  # noqa: E402
from cleanrl_plus.nn import EnsembleLinear  # noqa: E402


def cpu_seconds_per_call(function: Callable[[], object], calls: int) -> float:
    """This thread's CPU seconds per call of `function`, after a few untimed calls."""
    for _ in range(max(1, calls // 20)):
        function()
    start = time.thread_time()
    for _ in range(calls):
        function()
    return (time.thread_time() - start) / calls


def product_seconds(layer: EnsembleLinear, batch: int, first: bool, calls: int) -> float:
    """CPU seconds of one layer's products in one update: forward, ∂W and (not for the first layer) ∂X."""
    members, fan_in, fan_out = layer.weight.shape
    x, weight = torch.randn(members, batch, fan_in), layer.weight.detach()
    grad_out = torch.randn(members, batch, fan_out)
    seconds = cpu_seconds_per_call(lambda: torch.baddbmm(layer.bias.detach(), x, weight), calls)
    seconds += cpu_seconds_per_call(lambda: torch.bmm(x.transpose(1, 2), grad_out), calls)
    if not first:
        seconds += cpu_seconds_per_call(lambda: torch.bmm(grad_out, weight.transpose(1, 2)), calls)
    return seconds


def adam_seconds(parameters: list[torch.Tensor], calls: int) -> float:
    """CPU seconds of one fused Adam step (the optimiser the agents use on a CPU) over these parameters' sizes."""
    copies = [torch.nn.Parameter(p.detach().clone()) for p in parameters]
    for p in copies:
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.Adam(copies, lr=1e-3, fused=True)
    return cpu_seconds_per_call(optimizer.step, calls)


def floor(env_id: str, members: int, calls: int) -> dict[str, float]:
    """{products, adam}: CPU seconds per update; {updates}; {minutes}: the whole run's floor in CPU minutes."""
    args = ppo.Args.defaults_for(env_id)
    env = envs.make(env_id)
    agent = ppo.make_agent(members, env.single_observation_space.shape, env.single_action_space, args)
    env.close()
    batch = args.num_steps * args.num_envs // args.num_minibatches
    products = 0.0
    for network in (agent.policy, agent.critic):
        layers = [m for m in network.modules() if isinstance(m, EnsembleLinear)]
        products += sum(product_seconds(layer, batch, i == 0, calls) for i, layer in enumerate(layers))
    adam = adam_seconds(list(agent.parameters()), max(1, calls // 4))
    iterations = -(-args.total_timesteps // (args.num_steps * args.num_envs))
    updates = iterations * args.update_epochs * args.num_minibatches
    return dict(products=products, adam=adam, updates=updates, minutes=updates * (products + adam) / 60)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="continual:cchain-acrobot", help="a continual:cchain-* id")
    parser.add_argument("--members", type=int, default=6, help="seeds in the group")
    parser.add_argument("--calls", type=int, default=400, help="timed calls of each product")
    options = parser.parse_args(argv)
    recipe = recipes.find("ppo", options.env_id, ppo.Args)
    if recipe is None or recipe.name != "ppo-cchain-control":
        parser.exit(2, f"error: {options.env_id} is not a C-CHAIN setting: pass a continual:cchain-* id\n")
    torch.set_num_threads(1)
    result = floor(options.env_id, options.members, options.calls)
    print(
        f"{options.env_id}, {options.members} members, one thread: products {result['products'] * 1e3:.2f} ms "
        f"+ fused Adam {result['adam'] * 1e3:.2f} ms per update × {result['updates']:,} updates "
        f"= {result['minutes']:.1f} CPU-minutes at the least"
    )


if __name__ == "__main__":
    main()
