"""--track: a real tiny PPO run in W&B's offline mode mirrors its TensorBoard scalars and flags into the W&B run."""

from __future__ import annotations

import builtins
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parent.parent
wandb = pytest.importorskip("wandb", reason='--track needs the wandb extra: pip install -e ".[wandb]"')


def wandb_records(path: Path):
    """The protobuf records of a .wandb file (W&B's leveldb-style log: 7-byte file header, 32 KiB blocks, records
    split into FULL/FIRST/MIDDLE/LAST chunks each with a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2

    raw, block, pos, pending = path.read_bytes(), 32768, 7, b""
    while pos + 7 <= len(raw):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        pending += raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record
            pending = b""


def test_track_mirrors_tensorboard_scalars_and_flags_into_an_offline_wandb_run(tmp_path):
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb"), "WANDB_SILENT": "true", "PYTHONPATH": str(ROOT)}
    (tmp_path / "wandb").mkdir()
    command = [
        sys.executable,
        str(ROOT / "agents/ppo.py"),
        "--env-id",
        "CartPole-v1",
        "--total-timesteps",
        "512",
        "--num-steps",
        "128",
        "--num-envs",
        "2",
        "--eval-every",
        "256",
        "--eval-episodes",
        "2",
        "--log-every",
        "256",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--no-progress",
        "--threads",
        "1",
        "--track",
        "--wandb-project-name",
        "docs-test",
        "--learning-rate",
        "0.00123",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr[-2000:]
    [run_dir] = (tmp_path / "runs").iterdir()
    [wandb_file] = (tmp_path / "wandb").glob("wandb/offline-run-*/*.wandb")

    history: dict[str, list[float]] = {}
    config: dict[str, str] = {}
    for record in wandb_records(wandb_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            for item in record.history.item:
                history.setdefault(item.key or "/".join(item.nested_key), []).append(float(item.value_json))
        elif kind == "run":
            config |= {item.key: item.value_json for item in record.run.config.update}
    events = EventAccumulator(str(run_dir))
    events.Reload()
    logged = events.Tags()["scalars"]
    assert {"eval/episodic_return", "charts/episodic_return", "losses/value_loss"} <= set(logged)
    for tag in logged:  # every TensorBoard scalar reaches W&B, with the same values
        assert history.get(tag) == pytest.approx([e.value for e in events.Scalars(tag)], rel=1e-6), tag
    assert config["learning_rate"] == "0.00123" and config["env_id"] == '"CartPole-v1"'
    assert config["reset.method"]  # nested remedy settings arrive as dotted keys, as on the command line


def test_track_without_wandb_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    from agents import ppo
    from cleanrl_plus.run import cli_main

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    monkeypatch.setattr(sys, "argv", ["ppo.py", "--env-id", "CartPole-v1", "--track", "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as exit:
        cli_main(ppo.main, ppo.Args)
    assert exit.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and 'pip install -e ".[wandb]"' in error
    assert not list(tmp_path.iterdir())  # nothing was created
