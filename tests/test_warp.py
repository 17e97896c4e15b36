"""MuJoCo Warp locomotion against gymnasium's own envs, stepped side by side from the same states and actions.

On CPU, the first test to step a model compiles MuJoCo Warp's kernels for it on a cold cache (~/.cache/warp:
≈30 s for Hopper and Walker2d, ≈12 s more for HalfCheetah, ≈15 s more for Ant, ≈45 s for Humanoid alone; ≈1 s once
cached); steps then replay
a captured graph (a few ms). Tolerances were measured on CPU (see each test) and given 5–10× headroom. The continual
physics shifts (friction, gravity, mass, damping per world) are held to the unshifted tolerances against gymnasium
envs edited by the gymnasium path's own PhysicsShift.configure.

CUDA: the tests that take a `device` run on both; their `cuda` case is marked so (skipped without a CUDA device;
`pytest -m cuda tests/test_warp.py` runs only those) and holds the same tolerances. The bit-for-bit ones (graph replay
= eager launches, same seed = same episodes, a checkpoint restored into a fresh env) build their envs with
`deterministic=True` there: MuJoCo Warp's float atomics sum in a varying order on GPUs otherwise.
"""

from __future__ import annotations

import math

import gymnasium as gym
import mujoco
import numpy as np
import pytest
import torch

import envs
from envs.continual import ContinualArgs
from envs.errors import UserError
from envs.warp_backend import PHYSICS_FIELDS, TASKS, require_per_world

NUM_WORLDS = 8
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _exact(device: str) -> dict:
    """Env options under which two runs must agree bit for bit (module docstring)."""
    return {"deterministic": True} if device == "cuda" else {}


def _host(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


def _gymnasium_copies(env, qpos: torch.Tensor, qvel: torch.Tensor, configure=None) -> list[gym.Env]:
    """One unwrapped gymnasium env per world, started from that world's (float32) state; `configure(world, copy)`
    edits a copy's model first (continual physics shifts)."""
    copies = []
    for i in range(env.num_envs):
        reference = gym.make(env.env_id.removeprefix("warp:"), **env.gymnasium_kwargs()).unwrapped
        if configure is not None:
            configure(i, reference)
        reference.reset(seed=i)  # mj_resetData: zero warm start, as our reset
        reference.set_state(_host(qpos[i].double()), _host(qvel[i].double()))
        copies.append(reference)
    return copies


def _compare(
    env,
    actions: list[torch.Tensor],
    obs_atol: float,
    reward_atol: float,
    resync: bool = False,
    obs_rtol: float = 0.0,
    configure=None,
    steps_after_reset: float = math.inf,
) -> tuple[int, list[dict], int]:
    """Step the warp env and one gymnasium copy per world with the same actions; compare observations, rewards and
    both flags of every world at every step. Where a world's episode ends its copy restarts from the world's reset
    state (the reset noise differs by design), its first observation is compared, and the comparison goes on for
    `steps_after_reset` steps (all that remain by default; 0: a world is not followed past its first episode end):
    the first reward after a reset is as checked as any other. `resync` restarts every copy from the warp state
    before each step (one-step errors only); `configure` as in _gymnasium_copies. Returns how many terminations were
    compared, gymnasium's infos, and how many resets were followed."""
    references = _gymnasium_copies(env, env.qpos.clone(), env.qvel.clone(), configure)
    qpos, qvel = lambda i: _host(env.qpos[i].double()), lambda i: _host(env.qvel[i].double())
    episode_steps = np.zeros(env.num_envs, dtype=int)
    steps_left = np.full(env.num_envs, math.inf)  # steps each world is still compared
    terminations, resets, infos = 0, 0, []
    for t, action in enumerate(actions):
        if resync:
            for i in range(env.num_envs):
                references[i].set_state(qpos(i), qvel(i))
        step = env.step(action)
        next_obs, first_obs = _host(step.next_obs), _host(step.obs)
        episode_steps += 1
        steps_left -= 1
        for i in np.flatnonzero(steps_left >= 0):
            obs, reward, terminated, _, info = references[i].step(action[i].numpy())
            infos.append(info)
            where = f"{env.env_id} world {i} step {t}"
            np.testing.assert_allclose(next_obs[i], obs, rtol=obs_rtol, atol=obs_atol, err_msg=where)
            assert abs(float(step.reward[i]) - reward) <= reward_atol, where
            assert bool(step.terminated[i]) == terminated, where
            assert bool(step.truncated[i]) == (episode_steps[i] >= env.max_episode_steps), where  # gymnasium's TimeLimit rule
            terminations += terminated
            if (terminated or bool(step.truncated[i])) and steps_after_reset > 0:
                references[i].reset(seed=int(i))  # mj_resetData, then the world's new initial state
                references[i].set_state(qpos(i), qvel(i))
                np.testing.assert_allclose(
                    first_obs[i],
                    references[i]._get_obs(),
                    rtol=obs_rtol,
                    atol=obs_atol,
                    err_msg=f"{where}: first observation after the reset",
                )
                episode_steps[i], resets = 0, resets + 1
            if terminated or bool(step.truncated[i]):
                steps_left[i] = steps_after_reset
    return terminations, infos, resets


def _random_actions(env, steps: int, scale: float, seed: int = 1) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shape = (env.num_envs, *env.single_action_space.shape)
    return [scale * (2 * torch.rand(shape, generator=generator) - 1) for _ in range(steps)]


# (steps, obs atol, reward atol, resync). Measured worst differences (obs, reward): Hopper 9e-6 / 6e-7 and Walker2d
# 2e-4 / 2e-5 open loop until every world fell (~20 steps); HalfCheetah 4e-4 / 4e-6 per step. HalfCheetah is re-synced
# every step because it never falls: open loop, float32 error grows chaotically through its contacts (1e-2 by step 9).
PARITY = {
    "Hopper-v5": (50, 1e-4, 1e-5, False),
    "Walker2d-v5": (50, 2e-3, 2e-4, False),
    "HalfCheetah-v5": (50, 5e-3, 5e-5, True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", sorted(PARITY))
def test_planar_trajectories_match_gymnasium_from_identical_states(env_id, device):
    """Actions up to ±1.2 (MuJoCo clamps the control; the ctrl cost sees the unclipped action), from reset states
    and from states with large joint velocities, so that Hopper and Walker2d terminate within the window."""
    steps, obs_atol, reward_atol, resync = PARITY[env_id]
    env = envs.make("warp:" + env_id, num_envs=NUM_WORLDS, seed=3, device=device)
    env.reset()
    kick = torch.zeros(NUM_WORLDS, env.qvel.shape[1], device=device)
    kick[NUM_WORLDS // 2 :, 2:] = torch.linspace(-3.0, 3.0, env.qvel.shape[1] - 2)  # half the worlds start flailing
    env.set_state(env.qpos.clone(), env.qvel + kick)
    if not env.can_terminate:
        env.max_episode_steps = 20  # a short time limit: HalfCheetah's worlds go through truncations and their resets
    terminations, _, resets = _compare(env, _random_actions(env, steps, scale=1.2), obs_atol, reward_atol, resync)
    assert (terminations > 0 or not env.can_terminate) and resets >= NUM_WORLDS


def _ant_standing_state(env, ankle_degrees: float, height: float) -> torch.Tensor:
    """Ant's qpos0 with every ankle bent `ankle_degrees` towards the floor (the sign of each joint's range)."""
    model = mujoco.MjModel.from_xml_path(gym.make("Ant-v5").unwrapped.fullpath)
    qpos = env.init_qpos.clone()
    qpos[2] = height
    for joint in range(model.njnt):
        if mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, joint).startswith("ankle"):
            qpos[model.jnt_qposadr[joint]] = np.deg2rad(ankle_degrees) * np.sign(model.jnt_range[joint].sum())
    return qpos


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("include_cfrc_ext_in_observation", [True, False])
def test_ant_matches_gymnasium_while_its_contact_frames_agree(include_cfrc_ext_in_observation, device):
    """World 0 stands on its feet (ankles at 35°) and pushes with actions up to ±0.3, so feet touch the floor and
    contact forces enter the observation and the contact cost; world 1 jumps above z = 1 and terminates.

    Only 10 steps: once an ankle touching the floor is within 30° of vertical, MuJoCo Warp (like MJX) orients the
    contact's friction pyramid from the normal alone, MuJoCo from the capsule's axis, and with ant.xml's pyramidal
    cones the friction forces then differ (measured: agreement to 6e-5 for 11 steps, then O(1) differences)."""
    env = envs.make(
        "warp:Ant-v5", num_envs=2, seed=0, device=device, include_cfrc_ext_in_observation=include_cfrc_ext_in_observation
    )
    env.reset()
    qpos = torch.stack([_ant_standing_state(env, 35.0, 0.5), _ant_standing_state(env, 35.0, 0.95)])
    qvel = torch.zeros(2, env.qvel.shape[1])
    qvel[1, 2] = 2.0  # upwards
    env.set_state(qpos, qvel)
    assert env.single_observation_space.shape == ((105,) if include_cfrc_ext_in_observation else (27,))
    # after world 1's reset only its first step is compared: two steps later the reset pose's feet reach the floor,
    # where the friction pyramids differ (above)
    terminations, infos, resets = _compare(
        env, _random_actions(env, 10, scale=0.3), obs_atol=5e-4, reward_atol=1e-5, steps_after_reset=1
    )
    assert terminations == resets == 1
    assert sum(info["reward_contact"] < 0 for info in infos) >= 3  # feet were on the floor in the compared steps


# Open loop from a reset state a small contact force in cfrc_ext (0.74) drifted past the tolerance after 8 steps
# (by 3.6e-3, measured); the first steps after a reset, where a reset bug would show, stay compared.
HUMANOID_STEPS_AFTER_RESET = 4


@pytest.mark.parametrize("device", DEVICES)
def test_humanoid_matches_gymnasium_from_identical_states(device):
    """Eight worlds from reset states under actions up to ±0.5 (ctrlrange ±0.4): one thrown upwards terminates above
    z = 2 at step 10; one thrown down lands hard enough for the contact cost's cap (10); most others fall below z = 1
    by step 21, feet touching the floor on the way. gymnasium steps humanoid.xml with PGS, MuJoCo Warp with Newton
    (it has no PGS): the same solution here.

    Measured worst differences: 1e-4 on every observation entry but cfrc_ext, whose forces (up to ~1e3) agree to
    2e-4 relative (3e-2 absolute): rtol 1e-3 needs atol 6e-5; rewards 7e-5; first observations (mj_forward's
    cinert, cvel, qfrc_actuator) 3e-7."""
    env = envs.make("warp:Humanoid-v5", num_envs=NUM_WORLDS, seed=3, device=device)
    env.reset()
    thrown = env.qvel.clone()
    thrown[-1, 2], thrown[-2, 2] = 5.0, -5.0  # root z velocity, m/s
    first = env.set_state(env.qpos.clone(), thrown)
    assert env.single_observation_space.shape == (348,) and first.shape == (NUM_WORLDS, 348)
    for i, reference in enumerate(_gymnasium_copies(env, env.qpos, env.qvel)):
        np.testing.assert_allclose(_host(first[i]), reference._get_obs(), rtol=0, atol=5e-6)
    terminations, infos, resets = _compare(
        env,
        _random_actions(env, 25, scale=0.5),
        obs_atol=5e-4,
        reward_atol=5e-4,
        obs_rtol=1e-3,
        steps_after_reset=HUMANOID_STEPS_AFTER_RESET,
    )
    assert terminations >= NUM_WORLDS - 2 and resets == terminations
    assert sum(info["reward_contact"] < 0 for info in infos) >= 20  # contact forces entered obs and reward
    assert any(info["reward_contact"] == -10.0 for info in infos)


@pytest.mark.parametrize("device", DEVICES)
def test_humanoid_terminates_when_its_torso_leaves_1_to_2_m_and_restarts_from_forward_quantities(device):
    """Thrown up, toppled, left standing: terminated ⇔ z ∉ (1, 2) at every step; the thrown world ends above 2 and the
    toppled one below 1 (both at step 10), the standing one not within 12 steps. A restarted world's observation is
    gymnasium's after `set_state` (mj_forward from that state with ctrl zeroed: no actuator force although the last
    action was not 0)."""
    env = envs.make("warp:Humanoid-v5", num_envs=3, seed=0, device=device)
    env.reset()
    qvel = env.qvel.clone()
    qvel[0, 2], qvel[1, 4] = 5.0, 8.0  # root z velocity (m/s); pitch rate (rad/s): thrown down, its legs hold it
    env.set_state(env.qpos.clone(), qvel)
    final_z = {}
    for _ in range(12):
        step = env.step(torch.full((3, 17), 0.2))
        z = step.next_obs[:, 0]  # qpos[2]: the observation drops x and y
        assert torch.equal(step.terminated, (z <= 1.0) | (z >= 2.0))
        for i in step.terminated.nonzero().flatten().tolist():
            final_z.setdefault(i, float(z[i]))
            reference = _gymnasium_copies(env, env.qpos, env.qvel)[i]
            np.testing.assert_allclose(_host(step.obs[i]), reference._get_obs(), rtol=0, atol=5e-6)
            assert step.obs[i, 253:270].abs().max() == 0  # qfrc_actuator (after 22 + 23 + 130 + 78 entries)
    assert final_z[0] >= 2.0 and final_z[1] <= 1.0 and 2 not in final_z


@pytest.mark.parametrize("device", DEVICES)
def test_time_limit_truncates_and_next_obs_is_the_final_observation(device):
    """A 5-step limit next to an unlimited twin (same seed, same actions): at step 5 the limited env reports
    truncation (not termination), its `next_obs` is the twin's observation after step 5, its `obs` a fresh start."""
    limited = envs.make("warp:Hopper-v5", num_envs=3, seed=0, max_episode_steps=5, device=device, **_exact(device))
    unlimited = envs.make("warp:Hopper-v5", num_envs=3, seed=0, device=device, **_exact(device))
    limited.reset(), unlimited.reset()
    for t in range(5):
        step, twin = limited.step(torch.zeros(3, 3)), unlimited.step(torch.zeros(3, 3))
        assert not step.terminated.any() and not twin.truncated.any() and bool(step.truncated.all()) == (t == 4)
    assert torch.equal(step.next_obs, twin.obs)
    assert (step.obs[:, :5] - limited.init_qpos[1:]).abs().max() <= 5e-3 and step.obs[:, 5:].abs().max() <= 5e-3
    assert (twin.obs[:, 5:].abs() > 5e-3).any()  # the twin has moved on: the reset observation really is different
    assert limited.drain_episode_stats().lengths == [5, 5, 5] and len(unlimited.drain_episode_stats()) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_reset_where_ends_only_the_masked_episodes(device):
    env = envs.make("warp:Hopper-v5", num_envs=4, seed=0, device=device)
    obs = env.reset()
    for _ in range(3):
        obs = env.step(torch.full((4, 3), 0.5)).obs
    mask = torch.tensor([True, False, True, False], device=device)
    fresh = env.reset_where(mask, obs)
    assert torch.equal(fresh[~mask], obs[~mask])
    assert (fresh[mask, 5:].abs() <= 5e-3).all() and not torch.equal(fresh[mask], obs[mask])
    assert env.elapsed.tolist() == [0, 3, 0, 3]
    assert env.drain_episode_stats().lengths == [3, 3]


@pytest.mark.parametrize("device", DEVICES)
def test_same_seed_same_episodes_and_state_dict_round_trip_into_a_fresh_env(device):
    def rollout(env, steps):
        generator = torch.Generator().manual_seed(7)
        return torch.stack([env.step(2 * torch.rand(4, 3, generator=generator) - 1).obs for _ in range(steps)])

    a, b = (envs.make("warp:Hopper-v5", num_envs=4, seed=5, device=device, **_exact(device)) for _ in range(2))
    a.reset(), b.reset()
    assert torch.equal(rollout(a, 30), rollout(b, 30))  # episodes end and restart inside these 30 steps
    saved = a.state_dict()
    after = rollout(a, 20)
    resumed = envs.make("warp:Hopper-v5", num_envs=4, seed=99, device=device, **_exact(device))
    resumed.reset()
    resumed.load_state_dict(saved)
    assert torch.equal(rollout(resumed, 20), after)


@pytest.mark.parametrize("device", DEVICES)
def test_graph_replay_equals_eager_launches(device):
    graph = envs.make("warp:Hopper-v5", num_envs=2, seed=1, device=device, **_exact(device))
    eager = envs.make("warp:Hopper-v5", num_envs=2, seed=1, device=device, use_graph=False, **_exact(device))
    graph.reset(), eager.reset()
    actions = _random_actions(graph, 3, scale=1.0)
    for action in actions:
        assert torch.equal(graph.step(action).next_obs, eager.step(action).next_obs)
    assert "_physics" in graph.graphs and not eager.graphs


@pytest.mark.parametrize("device", DEVICES)
def test_a_failed_capture_falls_back_to_eager_launches(monkeypatch, device):
    env = envs.make("warp:Hopper-v5", num_envs=2, seed=1, device=device, **_exact(device))
    eager = envs.make("warp:Hopper-v5", num_envs=2, seed=1, device=device, use_graph=False, **_exact(device))
    env.reset(), eager.reset()
    physics = env._physics

    def fail_while_capturing():
        monkeypatch.setattr(env, "_physics", physics)
        raise RuntimeError("conditional graph nodes not supported")

    monkeypatch.setattr(env, "_physics", fail_while_capturing)
    with pytest.warns(UserWarning, match="graph capture failed .*conditional graph nodes"):
        step = env.step(torch.full((2, 3), 0.5))
    assert not env.graphs and not env.use_graph
    assert torch.equal(step.next_obs, eager.step(torch.full((2, 3), 0.5)).next_obs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id, qvel_noise", [("Hopper-v5", "uniform"), ("HalfCheetah-v5", "normal")])
def test_reset_noise_follows_gymnasium(env_id, qvel_noise, device):
    """Hopper: U(±0.005) on qpos and qvel; HalfCheetah: U(±0.1) on qpos, 0.1·N(0, 1) on qvel."""
    env = envs.make("warp:" + env_id, num_envs=2048, seed=0, device=device)
    env.reset()
    scale = env.reset_noise_scale
    qpos_noise, qvel = env.qpos - env.init_qpos, env.qvel
    assert qpos_noise.abs().max() <= scale and qpos_noise.abs().max() > 0.99 * scale
    if qvel_noise == "uniform":
        assert qvel.abs().max() <= scale and abs(float(qvel.std()) - scale / 3**0.5) < 0.05 * scale
    else:
        assert qvel.abs().max() > 3 * scale and abs(float(qvel.std()) - scale) < 0.05 * scale


def test_unknown_warp_ids_are_one_line_errors():
    with pytest.raises(UserError, match="did you mean 'Hopper-v5'"):
        envs.validate_env_id("warp:Hoper-v5")
    with pytest.raises(UserError, match="warp ids: warp:Hopper-v5"):
        envs.make("warp:Swimmer-v5")
    env = envs.make("warp:HalfCheetah-v5", num_envs=2)
    with pytest.raises(UserError, match=r"expects \(2, 6\)"):
        env.step(torch.zeros(2, 3))
    assert set(TASKS) == {"Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5"}
    assert not env.can_terminate and env.max_episode_steps == 1000


@pytest.mark.parametrize("device", DEVICES)
def test_ppo_trains_on_warp_hopper(tmp_path, device):
    from agents import ppo

    result = ppo.main(
        ppo.Args(
            env_id="warp:Hopper-v5",
            num_envs=4,
            total_timesteps=512,
            num_steps=64,
            num_minibatches=2,
            update_epochs=1,
            eval_every=0,
            eval_episodes=2,
            threads=1,
            progress=False,
            runs_dir=str(tmp_path),
            device=device,
        )
    )
    assert result["global_step"] == 512 and result["num_updates"] == 2 * 2  # 2 rollouts of 4 × 64 steps, 2 minibatches each
    returns = result["eval"]["returns"]  # Hopper pays 1 per step alive: every evaluation episode has a positive return
    assert len(returns) == 2 and all(np.isfinite(returns)) and min(returns) > 0


# --------------------------------------------------------------------------------------------------------------
# Continual physics shifts on warp worlds (envs/shifts.py's PhysicsShift, per world)
# --------------------------------------------------------------------------------------------------------------
def _two_task_physics_env(shift: str, num_envs: int, seed: int = 0, task: str = "Hopper-v5", device: str = "cpu", **kwargs):
    """A continual warp env whose even worlds run task 0 and odd worlds task 1 (an early stop after the switch);
    returns it and the observations after the stop."""
    env = envs.make(
        f"continual:{shift}:warp:{task}",
        num_envs,
        seed=seed,
        continual=ContinualArgs(steps_per_task=2 * num_envs, num_tasks=3),
        device=device,
        **kwargs,
    )
    obs = env.reset()
    for _ in range(2):  # standing still nobody falls; the step after the second is scheduled in task 1
        obs = env.step(torch.zeros(num_envs, *env.single_action_space.shape)).obs
    assert env.pending == 1 and (env.switch_index == 0).all()
    obs = env.reset_where(torch.arange(num_envs, device=device) % 2 == 1, obs)
    assert env.switch_index.tolist() == [i % 2 for i in range(num_envs)]
    return env, obs


def _model_values(env, field: str) -> torch.Tensor:
    model = env.inner.model.opt if field.startswith("opt.") else env.inner.model
    return env.inner.warp.to_torch(getattr(model, field.removeprefix("opt."))).cpu()


def _xml_values(env, field: str) -> torch.Tensor:
    host = env.inner.host_model.opt if field.startswith("opt.") else env.inner.host_model
    return torch.as_tensor(getattr(host, field.removeprefix("opt.")), dtype=torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shift, task",
    [(shift, "Hopper-v5") for shift in sorted(PHYSICS_FIELDS)]
    + [("friction", task) for task in ("HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")],
)
def test_a_physics_shift_scales_the_model_of_the_worlds_that_switched_only(shift, task, device):
    env, _ = _two_task_physics_env(shift, 4, task=task, device=device)
    factors = torch.as_tensor(env.setting.shift.factors, dtype=torch.float32)
    for field, column in PHYSICS_FIELDS[shift]:
        values, default = _model_values(env, field), _xml_values(env, field)
        assert values.shape[0] == 4  # one copy per world
        for world in range(4):
            if column is None:
                expected = default * factors[world % 2]
            else:
                expected = default.clone()
                expected[..., column] *= factors[world % 2]  # friction: only the sliding coefficient
            torch.testing.assert_close(values[world], expected, rtol=1e-6, atol=0, msg=f"{field} world {world}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shift, task", [(shift, "Hopper-v5") for shift in sorted(PHYSICS_FIELDS)] + [("friction", "Walker2d-v5")]
)
def test_each_world_steps_like_gymnasium_under_its_tasks_physics(shift, task, device):
    """Gymnasium's model with the shift's edit of its MjModel (PhysicsShift.configure) for the world's task, from the
    world's state; the unshifted tolerances (PARITY), flailing starts so that worlds fall inside the window."""
    env, _ = _two_task_physics_env(shift, NUM_WORLDS, seed=3, task=task, device=device)
    worlds = env.inner
    kick = torch.zeros(NUM_WORLDS, worlds.qvel.shape[1], device=device)
    kick[:, 2:] = torch.linspace(-3.0, 3.0, worlds.qvel.shape[1] - 2)
    worlds.set_state(worlds.qpos.clone(), worlds.qvel + kick)
    tasks = env.switch_index.tolist()
    steps, obs_atol, reward_atol, _ = PARITY[task]
    # a world that restarts takes the pending task's physics, which its copy does not model: compared until its end
    terminations, _, _ = _compare(
        worlds,
        _random_actions(worlds, steps, scale=1.2),
        obs_atol,
        reward_atol,
        configure=lambda world, copy: env.setting.shift.configure(copy, tasks[world]),
        steps_after_reset=0,
    )
    assert terminations > 0


@pytest.mark.parametrize("device", DEVICES)
def test_humanoid_under_a_mass_shift_restarts_and_steps_like_gymnasium(device):
    """The masses enter Humanoid's first observation (cinert, from the reset's forward: the switched worlds must get
    their masses before it) and its reward (the centre of mass's velocity); tolerances of the unshifted test."""
    env, first = _two_task_physics_env("mass", 4, task="Humanoid-v5", device=device)
    humanoid, tasks = env.inner, env.switch_index.tolist()
    configure = lambda world, copy: env.setting.shift.configure(copy, tasks[world])
    for world, reference in enumerate(_gymnasium_copies(humanoid, humanoid.qpos, humanoid.qvel, configure)):
        if tasks[world] == 1:
            np.testing.assert_allclose(_host(first[world]), reference._get_obs(), rtol=0, atol=5e-6)
    terminations, _, _ = _compare(
        humanoid,
        _random_actions(humanoid, 25, scale=0.5),
        obs_atol=5e-4,
        reward_atol=5e-4,
        obs_rtol=1e-3,
        configure=configure,
        steps_after_reset=0,
    )  # restarts switch task: as above
    assert terminations >= 3


@pytest.mark.parametrize("device", DEVICES)
def test_a_field_made_per_world_after_graph_capture_is_captured_again(device):
    env = envs.make("warp:Hopper-v5", num_envs=2, seed=0, device=device)
    env.reset()
    env.step(torch.zeros(2, 3))
    assert "_physics" in env.graphs
    friction = env.expand_per_world("geom_friction")
    assert not env.graphs  # the graph held the shared array's address
    friction[0, :, 0] *= 0.02  # world 0 on ice
    env.set_state(env.qpos[:1].expand(2, -1), env.qvel[:1].expand(2, -1))
    for action in _random_actions(env, 12, scale=1.0, seed=2):  # the foot lands at step 9
        step = env.step(action[:1].expand(2, -1).contiguous())
    assert "_physics" in env.graphs and not torch.allclose(step.next_obs[0], step.next_obs[1], atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_warp_physics_survive_a_checkpoint_into_a_fresh_env(device):
    env, _ = _two_task_physics_env("mass", 4, device=device, **_exact(device))
    state = env.state_dict()
    saved = {field: _model_values(env, field).clone() for field in ("body_mass", "body_inertia")}
    actions = _random_actions(env, 20, scale=1.0, seed=4)
    after = [env.step(action).obs for action in actions]
    restored = envs.make(
        "continual:mass:warp:Hopper-v5",
        4,
        seed=0,
        continual=ContinualArgs(steps_per_task=4, num_tasks=3),
        device=device,
        **_exact(device),
    )
    restored.reset()  # every world in task 0
    restored.load_state_dict(state)
    for field, values in saved.items():
        assert torch.equal(_model_values(restored, field), values), field
    for action, expected in zip(actions, after):
        assert torch.equal(restored.step(action).obs, expected)


def test_only_fields_mujoco_warp_batches_per_world_can_shift_and_others_name_the_gymnasium_alternative():
    for fields in PHYSICS_FIELDS.values():  # opt.gravity included: per world in mujoco-warp 3.17.0
        for field, _ in fields:
            require_per_world(field)
    with pytest.raises(UserError, match=r"shares `geom_condim` between all worlds.*use the gymnasium id"):
        require_per_world("geom_condim")
    with pytest.raises(UserError, match=r"shares `opt.disableflags`"):
        envs.make("warp:Hopper-v5", num_envs=2).expand_per_world("opt.disableflags")


@pytest.mark.parametrize("device", DEVICES)
def test_slippery_presets_run_on_warp_worlds_with_the_presets_own_frictions(device):
    warp_hopper = envs.make("continual:slippery-hopper", 2, seed=0, backend="warp", device=device)
    assert warp_hopper.inner.env_id == "warp:Hopper-v5"
    np.testing.assert_array_equal(
        warp_hopper.setting.shift.factors, envs.make("continual:slippery-hopper", 1, seed=0).setting.shift.factors
    )
    warp_hopper.reset()
    friction = _model_values(warp_hopper, "geom_friction")[..., 0]
    expected = _xml_values(warp_hopper, "geom_friction")[:, 0] * float(warp_hopper.setting.shift.factors[0])
    torch.testing.assert_close(friction, expected.expand(2, -1), rtol=1e-6, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_td3_with_the_many_env_flags_trains_on_warp_hopper(tmp_path, device):
    """TD3's FastTD3 flags on warp worlds; on CUDA with its steps captured as CUDA graphs next to the env's Warp graph."""
    from agents import td3
    from cleanrl_plus.distributional import CriticArgs

    result = td3.main(
        td3.Args(
            env_id="warp:Hopper-v5",
            num_envs=8,
            total_timesteps=800,
            learning_starts=400,
            batch_size=64,
            hidden_sizes=(32, 32),
            n_step=3,
            critic=CriticArgs(distributional=True, v_min=-10.0, v_max=100.0),
            normalize_obs=True,
            exploration_noise_min=0.05,
            exploration_noise_max=0.4,
            gradient_steps=2,
            cudagraphs=device == "cuda",
            eval_every=0,
            eval_episodes=2,
            threads=1,
            progress=False,
            runs_dir=str(tmp_path),
            device=device,
        )
    )
    assert result["global_step"] == 800 and result["num_updates"] == 2 * 50  # 50 vector steps of 8 worlds learn, twice each
    returns = result["eval"]["returns"]  # Hopper pays 1 per step alive: every evaluation episode has a positive return
    assert len(returns) == 2 and all(np.isfinite(returns)) and min(returns) > 0
