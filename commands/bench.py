"""`cleanrl-plus bench <agent>`: speed of the real training loop after warm-up (env steps/s, updates/s).

`cleanrl-plus bench env --env-id ... --num-envs N` times the environment alone with random actions drawn on
the env's device (the throughput ceiling an agent on that backend can reach).

`cleanrl-plus bench groups --agent ppo --seeds 20` times many seeds two ways side by side, as whole sweeps (evaluation,
logging and checkpoints included): one process per seed, then the seeds packed into groups of --members-per-process
(cleanrl_plus.members), the same seeds, flags and --workers; it prints runs per hour and their ratio.

`cleanrl-plus bench profile --agent ppo --seeds 10` trains one short group under torch's profiler and prints where its
CPU time goes, operator by operator: what a group can share (many small calls) against what it cannot (arithmetic)."""

from __future__ import annotations

import dataclasses
import json
import shlex
import tempfile
import time
from typing import Literal

import gymnasium as gym
import torch
import tyro

from cleanrl_plus.clocks import burn_in
from cleanrl_plus.flags import parse_flags
from cleanrl_plus.names import AGENTS, check_agent_name
from commands.agent_modules import agent_module
from envs.errors import UserError
from envs.ranges import AtLeastOne, Count, Seed


@dataclasses.dataclass
class BenchArgs:
    agent: tyro.conf.Positional[Literal[(*AGENTS, "env")]]
    """which agent's training loop to time ('env': the environment alone, random actions)"""
    env_id: str = "Hopper-v5"
    """environment to run"""
    steps: AtLeastOne = 3_000
    """timed environment steps after warm-up (learning is on for all of them)"""
    warmup: Count = 1_000
    """off-policy agents: untimed random-action steps that fill the replay before learning starts (on-policy: unused)"""
    burnin: Count = 0
    """untimed learning steps before the timed ones (LeanRL's measure_burnin): where --compile compiles and
    --cudagraphs captures; 0 times every learning step"""
    num_envs: AtLeastOne = 1
    """parallel environments"""
    threads: Count = 0
    """torch CPU threads (0 = the agents' default, min(2, cores))"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """device for networks, replay and env tensors"""
    env_backend: Literal["auto", "gymnasium", "atari", "envpool", "torch", "dmc", "warp"] = "auto"
    """env backend: for `bench env`, any; for agents that choose one (ddqn, ppo, gtr), atari or envpool (ALE ids in envpool)"""
    buffer_size: Count = 0
    """replay capacity (0 = the agent's default for the env; DDQN's 1M Atari transitions take 14.1 GB)"""
    seed: Seed = 1
    """seed"""
    agent_flags: str = ""
    """extra flags for the agent, e.g. --agent-flags='--network mlp --updates-per-step 1'"""
    json_out: bool = False
    """print the result as one JSON line"""


@dataclasses.dataclass
class SettingArgs:
    """One agent on one task with one set of flags: what `bench groups` and `bench profile` train."""

    agent: str = "ppo"
    """the agent (td3, sac_simba, ddqn, ppo, gtr)"""
    env_id: str = "continual:obs-offset:torch:CartPole-v1"
    """the task"""
    flags: str = ""
    """flags for every run (empty: `cleanrl-plus compare`'s PPO recipe for ppo/gtr, the agent's defaults otherwise)"""


@dataclasses.dataclass
class GroupBenchArgs(SettingArgs):
    seeds: AtLeastOne = 20
    """seeds, 1 … N, trained both ways"""
    members_per_process: tuple[AtLeastOne, ...] = (20,)
    """group sizes to time against one seed per process"""
    workers: AtLeastOne = 2
    """processes at a time, both ways (the cores they share)"""
    runs_dir: str = ""
    """keep the runs here (empty: a temporary folder, removed afterwards)"""
    json_out: bool = False
    """print the result as one JSON line"""


@dataclasses.dataclass
class ProfileArgs(SettingArgs):
    seeds: AtLeastOne = 10
    """members of the group, seeds 1 … N, trained in this process on one thread"""
    total_timesteps: AtLeastOne = 8_192
    """env steps of each member; keep it short: the profiler holds every operator call in memory until the run ends"""
    rows: AtLeastOne = 20
    """operators to list, the costliest first"""
    json_out: bool = False
    """print the result as one JSON line"""


def default_flags(agent: str) -> str:
    from commands.compare import CONTINUAL_CARTPOLE_FLAGS

    return CONTINUAL_CARTPOLE_FLAGS if agent in ("ppo", "gtr") else ""


def bench_profile(args: ProfileArgs) -> dict:
    """Self CPU time per torch operator of one group's run (flags, then seeds, steps and one thread, in that order)."""
    from pathlib import Path

    from torch.profiler import ProfilerActivity, profile

    from cleanrl_plus.config import parse_args

    module = agent_module(args.agent)
    seeds = [str(seed) for seed in range(1, args.seeds + 1)]
    with tempfile.TemporaryDirectory() as runs_dir:
        argv = [*shlex.split(args.flags or default_flags(args.agent)), "--env-id", args.env_id, "--seeds", *seeds]
        argv += ["--total-timesteps", str(args.total_timesteps), "--threads", "1", "--runs-dir", runs_dir, "--no-progress"]
        agent_args = parse_args(module.Args, argv)
        start = time.process_time()
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            module.main(agent_args)
        cpu = time.process_time() - start
        summaries = [json.loads(path.read_text()) for path in Path(runs_dir).glob("*/summary.json")]
    operators = [event for event in profiler.key_averages() if event.self_cpu_time_total > 0]
    total = sum(event.self_cpu_time_total for event in operators)
    operators.sort(key=lambda event: event.self_cpu_time_total, reverse=True)
    return {
        "agent": args.agent,
        "env_id": args.env_id,
        "seeds": args.seeds,
        "total_timesteps": args.total_timesteps,
        "trained_seeds": sorted(summary["seed"] for summary in summaries if summary["finished"]),
        "cpu_s": round(cpu, 2),  # the run's CPU time: the operators, the Python between them and the profiler's own work
        "profiled_cpu_s": total / 1e6,  # the operators' own time, what each share is a part of
        "operators": [
            {
                "name": event.key,
                "self_cpu_s": event.self_cpu_time_total / 1e6,
                "share": round(event.self_cpu_time_total / total, 4),
                "calls": event.count,
            }
            for event in operators[: args.rows]
        ],
    }


def bench_groups(args: GroupBenchArgs) -> dict:
    """Wall time of the same seeds as one process per seed and as groups, run one after the other in this call."""
    import resource
    from pathlib import Path

    from commands import sweep

    flags = args.flags or default_flags(args.agent)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.runs_dir or scratch)
        for size in (1, *args.members_per_process):
            plan = sweep.SweepArgs(
                agent=(args.agent,),
                env_id=(args.env_id,),
                seeds=tuple(range(1, args.seeds + 1)),
                flags=flags,
                runs_dir=str(folder / f"members-{size}"),
                workers=args.workers,
                members_per_process=size,
            )
            cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            results = sweep.run_sweep(plan)
            wall = time.perf_counter() - start
            cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if any(result["state"] != "finished" for result in results):
                raise UserError(f"bench groups: runs with --members-per-process {size} did not finish (listed above)")
            cpu = cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime
            rows.append({"members_per_process": size, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)})
    for row in rows:
        row["runs_per_hour"] = round(args.seeds * 3600 / row["wall_s"], 1)
        row["ratio"] = round(rows[0]["wall_s"] / row["wall_s"], 2)
    return {
        "agent": args.agent,
        "env_id": args.env_id,
        "seeds": args.seeds,
        "workers": args.workers,
        "flags": flags,
        "threads": torch.get_num_threads(),
        "rows": rows,
    }


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
    with tempfile.TemporaryDirectory() as runs_dir, burn_in(args.burnin):
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
            agent_args = parse_flags(
                module.Args, shlex.split(args.agent_flags), prog=f"agents/{args.agent}.py", default=agent_args
            )
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


def parse(argv: list[str] | None = None) -> BenchArgs | GroupBenchArgs | ProfileArgs:
    if argv and argv[0] in ("groups", "profile"):
        from commands.sweep import glue_flag_values

        args_type = GroupBenchArgs if argv[0] == "groups" else ProfileArgs
        setting = parse_flags(args_type, glue_flag_values(argv[1:], ("--flags",)), prog=f"cleanrl-plus bench {argv[0]}")
        check_agent_name(setting.agent)
        return setting
    return parse_flags(BenchArgs, argv or [], prog="cleanrl-plus bench")


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    if isinstance(args, ProfileArgs):
        result = bench_profile(args)
        if args.json_out:
            print(json.dumps(result))
            return result
        print(
            f"{result['agent']} on {result['env_id']}, a group of {result['seeds']} for {result['total_timesteps']} steps "
            f"each, one thread: {result['cpu_s']:.1f} s CPU, {result['profiled_cpu_s']:.1f} s in torch operators"
        )
        for row in result["operators"]:
            print(f"  {row['name']:<48} {row['self_cpu_s']:8.2f} s {row['share']:7.1%} {row['calls']:>9} calls")
        return result
    if isinstance(args, GroupBenchArgs):
        group_args = args
        result = bench_groups(group_args)
        if group_args.json_out:
            print(json.dumps(result))
            return result
        print(f"{result['agent']} on {result['env_id']}, {result['seeds']} seeds, {result['workers']} processes at a time:")
        for row in result["rows"]:
            print(
                f"  {row['members_per_process']:>3} per process: {row['wall_s']:8.1f} s wall, {row['cpu_s']:8.1f} s CPU, "
                f"{row['runs_per_hour']:8.1f} runs/h, {row['ratio']:.2f}× one seed per process"
            )
        return result
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
