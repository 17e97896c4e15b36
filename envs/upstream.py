"""Warnings that an upstream library prints once per object it builds, shown once per process instead."""

from __future__ import annotations

import sys

_shown: set[str] = set()  # MuJoCo warnings this process has shown
_installed = False


def show_mujoco_warnings_once() -> None:
    """Install a MuJoCo warning handler (`mujoco.set_mju_user_warning`) that shows each distinct warning once per process
    and says it is MuJoCo's. MuJoCo warns about a model file each time it compiles the model: under MuJoCo 3.17,
    gymnasium's HalfCheetah-v5 model (half_cheetah.xml, `<compiler settotalmass=...>`) printed "compiler attribute
    'settotalmass' is deprecated" once per env built, 55 times for a TD3 group of five, and the run's own lines scrolled
    away."""
    global _installed
    if _installed:
        return
    import mujoco

    mujoco.set_mju_user_warning(_warn_once)
    _installed = True


def _warn_once(message: str) -> None:
    if message in _shown:
        return
    _shown.add(message)
    print(f"warning: MuJoCo: {message} (MuJoCo's warning, shown once per process)", file=sys.stderr, flush=True)
