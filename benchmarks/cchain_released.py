"""The authors' released C-CHAIN classic-control scripts beside our runs, as data a reader can check.

Sources: Tang et al., "Mitigating plasticity loss in continual reinforcement learning by reducing churn", ICML 2025,
Eq. 1 (the average performance: per run, the mean over iterations of the iteration's mean training episode return);
bluecontra/C-CHAIN at 2f8bedf, crl_gym_classic_control/control_train_aligned_{vanilla,c_chain,oracle}.py (with
basic_utils.py and networks.py), whose `itr_mean_return` is that series.

    prepare CHECKOUT --into DIR   copy the released files from a git checkout of bluecontra/C-CHAIN into a scratch folder
                                  outside this repository, three lines of each script replaced (GYMNASIUM, NO_TRAC,
                                  WANDB below; every CSV lists them)
    run --scripts DIR --script c_chain --env_name Acrobot-v1 --seed 1
                                  run one patched script on one thread; its wandb.log rows become
                                  benchmarks/released/cchain/<script>__<env>__seed<s>.csv
    export RUN_DIR                the same CSV from one of our runs (agents/ppo.py on a continual:cchain-* id)
    table CSV...                  the page's rows: per-level means and Eq. 1, both from level_means_and_score
    cells [CSV...]                Table 1 whole, ours beside the paper's, from our runs' CSVs (default: every one under
                                  benchmarks/released/ours/), each cell the mean ± s.e. over seeds of level_means_and_score

Every CSV starts with `# key: value` lines (what made it, where, when) and has one row per iteration.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
import resource
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import commit_of, file_at, machine, now, write_csv  # noqa: E402
from cleanrl_plus.errors import RunFailure, exit_with  # noqa: E402
from envs.errors import UserError, did_you_mean  # noqa: E402

UPSTREAM = "bluecontra/C-CHAIN"
UPSTREAM_DIR = "crl_gym_classic_control"
SCRIPTS = ("vanilla", "c_chain", "oracle")
HELPERS = ("basic_utils.py", "networks.py")
RELEASED_DIR = ROOT / "benchmarks" / "released" / "cchain"
OURS_DIR = ROOT / "benchmarks" / "released" / "ours"
PUBLISHED_TABLE = ROOT / "benchmarks" / "published" / "cchain-table1.toml"
MANIFEST = "patch.json"
WANDB_STAND_IN = "wandb_to_csv"
LOG_VARIABLE = "CCHAIN_RELEASED_LOG"
ITERATION_STEPS = 800  # the scripts' --iteration_steps, which `run` leaves at its default

# The whole patch: (old line, new line), each old line exactly once in each of the three scripts. gym 0.26's API is
# gymnasium's (reset → (obs, info), step → 5 values), so only the import changes; TRAC's package is imported at the
# top even when --opt base never uses it; wandb is replaced by a stand-in that writes each wandb.log call to a file.
GYMNASIUM = ("import gym", "import gymnasium as gym")
NO_TRAC = ("from trac_optimizer import start_trac", "start_trac = None")
WANDB = ("    import wandb", f"    import {WANDB_STAND_IN} as wandb")
# Optional (`prepare --seed-env`): the scripts never seed their env, so a rerun draws other initial states (gymnasium
# seeds an unseeded env from the OS). Seeding the env once with --seed where it is made makes a run replay exactly on
# one machine; the initial states' distribution is unchanged, only which draw a seed gets.
SEEDED_ENV = (
    '    env = gym.make(args.env_name, render_mode="rgb_array")',
    '    env = gym.make(args.env_name, render_mode="rgb_array"); env.reset(seed=args.seed)',
)

WANDB_STAND_IN_SOURCE = f'''"""Stand-in for wandb in the released scripts, written by cleanrl_plus
benchmarks/cchain_released.py: each wandb.log call becomes one JSON line in the file named by
${LOG_VARIABLE}; init does nothing."""
import json
import os


def init(**settings):
    pass


def log(values, step):
    with open(os.environ["{LOG_VARIABLE}"], "a") as log_file:
        log_file.write(json.dumps({{"step": int(step), **{{key: float(value) for key, value in values.items()}}}}) + "\\n")
'''

# The CSV's columns: the authors' wandb.log keys (the coefficient only where the script logs it)
COLUMNS = ("iteration", "global_timestep", "itr_mean_return", "itr_mean_step")
COEFFICIENT = "stats/auto_p_reg_coef"
PRINTED = re.compile(r"^- Iteration num: (\d+), Avg Return: ([^,]+), Avg Step: ([^,]+),")


# ---------------------------------------------------------------- the patch


def patch_lines(text: str, replacements: list[tuple[str, str]], name: str) -> tuple[str, list[tuple[int, str, str]]]:
    """(patched text, [(line number, old, new)]): each old line replaced where it stands, line for line. A line that
    is missing or not unique is a UserError naming it (the checkout is not the commit the patch was written for)."""
    lines = text.split("\n")
    patched = []
    for old, new in replacements:
        where = [number for number, line in enumerate(lines) if line == old]
        if len(where) != 1:
            count = "no line" if not where else f"{len(where)} lines"
            raise UserError(f"{name} has {count} {old.strip()!r} to patch — prepare a checkout of {UPSTREAM} at 2f8bedf")
        lines[where[0]] = new
        patched.append((where[0] + 1, old, new))
    return "\n".join(lines), patched


def replacements(trac: bool, seed_env: bool = False) -> list[tuple[str, str]]:
    return [GYMNASIUM, *([] if trac else [NO_TRAC]), WANDB, *([SEEDED_ENV] if seed_env else [])]


def upstream_file(checkout: Path, commit: str, name: str) -> str:
    text = file_at(checkout, commit, f"{UPSTREAM_DIR}/{name}")
    if text is None:
        raise UserError(f"{checkout} at {commit} has no {UPSTREAM_DIR}/{name} — pass a git checkout of {UPSTREAM}")
    return text


def prepare(checkout: Path, into: Path, trac: bool = False, seed_env: bool = False) -> dict:
    """Copy the five released files at the checkout's HEAD into `into`, the three scripts patched, with the
    wandb stand-in and a manifest (MANIFEST: upstream commit, whether TRAC's import is kept and the env seeded, each
    patched line)."""
    into = into.resolve()
    if into == ROOT or ROOT in into.parents:
        raise UserError(
            f"--into {into} is inside this repository — pass a scratch folder outside it (the authors' code stays out of git)"
        )
    commit = commit_of(checkout)
    if commit is None:
        raise UserError(f"{checkout} is not a git checkout — fetch {UPSTREAM} and pass its folder")
    files, patched = {}, {}
    for script in SCRIPTS:
        name = f"control_train_aligned_{script}.py"
        files[name], patched[name] = patch_lines(upstream_file(checkout, commit, name), replacements(trac, seed_env), name)
    files |= {name: upstream_file(checkout, commit, name) for name in HELPERS}
    files[f"{WANDB_STAND_IN}.py"] = WANDB_STAND_IN_SOURCE
    manifest = {"upstream": UPSTREAM, "commit": commit, "trac_import_kept": trac, "env_seeded": seed_env}
    manifest["patched"] = patched
    files[MANIFEST] = json.dumps(manifest, indent=1) + "\n"
    into.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (into / name).write_text(text)
    return manifest


# ---------------------------------------------------------------- the CSV files


def read_csv(path: Path) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
    """(header: key → its values, columns: name → values) of a file write_csv wrote."""
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror} — pass a CSV this script wrote") from None
    header: dict[str, list[str]] = {}
    body = [line for line in lines if not line.startswith("# ")]
    for line in lines[: len(lines) - len(body)]:
        key, _, value = line[2:].partition(": ")
        header.setdefault(key, []).append(value)
    rows = list(csv.reader(body))
    if not rows or "itr_mean_return" not in rows[0] or not {"iterations_per_level", "planned_iterations"} <= set(header):
        raise UserError(f"{path} is not a CSV of benchmarks/cchain_released.py (no itr_mean_return or iterations_per_level)")
    columns = {name: np.array([float(row[i]) for row in rows[1:]]) for i, name in enumerate(rows[0])}
    return header, columns


def level_means_and_score(
    path: Path, read: tuple[dict[str, list[str]], dict[str, np.ndarray]] | None = None
) -> tuple[list[float], float]:
    """(each level's mean of itr_mean_return, Eq. 1 = the mean over all iterations), levels of the header's
    iterations_per_level from iteration 1 on. Levels of equal length average to Eq. 1; a run stopped early has a
    shorter last level. Iterations must be 1, 2, … with none missing. `read`: read_csv(path), where the caller has it."""
    header, columns = read or read_csv(path)
    iterations, returns = columns["iteration"], columns["itr_mean_return"]
    if len(returns) == 0 or not np.array_equal(iterations, np.arange(1, len(returns) + 1)):
        raise UserError(f"{path} does not hold iterations 1, 2, … in order — regenerate it (README.md beside it)")
    per_level = int(header["iterations_per_level"][0])
    levels = [float(returns[start : start + per_level].mean()) for start in range(0, len(returns), per_level)]
    return levels, float(returns.mean())


# ---------------------------------------------------------------- the released scripts


def preset_of(env_name: str):
    """Our continual:cchain-* preset on this gym env (its levels, iterations per level, offset σ)."""
    from envs import continual

    for name, preset in continual.PRESETS.items():
        if name.startswith("cchain-") and preset.env_id.removeprefix("torch:") == env_name:
            return name, preset
    names = [p.env_id.removeprefix("torch:") for n, p in continual.PRESETS.items() if n.startswith("cchain-")]
    hint = " (gymnasium's LunarLander-v2 is v3)" if env_name == "LunarLander-v2" else ""
    raise UserError(
        f"--env_name {env_name} is none of C-CHAIN's{hint}{did_you_mean(env_name, names) or ' — ' + ', '.join(names)}"
    )


def repository_commit() -> str:
    """This repository's HEAD (a run folder does not record the commit it ran at: the page names it)."""
    return commit_of(ROOT, short=True) or "unknown"


def released_rows(log_path: Path, printed: list[tuple[int, float, float]], coefficient: bool) -> list[list]:
    """The CSV rows from the stand-in's wandb.log lines, each checked against the line the script printed for its
    iteration (`- Iteration num: …, Avg Return: …, Avg Step: …`)."""
    logged = [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.exists() else []
    rows = [
        [entry["step"], int(entry["global_timestep"]), entry["itr_mean_return"], entry["itr_mean_step"]] for entry in logged
    ]
    if [(row[0], row[2], row[3]) for row in rows] != printed:
        raise RunFailure(f"the script's wandb.log rows in {log_path} and its printed iterations differ")
    return [row + [entry[COEFFICIENT]] for row, entry in zip(rows, logged)] if coefficient else rows


def run(
    scripts: Path,
    script: str,
    env_name: str,
    seed: int,
    level_num: int = 0,
    level_switch: int = 0,
    opt: str = "base",
    out: Path | None = None,
    lr: float | None = None,
) -> Path:
    """Run one patched script (OMP_NUM_THREADS=1, CPU) and write its CSV; levels and offset σ are the preset's unless
    given, the learning rate the script's default (1e-3) unless `lr`. Its output goes to a log beside the scripts; a
    failed run writes no CSV."""
    try:
        manifest = json.loads((scripts / MANIFEST).read_text())
    except (OSError, ValueError):
        raise UserError(
            f"{scripts} is not a prepared folder (no {MANIFEST}) — run `prepare CHECKOUT --into {scripts}` first"
        ) from None
    if script not in SCRIPTS:
        raise UserError(
            f"--script {script} is not released{did_you_mean(script, list(SCRIPTS)) or ' — ' + ', '.join(SCRIPTS)}"
        )
    if opt == "TRAC" and not manifest["trac_import_kept"]:
        raise UserError(
            f"--opt TRAC needs TRAC's import: prepare {scripts} again with --trac (and pip install trac-optimizer)"
        )
    _, preset = preset_of(env_name)
    preset_switch = preset.steps_per_task // ITERATION_STEPS
    level_num, level_switch = level_num or preset.num_tasks, level_switch or preset_switch
    sigma = preset.make_shift().sigma
    name = f"control_train_aligned_{script}.py"
    arguments = [name, *f"--env_name {env_name} --seed {seed} --level_num {level_num}".split()]
    arguments += [*f"--level_switch {level_switch} --obs_perturb_range {sigma} --opt {opt}".split()]
    rate = "" if lr is None else f" --lr {lr:g}"
    arguments += rate.split()
    shortened = "" if (level_num, level_switch) == (preset.num_tasks, preset_switch) else f"__levels{level_num}x{level_switch}"
    shortened += "" if lr is None else f"__lr{lr:g}"
    seeded = manifest.get("env_seeded", False)
    out = out or RELEASED_DIR / f"{script}__{env_name}__seed{seed}{shortened}{'__env-seeded' if seeded else ''}.csv"
    log_path, stdout_path = scripts / f"{out.stem}.wandb.jsonl", scripts / f"{out.stem}.log"
    log_path.unlink(missing_ok=True)
    environment = os.environ | {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
        LOG_VARIABLE: str(log_path),
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    printed = []
    with (
        open(stdout_path, "w") as stdout_file,
        subprocess.Popen(
            [sys.executable, *arguments],
            cwd=scripts,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as process,
    ):
        for line in process.stdout:
            stdout_file.write(line)
            if match := PRINTED.match(line):
                printed.append((int(match[1]), float(match[2]), float(match[3])))
                if int(match[1]) % level_switch == 0:
                    print(line.rstrip(), flush=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        raise RunFailure(f"{name} exited with code {process.returncode} — its output is in {stdout_path}")
    if len(printed) != level_num * level_switch:
        raise RunFailure(f"{name} printed {len(printed)} of {level_num * level_switch} iterations — see {stdout_path}")
    rows = released_rows(log_path, printed, coefficient=script == "c_chain")
    cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    patched = manifest["patched"][name]
    header = {
        "source": f"{UPSTREAM} {UPSTREAM_DIR}/{name} at {manifest['commit']} (the released script, patched below)",
        "command": f"OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES= python {shlex.join(arguments)}",
        "made_by": ("python benchmarks/cchain_released.py prepare CHECKOUT --into DIR --seed-env, then " if seeded else "")
        + f"python benchmarks/cchain_released.py run --scripts DIR --script {script} --env_name {env_name} "
        f"--seed {seed} --level_num {level_num} --level_switch {level_switch} --opt {opt}{rate}",
        "patched": [f"{name}:{number}: {old!r} -> {new!r}" for number, old, new in patched],
        "unpatched": f"{', '.join(HELPERS)}; wandb is {WANDB_STAND_IN}.py, written by benchmarks/cchain_released.py",
        "env_name": env_name,
        "seed": str(seed),
        "iterations_per_level": str(level_switch),
        "planned_iterations": str(level_num * level_switch),
        "machine": machine() + "; one thread, CPU",
        "date": now(),
        "cpu_seconds": f"{cpu_seconds:.0f}",
        "note": "the env is seeded with --seed (prepare --seed-env): a rerun on this machine replays this file"
        if seeded
        else "the script never seeds its env (env.reset() without a seed): a rerun of this command is another draw",
    }
    columns = [*COLUMNS, "auto_p_reg_coef"] if script == "c_chain" else list(COLUMNS)
    write_csv(out, header, columns, rows)
    return out


# ---------------------------------------------------------------- our runs


# Flags a --resume may change that still decide a run's numbers bit for bit (cleanrl_plus/config.py RESUMABLE_FLAGS)
# resumable run flags (not settings) that still change the numbers; --flush-denormal: values below 1.2e-38 become 0
REPRODUCING = ("total_timesteps", "threads", "device", "torch_deterministic", "compile", "cudagraphs", "flush_denormal")


def reproducing_flags(recorded: dict) -> list[str]:
    """The flags of agents/ppo.py that give this run from its env's recipe (`Args.defaults_for`): each setting that
    differs (cleanrl_plus/config.py run_settings) and each of REPRODUCING that differs, as the command line takes them."""
    from agents import ppo
    from cleanrl_plus.config import run_settings
    from cleanrl_plus.logger import flatten_args

    recipe = json.loads(json.dumps(dataclasses.asdict(ppo.Args.defaults_for(recorded["env_id"])), default=list))
    mine, theirs = run_settings(recorded), run_settings(recipe)
    differing = {name: value for name, value in mine.items() if name in theirs and value != theirs[name]}
    mine, theirs = flatten_args(recorded), flatten_args(recipe)
    differing |= {name: mine[name] for name in REPRODUCING if name in mine and mine[name] != theirs.get(name)}
    return [command_line_flag(name, value) for name, value in differing.items()]


def command_line_flag(name: str, value) -> str:
    """`--cchain.enabled`, `--cchain.no-enabled`, `--no-compile`, `--hidden-sizes 16 16`, `--num-steps 64`."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else re.sub(r"(--|\.)([^.]+)$", r"\1no-\2", flag)
    return f"{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}"


def group_seeds(run_dir: Path, recorded: dict) -> list[int]:
    """The seeds of the group the run was a member of (its args.json names the members' folders), or its own."""
    seeds = []
    for name in recorded.get("group") or [run_dir.name]:
        try:
            seeds.append(int(json.loads((run_dir.parent / name / "args.json").read_text())["seed"]))
        except (OSError, ValueError, KeyError):
            raise UserError(f"{run_dir}'s group member {name} is not beside it — export from the group's folder") from None
    return seeds


def export(run_dir: Path, out: Path | None = None) -> Path:
    """One of our runs (agents/ppo.py on continual:cchain-*) as the released scripts' CSV: per iteration of
    num_steps × num_envs steps the mean of its episodes' returns and lengths (commands/report.py iteration_means, the
    series its --metric average-performance averages)."""
    from commands.report import iteration_means, read_scalars
    from envs import continual

    try:
        args = json.loads((run_dir / "args.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        raise UserError(f"{run_dir} is not a run directory (no readable args.json and summary.json)") from None
    env_id = str(args.get("env_id", ""))
    if args.get("agent") != "ppo" or not env_id.startswith("continual:cchain-"):
        raise UserError(
            f"{run_dir} is a run of {args.get('agent')} on {env_id} — pass a run of agents/ppo.py on continual:cchain-*"
        )
    iteration_steps = int(args["num_steps"]) * int(args["num_envs"])
    setting = continual.parse(
        env_id, continual.ContinualArgs(**{key: args["continual"][key] for key in ("steps_per_task", "num_tasks")})
    )
    if setting.steps_per_task % iteration_steps:
        raise UserError(f"{run_dir}'s levels ({setting.steps_per_task} steps) are not whole iterations of {iteration_steps}")
    curves = read_scalars(run_dir, ["charts/episodic_return", "charts/episodic_length"])
    if "charts/episodic_return" not in curves:
        raise UserError(f"{run_dir} has no training episodes (charts/episodic_return) in its TensorBoard events")
    iterations, returns = iteration_means(*curves["charts/episodic_return"], iteration_steps)
    _, lengths = iteration_means(*curves["charts/episodic_length"], iteration_steps)
    rows = [[int(i), int(i) * iteration_steps, float(r), float(s)] for i, r, s in zip(iterations, returns, lengths)]
    seeds = group_seeds(run_dir, args)
    finished = "finished" if summary.get("finished") else "not finished"
    header = {
        "source": f"cleanrl_plus agents/ppo.py, run {run_dir.name} ({finished})",
        "command": " ".join(["python agents/ppo.py --env-id", env_id, "--seeds", *map(str, seeds), *reproducing_flags(args)]),
        "made_by": f"python benchmarks/cchain_released.py export {run_dir.name}",
        "group": f"seed {args['seed']} of a group of {len(seeds)} (eager on a CPU with one thread a member is its one-seed "
        "run; compiled, threaded or on a GPU only within rounding: issue 47)",
        "env_name": env_id,
        "exp_name": str(args.get("exp_name", "ppo")),
        "seed": str(args["seed"]),
        "iterations_per_level": str(setting.steps_per_task // iteration_steps),
        "planned_iterations": str(int(args["total_timesteps"]) // iteration_steps),
        "exported_at": f"commit {repository_commit()} of this repository, {now()}",
        "machine": machine(),
    }
    out = out or OURS_DIR / f"{args.get('exp_name', 'ppo')}__{env_id.removeprefix('continual:')}__seed{args['seed']}.csv"
    write_csv(out, header, list(COLUMNS), rows)
    return out


# ---------------------------------------------------------------- the page's rows


def signed(value: float, digits: int) -> str:
    return f"{value:.{digits}f}".replace("-", "−")


def table(paths: list[Path]) -> list[str]:
    """Markdown rows: who ran it (theirs: the released script, its iterations and CPU seconds; ours: the seed), the
    per-level means (whole numbers) and Eq. 1, each from level_means_and_score; then, for each side with two or more
    finished runs, the mean ± s.e. of their Eq. 1 over seeds (mean_and_standard_error, as `cells` computes a cell)."""
    from commands.published import mean_and_standard_error

    rows, most_levels, finished = [], 0, {"theirs": [], "ours": []}
    for path in paths:
        header, columns = read_csv(path)
        levels, score = level_means_and_score(path, (header, columns))
        most_levels = max(most_levels, len(levels))
        count, planned = len(columns["iteration"]), int(header["planned_iterations"][0])
        iterations = f"{count:,} iterations" if count == planned else f"the first {count:,} of {planned:,} iterations"
        side = "theirs" if "cpu_seconds" in header else "ours"
        if side == "theirs":
            label = f"theirs, `--seed {header['seed'][0]}` ({iterations}, {int(header['cpu_seconds'][0]):,} CPU-s)"
        else:
            label = f"ours, seed {header['seed'][0]}" + ("" if count == planned else f" ({iterations})")
        rows.append(f"| {label} | {', '.join(signed(m, 0) for m in levels)} | {signed(score, 1)} |")
        if count == planned:
            finished[side].append(score)
    for side, scores in finished.items():
        if len(scores) >= 2:
            mean, error = mean_and_standard_error(scores)
            rows.append(f"| {side}, {len(scores)} finished runs, mean ± s.e. | | {signed(mean, 1)} ± {error:.1f} |")
    return [f"| run | level means, levels 0–{most_levels - 1} | Eq. 1 |", "|-|-|-|", *rows]


def group_of(path: Path, header: dict[str, list[str]]) -> tuple[str, str]:
    """(env id, exp name) of one of our runs' CSVs: its header's `env_name` and `exp_name`; files exported before
    `exp_name` was written name a sweep's run folder (`<env>__<exp>__<seed>`) in `source`."""
    if "exp_name" in header and "env_name" in header:
        return header["env_name"][0], header["exp_name"][0]
    source = header.get("source", [""])[0]
    match = re.fullmatch(r"cleanrl_plus agents/ppo\.py, run [^_ ]+__(.+?)__\d+ \((?:not )?finished\)", source)
    if not match or "env_name" not in header:
        raise UserError(f"{path} is not a CSV of one of our runs — pass files `export` wrote (benchmarks/released/ours/)")
    return header["env_name"][0], match[1]


def cells(paths: list[Path], published: Path = PUBLISHED_TABLE) -> list[str]:
    """The paper's table in its layout, a row of ours above each of its rows: each cell of ours the mean ± s.e. over
    seeds (commands/published.py mean_and_standard_error, as `report` computes it) of each finished run's Eq. 1
    (level_means_and_score); bold where the two differ by more than their standard errors combined (`differs`, the
    report's rule); then how many cells agree and how many are not run (said only when some are). Runs not finished
    are left out and counted."""
    from commands.published import PublishedTable, differs, load_published, mean_and_standard_error

    table = load_published(published)
    if not isinstance(table, PublishedTable):
        raise UserError(f"{published} holds curves, not a table — pass C-CHAIN's Table 1 ({PUBLISHED_TABLE.name})")
    scores: dict[tuple[str, str], list[float]] = {}
    unfinished = 0
    for path in paths:
        header, columns = read_csv(path)
        if len(columns["iteration"]) != int(header["planned_iterations"][0]):
            unfinished += 1
            continue
        scores.setdefault(group_of(path, header), []).append(level_means_and_score(path, (header, columns))[1])

    def written(cell: tuple[float, float]) -> str:
        return f"{signed(cell[0], 1)} ± {cell[1]:.1f}"  # one decimal, as the paper prints its table

    lines = [f"| env | | {' | '.join(table.columns)} |", "|-|-" + "|-" * len(table.columns) + "|"]
    agree = compared = not_run = 0
    for row, env_id in table.rows.items():
        ours, theirs = [], []
        for column, exp_name in table.columns.items():
            published_cell, seeds = table.values.get((row, column)), scores.get((env_id, exp_name), [])
            theirs.append(written(published_cell) if published_cell else "—")
            if not seeds:
                ours.append("not run")
                not_run += 1
                continue
            cell = mean_and_standard_error(seeds)
            text = written(cell) + ("" if len(seeds) == table.seeds else f" ({len(seeds)} seeds)")
            if published_cell:
                beyond = differs(cell, published_cell)
                compared, agree = compared + 1, agree + (not beyond)
                text = f"**{text}**" if beyond else text
            ours.append(text)
        lines += [f"| {row} | ours | {' | '.join(ours)} |", f"| | the paper | {' | '.join(theirs)} |"]
    lines.append("")
    lines.append(
        f"{agree} of {compared} cells run agree within the standard errors combined (bold: beyond them)"
        + (f"; {not_run} not run" if not_run else "")
        + (f"; {unfinished} unfinished runs left out" if unfinished else "")
    )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prepare_parser = commands.add_parser("prepare", help="copy and patch the released scripts into a scratch folder")
    prepare_parser.add_argument("checkout", type=Path, help=f"a git checkout (or bare repository) of {UPSTREAM}")
    prepare_parser.add_argument("--into", type=Path, required=True, help="scratch folder outside this repository")
    prepare_parser.add_argument(
        "--trac", action="store_true", help="keep TRAC's import (for --opt TRAC; pip install trac-optimizer)"
    )
    prepare_parser.add_argument(
        "--seed-env", action="store_true", help="seed the env with --seed where it is made, so a run replays exactly"
    )
    run_parser = commands.add_parser("run", help="run one patched script and write its CSV")
    run_parser.add_argument("--scripts", type=Path, required=True, help="the folder `prepare` wrote")
    run_parser.add_argument("--script", default="c_chain", help="vanilla, c_chain or oracle")
    run_parser.add_argument("--env_name", default="Acrobot-v1", help="CartPole-v1, Acrobot-v1, LunarLander-v3, MountainCar-v0")
    run_parser.add_argument("--seed", type=int, default=0)
    run_parser.add_argument("--level_num", type=int, default=0, help="levels (0: the preset's, 10; MountainCar 5)")
    run_parser.add_argument(
        "--level_switch", type=int, default=0, help="iterations per level (0: the preset's, 200; MountainCar 400)"
    )
    run_parser.add_argument("--opt", default="base", choices=["base", "TRAC"])
    run_parser.add_argument("--lr", type=float, default=None, help="the script's --lr (default: its own, 1e-3)")
    run_parser.add_argument(
        "--out", type=Path, help=f"the CSV (default: {RELEASED_DIR.relative_to(ROOT)}/<script>__<env>__seed<s>.csv)"
    )
    export_parser = commands.add_parser("export", help="write the CSV of one of our runs")
    export_parser.add_argument("run_dir", type=Path)
    export_parser.add_argument(
        "--out", type=Path, help=f"the CSV (default: {OURS_DIR.relative_to(ROOT)}/<exp>__<preset>__seed<s>.csv)"
    )
    table_parser = commands.add_parser("table", help="print the page's rows from CSVs")
    table_parser.add_argument("csvs", type=Path, nargs="+")
    cells_parser = commands.add_parser("cells", help="Table 1 whole, ours beside the paper's, from our runs' CSVs")
    cells_parser.add_argument("csvs", type=Path, nargs="*", help=f"default: every CSV under {OURS_DIR.relative_to(ROOT)}")
    cells_parser.add_argument("--published", type=Path, default=PUBLISHED_TABLE, help="the paper's table (TOML)")
    options = parser.parse_args(argv)
    try:
        if options.command == "prepare":
            manifest = prepare(options.checkout, options.into, options.trac, options.seed_env)
            print(f"prepared {options.into} from {UPSTREAM} at {manifest['commit'][:7]}")
        elif options.command == "run":
            if options.seed < 0 or options.level_num < 0 or options.level_switch < 0:
                raise UserError("--seed, --level_num and --level_switch must be ≥ 0")
            if options.lr is not None and not options.lr > 0:
                raise UserError(f"--lr {options.lr} must be > 0 (leave it out for the script's own 1e-3)")
            print(
                run(
                    options.scripts,
                    options.script,
                    options.env_name,
                    options.seed,
                    options.level_num,
                    options.level_switch,
                    options.opt,
                    options.out,
                    options.lr,
                )
            )
        elif options.command == "export":
            print(export(options.run_dir, options.out))
        elif options.command == "table":
            print("\n".join(table(options.csvs)))
        else:
            print("\n".join(cells(options.csvs or sorted(OURS_DIR.glob("*.csv")), options.published)))
    except (UserError, RunFailure) as error:
        exit_with(error)


if __name__ == "__main__":
    main()
