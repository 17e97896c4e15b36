"""--capture-video: real runs and real renderers write playable mp4 files and a TensorBoard GIF; MuJoCo and
dm-control render headless when an OpenGL backend is installed (libosmesa6 + MUJOCO_GL=osmesa), and a run without
one stops at start-up with one line."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import imageio.v2 as imageio
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cleanrl_plus.members import Members
from cleanrl_plus.video import GL_HINT, VideoRecorder, observation_picture, renderable_id

ROOT = Path(__file__).resolve().parent.parent


def read_mp4(path: Path) -> list[np.ndarray]:
    with imageio.get_reader(path) as reader:
        return list(reader.iter_data())


def random_policy(space):
    """An evaluation policy of one member: (observations (1, E, ...), its generators) → random actions (1, E, ...)."""

    def policy(obs: torch.Tensor, members: Members) -> torch.Tensor:
        if isinstance(space, gym.spaces.Discrete):
            return members.randint(int(space.n), obs.shape[1])
        return members.rand(obs.shape[1], *space.shape) * 2 - 1

    return policy


def test_a_classic_control_run_records_its_final_evaluation_to_mp4_and_tensorboard(tmp_path):
    command = [
        sys.executable,
        str(ROOT / "agents/ppo.py"),
        "--env-id",
        "CartPole-v1",
        "--total-timesteps",
        "256",
        "--num-steps",
        "128",
        "--num-envs",
        "2",
        "--eval-every",
        "0",
        "--eval-episodes",
        "2",
        "--runs-dir",
        str(tmp_path),
        "--no-progress",
        "--threads",
        "1",
        "--capture-video",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "XDG_RUNTIME_DIR" not in result.stderr + result.stdout  # pygame draws off-screen, silently
    [run_dir] = tmp_path.iterdir()
    frames = read_mp4(run_dir / "videos" / "final.mp4")
    assert len(frames) > 5 and frames[0].shape == (400, 600, 3)
    assert np.abs(frames[-1].astype(int) - frames[0].astype(int)).mean() > 0.1  # the pole moved
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    events.Reload()
    [gif] = events.Images("videos/eval")
    assert gif.encoded_image_string.startswith(b"GIF89a") and gif.width == 200


@pytest.mark.parametrize(
    "env_id", ["ALE/Breakout-v5", "MinAtar/Breakout-v1", "torch:CartPole-v1", "continual:obs-offset:CartPole-v1"]
)
def test_atari_minatar_torch_and_continual_ids_record_without_system_packages(env_id, tmp_path):
    recorder = VideoRecorder(env_id, seed=3, device=torch.device("cpu"))
    frames = recorder.record(random_policy(recorder.env.single_action_space), tmp_path / "episode.mp4", task=0, max_steps=40)
    recorder.close()
    written = read_mp4(tmp_path / "episode.mp4")
    assert len(written) == len(frames) > 1 and written[0].ndim == 3 and written[0].shape[2] == 3
    assert max(float(f.std()) for f in written) > 1.0  # not blank


def test_observation_pictures_and_renderable_ids():
    grid = np.zeros((10, 10, 4), dtype=bool)
    grid[2, 3, 1] = True
    picture = observation_picture(grid)
    assert picture.shape == (160, 160, 3) and picture[2 * 16, 3 * 16].any() and not picture[0, 0].any()
    padded = np.zeros((10, 10, 10), dtype=bool)  # continual:minatar3 pads every game to 10 channels
    assert observation_picture(padded).shape == (160, 160, 3)
    stack = np.zeros((4, 84, 84), dtype=np.uint8)
    stack[-1, 10, 10] = 200
    assert observation_picture(stack).shape == (168, 168, 3) and observation_picture(stack)[20, 20, 0] == 200
    assert renderable_id("continual:friction:warp:Hopper-v5") == "continual:friction:Hopper-v5"
    assert renderable_id("torch:Pendulum-v1") == "Pendulum-v1"


def headless_gl() -> str | None:
    if ctypes.util.find_library("OSMesa"):
        return "osmesa"
    return os.environ.get("MUJOCO_GL") if os.environ.get("MUJOCO_GL") in ("egl", "osmesa") else None


@pytest.mark.skipif(headless_gl() is None, reason="no headless OpenGL: apt-get install libosmesa6 (MUJOCO_GL=osmesa)")
@pytest.mark.parametrize("env_id", ["Hopper-v5", "dmc:cheetah-run"])
def test_mujoco_and_dm_control_render_headless(env_id, tmp_path):
    """In a fresh process each: MUJOCO_GL is read when MuJoCo's renderer is first imported."""
    script = """
import sys, torch
from pathlib import Path
from cleanrl_plus.members import Members
from cleanrl_plus.video import VideoRecorder
from tests.test_video import random_policy
recorder = VideoRecorder(sys.argv[1], seed=1, device=torch.device("cpu"))
frames = recorder.record(random_policy(recorder.env.single_action_space), Path(sys.argv[2]), max_steps=10)
recorder.close()
assert len(frames) > 1 and min(f.std() for f in frames) > 1.0
"""
    env = os.environ | {"PYTHONPATH": str(ROOT), "MUJOCO_GL": headless_gl()}
    result = subprocess.run(
        [sys.executable, "-c", script, env_id, str(tmp_path / "episode.mp4")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr  # dm-control's GL context is freed before exit, not by atexit
    assert len(read_mp4(tmp_path / "episode.mp4")) > 1


def test_with_no_rendering_backend_a_run_stops_at_start_up_with_one_line(tmp_path):
    command = [
        sys.executable,
        str(ROOT / "agents/td3.py"),
        "--env-id",
        "Hopper-v5",
        "--total-timesteps",
        "200",
        "--learning-starts",
        "100",
        "--runs-dir",
        str(tmp_path),
        "--no-progress",
        "--capture-video",
    ]
    # MuJoCo's default backend (GLFW) needs a display: a headless machine without MUJOCO_GL has no renderer
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env | {"PYTHONPATH": str(ROOT)})
    if result.returncode == 0:
        pytest.skip("MuJoCo renders without MUJOCO_GL on this machine")
    assert result.returncode == 2, result.stderr[-2000:]
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "libosmesa6" in error_lines[0] and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())  # the run directory was removed again


def test_eval_of_a_dm_control_run_with_no_rendering_backend_is_one_line_and_nothing_after(tmp_path):
    """dm-control's GLFW renderer, built without a display, used to raise in MjrContext.__del__ and warn that GLFW was
    not initialised when it was freed at exit, after the one-line error."""
    pytest.importorskip("dm_control")
    flags = ["--total-timesteps", "200", "--learning-starts", "100", "--eval-every", "0", "--eval-episodes", "1"]
    flags += ["--batch-size", "32", "--hidden-sizes", "32", "32", "--threads", "1", "--no-progress"]
    train = [sys.executable, "agents/td3.py", "--env-id", "dmc:cartpole-balance", *flags, "--runs-dir", str(tmp_path)]
    trained = subprocess.run([*train, "--run-name", "dmc"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert trained.returncode == 0, trained.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    result = subprocess.run(
        [sys.executable, "-m", "commands.cli", "eval", str(tmp_path / "dmc"), "--capture-video", "--episodes", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env | {"PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    if result.returncode == 0:
        pytest.skip("dm-control renders without MUJOCO_GL on this machine")
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines() == [
        "error: --capture-video: cannot render dmc:cartpole-balance: no OpenGL rendering here — " + GL_HINT
    ], result.stderr[-2000:]


def test_a_failed_encode_leaves_the_earlier_video_and_no_partial_file(tmp_path, monkeypatch):
    import imageio.v2 as imageio

    from cleanrl_plus.video import write_mp4

    path = tmp_path / "videos" / "final.mp4"
    frames = [np.zeros((8, 8, 3), dtype=np.uint8)] * 2
    write_mp4(path, frames, fps=4)
    earlier = path.read_bytes()

    def fail_halfway(target, *args, **kwargs):
        Path(target).write_bytes(b"half an mp4")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(imageio, "mimwrite", fail_halfway)
    with pytest.raises(OSError):
        write_mp4(path, frames, fps=4)
    assert path.read_bytes() == earlier
    assert sorted(p.name for p in path.parent.iterdir()) == ["final.mp4"]
