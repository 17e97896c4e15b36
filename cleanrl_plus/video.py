"""`--capture-video`: evaluation episodes recorded as mp4 (imageio's bundled ffmpeg) and as an animated GIF in
TensorBoard (what SummaryWriter.add_video writes, encoded with Pillow instead of moviepy 1.x).

Frames come from the task's own renderer: gymnasium's `rgb_array` mode (classic control through pygame, MuJoCo
through MuJoCo's OpenGL renderer, Atari from the emulator), dm-control's `physics.render`. `torch:` and `warp:`
backends have no renderer, so their episodes are played on gymnasium's implementation of the same task (same
observations and dynamics, up to float32). Image observations without a renderer (MinAtar grids) are drawn from
the observation itself.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

import envs
from cleanrl_plus.members import Members
from envs.continual import ContinualArgs, is_continual
from envs.continual import parse as parse_continual_id
from envs.errors import UserError

GL_HINT = "install libosmesa6 and set MUJOCO_GL=osmesa (or libegl1 and MUJOCO_GL=egl on a GPU machine)"
MAX_STEPS = 2_000  # a video of a whole Atari game (up to 27k agent steps) is not what anyone watches
GIF_MAX_FRAMES, GIF_MAX_WIDTH = 200, 240  # keep the TensorBoard event file small
MINATAR_COLOURS = np.array(
    [
        [230, 25, 75],
        [60, 180, 75],
        [255, 225, 25],
        [0, 130, 200],
        [245, 130, 48],
        [145, 30, 180],
        [70, 240, 240],
        [240, 50, 230],
        [210, 245, 60],
        [250, 190, 190],
    ],
    dtype=np.uint8,
)


@contextlib.contextmanager
def _quiet_teardown_of_failed_renderers() -> Iterator[None]:
    """Warnings off, and quiet about a renderer that failed half-way: dm-control's GLFW context and MjrContext, built
    without a display, raise in `__del__` and warn when they are freed (at exit, after the one-line error, if the
    error held them)."""
    previous = sys.unraisablehook

    def quiet(unraisable: Any) -> None:
        if not getattr(unraisable.object, "__module__", "").startswith(("dm_control", "glfw", "mujoco", "OpenGL")):
            previous(unraisable)

    sys.unraisablehook = quiet
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield  # the failed renderer is freed as its exception is, inside this block
    finally:
        sys.unraisablehook = previous


def renderable_id(env_id: str) -> str:
    """The id whose episodes can be drawn: `torch:` and `warp:` tasks are played on gymnasium's implementation."""
    return env_id.replace("torch:", "").replace("warp:", "")


class VideoRecorder:
    """One rendering env of the run's task; `record` plays one episode with a policy and writes its video.

    Built at start-up, so a missing rendering backend stops the run before training, not after it."""

    def __init__(self, env_id: str, seed: int, device: torch.device, **env_kwargs: Any) -> None:
        self.env_id, self.seed = renderable_id(env_id), seed
        env_kwargs.pop("backend", None)  # e.g. envpool, which cannot render: the default backend of the id can
        # pygame (classic control) draws off-screen: no window, no audio device, no greeting on the console
        for name in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):
            os.environ.setdefault(name, "dummy")
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        base = parse_continual_id(self.env_id, ContinualArgs()).env_id if is_continual(self.env_id) else self.env_id
        if envs.backend_for(base) in ("gymnasium", "atari") and not base.startswith(
            "MinAtar/"
        ):  # MinAtar: a 10×10 float image
            env_kwargs = env_kwargs | {"render_mode": "rgb_array"}
        hint = None
        with _quiet_teardown_of_failed_renderers():  # GLFW warns about a missing display before failing, and after
            try:
                self.env = envs.make(self.env_id, num_envs=1, seed=seed, device=device, training=False, **env_kwargs)
                self.frame(self.env.reset(seed=seed))  # fails here when no rendering backend works
            except UserError:
                raise
            except Exception as error:  # the renderers raise many types (GLError, FatalError, EGLError, ...)
                gl = any(word in f"{type(error).__name__} {error}" for word in ("GL", "gl", "DISPLAY"))
                hint = f"no OpenGL rendering here — {GL_HINT}" if gl else f"{type(error).__name__}: {str(error)[:120]}"
        if hint is not None:  # raised here, so that the error holds no frame of the failed renderer
            raise UserError(f"--capture-video: cannot render {env_id}: {hint}")

    def _backend_env(self) -> Any:
        """The backend's env inside any continual wrappers: the one that can render."""
        inner = self.env
        while hasattr(inner, "inner"):
            inner = inner.inner
        return inner

    def frame(self, obs: torch.Tensor) -> np.ndarray:
        """An RGB uint8 (H, W, 3) picture of the current state."""
        inner = self._backend_env()
        if type(inner).__name__.startswith("DMC"):
            return inner.render()
        sub_env = getattr(getattr(inner, "vec", None), "envs", [None])[0]
        if sub_env is not None and getattr(sub_env, "render_mode", None) == "rgb_array":
            return np.asarray(sub_env.render())
        return observation_picture(obs[0].cpu().numpy())

    def record(self, policy: Callable, path: Path, task: int | None = None, max_steps: int = MAX_STEPS) -> list[np.ndarray]:
        """Play one episode (up to `max_steps` steps) with `policy` (an agent's evaluation policy of one member:
        (observations (1, 1, ...), generators) → actions (1, 1, ...)), write it to `path` (mp4), return its frames."""
        if task is not None and hasattr(self.env, "set_task"):
            self.env.set_task(task)
        devices = [self.env.device] if self.env.device.type == "cuda" else []
        frames = []
        generators = Members((self.seed,), self.env.device)  # an ε-greedy policy's draws, the same at every recording
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(self.seed)
            obs = self.env.reset(seed=self.seed)
            frames.append(self.frame(obs))
            for _ in range(max_steps):
                step = self.env.step(policy(obs.unsqueeze(0), generators).squeeze(0))
                obs = step.obs
                if bool(step.terminated[0] | step.truncated[0]):  # one env, off the training loop: a sync is fine
                    break
                frames.append(self.frame(obs))
        self.env.drain_episode_stats()
        write_mp4(path, frames, self.fps)
        return frames

    @property
    def fps(self) -> int:
        inner = self._backend_env()
        sub_env = getattr(getattr(inner, "vec", None), "envs", [None])[0]
        return int(getattr(sub_env, "metadata", {}).get("render_fps") or 30)

    def close(self) -> None:
        inner = self._backend_env()
        for dmc_env in getattr(inner, "envs", []) if type(inner).__name__.startswith("DMC") else []:
            dmc_env.physics.free()  # free the GL context now: at interpreter exit dm-control's executor is gone
        self.env.close()


def observation_picture(obs: np.ndarray) -> np.ndarray:
    """Atari frame stacks (C, 84, 84): the newest frame in gray; MinAtar grids (10, 10, C): one colour per channel."""
    if obs.ndim == 3 and obs.shape[0] < obs.shape[1] == obs.shape[2]:  # channels first: a frame stack (4, 84, 84)
        gray = obs[-1].astype(np.uint8)
        return np.repeat(np.repeat(np.stack([gray] * 3, axis=-1), 2, axis=0), 2, axis=1)
    if obs.ndim == 3:  # channels last: MinAtar's boolean grid
        picture = np.zeros((*obs.shape[:2], 3), dtype=np.uint8)
        for channel in range(obs.shape[2]):
            picture[obs[..., channel] > 0] = MINATAR_COLOURS[channel % len(MINATAR_COLOURS)]
        return np.repeat(np.repeat(picture, 16, axis=0), 16, axis=1)
    raise UserError("--capture-video: this environment has no renderer and its observations are not images")


def write_mp4(path: Path, frames: list[np.ndarray], fps: int) -> None:
    import imageio.v2 as imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    # even sizes for H.264; macro_block_size=1 keeps imageio from resizing and warning about it
    frames = [f[: f.shape[0] // 2 * 2, : f.shape[1] // 2 * 2] for f in frames]
    # encoded next to its destination, then renamed: a failure halfway leaves any earlier video as it was
    partial = path.with_name(f".{path.stem}.partial{path.suffix}")  # the suffix tells imageio the container
    try:
        imageio.mimwrite(partial, frames, fps=fps, codec="libx264", macro_block_size=1, quality=7)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def log_video(writer: Any, tag: str, frames: list[np.ndarray], fps: int, step: int) -> None:
    """An animated GIF summary, the format SummaryWriter.add_video writes (TensorBoard's Images tab plays it)."""
    from PIL import Image
    from tensorboard.compat.proto.summary_pb2 import Summary

    stride = max(1, -(-len(frames) // GIF_MAX_FRAMES))
    scale = max(1, -(-frames[0].shape[1] // GIF_MAX_WIDTH))
    images = [Image.fromarray(np.ascontiguousarray(f[::scale, ::scale])) for f in frames[::stride]]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 * stride / fps), loop=0)
    image = Summary.Image(height=images[0].height, width=images[0].width, colorspace=3, encoded_image_string=buffer.getvalue())
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)
    writer.flush()
