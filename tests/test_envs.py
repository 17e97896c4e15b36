import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from envs.errors import UserError


def test_make_speaks_torch_with_batch_dimension():
    env = envs.make("Hopper-v5", num_envs=3, seed=0)
    obs = env.reset()
    assert obs.shape == (3, 11) and obs.dtype == torch.float32
    step = env.step(torch.zeros(3, 3))
    assert step.reward.shape == (3,) and step.reward.dtype == torch.float32
    assert step.terminated.dtype == torch.bool and step.truncated.dtype == torch.bool
    assert step.next_obs.shape == step.obs.shape == (3, 11)


def test_next_obs_is_the_final_observation_at_truncation():
    """Pendulum truncates at 200 steps: next_obs must be gymnasium's final obs, obs the reset obs."""
    env = envs.make("Pendulum-v1", num_envs=1, seed=3)
    reference = gym.make("Pendulum-v1")
    obs = env.reset(seed=3)
    reference_obs, _ = reference.reset(seed=3)
    np.testing.assert_allclose(obs[0].numpy(), reference_obs)
    actions = torch.linspace(-2, 2, 200).reshape(200, 1, 1)
    for t in range(200):
        step = env.step(actions[t])
        reference_obs, reward, terminated, truncated, _ = reference.step(actions[t][0].numpy())
        np.testing.assert_allclose(step.next_obs[0].numpy(), reference_obs, rtol=1e-6)
        assert step.reward[0].item() == pytest.approx(reward, rel=1e-5)
        assert bool(step.truncated[0]) == truncated and bool(step.terminated[0]) == terminated
    assert truncated and not terminated
    assert not torch.equal(step.obs, step.next_obs), "obs to act on must be the reset observation"
    stats = env.drain_episode_stats()
    assert stats.lengths == [200] and stats.end_steps == [200]
    assert env.drain_episode_stats().returns == []


def test_termination_is_reported_with_final_obs_and_episode_stats():
    env = envs.make("Hopper-v5", num_envs=1, seed=0)
    env.reset()
    total = 0.0
    for _ in range(1000):
        step = env.step(torch.ones(1, 3))  # full torque: Hopper falls within a few dozen steps
        total += step.reward.item()
        if step.terminated[0]:
            break
    assert bool(step.terminated[0]) and not bool(step.truncated[0])
    z_height = step.next_obs[0, 0].item()
    assert not torch.equal(step.obs, step.next_obs) and (z_height < 0.7 or abs(step.next_obs[0, 1].item()) > 0.2)
    stats = env.drain_episode_stats()
    assert len(stats) == 1 and stats.returns[0] == pytest.approx(total, rel=1e-5)


def test_unknown_env_id_suggests_the_closest():
    with pytest.raises(UserError, match="unknown env id 'Hoper-v5' — did you mean 'Hopper-v5'"):
        envs.make("Hoper-v5")


def test_wrong_action_shape_is_a_clear_error():
    env = envs.make("Hopper-v5", num_envs=2)
    env.reset()
    with pytest.raises(UserError, match=r"action batch has shape \(3,\) but this env expects \(2, 3\)"):
        env.step(torch.zeros(3))


@pytest.mark.parametrize("env_id", ["Hopper-v5", "Pendulum-v1"])
def test_state_dict_restores_mid_episode_exactly(env_id):
    env = envs.make(env_id, num_envs=2, seed=5)
    env.reset()
    action_dim = env.single_action_space.shape[0]
    generator = torch.Generator().manual_seed(0)
    for _ in range(37):
        env.step(torch.rand(2, action_dim, generator=generator) * 0.5)
    state = env.state_dict()
    actions = torch.rand(60, 2, action_dim, generator=generator) * 0.5
    original = [env.step(a) for a in actions]

    restored_env = envs.make(env_id, num_envs=2, seed=99)
    restored_env.reset()
    restored_env.load_state_dict(state)
    restored = [restored_env.step(a) for a in actions]
    for a, b in zip(original, restored):
        assert torch.equal(a.next_obs, b.next_obs) and torch.equal(a.reward, b.reward)
        assert torch.equal(a.terminated, b.terminated) and torch.equal(a.truncated, b.truncated)
    assert env.env_steps == restored_env.env_steps


def random_actions(env, steps: int, generator: torch.Generator) -> torch.Tensor:
    space = env.single_action_space
    if isinstance(space, gym.spaces.Discrete):
        return torch.randint(int(space.n), (steps, env.num_envs), generator=generator)
    return torch.rand(steps, env.num_envs, space.shape[0], generator=generator) * 2 - 1


@pytest.mark.parametrize("kwargs", [{}, {"continuous": True}], ids=["discrete", "continuous"])
def test_box2d_state_dict_restores_mid_episode_exactly(kwargs):
    """A Box2D env pickles as its constructor's arguments: restored, it is new and never reset. Its episode is
    replayed (envs/gymnasium_backend.py ReplayedEpisode); here past an autoreset, so the replayed reset has no seed."""
    pytest.importorskip("Box2D")
    env_id = "LunarLander-v3"
    env = envs.make(env_id, num_envs=2, seed=5, **kwargs)
    env.reset()
    generator = torch.Generator().manual_seed(0)
    buffer = random_actions(env, 1, generator)[0]  # one action buffer, refilled each step as an agent's may be
    for action in random_actions(env, 150, generator):
        env.step(buffer.copy_(action))
    assert len(env.drain_episode_stats()) >= 1, "the window must cross an autoreset"
    state = env.state_dict()
    actions = random_actions(env, 60, generator)
    original = [env.step(a) for a in actions]

    reset_before, never_reset = (envs.make(env_id, num_envs=2, seed=99, **kwargs) for _ in range(2))
    reset_before.reset()
    for restored_env in (reset_before, never_reset):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # LunarLander builds a new world each episode: exact, no warning
            restored_env.load_state_dict(state)
        restored = [restored_env.step(a) for a in actions]
        for a, b in zip(original, restored):
            assert torch.equal(a.next_obs, b.next_obs) and torch.equal(a.reward, b.reward)
            assert torch.equal(a.terminated, b.terminated) and torch.equal(a.truncated, b.truncated)


def box2d_bodies(env) -> list[tuple]:
    walker = env.vec.envs[0].unwrapped
    return [(tuple(body.position), body.angle, tuple(body.linearVelocity)) for body in [walker.hull, *walker.legs]]


def test_a_box2d_world_kept_across_episodes_resumes_its_state_and_says_it_may_part():
    """BipedalWalker keeps one Box2D world for life: the replay lands on the checkpointed bodies, and a warning says
    that contact order, which depends on earlier episodes, may make the run part from a straight one."""
    pytest.importorskip("Box2D")
    env = envs.make("BipedalWalker-v3", num_envs=1, seed=5)
    env.reset()
    generator = torch.Generator().manual_seed(0)
    for action in random_actions(env, 40, generator):
        env.step(action)
    with pytest.warns(UserWarning, match="BipedalWalker resumes from its checkpointed state, but its Box2D world"):
        restored = envs.make("BipedalWalker-v3", num_envs=1, seed=99)
        restored.load_state_dict(env.state_dict())
    assert box2d_bodies(restored) == box2d_bodies(env)


def test_box2d_resume_refuses_a_replay_that_misses_or_an_episode_never_saved():
    pytest.importorskip("Box2D")
    from envs.gymnasium_backend import ReplayedEpisode

    env = envs.make("LunarLander-v3", num_envs=1, seed=5)
    env.reset()
    for _ in range(20):
        env.step(torch.ones(1, dtype=torch.long))
    replayed = env.vec.envs[0]
    assert isinstance(replayed, ReplayedEpisode)
    replayed.actions[3] = np.array(2)  # the main engine instead of the left one: the replay lands elsewhere
    with pytest.raises(RuntimeError, match="replaying its episode's 20 actions did not reproduce"):
        envs.make("LunarLander-v3", num_envs=1, seed=5).load_state_dict(env.state_dict())
    replayed.actions[3] = np.array(1)
    envs.make("LunarLander-v3", num_envs=1, seed=5).load_state_dict(env.state_dict())  # the true episode replays
    env.vec.envs[0] = replayed.env  # as checkpoints written before the replay were: the bare env, pickled
    with pytest.raises(UserError, match="LunarLander saved without its episode .* start the run again without --resume"):
        envs.make("LunarLander-v3", num_envs=1, seed=5).load_state_dict(env.state_dict())


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(UserError, match="unknown env backend 'nope'"):
        envs.make("Pendulum-v1", backend="nope")


def test_dmc_episode_ends_by_truncation_at_1000_steps_with_final_obs():
    env = envs.make("dmc:cheetah-run", num_envs=1, seed=0)
    assert env.single_action_space.shape == (6,) and env.single_observation_space.shape == (17,)
    assert not env.can_terminate
    obs = env.reset()
    assert obs.dtype == torch.float32 and obs.shape == (1, 17)
    for t in range(1000):
        step = env.step(torch.zeros(1, 6))
        if t < 999:
            assert not bool(step.truncated[0] | step.terminated[0])
            assert torch.equal(step.obs, step.next_obs)
    assert bool(step.truncated[0]) and not bool(step.terminated[0])
    assert not torch.equal(step.obs, step.next_obs)
    stats = env.drain_episode_stats()
    assert stats.lengths == [1000] and env.frames == 1000


def test_dmc_action_repeat_counts_frames_and_agent_steps_apart():
    env = envs.make("dmc:cheetah-run", num_envs=2, seed=0, action_repeat=4)
    env.reset()
    for _ in range(250):
        step = env.step(torch.zeros(2, 6))
    assert bool(step.truncated.all()) and env.frames == 2000 and env.env_steps == 500
    assert env.drain_episode_stats().lengths == [250, 250]


def test_dmc_seeds_reproduce_and_differ():
    first = envs.make("dmc:walker-walk", num_envs=2, seed=3).reset()
    again = envs.make("dmc:walker-walk", num_envs=2, seed=3).reset()
    other = envs.make("dmc:walker-walk", num_envs=2, seed=4).reset()
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert not torch.equal(first[0], first[1])


def test_dmc_state_dict_restores_mid_episode_exactly():
    env = envs.make("dmc:walker-walk", num_envs=1, seed=1)
    env.reset()
    for _ in range(20):
        env.step(torch.full((1, 6), 0.3))
    state = env.state_dict()
    original = [env.step(torch.full((1, 6), -0.2)) for _ in range(30)]
    restored_env = envs.make("dmc:walker-walk", num_envs=1, seed=9)
    restored_env.load_state_dict(state)
    restored = [restored_env.step(torch.full((1, 6), -0.2)) for _ in range(30)]
    assert all(torch.equal(a.next_obs, b.next_obs) and torch.equal(a.reward, b.reward) for a, b in zip(original, restored))


def test_unknown_dmc_id_suggests_the_closest():
    with pytest.raises(UserError, match="unknown env id 'dmc:cheetah-runn' — did you mean 'dmc:cheetah-run'"):
        envs.make("dmc:cheetah-runn")


def test_never_terminating_gymnasium_tasks_are_marked():
    assert not envs.make("Pendulum-v1").can_terminate
    assert envs.make("Hopper-v5").can_terminate


@pytest.mark.parametrize(
    "env_id, backend",
    [
        ("dmc:cartpole-balance", "auto"),
        ("MinAtar/Breakout-v1", "auto"),
        ("continual:dmc-walker", "auto"),
        pytest.param(
            "ALE/Pong-v5",
            "envpool",
            marks=pytest.mark.skipif(
                __import__("importlib").util.find_spec("envpool") is None, reason="envpool not installed"
            ),
        ),
    ],
)
def test_the_largest_seed_and_the_seeds_derived_from_it_start_every_backend(env_id, backend):
    """--seed takes [0, 2**32 - 1]; sub-env i and the evaluation envs (+100,000) derive larger seeds, which dm-control's
    and MinAtar's RandomState (below 2**32) and envpool (below 2**31) refuse unless they are folded into their range."""
    from cleanrl_plus.evaluator import EVAL_SEED_OFFSET
    from envs.ranges import SEED_MAX

    for seed in (SEED_MAX, SEED_MAX + EVAL_SEED_OFFSET):
        env = envs.make(env_id, num_envs=2, seed=seed, backend=backend)
        obs = env.reset(seed=seed)
        assert obs.shape[0] == 2
        env.close()
