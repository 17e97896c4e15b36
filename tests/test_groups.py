"""A group of seeds in one process (`--seeds`, cleanrl_plus/members.py), end to end with PPO and GTR: each member is
the one-seed run of its seed bit for bit (CPU, one thread), at small sizes and at C-CHAIN's recipe's, an ordinary run in
its own directory; members never couple; a killed group resumes as a group; a member that diverges stops alone."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import assert_states_equal, cli_in_process, run_script
from test_reliability import _kill_after_a_checkpoint, _scalars

from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.config import parse_args
from cleanrl_plus.members import MemberEnvs

# rl-zoo's CartPole recipe, shortened: 2 iterations of 8 envs × 32 steps, 4 epochs × 4 minibatches (32 updates)
FLAGS = [
    "--threads",  # the subprocesses too: a batched matmul splits its sums differently over 2 threads
    "1",
    "--env-id",
    "torch:CartPole-v1",
    "--total-timesteps",
    "512",
    "--num-envs",
    "8",
    "--num-steps",
    "32",
    "--num-minibatches",
    "4",
    "--update-epochs",
    "4",
    "--learning-rate",
    "1e-3",
    "--eval-every",
    "256",
    "--eval-episodes",
    "3",
    "--log-every",
    "256",
    "--no-normalize-obs",
]
SEEDS = (3, 7, 5)
# where a member is its one-seed run within rounding only (a compiled group: tests/test_compiled_rollout.py)
TOLERANCE = 1e-4

REMEDIES = {
    "baseline": [],
    "normalisers": ["--normalize-obs", "--normalize-reward"],
    "continual": ["--env-id", "continual:obs-offset:torch:CartPole-v1", "--continual.steps-per-task", "256"],
    "redo": ["--net.activation", "relu", "--reset.method", "redo", "--reset.every", "8"],
    "cbp": ["--net.activation", "relu", "--reset.method", "cbp", "--reset.cbp-maturity", "4"],
    "shrink-perturb": ["--reset.method", "shrink-perturb", "--reset.every", "16"],
    "inject": ["--reset.method", "inject", "--reset.every", "16"],
    "l2-init": ["--reg.l2-init", "1e-2"],
    "parseval": ["--reg.parseval", "1e-3"],
    "nap": ["--nap.enabled"],
    "c-chain": ["--cchain.enabled"],
    "trac": ["--optim.trac"],
    "diagnostics": ["--diagnostics.every", "8", "--diagnostics.ntk-every", "16", "--diagnostics.ntk-batch", "4"],
}


def train(agent: str, flags: list[str], runs_dir: Path, run_name: str) -> dict:
    from commands.agent_modules import agent_module

    module = agent_module(agent)
    return module.main(parse_args(module.Args, [*flags, "--runs-dir", str(runs_dir), "--run-name", run_name]))


def member_dir(runs_dir: Path, name: str, seed: int, grouped: bool) -> Path:
    return runs_dir / (f"{name}__{seed}" if grouped else name)


def assert_close_states(group: dict, single: dict, where: str, tolerance: float = TOLERANCE) -> None:
    if isinstance(group, torch.Tensor):
        assert group.shape == single.shape, where
        if group.is_floating_point():
            assert torch.allclose(group, single, atol=tolerance, rtol=1e-3), f"{where}: {(group - single).abs().max()}"
        else:
            assert torch.equal(group, single), where
    elif isinstance(group, dict):
        assert group.keys() == single.keys(), where
        for key in group:
            assert_close_states(group[key], single[key], f"{where}.{key}", tolerance)
    elif isinstance(group, (list, tuple)):
        assert len(group) == len(single), where
        for i, (a, b) in enumerate(zip(group, single)):
            assert_close_states(a, b, f"{where}[{i}]", tolerance)


@pytest.mark.parametrize("remedy", sorted(REMEDIES))
def test_each_member_of_a_ppo_group_is_the_one_seed_run_of_its_seed(remedy, tmp_path):
    """Member k of `--seeds 3 7 5` ends with the checkpoint (networks, Adam moments, normalisers, remedy state, RNG of its
    own) of `--seed s_k` and logs the same series, bit for bit."""
    flags = [*FLAGS, *REMEDIES[remedy]]
    summary = train("ppo", [*flags, "--seeds", *map(str, SEEDS)], tmp_path, "group")
    assert [member["seed"] for member in summary["members"]] == list(SEEDS)
    for seed in SEEDS[:2]:
        train("ppo", [*flags, "--seed", str(seed)], tmp_path, f"single{seed}")
        assert_member_is_its_one_seed_run(tmp_path, "group", f"single{seed}", seed, f"{remedy} seed {seed}")


def assert_member_is_its_one_seed_run(runs_dir: Path, group: str, single: str, seed: int, where: str) -> None:
    """Seed `seed`'s member of run `group` and the one-seed run `single`: the same checkpoint, scalar series (but the
    speed) and evaluation returns, bit for bit."""
    together, alone = member_dir(runs_dir, group, seed, True), member_dir(runs_dir, single, seed, False)
    group_state, single_state = load_checkpoint(together / "checkpoint.pt"), load_checkpoint(alone / "checkpoint.pt")
    for state in (group_state, single_state):
        state.pop("rng")  # the global RNG is the process's: a group's is seeded from its first member
    assert_states_equal(group_state, single_state, where)
    group_tags, single_tags = _scalars(together), _scalars(alone)
    assert sorted(group_tags) == sorted(single_tags), where
    for tag, points in single_tags.items():
        if tag != "charts/SPS":
            assert group_tags[tag] == points, f"{where}: {tag}"
    returns = json.loads((together / "summary.json").read_text())["eval"]["returns"]
    assert returns == json.loads((alone / "summary.json").read_text())["eval"]["returns"], f"{where}: evaluation"


# C-CHAIN's classic-control recipe at its own sizes (cleanrl_plus/recipes/ppo-cchain-control.toml: 3 × 256 LeakyReLU networks,
# 800-step rollouts, minibatches of 32), three iterations
RECIPE = ["--threads", "1", "--env-id", "continual:cchain-cartpole", "--cchain.enabled", "--total-timesteps", "2400"]


@pytest.mark.slow  # ≈ 65 s on a busy 2-core box; tests/test_members.py checks each kernel at these sizes in seconds
def test_a_member_of_cchains_recipe_is_its_one_seed_run(tmp_path):
    """Seed 2 of `--seeds 2 3 4 5` is `--seed 2` for three iterations of C-CHAIN's recipe, bit for bit: alone it takes
    its one-output value head through MKL's gemm and steps its 2-logit head's biases in scalar code; in a group of four
    it would take them through MKL's batched gemm and in whole AVX2 vectors (cleanrl_plus/nn.py EnsembleLinear,
    plasticity/optimizers.py ElementStepAdam take such products and steps member by member)."""
    train("ppo", [*RECIPE, "--seeds", "2", "3", "4", "5"], tmp_path, "group")
    train("ppo", [*RECIPE, "--seed", "2"], tmp_path, "single")
    assert_member_is_its_one_seed_run(tmp_path, "group", "single", 2, "C-CHAIN recipe seed 2")


def test_each_member_of_a_gtr_group_is_the_one_seed_run_of_its_seed(tmp_path):
    train("gtr", [*FLAGS, "--seeds", "3", "7"], tmp_path, "group")
    train("gtr", [*FLAGS, "--seed", "7"], tmp_path, "single")
    group_state = load_checkpoint(member_dir(tmp_path, "group", 7, True) / "checkpoint.pt")
    single_state = load_checkpoint(member_dir(tmp_path, "single", 7, False) / "checkpoint.pt")
    for state in (group_state, single_state):
        state.pop("rng")
    assert_states_equal(group_state, single_state, "gtr")


def test_changing_one_members_seed_leaves_the_other_members_unchanged(tmp_path):
    """Members never couple: (3, 7, 5) and (3, 8, 5) log bit-identical series and checkpoints for seeds 3 and 5."""
    assert_seeds_3_and_5_unchanged_by_the_middle_seed(
        "ppo", [*FLAGS, "--reg.l2-init", "1e-2", "--cchain.enabled", "--normalize-obs"], tmp_path
    )


def assert_seeds_3_and_5_unchanged_by_the_middle_seed(agent: str, flags: list[str], tmp_path: Path) -> dict[str, list]:
    """Train the groups (3, 7, 5) and (3, 8, 5); seeds 3 and 5 log the same series and end with the same checkpoint, bit
    for bit. Returns seed 3's series."""
    train(agent, [*flags, "--seeds", "3", "7", "5"], tmp_path, "a")
    train(agent, [*flags, "--seeds", "3", "8", "5"], tmp_path, "b")
    for seed in (3, 5):
        first, second = member_dir(tmp_path, "a", seed, True), member_dir(tmp_path, "b", seed, True)
        expected, got = _scalars(first), _scalars(second)
        assert sorted(got) == sorted(expected)
        for tag in expected:
            if tag != "charts/SPS":
                assert got[tag] == expected[tag], (seed, tag)
        a, b = (load_checkpoint(d / "checkpoint.pt") for d in (first, second))
        for state in (a, b):
            state.pop("rng")  # the global RNG is the process's: a group's is seeded from its first member
        assert_states_equal(a, b, f"seed {seed}")
    return _scalars(member_dir(tmp_path, "a", 3, True))


def test_a_member_that_diverges_stops_alone_and_the_others_are_unchanged(tmp_path, monkeypatch):
    """NaN rewards for member 1 from its 100th step: its summary says it diverged, it logs no more; members 0 and 2 log
    the series of an undisturbed group and finish."""
    flags = [*FLAGS, "--total-timesteps", "768", "--log-every", "128"]
    train("ppo", [*flags, "--seeds", *map(str, SEEDS)], tmp_path, "calm")
    step = MemberEnvs.step

    def poisoned(self, actions):
        result = step(self, actions)
        self.steps_taken = getattr(self, "steps_taken", 0) + 1
        if self.steps_taken >= 100 and self.members == 3:
            result.reward[1] = float("nan")
        return result

    monkeypatch.setattr(MemberEnvs, "step", poisoned)
    summary = train("ppo", [*flags, "--seeds", *map(str, SEEDS)], tmp_path, "stormy")
    diverged = summary["members"][1]
    assert "diverged" in diverged and diverged["diverged"]["step"] < 768
    last_logged = max(step for points in _scalars(member_dir(tmp_path, "stormy", 7, True)).values() for step, _ in points)
    assert last_logged <= diverged["diverged"]["step"]
    for k in (0, 2):
        assert summary["members"][k]["finished"] and "diverged" not in summary["members"][k]
        expected = _scalars(member_dir(tmp_path, "calm", SEEDS[k], True))
        got = _scalars(member_dir(tmp_path, "stormy", SEEDS[k], True))
        for tag in expected:
            if tag != "charts/SPS":
                assert got[tag] == expected[tag], (k, tag)


def assert_a_killed_group_resumes_as_the_straight_group(agent: str, flags: list[str], tmp_path: Path, after_step: int) -> None:
    """kill -9 a group of seeds 3 and 7 `delay` after a checkpoint past `after_step`, `--resume` it from the second
    member's directory (any member resumes them all), run the same group straight in-process, and compare member by
    member: the same tags at the same steps with the same values, and the same checkpoint, bit for bit (CPU)."""
    seeds = ["--seeds", "3", "7"]
    command = [sys.executable, f"agents/{agent}.py", *flags, *seeds, "--run-name", "killed"]
    checkpoint_step = _kill_after_a_checkpoint(command, tmp_path / "killed__3", after_step, 0.2)
    assert after_step <= checkpoint_step
    result = run_script(f"agents/{agent}.py", "--resume", str(tmp_path / "killed__7"))
    assert result.returncode == 0, result.stderr
    module = importlib.import_module(f"agents.{agent}")
    module.main(parse_args(module.Args, [*flags, *seeds, "--run-name", "straight"]))
    for seed in (3, 7):
        expected, got = _scalars(tmp_path / f"straight__{seed}"), _scalars(tmp_path / f"killed__{seed}")
        assert sorted(got) == sorted(expected)
        for tag in expected:
            assert [s for s, _ in got[tag]] == [s for s, _ in expected[tag]], tag
            if tag != "charts/SPS":
                assert got[tag] == expected[tag], (seed, tag)
        a = load_checkpoint(tmp_path / f"straight__{seed}" / "checkpoint.pt")
        b = load_checkpoint(tmp_path / f"killed__{seed}" / "checkpoint.pt")
        assert_states_equal(a, b, f"seed {seed}")


def test_a_killed_group_resumes_as_a_group_and_logs_what_a_straight_group_logs(tmp_path):
    flags = [*FLAGS, "--total-timesteps", "3072", "--checkpoint-every", "512", "--eval-every", "512", "--log-every", "256"]
    assert_a_killed_group_resumes_as_the_straight_group(
        "ppo", [*flags, "--reg.l2-init", "1e-2", "--runs-dir", str(tmp_path)], tmp_path, 512
    )


def test_group_flags_that_cannot_be_per_member_are_refused_in_one_line(runs_dir, monkeypatch, capsys):
    for flags, says in (
        (["--optim.name", "kron"], "Kron"),
        (["--target-kl", "0.02"], "--target-kl"),
        (["--capture-video"], "--capture-video"),
        (["--seeds", "3", "3"], "repeats a seed"),
    ):
        result = cli_in_process("ppo", [*FLAGS, "--runs-dir", runs_dir, "--seeds", "3", "4", *flags], monkeypatch, capsys)
        assert result.returncode == 2 and says in result.stderr and len(result.stderr.strip().splitlines()) == 1, flags
        assert not Path(runs_dir).exists() or not any(Path(runs_dir).iterdir())


def test_a_group_checkpoint_cut_short_by_a_kill_is_completed_or_dropped_as_a_whole(tmp_path):
    """Members' checkpoints are replaced only once every member's next one is written (checkpoint.pt.pending): a kill
    between two replacements is completed on resume, a kill while they were being written leaves the old ones."""
    from cleanrl_plus.checkpoint import finish_group_checkpoint, pending_path, save_checkpoint

    paths = [tmp_path / name / "checkpoint.pt" for name in ("a", "b", "c")]
    for path in paths:
        path.parent.mkdir()
        save_checkpoint(path, {"global_step": 100})

    def steps() -> list[int]:
        return [load_checkpoint(path)["global_step"] for path in paths]

    save_checkpoint(paths[0], {"global_step": 200})  # a's replaced; the kill came before b's and c's
    for path in paths[1:]:
        save_checkpoint(pending_path(path), {"global_step": 200})
    finish_group_checkpoint(paths)
    assert steps() == [200, 200, 200] and not any(pending_path(path).exists() for path in paths)

    save_checkpoint(pending_path(paths[0]), {"global_step": 300})  # killed while b's and c's were being written
    finish_group_checkpoint(paths)
    assert steps() == [200, 200, 200] and not pending_path(paths[0]).exists()


def test_no_members_checkpoint_is_replaced_before_every_members_next_one_is_written(tmp_path, monkeypatch, capsys):
    """The second member's next checkpoint fails to write (a full disk): the first member's checkpoint.pt keeps its
    bytes, the run stops with one line, and the group resumes with both members at the step they last shared."""
    import errno

    import cleanrl_plus.checkpoint

    first, second = tmp_path / "group__3", tmp_path / "group__7"
    real_save, first_checkpoint = torch.save, {}

    def full_disk_for_the_second_member(state, file):
        if state["global_step"] == 512 and Path(file.name).parent == second:
            first_checkpoint["bytes"] = (first / "checkpoint.pt").read_bytes()  # as it was before this checkpoint began
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(state, file)

    monkeypatch.setattr(cleanrl_plus.checkpoint.torch, "save", full_disk_for_the_second_member)
    flags = [*FLAGS, "--checkpoint-every", "256", "--seeds", "3", "7", "--runs-dir", str(tmp_path), "--run-name", "group"]
    result = cli_in_process("ppo", flags, monkeypatch, capsys)
    assert result.returncode == 1 and result.stderr.startswith(f"error: cannot write {second / 'checkpoint.pt'}: No space")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert load_checkpoint(first / "checkpoint.pt")["global_step"] == 256
    assert (first / "checkpoint.pt").read_bytes() == first_checkpoint["bytes"]
    assert load_checkpoint(second / "checkpoint.pt")["global_step"] == 256

    monkeypatch.undo()
    result = run_script("agents/ppo.py", "--resume", str(second))
    assert result.returncode == 0 and "resuming from step 256" in result.stdout, result.stderr
    assert [load_checkpoint(d / "checkpoint.pt")["global_step"] for d in (first, second)] == [512, 512]
