"""benchmarks/peers/run.py without running an arm: the `/usr/bin/time` reading, the gymnasium-1.x patch of CleanRL's
ppo.py (on a small script written as CleanRL writes its env loop, run on gymnasium's CartPole), the recipe our arms
are given, the returns read from TensorBoard events, the table, and the one-line refusals of bad arguments."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sys

import pytest
from conftest import REPO, run_script

spec = importlib.util.spec_from_file_location("peers_run", REPO / "benchmarks" / "peers" / "run.py")
peers = sys.modules["peers_run"] = importlib.util.module_from_spec(spec)  # registered: its dataclasses look it up
spec.loader.exec_module(peers)

# CleanRL ppo.py's env setup and episode logging, verbatim where the patch edits, around random actions
CLEANRL_LOOP = """
import gymnasium as gym
import numpy as np


def make_env(env_id):
    def thunk():
        return gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))

    return thunk


envs = gym.vector.SyncVectorEnv(
    [make_env("CartPole-v1") for i in range(2)],
)
envs.reset(seed=1)
envs.action_space.seed(1)
logged, rewards, ends = [], [], 0
for step in range(300):
    next_obs, reward, terminations, truncations, infos = envs.step(envs.action_space.sample())
    rewards += list(reward)
    ends += int(np.logical_or(terminations, truncations).sum())
    if "final_info" in infos:
        for info in infos["final_info"]:
            if info and "episode" in info:
                logged.append((float(info["episode"]["r"]), int(info["episode"]["l"])))
"""


def test_cpu_time_is_user_plus_system_from_the_last_line():
    assert peers.parse_cpu_time("12.50 0.75\n") == pytest.approx(13.25)
    assert peers.parse_cpu_time("Command exited with non-zero status 1\n3.00 0.25\n") == pytest.approx(3.25)
    for bad in ("", "Command terminated by signal 9\n", "1.0\n", "1.0 2.0 3.0\n"):
        with pytest.raises(ValueError):
            peers.parse_cpu_time(bad)


def test_the_patch_makes_cleanrls_loop_log_every_episode_and_learn_from_no_reset_step():
    patched = peers.patch_for_gymnasium_1(CLEANRL_LOOP)
    scope: dict = {}
    exec(compile(patched, "cleanrl_loop.py", "exec"), scope)
    # every finished episode is logged once with its own statistics (CartPole: return = length)
    assert scope["ends"] > 10 and len(scope["logged"]) == scope["ends"]
    assert all(r == length for r, length in scope["logged"])
    # resets happen within the step: no step of zero reward (gymnasium 1.x's default gives one after every end)
    assert set(scope["rewards"]) == {1.0}


def test_unpatched_on_gymnasium_1_the_loop_logs_nothing():
    # what the patch is for: without it CleanRL's ppo.py trains on reset steps and records no return at all
    scope: dict = {}
    exec(compile(CLEANRL_LOOP, "cleanrl_loop.py", "exec"), scope)
    assert scope["logged"] == [] and 0.0 in scope["rewards"]


def test_the_patch_refuses_a_script_it_does_not_know_or_one_already_patched():
    with pytest.raises(peers.PatchError, match="found 0 times"):
        peers.patch_for_gymnasium_1(CLEANRL_LOOP.replace("SyncVectorEnv", "AsyncVectorEnv"))
    with pytest.raises(peers.PatchError, match="found 2 times"):
        peers.patch_for_gymnasium_1(CLEANRL_LOOP + 'for info in infos["final_info"]:\n    pass\n')
    with pytest.raises(peers.PatchError, match="already patched"):
        peers.patch_for_gymnasium_1(peers.patch_for_gymnasium_1(CLEANRL_LOOP))


def test_our_arms_train_cleanrls_recipe():
    from agents.ppo import Args, network_settings
    from cleanrl_plus.config import parse_args

    args = parse_args(Args, ["--env-id", "CartPole-v1", *peers.recipe_flags(), *peers.OURS_FLAGS])
    assert (args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs) == (4, 128, 4, 4)
    assert (args.learning_rate, args.anneal_lr, args.adam_eps, args.max_grad_norm) == (2.5e-4, True, 1e-5, 0.5)
    assert (args.gamma, args.gae_lambda, args.ent_coef, args.vf_coef) == (0.99, 0.95, 0.01, 0.5)
    assert (args.clip_coef, args.clip_vloss, args.anneal_clip) == (0.2, True, False)
    assert (args.norm_adv, args.norm_adv_over, args.normalize_obs, args.normalize_reward) == (True, "minibatch", False, False)
    assert (args.hidden_sizes, network_settings(args), args.init) == ((64, 64), ("none", "tanh"), "orthogonal")
    assert (args.device, args.threads, args.eval_every, args.checkpoint_every) == ("cpu", 1, 0, 0)


def test_a_runs_return_is_the_mean_of_its_last_ten_episodes(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    for name, values in (("a", [float(v) for v in range(1, 16)]), ("b", [7.0, 9.0]), ("c", [])):
        writer = SummaryWriter(str(tmp_path / "runs" / name))
        for index, value in enumerate(values):  # two episodes a step, as CleanRL's 4 envs log them
            writer.add_scalar("charts/episodic_return", value, index // 2 * 4)
        writer.add_scalar("losses/value_loss", 1.0, 0)
        writer.close()
    # a: the mean of 6..15; b: fewer than ten episodes, all of them; c: no episode, no return
    assert peers.tensorboard_returns(tmp_path) == [pytest.approx(10.5), pytest.approx(8.0)]


def result(arm, cpu_seconds, returns, seeds=4, note=""):
    return peers.ArmResult(arm, seeds, cpu_seconds, returns, note)


def test_the_table_gives_cost_per_seed_rate_ratio_and_the_return_check():
    alike = [270.0, 272.0, 268.0, 274.0]  # mean 271, s.e. √(20/3)/2 ≈ 1.29
    table = peers.markdown_table(
        [
            result("group", 10.0, [272.0, 274.0, 270.0, 276.0]),
            result("cleanrl", 40.0, alike),
            result("group-torch", 5.0, [200.0, 202.0, 198.0, 204.0]),
            result("rejax", None, [], note="skipped: no jax"),
        ]
    ).splitlines()
    assert table[0] == "| arm | CPU s per seed | seeds per CPU-hour | ratio to our group | return check |"
    assert table[2] == "| group | 2.50 | 1,440 | 1.00× | 273.0 ± 1.3, alike (Δ +2.0, s.e. summed 2.6) |"
    assert table[3] == "| cleanrl | 10.00 | 360 | 4.00× | 271.0 ± 1.3, the reference |"
    assert table[4] == "| group-torch | 1.25 | 2,880 | 0.50× | 201.0 ± 1.3, **differs** (Δ -70.0, s.e. summed 2.6) |"
    assert table[5] == "| rejax | – | – | – | skipped: no jax |"


def test_without_cleanrl_and_the_gymnasium_group_the_first_arm_and_the_torch_group_are_the_references():
    table = peers.markdown_table([result("ours", 8.0, [250.0, 260.0], seeds=2), result("group-torch", 2.0, [255.0], seeds=2)])
    assert table.splitlines()[2] == "| ours | 4.00 | 900 | 4.00× | 255.0 ± 5.0, the reference |"
    assert (
        table.splitlines()[3]
        == "| group-torch | 1.00 | 3,600 | 1.00× | 255.0 ± nan (1 of 2 seeds) (Δ +0.0; one seed: no standard error) |"
    )
    assert peers.return_check([], 2, [1.0, 2.0]) == "no episodes logged"
    assert math.isnan(peers.mean_and_error([3.0])[1])


@pytest.fixture
def cleanrl_script(tmp_path):
    path = tmp_path / "ppo.py"
    path.write_text(CLEANRL_LOOP)
    return path


def refusal(argv, capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        peers.parse_args(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert " — " in lines[0], lines[0]  # names the fix
    return lines[0]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--arms", "ours", "--seeds", "0"], "--seeds 0 trains no seed — pass 1 or more"),
        (["--arms", "ours", "--seeds", "two"], "argument --seeds: invalid int value: 'two'"),
        (
            ["--arms", "ours", "--steps", "511"],
            "--steps 511 is less than one rollout of 4 envs × 128 steps — pass 512 or more",
        ),
        (["--arms", "ours", "--core", "4096"], "--core 4096 is not a CPU this process may run on"),
        (["--arms", "ours", "cleanrl-ppo"], "argument --arms: invalid choice: 'cleanrl-ppo'"),
        (["--arms", "ours", "group", "ours"], "names an arm twice"),
        (["--arms", "cleanrl"], "the cleanrl arm needs --cleanrl PATH"),
        ([], "the cleanrl arm needs --cleanrl PATH"),  # the default arms include CleanRL's
        (["--arms", "cleanrl", "--cleanrl", "missing/ppo.py"], "--cleanrl missing/ppo.py: no such file"),
        (["--arms", "purejaxrl"], "the purejaxrl arm needs --purejaxrl PATH"),
        (["--arms", "ours", "--python", "missing/python"], "--python missing/python: not an executable"),
        (["--arms", "ours", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(argv, expected, capsys):
    assert expected in refusal(argv, capsys)


def test_the_default_core_is_the_first_this_process_may_run_on(monkeypatch):
    """Under `taskset -c 3,5` the runs pin to CPU 3 (CPU 0 would be refused), so the tool and its tests work on any
    set of cores a process is given."""
    monkeypatch.setattr(peers.os, "sched_getaffinity", lambda pid: {5, 3})
    assert peers.parse_args(["--arms", "ours"]).core == 3
    assert peers.parse_args(["--arms", "ours", "--core", "5"]).core == 5


def test_files_the_arms_cannot_use_are_refused_before_anything_runs(cleanrl_script, tmp_path, capsys):
    unknown = tmp_path / "other.py"
    unknown.write_text("print('not ppo.py')\n")
    assert "found 0 times" in refusal(["--arms", "cleanrl", "--cleanrl", str(unknown)], capsys)
    (tmp_path / "patched.py").write_text(peers.patch_for_gymnasium_1(CLEANRL_LOOP))
    assert "already patched" in refusal(["--arms", "cleanrl", "--cleanrl", str(tmp_path / "patched.py")], capsys)
    assert "no wrappers.py beside it" in refusal(["--arms", "purejaxrl", "--purejaxrl", str(cleanrl_script)], capsys)
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "old.log").write_text("")
    assert "is not an empty folder" in refusal(["--arms", "ours", "--scratch", str(tmp_path / "scratch")], capsys)
    # a good command line passes, and the CleanRL arm holds the patched text, not the file as fetched
    args = peers.parse_args(["--cleanrl", str(cleanrl_script), "--scratch", str(tmp_path / "new"), "--seeds", "2"])
    default_arms = ["cleanrl", "ours", "group", "group-torch", "group-compiled", "group-torch-compiled", "rejax"]
    assert args.arms == default_arms and "SAME_STEP" in args.cleanrl_text
    assert not (tmp_path / "new").exists()


def test_the_script_refuses_in_one_line_from_the_shell():
    result = run_script(str(REPO / "benchmarks" / "peers" / "run.py"), "--arms", "ours", "--steps", "100", timeout=60)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: --steps 100 is less than one rollout of 4 envs × 128 steps — pass 512 or more"
    ]


def test_run_py_imports_only_the_standard_library_at_the_top():
    # the JAX arm imports the recipe from run.py in an environment without this project, torch or tensorboard
    folder = str(REPO / "benchmarks" / "peers")
    code = f"import json, sys; sys.path.insert(0, {folder!r}); import run; print(json.dumps(sorted(sys.modules)))"
    result = run_script("-I", "-c", code, timeout=60)
    assert result.returncode == 0, result.stderr
    assert not {"torch", "numpy", "tensorboard", "cleanrl_plus"} & set(json.loads(result.stdout))


def test_every_arm_runs_the_same_whole_rollouts_and_seeds(cleanrl_script, tmp_path):
    args = peers.parse_args(["--cleanrl", str(cleanrl_script), "--seeds", "3", "--steps", "100000"])
    args.purejaxrl, args.jax_python = tmp_path / "purejaxrl" / "ppo.py", tmp_path / "jax-python"
    assert args.steps == 99_840  # 195 rollouts of 512, as CleanRL's 100000 // 512 (ours would run 196)
    scratch = tmp_path / "scratch"
    jobs = {arm: peers.arm_jobs(arm, args, scratch) for arm in peers.ARMS}
    for arm in ("cleanrl", "ours"):  # one process per seed
        assert [name for name, _, _ in jobs[arm]] == ["seed-1", "seed-2", "seed-3"]
        for seed, (_, argv, _) in enumerate(jobs[arm], start=1):
            flags = [str(word) for word in argv[2:]]
            assert flags[flags.index("--seed") + 1] == str(seed) and flags[flags.index("--total-timesteps") + 1] == "99840"
            assert " ".join(peers.recipe_flags()) in " ".join(flags)
    assert (
        jobs["cleanrl"][0][1][1] == scratch / "peers" / "cleanrl_ppo.py"
        and jobs["cleanrl"][1][2] == scratch / "cleanrl" / "seed-2"
    )
    ours = (("ours", "CartPole-v1"), ("group", "CartPole-v1"), ("group-torch", "torch:CartPole-v1"))
    ours += (("group-compiled", "CartPole-v1"), ("group-torch-compiled", "torch:CartPole-v1"))
    for arm, env_id in ours:
        for _, argv, _ in jobs[arm]:
            assert argv[1] == peers.REPO / "agents" / "ppo.py" and argv[argv.index("--env-id") + 1] == env_id
            assert argv[argv.index("--runs-dir") + 1] == scratch / arm / "runs"
            assert ("--compile" in argv) == arm.endswith("-compiled")
    for arm in ("group", "group-torch", "group-compiled", "group-torch-compiled", "rejax", "purejaxrl"):  # one process
        (_, argv, _), *more = jobs[arm]
        assert not more and argv[argv.index("--seeds") + 1 :][:3] == [1, 2, 3]
    for arm in ("rejax", "purejaxrl"):
        argv = jobs[arm][0][1]
        assert argv[:3] == [args.jax_python, peers.JAX_ARM, arm] and argv[argv.index("--steps") + 1] == 99_840
    argv = jobs["purejaxrl"][0][1]
    assert argv[argv.index("--script") + 1] == args.purejaxrl.resolve()


@pytest.mark.skipif(
    not shutil.which("taskset") or not os.access("/usr/bin/time", os.X_OK), reason="needs taskset, /usr/bin/time"
)
def test_a_run_is_timed_on_its_core_and_a_failed_one_names_its_log(tmp_path):
    core = min(os.sched_getaffinity(0))
    spin = (
        "import os; assert os.sched_getaffinity(0) == {%d} and os.environ['OMP_NUM_THREADS'] == '1'; sum(range(3_000_000))"
        % core
    )
    seconds = peers.timed_run([sys.executable, "-c", spin], tmp_path / "run", tmp_path / "ok.log", core)
    assert 0 < seconds < 30 and (tmp_path / "ok.log").read_text().startswith("$ taskset -c")
    with pytest.raises(peers.ArmFailed, match=f"exit 3, see {tmp_path / 'bad.log'}"):
        peers.timed_run([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "run", tmp_path / "bad.log", core)
