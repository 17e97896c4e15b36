"""The evaluator (cleanrl_plus/evaluator.py) on real envs: each episode's return stops at its end, every
evaluation starts from the same states without touching the training RNG, and a continual run evaluates on the
task the agent is in."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl_plus.evaluator import EVAL_SEED_OFFSET, Evaluator
from cleanrl_plus.members import Members
from envs.continual import ContinualArgs


def balance(obs: torch.Tensor, members: Members | None = None) -> torch.Tensor:
    """Push toward the side the pole leans to: it balances for a while, episodes of different lengths. Observations
    (members, episodes, 4) → actions (members, episodes); it draws nothing from the members' generators."""
    return (obs[..., 2] > 0).long()


def gymnasium_returns(seed: int, num_episodes: int) -> list[float]:
    """The same policy in plain gymnasium, one env per episode, seeded as the evaluator's vector env seeds them."""
    returns = []
    for i in range(num_episodes):
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(balance(torch.as_tensor(obs)[None])[0]))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return returns


@pytest.mark.parametrize("check_every", [1, 16])
def test_each_return_counts_rewards_only_until_its_episode_ends(check_every):
    """Also when the host checks for the end only every 16 steps (the default: fewer device syncs), stepping past it."""
    evaluator = Evaluator("CartPole-v1", 4, seed=3, device=torch.device("cpu"))
    evaluator.check_every = check_every
    returns = evaluator(balance)
    expected = gymnasium_returns(3 + EVAL_SEED_OFFSET, 4)
    assert len(set(expected)) > 1  # episodes end at different steps, so rewards after an end would show
    np.testing.assert_array_equal(returns, [expected])  # (members, episodes): a one-seed run is a group of one


@pytest.mark.parametrize("draws_from", ["members", "torch"])
def test_every_evaluation_starts_alike_and_leaves_the_training_rng_alone(draws_from):
    """A policy draws its random numbers from the members' evaluation generators (the agents' policies), or from torch's
    global RNG (which the evaluator forks)."""
    evaluator = Evaluator("CartPole-v1", 3, seed=0, device=torch.device("cpu"))
    first_obs = []

    def epsilon_greedy(obs, members):  # draws random numbers, like DDQN's evaluation policy
        if draws_from == "members":
            return torch.where(members.rand(obs.shape[1]) < 0.3, members.randint(2, obs.shape[1]), balance(obs))
        return torch.where(torch.rand(obs.shape[:2]) < 0.3, torch.randint(0, 2, obs.shape[:2]), balance(obs))

    def recording(obs, members):
        if not recording.started:
            first_obs.append(obs.clone())
            recording.started = True
        return epsilon_greedy(obs, members)

    results = []
    for _ in range(2):
        recording.started = False
        torch.manual_seed(123)
        training_rng = torch.get_rng_state()
        results.append(evaluator(recording))
        assert torch.equal(torch.get_rng_state(), training_rng), "evaluation consumed training random numbers"
        torch.rand(5)  # training moves on between evaluations
    assert torch.equal(first_obs[0], first_obs[1])
    np.testing.assert_array_equal(results[0], results[1])  # same starts and the same ε draws: the same episodes


def test_a_continual_evaluator_plays_the_task_it_is_set_to():
    continual = ContinualArgs(steps_per_task=100, num_tasks=2)
    evaluator = Evaluator("continual:reward-flip:CartPole-v1", 4, seed=3, device=torch.device("cpu"), continual=continual)
    expected = np.array(gymnasium_returns(3 + EVAL_SEED_OFFSET, 4))
    evaluator.env.set_task(1)
    np.testing.assert_array_equal(evaluator(balance), [-expected])
    evaluator.env.set_task(0)
    np.testing.assert_array_equal(evaluator(balance), [expected])


def test_a_continual_run_evaluates_on_the_task_the_agent_is_in(runs_dir):
    from agents import ppo

    args = ppo.Args(
        env_id="continual:reward-flip:CartPole-v1",
        continual=ContinualArgs(steps_per_task=256, num_tasks=3),
        total_timesteps=768,
        num_steps=64,
        num_minibatches=2,
        update_epochs=1,
        hidden_sizes=(16, 16),
        eval_every=128,
        eval_episodes=2,
        progress=False,
        runs_dir=runs_dir,
    )
    result = ppo.main(args)
    tasks = json.loads((Path(result["run_dir"]) / "summary.json").read_text())["tasks"]
    assert [t["task"] for t in tasks] == [0, 1, 2]
    for record in tasks:  # odd tasks pay −1 per step: every evaluation of them is negative, of the others positive
        sign = -1 if record["task"] % 2 else 1
        assert record["evals"] and all(sign * mean > 0 for _, mean in record["evals"]), record
