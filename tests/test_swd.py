import math
from types import SimpleNamespace

import pytest
import torch

from cleanrl_plus.members import Members
from cleanrl_plus.replay import ReplayBuffer
from cleanrl_plus.transition import Transition
from plasticity.swd import SWDArgs, SWDSampler, age_weights


def _chi_square(ages: torch.Tensor, probabilities: torch.Tensor) -> tuple[float, int]:
    observed = torch.bincount(ages, minlength=len(probabilities)).double()
    expected = probabilities * len(ages)
    return float(((observed - expected) ** 2 / expected).sum()), len(probabilities) - 1


def _passes(statistic: float, dof: int) -> bool:
    return statistic < dof + 6 * math.sqrt(2 * dof)  # ~6σ above the χ² mean: a correct sampler never fails


@pytest.mark.parametrize(
    "num_steps, args",
    [
        (400, SWDArgs(decay_steps=150, min_weight=0.1)),  # buffer longer than the ramp: floor + ramp
        (100, SWDArgs(decay_steps=333, min_weight=0.1)),  # buffer shorter than the ramp: truncated ramp
        (300, SWDArgs(decay_steps=100, min_weight=0.25)),
        (300, SWDArgs(decay_steps=120, min_weight=0.1, mode="augment")),
    ],
)
def test_sampled_ages_follow_the_target_distribution(num_steps, args):
    torch.manual_seed(0)
    ages = SWDSampler(args).sample_ages(num_steps, 400_000, torch.device("cpu"))
    target = age_weights(torch.arange(num_steps), args)
    target = target / target.sum()
    statistic, dof = _chi_square(ages, target)
    assert _passes(statistic, dof), (statistic, dof)
    # the same check rejects plain uniform sampling, so it has teeth
    uniform_ages = torch.randint(0, num_steps, (400_000,))
    assert not _passes(*_chi_square(uniform_ages, target))


def test_zero_decay_steps_is_uniform():
    torch.manual_seed(0)
    ages = SWDSampler(SWDArgs(decay_steps=0)).sample_ages(50, 200_000, torch.device("cpu"))
    assert _passes(*_chi_square(ages, torch.full((50,), 1 / 50, dtype=torch.float64)))


def _ring(size: int) -> SimpleNamespace:
    """Only the bookkeeping of a full ring buffer, no storage: the sampler must need nothing else."""
    ring = SimpleNamespace(size=size, capacity=size, position=5, num_inserted=size + 5, device=torch.device("cpu"))
    ring.members = Members((0,))  # a group of one: the sampler draws from the member's generators
    ring.slots_by_age = lambda ages: (ring.position - 1 - ages) % ring.capacity
    return ring


def test_cost_is_independent_of_buffer_size():
    torch.manual_seed(0)
    # 10^12 transitions: any O(N) weight vector would be impossible to allocate.
    huge = _ring(10**12)
    slots = SWDSampler(SWDArgs()).sample_indices(huge, 4096)
    assert slots.shape == (1, 4096) and ((slots >= 0) & (slots < huge.capacity)).all()
    # Defaults on a full 10^6 buffer: the newest 80k transitions (8%) should fill ≈ 30.5% of each batch
    # (ramp mass 39.6k + 0.8k floor against 92k for the rest).
    ring = _ring(10**6)
    ages = (ring.position - 1 - SWDSampler(SWDArgs()).sample_indices(ring, 400_000)) % ring.capacity
    assert (ages < 80_000).double().mean().item() == pytest.approx(40.4 / 132.4, abs=0.004)


def test_recency_in_a_real_buffer_and_vector_env_slots():
    torch.manual_seed(0)
    sampler = SWDSampler(SWDArgs(decay_steps=100, min_weight=0.1), num_envs=2)
    buffer = ReplayBuffer(1000, (1,), (1,), Members((0,)), sampler=sampler)
    for step in range(600):  # 2 envs per step: 1200 insertions wrap a 1000-slot ring
        value = torch.tensor([[step, step]], dtype=torch.float32)
        obs, no = value[..., None], torch.zeros(1, 2, dtype=torch.bool)
        buffer.add(Transition(obs=obs, action=obs, reward=value, terminated=no, truncated=no, next_obs=obs))
    batch = buffer.sample(100_000)
    step_age = 599 - batch.rewards[0].long()  # the env step a transition came from, counted back from the newest
    assert step_age.min() == 0 and step_age.max() == 499
    target = age_weights(torch.arange(500), SWDArgs(decay_steps=100, min_weight=0.1))
    statistic, dof = _chi_square(step_age, target / target.sum())
    assert _passes(statistic, dof)
    assert torch.equal(buffer.age(batch)[0] // 2, step_age)  # age in insertions = 2·step age + slot


@pytest.mark.parametrize("agent", ["td3", "sac_simba"])
def test_agents_take_swd_from_the_command_line_and_log_sample_age(agent, tmp_path):
    import importlib

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from cleanrl_plus.config import parse_args

    module = importlib.import_module(f"agents.{agent}")
    common = [
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "1000",
        "--learning-starts",
        "100",
        "--log-every",
        "1000",
        "--eval-every",
        "0",
        "--eval-episodes",
        "1",
        "--batch-size",
        "64",
        "--runs-dir",
        str(tmp_path),
        "--no-progress",
    ]
    small = (
        ["--hidden-sizes", "16", "16"]
        if agent == "td3"
        else ["--actor-width", "16", "--critic-width", "16", "--critic-blocks", "1"]
    )
    ages = {}
    for name, flags in (("uniform", []), ("swd", ["--swd.enabled", "--swd.decay-steps", "100", "--swd.min-weight", "0.01"])):
        args = parse_args(module.Args, [*common, *small, "--exp-name", name, *flags])
        assert args.swd.enabled == (name == "swd")
        result = module.main(args)
        ages[name] = EventAccumulator(result["run_dir"]).Reload().Scalars("replay/sample_age")[-1].value
    assert ages["uniform"] == pytest.approx(500, rel=0.15)  # uniform over 1000 stored transitions
    assert ages["swd"] < 0.5 * ages["uniform"]  # expected ≈ 110: 85% of the mass on the newest 100


@pytest.mark.parametrize(
    "num_steps, args",
    [
        (12, SWDArgs(decay_steps=10, min_weight=0.25)),  # a* = 7.5: floor + a ramp with a fractional top
        (5, SWDArgs(decay_steps=10, min_weight=0.25)),  # the buffer cuts the ramp: the cut-triangle piece is used
        (9, SWDArgs(decay_steps=7, min_weight=0.3)),  # a* = 4.9
        (6, SWDArgs(decay_steps=4, min_weight=0.5)),  # a* = 2 exactly (integer ramp end)
    ],
)
def test_sampler_probabilities_enumerated_exactly_equal_the_closed_form(num_steps, args, monkeypatch):
    """Enumerate the sampler's randomness instead of sampling it: each mixture piece is forced in turn, with every
    uniform draw replaced by each of its values equally often, so the sampler's exact probability of every age comes
    out and must equal w(a)/Σw to float precision (an off-by-one of 0.2% in total variation fails here; χ² cannot see it)."""
    ramp_len = min(num_steps, math.ceil(args.decay_steps * (1 - args.min_weight)))
    draws = math.lcm(num_steps, ramp_len, ramp_len * (ramp_len - 1) // 2)  # a multiple of every uniform draw's range
    recorded: dict = {}

    def enumerate_randint(low, high, size, **kwargs):
        assert low == 0 and size[0] % high == 0, "each uniform draw must see every value equally often"
        return torch.arange(size[0], dtype=torch.int64) % high

    def forced_piece(probabilities, count, **kwargs):
        recorded["probabilities"] = probabilities.double()
        return torch.full((count,), recorded["piece"], dtype=torch.int64)

    monkeypatch.setattr(torch, "randint", enumerate_randint)
    monkeypatch.setattr(torch, "multinomial", forced_piece)
    probabilities = torch.zeros(num_steps, dtype=torch.float64)
    for piece in range(4):
        recorded["piece"] = piece
        ages = SWDSampler(args).sample_ages(num_steps, draws, torch.device("cpu"))
        probabilities += recorded["probabilities"][piece] * torch.bincount(ages, minlength=num_steps).double() / draws
    monkeypatch.undo()
    closed_form = age_weights(torch.arange(num_steps), args)
    torch.testing.assert_close(probabilities, closed_form / closed_form.sum(), rtol=0, atol=1e-12)
