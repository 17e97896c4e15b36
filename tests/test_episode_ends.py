"""How every agent stores episode ends, checked on short real runs with a tight time limit.

For each agent the run's stored transitions are compared with what the environment returned and with an
independent reading of the task's physics: a transition is terminal exactly where the final observation breaks
the task's termination condition (a time-limit truncation must bootstrap), and the stored next observation is
the true final one, never the reset observation the env hands back with it.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest
import torch

import envs
from cleanrl_plus.checkpoint import load_checkpoint

# time limits near the median random-policy episode length, so truncations and terminations both happen in a few
# hundred steps (random CartPole episodes last 11–41 steps, InvertedPendulum ones 3–13: 5th–95th percentiles)
TIME_LIMITS = {"CartPole-v1": 18, "InvertedPendulum-v5": 5}


def cartpole_falls(obs: torch.Tensor) -> torch.Tensor:
    """CartPole-v1 terminates when |x| > 2.4 or |θ| > 12°."""
    return (obs[..., 0].abs() > 2.4) | (obs[..., 2].abs() > 12 * 2 * math.pi / 360)


def inverted_pendulum_falls(obs: torch.Tensor) -> torch.Tensor:
    """InvertedPendulum-v5 terminates when the pole leaves |angle| ≤ 0.2."""
    return obs[..., 1].abs() > 0.2


@pytest.fixture
def env_steps(monkeypatch):
    """Give the test's envs a short time limit (TIME_LIMITS) and record the training env's steps."""
    steps: list = []
    make = envs.make

    def make_time_limited(env_id, *args, training=True, **kwargs):
        env = make(env_id, *args, training=training, max_episode_steps=TIME_LIMITS[env_id], **kwargs)
        if training:
            step = env.step

            def recording_step(actions):
                result = step(actions)
                steps.append(result)
                return result

            env.step = recording_step
        return env

    monkeypatch.setattr(envs, "make", make_time_limited)
    return steps


def check_episode_ends(env_steps, obs, next_obs, terminated, falls, num_envs):
    """`obs`, `next_obs`, `terminated` are (steps, num_envs, ...) as the agent stored them, in step order."""
    ended = torch.stack([s.terminated | s.truncated for s in env_steps])
    truncated = torch.stack([s.truncated for s in env_steps]) & ~torch.stack([s.terminated for s in env_steps])
    reset_obs = torch.stack([s.obs for s in env_steps])
    assert terminated.shape[:2] == ended.shape == (len(env_steps), num_envs)
    # terminal ⇔ the stored final observation breaks the termination condition (independent of the env's flags)
    assert torch.equal(terminated.bool(), falls(next_obs))
    assert terminated.bool().any() and truncated.any(), "the run should see both kinds of episode end"
    assert not terminated.bool()[truncated].any(), "a time-limit truncation must bootstrap"
    # the stored s' is the env's true final observation, not the reset observation
    torch.testing.assert_close(next_obs, torch.stack([s.next_obs for s in env_steps]).to(next_obs.dtype))
    assert (next_obs[ended] != reset_obs[ended]).any(dim=-1).all()
    # within an episode s' is the next step's s
    torch.testing.assert_close(next_obs[:-1][~ended[:-1]], obs[1:][~ended[:-1]])


REPLAY_AGENTS = {
    "td3": ("InvertedPendulum-v5", inverted_pendulum_falls, {}),
    "sac_simba": ("InvertedPendulum-v5", inverted_pendulum_falls, {}),  # raw observations are stored, normalised when sampled
    "ddqn": ("CartPole-v1", cartpole_falls, {"end_e": 1.0}),  # random play: both kinds of episode end in 240 steps
}


@pytest.mark.parametrize("agent", sorted(REPLAY_AGENTS))
def test_replay_agents_store_episode_ends(agent, env_steps, runs_dir):
    module = importlib.import_module(f"agents.{agent}")
    env_id, falls, extra = REPLAY_AGENTS[agent]
    num_envs, total = 2, 240
    args = module.Args(
        env_id=env_id,
        num_envs=num_envs,
        total_timesteps=total,
        learning_starts=10_000,
        buffer_size=1_000,
        eval_every=0,
        eval_episodes=1,
        progress=False,
        runs_dir=runs_dir,
        **extra,
    )
    result = module.main(args)
    replay = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")["replay"]
    assert replay["size"] == total  # rows are step-major: env 0, env 1 of step 0, then step 1, …

    def by_step(x):  # the run's one member: (1, rows, ...)
        return x[0].reshape(total // num_envs, num_envs, *x.shape[2:])

    check_episode_ends(
        env_steps, by_step(replay["obs"]), by_step(replay["next_obs"]), by_step(replay["terminated"]), falls, num_envs
    )


@pytest.mark.parametrize("agent", ["ppo", "gtr"])
def test_rollout_agents_store_episode_ends(agent, env_steps, runs_dir, monkeypatch):
    from agents import ppo

    module = importlib.import_module(f"agents.{agent}")
    rollouts = []

    estimate_advantages = ppo.estimate_advantages

    def recording(value, storage, args):
        rollouts.append({name: getattr(storage, name).clone() for name in ("obs", "next_obs", "terminated", "dones")})
        return estimate_advantages(value, storage, args)

    monkeypatch.setattr(ppo, "estimate_advantages", recording)
    num_envs = 2
    args = module.Args(
        env_id="CartPole-v1",
        num_envs=num_envs,
        num_steps=60,
        total_timesteps=240,
        num_minibatches=2,
        update_epochs=1,
        normalize_obs=False,
        normalize_reward=False,
        eval_every=0,
        eval_episodes=1,
        progress=False,
        runs_dir=runs_dir,
    )
    module.main(args)
    # rollouts are (members, steps, num_envs, ...): the run's one member, its rollouts in step order
    stored = {name: torch.cat([r[name] for r in rollouts], dim=1)[0] for name in rollouts[0]}
    check_episode_ends(env_steps, stored["obs"], stored["next_obs"], stored["terminated"], cartpole_falls, num_envs)
    ended = torch.stack([s.terminated | s.truncated for s in env_steps])
    assert torch.equal(stored["dones"], ended)  # GAE must not leak across any episode end
