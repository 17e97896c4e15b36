"""`cleanrl-plus eval RUN_DIR`: a saved run of every agent, re-evaluated from its checkpoint, gives exactly the
final evaluation the run logged (same policy, same episodes); other seeds, continual tasks and videos work."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch

from cleanrl_plus.config import parse_args
from commands.cli import main as cli_main
from commands.eval import EvalArgs, evaluate_run

TINY = ["--eval-every", "0", "--eval-episodes", "3", "--no-progress", "--threads", "1", "--log-every", "100"]
RUNS = {
    "td3": ["--env-id", "Pendulum-v1", "--total-timesteps", "300", "--learning-starts", "200", "--hidden-sizes", "32", "32"],
    "sac_simba": [
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "260",
        "--learning-starts",
        "200",
        "--actor-width",
        "16",
        "--critic-width",
        "16",
        "--critic-blocks",
        "1",
    ],
    "ddqn": [
        "--env-id",
        "CartPole-v1",
        "--total-timesteps",
        "600",
        "--learning-starts",
        "100",
        "--train-frequency",
        "4",
        "--gradient-steps",
        "1",
        "--hidden-sizes",
        "32",
        "32",
    ],
    "ppo": ["--env-id", "CartPole-v1", "--total-timesteps", "256", "--num-steps", "128", "--num-envs", "2"],
    "gtr": ["--env-id", "CartPole-v1", "--total-timesteps", "512", "--num-steps", "128", "--num-envs", "2"],
}


def train(agent: str, runs_dir, flags: list[str]) -> tuple[str, dict]:
    module = importlib.import_module(f"agents.{agent}")
    summary = module.main(parse_args(module.Args, flags + TINY + ["--runs-dir", str(runs_dir)]))
    return summary["run_dir"], summary


@pytest.mark.parametrize("agent", sorted(RUNS))
def test_eval_reproduces_the_runs_final_evaluation(agent, tmp_path):
    run_dir, summary = train(agent, tmp_path, RUNS[agent])
    result = evaluate_run(EvalArgs(run_dir, episodes=3))
    assert result["agent"] == agent
    assert result["returns"] == pytest.approx(summary["eval"]["returns"], rel=1e-5, abs=1e-4)


@pytest.mark.parametrize("agent", ["td3", "ddqn", "ppo"])  # SAC's actor has two heads (mean, log σ): injection refuses it
def test_eval_rebuilds_an_injected_head(agent, tmp_path):
    """Plasticity injection changed the policy's structure during the run: eval builds it again from the checkpoint."""
    run_dir, summary = train(agent, tmp_path, RUNS[agent] + ["--reset.method", "inject", "--reset.every", "50"])
    assert any(
        ".fresh." in key
        for key in torch.load(Path(run_dir) / "checkpoint.pt", weights_only=False)[
            {"td3": "actor", "ddqn": "critic", "ppo": "agent"}[agent]
        ]
    )
    result = evaluate_run(EvalArgs(run_dir, episodes=3))
    assert result["returns"] == pytest.approx(summary["eval"]["returns"], rel=1e-5, abs=1e-4)


@pytest.mark.parametrize("agent", ["td3", "ddqn", "ppo"])
def test_eval_rebuilds_the_remedied_architecture(agent, tmp_path):
    # the policy must come from the same builder as training: a LayerNorm/CReLU torso has other weights and widths
    run_dir, summary = train(agent, tmp_path, RUNS[agent] + ["--net.norm", "layer", "--net.activation", "crelu"])
    result = evaluate_run(EvalArgs(run_dir, episodes=3))
    assert result["returns"] == pytest.approx(summary["eval"]["returns"], rel=1e-5, abs=1e-4)


def test_eval_on_another_seed_and_a_continual_task_with_a_video(tmp_path, capsys):
    flags = [
        "--env-id",
        "continual:cartpole-offset-small",
        "--continual.steps-per-task",
        "256",
        "--continual.num-tasks",
        "2",
        "--total-timesteps",
        "512",
        "--num-steps",
        "128",
        "--num-envs",
        "2",
    ]
    run_dir, summary = train("ppo", tmp_path, flags)
    # the run ended in task 1; its end-of-task evaluation is what eval gives by default
    assert evaluate_run(EvalArgs(run_dir, episodes=3))["mean"] == pytest.approx(summary["tasks"][-1]["final_eval"], rel=1e-5)
    on_task_0 = evaluate_run(EvalArgs(run_dir, episodes=3, task=0))
    other_seed = evaluate_run(EvalArgs(run_dir, episodes=3, task=0, seed=7))
    assert on_task_0["task"] == 0 and other_seed["returns"] != on_task_0["returns"]
    cli_main(["eval", run_dir, "--episodes", "2", "--task", "1", "--capture-video"])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("ppo on continual:cartpole-offset-small task 1: ") and " ± " in line and "over 2 episodes" in line
    assert (Path(run_dir) / "videos" / "eval-seed1-task1.mp4").stat().st_size > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "{tmp}/missing"], "no checkpoint.pt there"),
        (["eval", "{run}", "--task", "3"], "tasks 0..1"),
        (["eval", "{run}", "--episodes", "0"], "--episodes must be at least 1"),
    ],
)
def test_eval_mistakes_are_one_line(argv, message, tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint.pt").write_bytes(b"")
    (run_dir / "summary.json").write_text(json.dumps({"agent": "ppo"}))
    (run_dir / "args.json").write_text(
        json.dumps({"agent": "ppo", "env_id": "continual:cartpole-offset-small", "continual": {"num_tasks": 2}})
    )
    with pytest.raises(SystemExit) as exit:
        cli_main([a.format(tmp=tmp_path, run=run_dir) for a in argv])
    assert exit.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and message in error
