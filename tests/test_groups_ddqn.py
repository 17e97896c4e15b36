"""A group of seeds in one process with Double DQN (`--seeds`, cleanrl_plus/members.py): each member is the one-seed
run of its seed (replay, ε-greedy draws, TD targets, remedies of its own), members never couple, a MinAtar group
writes ordinary runs that `cleanrl-plus eval` loads, and a killed group resumes as a group."""

from __future__ import annotations

import json

import pytest
from test_groups import (
    assert_a_killed_group_resumes_as_the_straight_group,
    assert_close_states,
    assert_seeds_3_and_5_unchanged_by_the_middle_seed,
    member_dir,
    train,
)
from test_reliability import _scalars

from cleanrl_plus.checkpoint import load_checkpoint
from commands.eval import EvalArgs, evaluate_run

# rl-zoo's CartPole recipe, shortened: 1 env, 256 random-ish steps, then 16 gradient steps every 32 env steps
# (256 updates in 768 steps), a target copy every 64 steps, ReDo every 32 updates and an L2-init penalty
FLAGS = [
    "--threads",  # the subprocesses too: a batched matmul splits its sums differently over 2 threads
    "1",
    "--env-id",
    "torch:CartPole-v1",
    "--total-timesteps",
    "768",
    "--learning-starts",
    "256",
    "--train-frequency",
    "32",
    "--gradient-steps",
    "16",
    "--target-network-frequency",
    "64",
    "--batch-size",
    "32",
    "--hidden-sizes",
    "64",
    "64",
    "--buffer-size",
    "1000",
    "--eval-every",
    "384",
    "--eval-episodes",
    "3",
    "--log-every",
    "64",
    "--no-progress",
]
REMEDIES = ["--reg.l2-init", "1e-2", "--reset.method", "redo", "--reset.every", "32"]
SEEDS = (3, 7, 5)
TOLERANCE = 1e-4  # batched and single kernels may round differently (measured: bit-identical on one CPU thread)
SERIES = ("losses/td_loss", "losses/q_values", "replay/sample_age", "remedies/critic_l2_init")


def test_each_member_of_a_ddqn_group_is_the_one_seed_run_of_its_seed(tmp_path):
    """Member k of `--seeds 3 7 5` ends with the checkpoint (Q-network, target, Adam moments, replay, ReDo's state, its
    generators) of `--seed s_k`, within float tolerance, and logs the same losses and Q-values at the same steps."""
    flags = [*FLAGS, *REMEDIES]
    summary = train("ddqn", [*flags, "--seeds", *map(str, SEEDS)], tmp_path, "group")
    assert [member["seed"] for member in summary["members"]] == list(SEEDS)
    assert all(member["num_updates"] == 256 for member in summary["members"])
    for seed in SEEDS[1:]:
        train("ddqn", [*flags, "--seed", str(seed)], tmp_path, f"single{seed}")
        together, alone = member_dir(tmp_path, "group", seed, True), member_dir(tmp_path, f"single{seed}", seed, False)
        group_state, single_state = load_checkpoint(together / "checkpoint.pt"), load_checkpoint(alone / "checkpoint.pt")
        for state in (group_state, single_state):  # the global RNG is the process's: a group's is seeded from its first
            state.pop("rng")
        assert_close_states(group_state, single_state, f"seed {seed}")
        group_tags, single_tags = _scalars(together), _scalars(alone)
        assert sorted(group_tags) == sorted(single_tags)
        assert all(tag in single_tags for tag in SERIES), sorted(single_tags)
        for tag, points in single_tags.items():
            assert [step for step, _ in group_tags[tag]] == [step for step, _ in points], tag
            if tag != "charts/SPS":
                expected = pytest.approx([value for _, value in points], rel=1e-4, abs=TOLERANCE)
                assert [value for _, value in group_tags[tag]] == expected, (seed, tag)
        returns = json.loads((together / "summary.json").read_text())["eval"]["returns"]
        assert returns == json.loads((alone / "summary.json").read_text())["eval"]["returns"], "evaluation"


CONTINUAL = ["--env-id", "continual:obs-offset:torch:CartPole-v1", "--continual.steps-per-task", "256"]
FAMILIES = {  # every remedy family, a few at once where they combine, on 512 steps (128 updates)
    "cbp": ["--reset.method", "cbp", "--reset.cbp-maturity", "4"],
    "inject": ["--reset.method", "inject", "--reset.every", "64"],
    "shrink-perturb+parseval+c-chain": ["--reset.method", "shrink-perturb", "--reset.every", "32"]
    + ["--reg.parseval", "1e-3", "--cchain.enabled"],
    "regrama+trac": ["--reset.method", "regrama", "--reset.every", "16", "--optim.trac"],
    "nap+swd+diagnostics": ["--nap.enabled", "--swd.enabled", "--swd.decay-steps", "200", "--diagnostics.every", "8"]
    + ["--diagnostics.ntk-every", "16", "--diagnostics.ntk-batch", "4"],
    "layer-norm+crelu+weight-clip": ["--net.norm", "layer", "--net.activation", "crelu", "--clip.kappa", "2.0"],
    "continual-oracle": [*CONTINUAL, "--continual.oracle"],
    "continual-reset-replay": [*CONTINUAL, "--continual.reset-replay", "--continual.reset-exploration"],
    "minatar-cnn+redo": ["--env-id", "MinAtar/Breakout-v1", "--total-timesteps", "384", "--eval-epsilon", "0.2"]
    + ["--reset.method", "redo", "--reset.every", "16"],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_remedy_family_acts_on_each_ddqn_member_as_on_its_one_seed_run(family, tmp_path):
    """Member 7 of `--seeds 3 7` ends with the checkpoint of `--seed 7` (remedy state included) and logs the same tags at
    the same steps, for every remedy family, the continual settings and MinAtar's grouped CNN."""
    flags = [*FLAGS, "--total-timesteps", "512", *FAMILIES[family]]
    train("ddqn", [*flags, "--seeds", "3", "7"], tmp_path, "group")
    train("ddqn", [*flags, "--seed", "7"], tmp_path, "single")
    together, alone = member_dir(tmp_path, "group", 7, True), member_dir(tmp_path, "single", 7, False)
    group_state, single_state = load_checkpoint(together / "checkpoint.pt"), load_checkpoint(alone / "checkpoint.pt")
    for state in (group_state, single_state):
        state.pop("rng")
    assert_close_states(group_state, single_state, family)
    group_tags, single_tags = _scalars(together), _scalars(alone)
    assert sorted(group_tags) == sorted(single_tags)
    for tag, points in single_tags.items():
        assert [step for step, _ in group_tags[tag]] == [step for step, _ in points], tag


def test_changing_one_ddqn_members_seed_leaves_the_other_members_unchanged(tmp_path):
    """Members never couple: (3, 7, 5) and (3, 8, 5) log bit-identical series and checkpoints for seeds 3 and 5, with
    SWD sampling, C-CHAIN and gradient clipping on."""
    flags = [*FLAGS, *REMEDIES, "--total-timesteps", "512", "--swd.enabled", "--swd.decay-steps", "200", "--cchain.enabled"]
    assert "losses/td_loss" in assert_seeds_3_and_5_unchanged_by_the_middle_seed("ddqn", flags, tmp_path)


def test_a_minatar_group_writes_one_ordinary_run_per_member_that_eval_loads(tmp_path):
    """MinAtar's CNN as grouped convolutions: each member's directory has its own seed in args.json, its summary and a
    checkpoint whose policy `cleanrl-plus eval` rebuilds, giving the member's own final evaluation."""
    flags = [
        *("--threads", "1", "--env-id", "MinAtar/SpaceInvaders-v1", "--total-timesteps", "300", "--learning-starts", "100"),
        *("--train-frequency", "4", "--buffer-size", "300", "--batch-size", "16", "--eval-every", "0"),
        *("--eval-episodes", "3", "--eval-epsilon", "0.2", "--log-every", "100", "--no-progress"),
    ]
    summary, returns = train("ddqn", [*flags, "--seeds", "4", "9"], tmp_path, "grid"), []
    for k, seed in enumerate((4, 9)):
        run_dir = member_dir(tmp_path, "grid", seed, True)
        assert json.loads((run_dir / "args.json").read_text())["seed"] == seed
        member_summary = json.loads((run_dir / "summary.json").read_text())
        assert member_summary["seed"] == seed and member_summary["finished"] and member_summary["num_updates"] == 50
        assert member_summary == json.loads(json.dumps(summary["members"][k]))  # what the group returned for it
        state = load_checkpoint(run_dir / "checkpoint.pt")
        assert state["replay"]["actions"].shape == (1, 300)  # the member's own replay, as a one-seed run stores it
        result = evaluate_run(EvalArgs(str(run_dir), episodes=3))
        assert result["agent"] == "ddqn"
        assert result["returns"] == pytest.approx(member_summary["eval"]["returns"], rel=1e-5, abs=1e-4)
        returns.append(result["returns"])
    assert returns[0] != returns[1] and sum(map(sum, returns)) > 0  # (an untrained greedy policy scores some points)


def test_a_killed_ddqn_group_resumes_as_a_group_and_logs_what_a_straight_group_logs(tmp_path):
    """kill -9 after a checkpoint, then `--resume` of one member's directory: both members continue, log the straight
    group's series tag by tag and end with its checkpoints (replay, networks, generators), bit for bit (CPU)."""
    flags = [
        *FLAGS,
        *REMEDIES,
        *("--total-timesteps", "4096", "--checkpoint-every", "512", "--eval-every", "1024", "--log-every", "256"),
        *("--runs-dir", str(tmp_path)),
    ]
    assert_a_killed_group_resumes_as_the_straight_group("ddqn", flags, tmp_path, 512)
