"""A clean console: the report does not trip over the sweep's own log folder, and building environments prints no
third-party banners or deprecation notes (ALE's emulator banner, dm-control's absl warnings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from commands.report import find_run_dirs

ROOT = Path(__file__).resolve().parent.parent


def test_the_sweeps_log_folder_is_not_reported_as_a_skipped_run(tmp_path):
    run = tmp_path / "CartPole-v1__ppo__1"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    (tmp_path / "logs" / "submitit").mkdir(parents=True)
    (tmp_path / "logs" / "CartPole-v1__ppo__1.log").write_text("ppo finished\n")
    (tmp_path / "notes").mkdir()  # a folder that is neither a run nor the sweep's logs still gets its note
    found, notes = find_run_dirs([str(tmp_path)])
    assert found == [run]
    assert notes == [f"skipped {tmp_path / 'notes'}: not a run directory (no summary.json or args.json)"]
    (tmp_path / "logs" / "data.csv").write_text("")  # a 'logs' folder with other files is not the sweep's
    assert len(find_run_dirs([str(tmp_path)])[1]) == 2


def test_building_atari_and_dm_control_envs_prints_nothing(tmp_path):
    script = "import envs; envs.make('ALE/Breakout-v5', 1).close(); envs.make('dmc:cheetah-run', 1).close(); print('built')"
    env = os.environ | {"PYTHONPATH": str(ROOT), "MUJOCO_GL": "disabled"}  # rendering is not needed to step
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "built\n"
    for noise in ("A.L.E", "Stella", "WARNING:absl", "deprecated"):
        assert noise not in result.stderr, result.stderr
