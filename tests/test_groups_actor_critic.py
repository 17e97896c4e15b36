"""TD3 and SAC+SimBa as groups (`--seeds`, cleanrl_plus/members.py): each member is the one-seed run of its seed (within
float tolerance: batched and single kernels round differently), members never couple (exploration, LEAST's stops, SAC's
α), a reset restarts each member's temperature on its own, and a killed group resumes bit for bit."""

from __future__ import annotations

import math

import pytest
import torch
from test_groups import (
    assert_a_killed_group_resumes_as_the_straight_group,
    assert_close_states,
    assert_seeds_3_and_5_unchanged_by_the_middle_seed,
    member_dir,
    train,
)
from test_reliability import _scalars

from cleanrl_plus.checkpoint import load_checkpoint

PENDULUM = ["--threads", "1", "--env-id", "torch:Pendulum-v1", "--buffer-size", "1000", "--batch-size", "32"]
# TD3: 300 steps, learning from step 100: 200 critic and 100 actor updates
TD3_FLAGS = [*PENDULUM, "--total-timesteps", "300", "--learning-starts", "100", "--hidden-sizes", "32", "32"]
TD3_FLAGS += ["--eval-every", "150", "--eval-episodes", "2", "--log-every", "50"]
# SAC: 250 steps, learning from step 100, 2 updates a step: 300 updates of actor, temperature and critic
SAC_FLAGS = [*PENDULUM, "--total-timesteps", "250", "--learning-starts", "100", "--actor-width", "16", "--critic-width", "16"]
SAC_FLAGS += ["--critic-blocks", "1", "--eval-every", "125", "--eval-episodes", "2", "--log-every", "50"]
SAC_MLP = ["--network", "mlp", "--mlp-hidden-sizes", "32", "32"]
C51 = ["--critic.distributional", "--critic.num-atoms", "21", "--critic.v-min", "-100", "--critic.v-max", "10"]
FLAGS = {"td3": TD3_FLAGS, "sac_simba": SAC_FLAGS}
SEEDS = (3, 7, 5)
# batched (bmm over K members) and single kernels round differently: allclose(atol=1e-4, rtol=1e-3) over every
# checkpointed tensor; measured max |Δ| over the cases below: 1e-7 (TD3 C51) to 5e-5 (SAC+SimBa, S&P)
TOLERANCE = 1e-4

CASES = {
    "td3-l2-init-shrink-perturb": (
        "td3",
        ["--reg.l2-init", "1e-2", "--reset.method", "shrink-perturb", "--reset.every", "60"],
    ),
    "td3-c51-redo-normalised-per-env-noise": (
        "td3",
        [*C51, "--reset.method", "redo", "--reset.every", "50", "--normalize-obs", "--num-envs", "2"]
        + ["--exploration-noise-min", "0.05", "--exploration-noise-max", "0.4", "--n-step", "2"],
    ),
    "sac-simba-l2-init-shrink-perturb": (
        "sac_simba",
        ["--reg.l2-init", "1e-2", "--reset.method", "shrink-perturb", "--reset.every", "60"],
    ),
    "sac-mlp-c51-redo-twin": (
        "sac_simba",
        [*SAC_MLP, *C51, "--clipped-double-q", "on", "--reset.method", "redo", "--reset.every", "50", "--reg.l2-init", "1e-2"],
    ),
    "sac-simba-full-reset": ("sac_simba", ["--reset.method", "full", "--reset.every", "70"]),  # α restarts with the actor
}


def _checkpoint(run_dir) -> dict:
    state = load_checkpoint(run_dir / "checkpoint.pt")
    state.pop("rng")  # the global RNG is the process's: a group's is seeded from its first member
    return state


def compare_member_with_its_one_seed_run(agent: str, flags: list[str], tmp_path, seed: int = 7) -> None:
    summary = train(agent, [*flags, "--seeds", *map(str, SEEDS)], tmp_path, "group")
    assert [member["seed"] for member in summary["members"]] == list(SEEDS)
    train(agent, [*flags, "--seed", str(seed)], tmp_path, "single")
    together, alone = member_dir(tmp_path, "group", seed, True), member_dir(tmp_path, "single", seed, False)
    group_state, single_state = _checkpoint(together), _checkpoint(alone)
    assert_close_states(group_state, single_state, f"{agent} seed {seed}", TOLERANCE)
    group_tags, single_tags = _scalars(together), _scalars(alone)
    assert sorted(group_tags) == sorted(single_tags)
    for tag, points in single_tags.items():
        assert [step for step, _ in group_tags[tag]] == [step for step, _ in points], tag
        if tag != "charts/SPS":
            assert [v for _, v in group_tags[tag]] == pytest.approx([v for _, v in points], rel=1e-3, abs=1e-3), tag


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_member_of_an_actor_critic_group_is_the_one_seed_run_of_its_seed(case, tmp_path):
    """Member 7 of `--seeds 3 7 5` ends with the checkpoint of `--seed 7` (networks, targets, optimisers, replay,
    normalisers, noise scales, SAC's α and its Adam, remedy state, its generators) and logs the same series, within
    float tolerance, after a few hundred updates with remedies on."""
    agent, extra = CASES[case]
    compare_member_with_its_one_seed_run(agent, [*FLAGS[agent], *extra], tmp_path)


INDEPENDENCE = {
    # LEAST stops as many episodes as it can (its thresholds per member), FastTD3's per-env noise, normalisers, SWD, C-CHAIN
    "td3": [*TD3_FLAGS, "--total-timesteps", "500", "--num-envs", "2", "--exploration-noise-max", "0.4", "--normalize-obs"]
    + ["--least.enabled", "--least.start", "0", "--least.window", "8", "--least.weight", "2.0", "--least.min-history", "1"]
    + ["--swd.enabled", "--cchain.enabled"],
    # per-member α (logged as losses/alpha), LEAST's stops
    "sac_simba": [*SAC_FLAGS, *SAC_MLP, "--total-timesteps", "500", "--num-envs", "2"]
    + ["--least.enabled", "--least.start", "0", "--least.window", "8", "--least.weight", "20", "--least.min-history", "1"],
}


@pytest.mark.parametrize("agent", sorted(INDEPENDENCE))
def test_changing_one_members_seed_leaves_the_other_members_unchanged(agent, tmp_path):
    """(3, 7, 5) and (3, 8, 5) log bit-identical series and checkpoints for seeds 3 and 5: exploration, sampling, LEAST's
    histories and stops, and SAC's temperature are each member's own."""
    assert_seeds_3_and_5_unchanged_by_the_middle_seed(agent, INDEPENDENCE[agent], tmp_path)
    stopped = sum(
        float(_checkpoint(member_dir(tmp_path, "a", seed, True))["plasticity"]["least"]["stopped"].sum()) for seed in (3, 5)
    )
    assert stopped > 0, "LEAST stopped no episode: the test would not see its per-member stops"
    changed = _checkpoint(member_dir(tmp_path, "b", 8, True))
    assert not torch.equal(changed["replay"]["actions"], _checkpoint(member_dir(tmp_path, "a", 7, True))["replay"]["actions"])


def test_resetting_chosen_members_restarts_only_their_temperature_and_its_adam_state():
    """Temperature.reset(chosen): the chosen members' log α returns to log α₀ and their Adam moments and step counts start
    afresh (their next step is a fresh Adam's), the others' α and Adam state are untouched; reset() restarts all."""
    from agents.sac_simba import Args, Temperature

    args = Args(initial_alpha=0.1, alpha_learning_rate=0.05)
    temperature = Temperature(args, action_dim=2, device=torch.device("cpu"), members=3)
    draws = torch.Generator().manual_seed(0)
    log_probs = [torch.randn(3, 16, generator=draws) for _ in range(6)]
    for log_prob in log_probs[:5]:
        temperature.minimise(log_prob)
    before = temperature.log_alpha.detach().clone()
    state = {key: value.clone() for key, value in temperature.optimizer.state[temperature.log_alpha].items()}
    chosen = torch.tensor([False, True, False])
    temperature.reset(chosen)
    assert float(temperature.log_alpha[1]) == pytest.approx(math.log(0.1))
    assert torch.equal(temperature.log_alpha[~chosen], before[~chosen])
    after = temperature.optimizer.state[temperature.log_alpha]
    for key in ("exp_avg", "exp_avg_sq"):
        assert after[key][1] == 0 and torch.equal(after[key][~chosen], state[key][~chosen]), key
    report = temperature.minimise(log_probs[5])
    fresh = Temperature(args, action_dim=2, device=torch.device("cpu"), members=1)
    fresh_report = fresh.minimise(log_probs[5][1:2])
    torch.testing.assert_close(report["losses/alpha"][1:2], fresh_report["losses/alpha"], rtol=1e-6, atol=1e-7)
    untouched = Temperature(args, action_dim=2, device=torch.device("cpu"), members=3)
    for log_prob in log_probs:
        untouched.minimise(log_prob)
    # the restarted entry's per-element Adam path rounds the others' step differently than the fused one (≈ 1e-7)
    torch.testing.assert_close(temperature.alpha[~chosen], untouched.alpha[~chosen], rtol=1e-5, atol=1e-7)
    temperature.reset()
    assert torch.allclose(temperature.alpha, torch.full((3,), 0.1)) and not temperature.optimizer.state


def test_a_killed_td3_group_resumes_as_a_group_and_logs_what_a_straight_group_logs(tmp_path):
    """kill -9 after a checkpoint, then `--resume` of one member's directory: every member logs the straight group's
    series, tag by tag, and ends with its checkpoint, bit for bit (CPU, one thread)."""
    flags = [*TD3_FLAGS, "--total-timesteps", "800", "--checkpoint-every", "200", "--eval-every", "200"]
    flags += ["--normalize-obs", "--reg.l2-init", "1e-2", "--runs-dir", str(tmp_path)]
    assert_a_killed_group_resumes_as_the_straight_group("td3", flags, tmp_path, 200)
