"""LEAST: the stop rule on constructed histories, the history ring, early resets, and stops stored as truncations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import envs
from agents import ppo, td3
from cleanrl_plus.checkpoint import load_checkpoint
from envs.errors import UserError
from plasticity.least import EpisodeStopper, LEASTArgs


def _stopper(history_q: float, history_g: float = 1.0, start: float = 0.0) -> EpisodeStopper:
    stopper = EpisodeStopper(
        LEASTArgs(enabled=True, start=start, window=4, weight=0.5, min_history=2), 1, 5, 100, torch.device("cpu")
    )
    stopper.history_q[0, :4, 0] = history_q
    stopper.history_g[0, :4, 0] = history_g
    return stopper


@pytest.mark.parametrize(
    "history_q, q, g, expected",
    [
        (10.0, 4.0, 1.0, True),  # ε = 10, ω = 1: stop below 0.5·10 = 5
        (10.0, 6.0, 1.0, False),
        (10.0, 4.0, 10.0, False),  # a surprising transition (G = 10 ⇒ ω = 0.1) lowers the bar to 0.5
        (-10.0, -25.0, 1.0, True),  # ε < 0: stop below ε/(c·ω) = −20
        (-10.0, -15.0, 1.0, False),
    ],
)
def test_stop_rule_on_a_constructed_history(history_q, q, g, expected):
    stop = _stopper(history_q).should_stop(torch.tensor([q])[None], torch.tensor([g])[None], global_step=50)[0]
    assert bool(stop[0]) is expected


def test_no_stop_before_the_start_time_or_without_enough_history():
    assert not _stopper(10.0, start=0.6).should_stop(torch.tensor([0.0])[None], torch.tensor([1.0])[None], global_step=50)[0][
        0
    ]
    thin = _stopper(10.0)
    thin.history_q[0, 1:4, 0] = float("nan")  # only one episode reached step 0
    assert not thin.should_stop(torch.tensor([0.0])[None], torch.tensor([1.0])[None], global_step=50)[0][0]


def test_finished_episodes_enter_the_history_ring_in_order_and_wrap():
    stopper = EpisodeStopper(LEASTArgs(enabled=True, window=2), 3, 4, 100, torch.device("cpu"))
    for value in (1.0, 2.0):
        stopper.should_stop(torch.full((3,), value)[None], torch.ones(3)[None], global_step=0)[0]
    stopper.end_episodes(torch.tensor([[True, False, True]]), torch.tensor([[True, False, False]]))
    assert stopper.history_q[0, :2, :2].tolist() == [[1.0, 2.0], [1.0, 2.0]]
    assert stopper.step_index.tolist() == [[0, 2, 0]] and float(stopper.steps_saved) == 2.0  # 4 − 2 steps unused
    stopper.should_stop(torch.full((3,), 7.0)[None], torch.ones(3)[None], global_step=0)[0]
    stopper.end_episodes(torch.tensor([[True, False, False]]), torch.tensor([[False, False, False]]))
    assert stopper.history_q[0, 0, 0] == 7.0 and int(stopper.next_row) == 1  # the oldest row was overwritten
    assert float(stopper.report()["least/stop_rate"]) == pytest.approx(1 / 3)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "torch:Pendulum-v1"])
def test_reset_where_ends_the_chosen_episodes_and_counts_them(env_id):
    env = envs.make(env_id, num_envs=2, seed=0)
    obs = env.reset()
    for _ in range(3):
        obs = env.step(torch.zeros(2, 1)).obs
    fresh = env.reset_where(torch.tensor([False, True]), obs)
    assert torch.equal(fresh[0], obs[0]) and not torch.equal(fresh[1], obs[1])
    assert env.drain_episode_stats().lengths == [3]


def test_td3_with_least_stops_episodes_as_truncations(runs_dir):
    """Pendulum never terminates, so every stored `terminated` must stay 0 although many episodes are cut short."""
    least = LEASTArgs(enabled=True, start=0.0, window=8, weight=2.0, min_history=1)
    result = td3.main(
        td3.Args(
            env_id="Pendulum-v1",
            total_timesteps=1_500,
            learning_starts=500,
            eval_every=0,
            eval_episodes=1,
            log_every=500,
            runs_dir=runs_dir,
            progress=False,
            batch_size=32,
            hidden_sizes=(32, 32),
            least=least,
        )
    )
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    assert float(state["plasticity"]["least"]["stopped"]) > 0 and float(state["plasticity"]["least"]["steps_saved"]) > 0
    assert state["replay"]["terminated"].sum() == 0


def test_least_on_an_agent_without_a_q_function_is_a_clear_error(runs_dir):
    with pytest.raises(UserError, match="LEAST needs a Q function"):
        ppo.main(ppo.Args(env_id="CartPole-v1", runs_dir=runs_dir, least=LEASTArgs(enabled=True)))


def test_the_learning_potential_uses_the_episode_mean_td_error():
    """ω divides by the running mean of this episode's TD errors, so one quiet transition does not trigger a stop."""
    stopper = EpisodeStopper(
        LEASTArgs(enabled=True, start=0.0, window=4, weight=0.5, min_history=2), 1, 5, 100, torch.device("cpu")
    )
    stopper.history_q[0, :4, 1] = 10.0
    stopper.history_g[0, :4, 1] = 1.0
    stopper.should_stop(torch.tensor([10.0])[None], torch.tensor([1.9])[None], global_step=50)[0]  # step 0: G = 1.9
    # step 1: this G = 0.1 alone would give ω = 10 (stop below 50); the episode mean (1.9 + 0.1)/2 = 1 gives ω = 1
    assert not stopper.should_stop(torch.tensor([6.0])[None], torch.tensor([0.1])[None], global_step=50)[0][0]
    assert float(stopper.current_g[0, 0, 1]) == pytest.approx(1.0)
