"""`cleanrl-plus bench <agent>`: speed of the real training loop after warm-up (env steps/s, updates/s).

`cleanrl-plus bench env --env-id ... --num-envs N` times the environment alone with random actions drawn on
the env's device (the throughput ceiling an agent on that backend can reach)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shlex
import tempfile
import time
from typing import Literal

import gymnasium as gym
import torch
import tyro

from cleanrl_plus.errors import UserError
from cleanrl_plus.registry import AGENTS, agent_module


@dataclasses.dataclass
class BenchArgs:
    agent: tyro.conf.Positional[Literal[(*AGENTS, "env")]]
    """which agent's training loop to time ('env': the environment alone, random actions)"""
    env_id: str = "Hopper-v5"
    """environment to run"""
    steps: int = 3_000
    """timed environment steps after warm-up (learning is on for all of them)"""
    warmup: int = 1_000
    """off-policy agents: untimed random-action steps that fill the replay before learning starts (on-policy: unused)"""
    burnin: int = 0
    """untimed learning steps before the timed ones (LeanRL's measure_burnin): where --compile compiles and
    --cudagraphs captures; 0 times every learning step"""
    num_envs: int = 1
    """parallel environments"""
    threads: int = 0
    """torch CPU threads (0 = the agents' default, min(2, cores))"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """device for networks, replay and env tensors"""
    env_backend: Literal["auto", "gymnasium", "atari", "envpool", "torch", "dmc", "warp"] = "auto"
    """env backend: for `bench env`, any; for agents that choose one (ddqn, ppo, gtr), atari or envpool (ALE ids in envpool)"""
    buffer_size: int = 0
    """replay capacity (0 = the agent's default for the env; DDQN's 1M Atari transitions take 14.1 GB)"""
    seed: int = 1
    """seed"""
    agent_flags: str = ""
    """extra flags for the agent, e.g. --agent-flags='--network mlp --updates-per-step 1'"""
    json_out: bool = False
    """print the result as one JSON line"""


def bench_env(args: BenchArgs) -> dict:
    import envs
    from cleanrl_plus.run import resolve_device, resolve_threads

    device = resolve_device(args.device)
    torch.set_num_threads(resolve_threads(args.threads))
    env = envs.make(args.env_id, num_envs=args.num_envs, seed=args.seed, device=device, backend=args.env_backend)
    space = env.single_action_space
    if isinstance(space, gym.spaces.Discrete):

        def random_actions() -> torch.Tensor:
            return torch.randint(int(space.n), (env.num_envs,), device=device)
    else:
        low = torch.as_tensor(space.low, device=device, dtype=torch.float32)
        high = torch.as_tensor(space.high, device=device, dtype=torch.float32)

        def random_actions() -> torch.Tensor:
            return low + (high - low) * torch.rand((env.num_envs, *space.shape), device=device)

    def run(iterations: int) -> float:
        start = time.perf_counter()
        for _ in range(iterations):
            step = env.step(random_actions())
        step.reward.sum().item()  # wait for the device to finish
        return time.perf_counter() - start

    env.reset()
    warmup_iterations = max(args.warmup // env.num_envs, 10)
    run(warmup_iterations)
    iterations = max(-(-args.steps // env.num_envs), 1)
    elapsed = run(iterations)
    env.close()
    return {
        "agent": "env",
        "env_id": args.env_id,
        "num_envs": env.num_envs,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "timed_steps": iterations * env.num_envs,
        "warmup_steps": warmup_iterations * env.num_envs,
        "env_steps_per_second": round(iterations * env.num_envs / elapsed, 1),
        "updates_per_second": 0.0,
        "agent_flags": "",
    }


def bench(args: BenchArgs) -> dict:
    if args.agent == "env":
        return bench_env(args)
    module = agent_module(args.agent)
    off_policy = any(field.name == "learning_starts" for field in dataclasses.fields(module.Args))
    warmup = args.warmup if off_policy else 0  # on-policy agents learn from the first rollout: all steps are timed
    with tempfile.TemporaryDirectory() as runs_dir, _burnin(args.burnin):
        settings = dict(
            total_timesteps=warmup + args.burnin + args.steps,
            num_envs=args.num_envs,
            threads=args.threads,
            device=args.device,
            seed=args.seed,
            eval_every=0,
            eval_episodes=1,
            checkpoint_every=0,
            log_every=1_000,
            runs_dir=runs_dir,
            progress=False,
            **({"learning_starts": warmup} if off_policy else {}),
        )
        if args.buffer_size:
            settings["buffer_size"] = args.buffer_size
        if args.env_backend != "auto":
            if not hasattr(module.Args, "env_backend"):
                raise UserError(f"--env-backend: {args.agent} has no env backend choice")
            settings["env_backend"] = args.env_backend
        agent_args = module.Args.defaults_for(args.env_id, **settings)
        if args.agent_flags:
            agent_args = tyro.cli(module.Args, args=shlex.split(args.agent_flags), default=agent_args)
        result = module.main(agent_args)
    report = {
        "agent": args.agent,
        "env_id": args.env_id,
        "num_envs": args.num_envs,
        "device": result["device"],
        "threads": result["threads"],
        "timed_steps": args.steps,
        "warmup_steps": warmup,
        "burnin_steps": args.burnin,
        "env_steps_per_second": round(result["sps_learning"], 1),
        "updates_per_second": round(result["updates_per_second"], 1),
        "agent_flags": args.agent_flags,
    }
    if "frames" in result:  # Atari: 4 emulator frames per agent step (dm-control: action repeat)
        report["env_frames_per_second"] = round(result["sps_learning"] * result["frames"] / result["global_step"], 1)
        report["env_backend"] = args.env_backend
    return report


@contextlib.contextmanager
def _burnin(steps: int):
    """The training loop's learning clock starts over `steps` env steps after learning begins (cleanrl_plus/session.py)."""
    from cleanrl_plus.session import TrainingSession

    TrainingSession.burnin_steps = steps
    try:
        yield
    finally:
        TrainingSession.burnin_steps = 0


def parse(argv: list[str] | None = None) -> BenchArgs:
    return tyro.cli(BenchArgs, args=argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    result = bench(args)
    if args.json_out:
        print(json.dumps(result))
    elif args.agent == "env":
        print(
            f"env {result['env_id']} ({result['num_envs']} envs, {result['device']}, {result['threads']} threads): "
            f"{result['env_steps_per_second']:,.0f} env steps/s with random actions over {result['timed_steps']} steps"
        )
    else:
        line = (
            f"{result['agent']} on {result['env_id']} ({result['num_envs']} env, {result['device']}, {result['threads']} "
            "threads): "
            f"{result['env_steps_per_second']:.1f} env steps/s, {result['updates_per_second']:.1f} updates/s"
        )
        if "env_frames_per_second" in result:
            line += f", {result['env_frames_per_second']:.1f} env frames/s ({args.env_backend} backend)"
        burnin = f" and {result['burnin_steps']} burn-in steps" if result["burnin_steps"] else ""
        timed = f"over {result['timed_steps']} steps after {result['warmup_steps']} warm-up steps{burnin}"
        print(f"{line} {timed} {args.agent_flags}".rstrip())
    return result
