"""The custom-scalars layout a run writes names the diagnostics it really logs, grouped per network, next to the
returns (TensorBoard's Custom Scalars dashboard)."""

from __future__ import annotations

import re

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2

from agents import ppo, td3
from cleanrl_plus.config import parse_args

COMMON = [
    "--eval-episodes",
    "2",
    "--no-progress",
    "--threads",
    "1",
    "--log-every",
    "100",
    "--diagnostics.every",
    "50",
    "--diagnostics.churn-every",
    "50",
]


def layout_and_tags(run_dir: str) -> tuple[layout_pb2.Layout, list[str]]:
    events = EventAccumulator(run_dir, size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    layout = layout_pb2.Layout()
    layout.ParseFromString(events.Tensors("custom_scalars__config__")[-1].tensor_proto.string_val[0])
    return layout, events.Tags()["scalars"]


@pytest.mark.parametrize(
    "module, flags, networks",
    [
        (
            td3,
            ["--env-id", "Pendulum-v1", "--total-timesteps", "400", "--learning-starts", "200", "--eval-every", "200"],
            {"critic", "actor"},
        ),
        (
            ppo,
            [
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
                "--num-minibatches",
                "4",
            ],
            {"critic", "policy"},
        ),
    ],
)
def test_the_layout_groups_each_networks_logged_diagnostics_next_to_the_return(module, flags, networks, tmp_path):
    summary = module.main(parse_args(module.Args, flags + COMMON + ["--runs-dir", str(tmp_path)]))
    layout, tags = layout_and_tags(summary["run_dir"])
    assert {category.title for category in layout.category} == {f"plasticity: {net}" for net in networks}
    for category in layout.category:
        net = category.title.split(": ")[1]
        charts = {chart.title: list(chart.multiline.tag) for chart in category.chart}
        assert list(charts)[0] == "return (train, eval)"
        for title, patterns in charts.items():  # every chart shows real tags of this run, and only this network's
            shown = [tag for tag in tags if any(re.search(p, tag) for p in patterns)]
            assert shown, (category.title, title)
            if title != "return (train, eval)":
                assert all(tag.startswith(f"plasticity/{net}_") for tag in shown), shown
        dormant = [tag for tag in tags if tag.startswith(f"plasticity/{net}_dormant_")]
        assert len(dormant) == 3 and all(re.search(charts["dormant fraction"][0], tag) for tag in dormant)
    assert {"eval/episodic_return", "charts/episodic_return"} <= set(tags)
