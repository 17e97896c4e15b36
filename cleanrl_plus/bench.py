"""`cleanrl-plus bench <agent>`: speed of the real training loop after warm-up (env steps/s, updates/s)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import shlex
import tempfile
from typing import Literal

import tyro

from cleanrl_plus.errors import UserError

AGENTS = {"td3": "agents.td3", "sac_simba": "agents.sac_simba", "ddqn": "agents.ddqn"}


@dataclasses.dataclass
class BenchArgs:
    agent: tyro.conf.Positional[Literal["td3", "sac_simba", "ddqn"]]
    """which agent's training loop to time"""
    env_id: str = "Hopper-v5"
    """environment to run"""
    steps: int = 3_000
    """timed environment steps after warm-up (learning is on for all of them)"""
    warmup: int = 1_000
    """untimed random-action steps that fill the replay before learning starts"""
    num_envs: int = 1
    """parallel environments"""
    threads: int = 0
    """torch CPU threads (0 = the agents' default, min(2, cores))"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """device for networks, replay and env tensors"""
    env_backend: Literal["auto", "atari", "envpool"] = "auto"
    """env backend for agents that choose one (ddqn): 'envpool' runs ALE ids in envpool"""
    buffer_size: int = 0
    """replay capacity (0 = the agent's default for the env; DDQN's 1M Atari transitions take 14.1 GB)"""
    seed: int = 1
    """seed"""
    agent_flags: str = ""
    """extra flags for the agent, e.g. --agent-flags='--network mlp --updates-per-step 1'"""
    json_out: bool = False
    """print the result as one JSON line"""


def bench(args: BenchArgs) -> dict:
    module = importlib.import_module(AGENTS[args.agent])
    with tempfile.TemporaryDirectory() as runs_dir:
        settings = dict(
            total_timesteps=args.warmup + args.steps, learning_starts=args.warmup,
            num_envs=args.num_envs, threads=args.threads, device=args.device, seed=args.seed,
            eval_every=0, eval_episodes=1, checkpoint_every=0, log_every=1_000, runs_dir=runs_dir, progress=False,
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
        "agent": args.agent, "env_id": args.env_id, "num_envs": args.num_envs, "device": result["device"],
        "threads": result["threads"], "timed_steps": args.steps,
        "env_steps_per_second": round(result["sps_learning"], 1),
        "updates_per_second": round(result["updates_per_second"], 1), "agent_flags": args.agent_flags,
    }
    if "frames" in result:  # Atari: 4 emulator frames per agent step (dm-control: action repeat)
        report["env_frames_per_second"] = round(result["sps_learning"] * result["frames"] / result["global_step"], 1)
        report["env_backend"] = args.env_backend
    return report


def main(argv: list[str] | None = None) -> dict:
    args = tyro.cli(BenchArgs, args=argv)
    result = bench(args)
    if args.json_out:
        print(json.dumps(result))
    else:
        line = (
            f"{result['agent']} on {result['env_id']} ({result['num_envs']} env, {result['device']}, {result['threads']} threads): "
            f"{result['env_steps_per_second']:.1f} env steps/s, {result['updates_per_second']:.1f} updates/s"
        )
        if "env_frames_per_second" in result:
            line += f", {result['env_frames_per_second']:.1f} env frames/s ({args.env_backend} backend)"
        print(f"{line} over {result['timed_steps']} steps after {args.warmup} warm-up steps {args.agent_flags}".rstrip())
    return result
