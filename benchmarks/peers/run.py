"""CPU seconds per seed of one PPO recipe, side by side on one core: CleanRL's ppo.py (one process per seed), ours
(one process per seed; one group of every seed on gymnasium's CartPole and on the torch CartPole), rejax's PPO and,
optionally, PureJaxRL's ppo.py (each vmapped over the seeds in one process), with every arm's returns checked.
How to fetch the peers and what each arm differs in: benchmarks/peers/README.md.

    python benchmarks/peers/run.py --cleanrl /tmp/peers/ppo.py --seeds 20 --steps 100000 --core 1

The recipe is CleanRL ppo.py's CartPole-v1 defaults (RECIPE); every arm trains --steps rounded down to whole 512-step
rollouts. Each run is pinned to --core with one thread (taskset, OMP_NUM_THREADS=1, XLA single-threaded) and timed by
`/usr/bin/time -f "%U %S"` (user + system CPU seconds); the arms run one after another, each run's log and run
directory kept in --scratch. An arm's CPU seconds per seed are its runs' total over its seeds. A seed's return is the
mean of its last 10 training episodes (rejax: the mean of its own final evaluation, 128 episodes of the sampled
policy); the check gives the mean over seeds ± its standard error and calls an arm alike when it lies within the two
standard errors summed of the reference arm's (CleanRL's when it ran).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JAX_ARM = Path(__file__).resolve().parent / "jax_arm.py"

# CleanRL ppo.py's defaults (separate 64-64 tanh networks, orthogonal init, Adam ε 1e-5, lr annealed to 0, clipped
# value loss, per-minibatch advantage normalisation); every arm is given these numbers, CleanRL's flags by these names
RECIPE = dict(num_envs=4, num_steps=128, num_minibatches=4, update_epochs=4, learning_rate=2.5e-4, gamma=0.99)
RECIPE |= dict(gae_lambda=0.95, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5)
ROLLOUT = RECIPE["num_envs"] * RECIPE["num_steps"]
LAST_EPISODES = 10
ARMS = ("cleanrl", "ours", "group", "group-torch", "group-compiled", "group-torch-compiled", "rejax", "purejaxrl")
GROUP_ENVS = {"group": "CartPole-v1", "group-torch": "torch:CartPole-v1"}  # each arm also --compile'd ("-compiled")
# agents/ppo.py's defaults hold the rest of the recipe; CleanRL's script has no observation or reward normalisation
OURS_FLAGS = ["--no-normalize-obs", "--no-normalize-reward", "--device", "cpu", "--threads", "1"]
OURS_FLAGS += ["--eval-every", "0", "--checkpoint-every", "0", "--no-progress"]  # one evaluation and checkpoint, at the end
ONE_THREAD = dict(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
ONE_THREAD |= dict(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
JAX_IMPORTS = {"rejax": "import jax, rejax", "purejaxrl": "import jax, flax, optax, distrax, gymnax"}

# CleanRL's ppo.py was written for gymnasium 0.29: the two edits of tools/gpu/patch_peers.py (standard library only)
# that it needs on 1.x, (why, old text, new text); each old text must occur exactly once
sys.path.insert(0, str(REPO / "tools" / "gpu"))
sys.path.insert(0, str(REPO))
from patch_peers import FINAL_INFO_AS_LIST, SAME_STEP_AUTORESET  # noqa: E402

from benchmarks.provenance import commit_of, cpu_model  # noqa: E402

GYMNASIUM_1_PATCH = [SAME_STEP_AUTORESET, FINAL_INFO_AS_LIST]


class PatchError(ValueError):
    pass


def patch_for_gymnasium_1(text: str) -> str:
    """CleanRL's ppo.py as fetched → the same script for gymnasium 1.x; refuses a text it does not know."""
    for _, old, new in GYMNASIUM_1_PATCH:
        if new in text:
            raise PatchError(f"already patched ({new[:60]}...): pass the file as fetched")
        if text.count(old) != 1:
            raise PatchError(f"{old!r} found {text.count(old)} times, not once: fetch the commit named in the README")
        text = text.replace(old, new)
    return text


def parse_cpu_time(text: str) -> float:
    """User + system seconds from `/usr/bin/time -f "%U %S" -o FILE`'s FILE (its last line; a line saying the command
    exited with a non-zero status may stand before it)."""
    lines = text.strip().splitlines()
    fields = lines[-1].split() if lines else []
    try:
        user, system = map(float, fields)
    except ValueError:
        raise ValueError(f"not a '%U %S' line: {lines[-1] if lines else '(empty)'!r}") from None
    return user + system


def recipe_flags() -> list[str]:
    return [item for key, value in RECIPE.items() for item in ("--" + key.replace("_", "-"), str(value))]


def mean_and_error(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error (nan for one value)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan


def return_check(returns: list[float], seeds: int, reference: list[float] | None) -> str:
    """'mean ± s.e.' of the seeds' returns and, beside a reference arm's, whether the two are alike: the difference
    within their standard errors summed."""
    if not returns:
        return "no episodes logged"
    mean, error = mean_and_error(returns)
    text = f"{mean:.1f} ± {error:.1f}" + (f" ({len(returns)} of {seeds} seeds)" if len(returns) < seeds else "")
    if reference is None:
        return text + ", the reference"
    reference_mean, reference_error = mean_and_error(reference)
    gap, allowed = mean - reference_mean, error + reference_error
    if math.isnan(allowed):
        return f"{text} (Δ {gap:+.1f}; one seed: no standard error)"
    return f"{text}, {'alike' if abs(gap) <= allowed else '**differs**'} (Δ {gap:+.1f}, s.e. summed {allowed:.1f})"


@dataclass
class ArmResult:
    arm: str
    seeds: int
    cpu_seconds: float | None = None  # all of the arm's runs together
    returns: list[float] = field(default_factory=list)  # one per seed
    note: str = ""  # why there are no figures: skipped or failed

    @property
    def cpu_per_seed(self) -> float | None:
        return None if self.cpu_seconds is None else self.cpu_seconds / self.seeds


def markdown_table(results: list[ArmResult]) -> str:
    """arm | CPU s per seed | seeds per CPU-hour | ratio to our group | return check. The ratio is the arm's CPU per
    seed over our group's (gymnasium CartPole's, else the torch CartPole's); returns are checked against CleanRL's arm
    (else the first arm with returns)."""
    timed = {result.arm: result.cpu_per_seed for result in results if result.cpu_per_seed}
    group = timed.get("group") or timed.get("group-torch")
    with_returns = [result for result in results if result.returns]
    reference = next((r for r in with_returns if r.arm == "cleanrl"), with_returns[0] if with_returns else None)
    lines = ["| arm | CPU s per seed | seeds per CPU-hour | ratio to our group | return check |", "|-|-|-|-|-|"]
    for result in results:
        if not result.cpu_per_seed:
            lines.append(f"| {result.arm} | – | – | – | {result.note} |")
            continue
        ratio = f"{result.cpu_per_seed / group:.2f}×" if group else "–"
        check = return_check(result.returns, result.seeds, None if result is reference else reference.returns)
        lines.append(f"| {result.arm} | {result.cpu_per_seed:.2f} | {3600 / result.cpu_per_seed:,.0f} | {ratio} | {check} |")
    return "\n".join(lines)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        hint = "" if "—" in message else " — see --help"  # argparse's own messages name no fix
        print(f"error: {message}{hint}", file=sys.stderr)
        sys.exit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineParser(prog="benchmarks/peers/run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cleanrl", type=Path, help="CleanRL's cleanrl/ppo.py as fetched (patched here, in --scratch)")
    parser.add_argument("--purejaxrl", type=Path, help="PureJaxRL's purejaxrl/ppo.py, its wrappers.py beside it (optional)")
    parser.add_argument("--seeds", type=int, default=20, help="seeds 1..N for every arm (default 20)")
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per seed, rounded down to 512s (default 100000)")
    parser.add_argument("--core", type=int, help="the CPU every run is pinned to (default: the first this process may run on)")
    parser.add_argument("--arms", nargs="+", choices=ARMS, help="default: all but purejaxrl, which --purejaxrl adds")
    parser.add_argument("--scratch", type=Path, help="an empty or new folder for logs and runs (default: a new temp folder)")
    parser.add_argument("--python", type=Path, default=Path(sys.executable), help="interpreter of ours and CleanRL's")
    parser.add_argument("--jax-python", type=Path, default=Path(sys.executable), help="interpreter of the JAX arms")
    args = parser.parse_args(argv)
    args.arms = args.arms or [arm for arm in ARMS if arm != "purejaxrl" or args.purejaxrl]
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds} trains no seed — pass 1 or more")
    if args.steps < ROLLOUT:
        parser.error(f"--steps {args.steps} is less than one rollout of 4 envs × 128 steps — pass {ROLLOUT} or more")
    args.steps = args.steps // ROLLOUT * ROLLOUT  # whole rollouts: CleanRL and PureJaxRL round down, ours up
    if args.core is None:
        args.core = min(os.sched_getaffinity(0))
    if args.core not in os.sched_getaffinity(0):
        cores = ", ".join(map(str, sorted(os.sched_getaffinity(0))))
        parser.error(f"--core {args.core} is not a CPU this process may run on — one of {cores}")
    if len(set(args.arms)) < len(args.arms):
        parser.error(f"--arms {' '.join(args.arms)} names an arm twice — name each once")
    for arm, path, what in (
        ("cleanrl", args.cleanrl, "CleanRL's ppo.py"),
        ("purejaxrl", args.purejaxrl, "PureJaxRL's ppo.py"),
    ):
        if arm in args.arms and path is None:
            parser.error(f"the {arm} arm needs --{arm} PATH ({what}, fetched: see the README) — or leave it out of --arms")
        if arm in args.arms and not path.is_file():
            parser.error(f"--{arm} {path}: no such file — the path of the fetched {what}")
    if "purejaxrl" in args.arms and not (args.purejaxrl.parent / "wrappers.py").is_file():
        parser.error(f"--purejaxrl {args.purejaxrl}: no wrappers.py beside it — fetch purejaxrl/wrappers.py into that folder")
    if "cleanrl" in args.arms:
        try:
            args.cleanrl_text = patch_for_gymnasium_1(args.cleanrl.read_text())
        except PatchError as error:
            parser.error(f"--cleanrl {args.cleanrl}: {error} — see the README")
    for flag, interpreter in (("--python", args.python), ("--jax-python", args.jax_python)):
        if not os.access(interpreter, os.X_OK):
            parser.error(f"{flag} {interpreter}: not an executable — the path of a Python interpreter")
    if args.scratch is not None and args.scratch.exists() and (not args.scratch.is_dir() or any(args.scratch.iterdir())):
        parser.error(f"--scratch {args.scratch} is not an empty folder — pass a new or empty one")
    if shutil.which("taskset") is None or not os.access("/usr/bin/time", os.X_OK):
        parser.error("taskset and /usr/bin/time are needed — install the Debian packages util-linux and time")
    return args


class ArmFailed(Exception):
    pass


def timed_run(argv: list[str], cwd: Path, log: Path, core: int) -> float:
    """Run argv in cwd pinned to `core` with one thread; its CPU seconds (user + system)."""
    cwd.mkdir(parents=True, exist_ok=True)
    time_file = log.with_suffix(".time")
    command = ["taskset", "-c", str(core), "/usr/bin/time", "-f", "%U %S", "-o", str(time_file), *map(str, argv)]
    with log.open("w") as output:
        output.write(f"$ {shlex.join(command)}\n")
        output.flush()
        code = subprocess.run(
            command, cwd=cwd, stdout=output, stderr=subprocess.STDOUT, env=os.environ | ONE_THREAD
        ).returncode
    if code != 0:
        raise ArmFailed(f"failed: exit {code}, see {log}")
    return parse_cpu_time(time_file.read_text())


def episodic_returns(run_dir: Path) -> list[float]:
    """Every charts/episodic_return point of a run's TensorBoard events, in the order written (CleanRL writes one per
    episode; ours one per env step at which episodes ended, their mean)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    if "charts/episodic_return" not in accumulator.Tags().get("scalars", []):
        return []
    return [event.value for event in accumulator.Scalars("charts/episodic_return")]


def tensorboard_returns(folder: Path) -> list[float]:
    """Each run's return below `folder`: the mean of its last LAST_EPISODES training episodes."""
    run_dirs = sorted({events.parent for events in folder.rglob("events.out.tfevents.*")})
    per_run = [episodic_returns(run_dir)[-LAST_EPISODES:] for run_dir in run_dirs]
    return [statistics.fmean(returns) for returns in per_run if returns]


def arm_jobs(arm: str, args: argparse.Namespace, scratch: Path) -> list[tuple[str, list, Path]]:
    """The runs of an arm, each (name, argv, working folder); CleanRL's patched script is scratch/peers/cleanrl_ppo.py."""
    seeds, folder = list(range(1, args.seeds + 1)), scratch / arm
    ours = [args.python, REPO / "agents" / "ppo.py", "--total-timesteps", args.steps, *recipe_flags(), *OURS_FLAGS]
    ours += ["--exp-name", f"peers-{arm}", "--runs-dir", folder / "runs"]
    if arm == "cleanrl":
        cleanrl = [args.python, scratch / "peers" / "cleanrl_ppo.py", "--total-timesteps", args.steps, *recipe_flags()]
        return [(f"seed-{seed}", [*cleanrl, "--seed", seed], folder / f"seed-{seed}") for seed in seeds]
    if arm == "ours":
        return [(f"seed-{seed}", [*ours, "--env-id", "CartPole-v1", "--seed", seed], folder) for seed in seeds]
    if (group_arm := arm.removesuffix("-compiled")) in GROUP_ENVS:
        compile_flag = ["--compile"] if arm != group_arm else []
        return [("group", [*ours, "--env-id", GROUP_ENVS[group_arm], "--seeds", *seeds, *compile_flag], folder)]
    peer = ["--script", args.purejaxrl.resolve()] if arm == "purejaxrl" else []
    out = folder / "returns.json"
    return [(arm, [args.jax_python, JAX_ARM, arm, *peer, "--seeds", *seeds, "--steps", args.steps, "--out", out], folder)]


def run_arm(arm: str, args: argparse.Namespace, scratch: Path) -> ArmResult:
    result = ArmResult(arm, args.seeds)
    if arm in JAX_IMPORTS:
        probe = subprocess.run([args.jax_python, "-c", JAX_IMPORTS[arm]], capture_output=True, text=True)
        if probe.returncode != 0:
            cause = (probe.stderr.strip().splitlines() or ["?"])[-1]
            result.note = f"skipped: {args.jax_python} cannot `{JAX_IMPORTS[arm]}` ({cause}); see the README's pip line"
            return result
    if arm == "cleanrl":
        (scratch / "peers").mkdir(exist_ok=True)
        (scratch / "peers" / "cleanrl_ppo.py").write_text(args.cleanrl_text)
        for why, _, _ in GYMNASIUM_1_PATCH:
            print(f"[cleanrl] patched for gymnasium 1.x: {why}", file=sys.stderr)
    (scratch / "logs").mkdir(exist_ok=True)
    total = 0.0
    for name, argv, cwd in arm_jobs(arm, args, scratch):
        try:
            seconds = timed_run(argv, cwd, scratch / "logs" / f"{arm}__{name}.log", args.core)
        except ArmFailed as failure:
            result.note = str(failure)
            return result
        total += seconds
        print(f"[{arm}] {name}: {seconds:.2f} CPU s", file=sys.stderr, flush=True)
    result.cpu_seconds = total
    if arm in JAX_IMPORTS:
        result.returns = json.loads((scratch / arm / "returns.json").read_text())["returns"]
    else:
        result.returns = tensorboard_returns(scratch / arm)
    return result


def machine() -> str:
    return f"{cpu_model()}, commit {commit_of(REPO, short=True) or 'unknown'}, {time.strftime('%Y-%m-%d')}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="peers-"))
    scratch.mkdir(parents=True, exist_ok=True)
    print(f"scratch: {scratch}", file=sys.stderr, flush=True)
    results = [run_arm(arm, args, scratch) for arm in args.arms]
    (scratch / "results.json").write_text(json.dumps([vars(result) for result in results], indent=1))
    print(
        f"PPO on CartPole-v1 with CleanRL ppo.py's recipe: {args.seeds} seeds × {args.steps:,} env steps "
        f"({args.steps // ROLLOUT} rollout{'s' if args.steps > ROLLOUT else ''} of {ROLLOUT}), each run on core {args.core} "
        f"with one thread; {machine()}\n"
    )
    print(markdown_table(results))
    print(
        f"\nReturn: per seed, the mean of its last {LAST_EPISODES} training episodes (ours: of its last "
        f"{LAST_EPISODES} points, each the mean of the episodes ending at one env step; rejax: its final evaluation, 128 "
        "episodes of the sampled policy), then mean ± standard error over seeds."
    )
    return 1 if any(result.note.startswith("failed") for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
