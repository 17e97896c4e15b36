import dataclasses
import io
import json
import re

import pytest
import torch
from conftest import OnTheGpu

from agents.td3 import Args
from cleanrl_plus.checkpoint import capture_rng_state, load_checkpoint, restore_rng_state, save_checkpoint
from cleanrl_plus.config import parse_args
from cleanrl_plus.logger import hyperparameter_table
from cleanrl_plus.progress import Progress
from cleanrl_plus.run import resolve_threads, run_name_for
from envs.errors import UserError


def test_resume_reuses_saved_flags_and_lets_new_ones_override(tmp_path):
    from plasticity.swd import SWDArgs

    saved = Args(
        seed=7, env_id="Pendulum-v1", hidden_sizes=(64, 32), total_timesteps=1000, swd=SWDArgs(enabled=True, decay_steps=123)
    )
    (tmp_path / "args.json").write_text(json.dumps(dataclasses.asdict(saved) | {"agent": "td3"}))
    args = parse_args(Args, ["--resume", str(tmp_path), "--total-timesteps", "5000"])
    assert args.seed == 7 and args.env_id == "Pendulum-v1" and args.hidden_sizes == (64, 32)
    assert args.total_timesteps == 5000 and args.resume == str(tmp_path)
    assert args.swd == SWDArgs(enabled=True, decay_steps=123)  # nested remedy settings survive JSON


def test_resume_rejects_flags_of_another_agent(tmp_path):
    (tmp_path / "args.json").write_text(json.dumps({"agent": "td3", "seed": 1, "num_minibatches": 4}))
    with pytest.raises(UserError, match=r"saved flags \['num_minibatches'\] are not flags of this agent"):
        parse_args(Args, ["--resume", str(tmp_path)])


def test_checkpoint_round_trip_and_rng_state(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.manual_seed(3)
    state = {"global_step": 12, "rng": capture_rng_state(), "weights": torch.arange(4.0)}
    expected = torch.rand(3)
    save_checkpoint(path, state)
    assert not path.with_suffix(".pt.tmp").exists()
    loaded = load_checkpoint(path)
    restore_rng_state(loaded["rng"])
    assert torch.equal(torch.rand(3), expected) and torch.equal(loaded["weights"], torch.arange(4.0))


def test_rng_state_restores_from_a_checkpoint_loaded_onto_a_gpu():
    """map_location='cuda' brings the saved states to the GPU; only `.cpu()` gives what torch.set_rng_state takes."""
    state = capture_rng_state()
    expected = torch.rand(3)
    restore_rng_state(state | {"torch": OnTheGpu(state["torch"])})
    assert torch.equal(torch.rand(3), expected)


def test_checkpoint_without_step_is_rejected(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"weights": 1}, path)
    with pytest.raises(UserError, match="incomplete"):
        load_checkpoint(path)


def test_progress_line_shows_sps_and_eta():
    stream = io.StringIO()
    progress = Progress(total=1000, description="td3 Pendulum-v1", stream=stream)
    progress.set(ret=-150.25)
    for step in range(0, 1001, 100):
        progress.update(step)
    progress.close(1000)
    line = stream.getvalue().strip().splitlines()[-1]
    assert line.startswith("td3 Pendulum-v1 1.00k/1.00k [100%]")
    assert "SPS" in line and "ETA 0:00:00" in line and "ret -150.2" in line


def test_progress_line_past_a_rounded_up_budget_never_shows_a_negative_eta():
    stream = io.StringIO()
    Progress(total=100, description="ppo", stream=stream).close(8192)  # one whole 8192-step rollout for a 100-step budget
    line = stream.getvalue().strip()
    assert line.startswith("ppo 8.19k/8.19k [100%]") and "ETA 0:00:00" in line


def test_run_name_is_filesystem_safe():
    args = Args(env_id="ALE/Pong-v5", exp_name="td3", seed=3)
    name = run_name_for(args)
    assert name.startswith("ALE-Pong-v5__td3__3__") and "/" not in name


def test_hyperparameter_table_flattens_nested_settings():
    @dataclasses.dataclass
    class Inner:
        decay_steps: int = 80_000

    @dataclasses.dataclass
    class Outer:
        seed: int = 1
        swd: Inner = dataclasses.field(default_factory=Inner)

    table = hyperparameter_table(Outer())
    assert "|seed|1|" in table and "|swd.decay_steps|80000|" in table


def test_threads_default_and_validation():
    assert resolve_threads(3) == 3
    assert 1 <= resolve_threads(0) <= 2
    with pytest.raises(UserError):
        resolve_threads(-1)


FAULT_PROBE = """
import resource, sys, torch
from cleanrl_plus.run import tune_allocator
if sys.argv[1] == "tuned":
    tune_allocator()
def one_update_worth_of_activations():
    activations = [torch.ones(512 * 1024) for _ in range(8)]  # 8 x 2 MiB, freed together
    del activations
one_update_worth_of_activations()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    one_update_worth_of_activations()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_tuned_allocator_stops_returning_activations_to_the_os():
    """Without the tuning glibc trims the freed 16 MiB and every round faults it back in (~4600 faults)."""
    from conftest import run_script

    faults = {mode: int(run_script("-c", FAULT_PROBE, mode).stdout) for mode in ("plain", "tuned")}
    assert faults["plain"] > 2000, faults  # the probe does provoke faults on this platform
    assert faults["tuned"] < faults["plain"] / 4, faults


def test_episode_logging_averages_episodes_that_end_at_the_same_step(tmp_path):
    """Thousands of envs finish thousands of episodes per log interval: one point per end step, the mean."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from cleanrl_plus.logger import Logger
    from envs.base import EpisodeStats

    logger = Logger(str(tmp_path), args=None, purge_step=0)
    logger.episodes(EpisodeStats(returns=[1.0, 3.0, 5.0], lengths=[10, 30, 50], end_steps=[10, 10, 20]))
    logger.close()
    events = EventAccumulator(str(tmp_path)).Reload()
    assert [(e.step, e.value) for e in events.Scalars("charts/episodic_return")] == [(10, 2.0), (20, 5.0)]
    assert [e.value for e in events.Scalars("charts/episodic_length")] == [20.0, 50.0]
    assert logger.last_episodic_return == 5.0


@pytest.mark.parametrize(
    "agent, flags, message",
    [
        ("ppo", ["--num-steps", "0"], "--num-steps must be at least 1, got 0"),
        ("td3", ["--gamma", "1.5"], "--gamma must be in [0, 1], got 1.5"),
        ("td3", ["--learning-rate", "0"], "--learning-rate must be > 0, got 0.0"),
        ("ddqn", ["--eval-episodes", "0"], "--eval-episodes must be at least 1, got 0"),
        ("td3", ["--buffer-size", "100"], "--buffer-size 100 is smaller than --batch-size 256 — raise it"),
        ("td3", ["--continual.num-tasks", "3"], "--continual.* flags apply to continual ids; Pendulum-v1 is not one"),
    ],
)
def test_flags_out_of_range_are_one_line_errors_before_anything_is_created(agent, flags, message, tmp_path):
    import importlib

    from cleanrl_plus.config import validate_args

    args_type = importlib.import_module(f"agents.{agent}").Args
    env_id = "CartPole-v1" if agent in ("ppo", "ddqn") else "Pendulum-v1"
    with pytest.raises(UserError, match=re.escape(message)):  # parse_args runs validate_args
        parse_args(args_type, ["--env-id", env_id, "--runs-dir", str(tmp_path), *flags])
    validate_args(parse_args(args_type, ["--env-id", env_id]))  # the defaults pass


def test_flush_denormal_sets_the_processs_cpu_mode_and_may_change_on_resume(tmp_path):
    """--flush-denormal makes a product that lands below float32's smallest normal value 0 (Intel cores run ≈ 200×
    slower on such values); without it the value stays. It is how a run computes, not what, so a resume may change it."""
    from cleanrl_plus.config import check_resume
    from cleanrl_plus.run import prepare_run

    tiny = torch.tensor([1e-30]) * 1e-9  # 1e-39: below float32's tiny (1.18e-38)
    try:
        for flush in (True, False, True):
            prepare_run(Args(env_id="Pendulum-v1", runs_dir=str(tmp_path), flush_denormal=flush, progress=False))
            assert bool((torch.tensor([1e-30]) * 1e-9 == 0).item()) is flush
    finally:
        torch.set_flush_denormal(False)
    assert tiny.item() != 0
    saved = Args(env_id="Pendulum-v1", flush_denormal=False)
    saved.continual.schedule_seed = saved.seed  # as prepare_run records it
    (tmp_path / "args.json").write_text(json.dumps(dataclasses.asdict(saved) | {"agent": "td3"}))
    check_resume(dataclasses.replace(saved, flush_denormal=True, resume=str(tmp_path)), tmp_path)
