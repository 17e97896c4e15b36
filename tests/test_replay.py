from types import SimpleNamespace

import pytest
import torch

from cleanrl_plus.members import Members
from cleanrl_plus.replay import ReplayBuffer
from cleanrl_plus.transition import Transition


def one(seed: int = 0) -> Members:
    """A group of one member (a one-seed run)."""
    return Members((seed,))


def _fill(buffer, start, n, num_envs=1):
    """Member k stores the values 1000·k + insertion counter."""
    K = len(buffer.members)
    for k in range(start, start + n, num_envs):
        value = torch.arange(k, k + num_envs, dtype=torch.float32) + 1000 * torch.arange(K).unsqueeze(1)
        no = torch.zeros(K, num_envs, dtype=torch.bool)
        obs = value[..., None]
        buffer.add(Transition(obs=obs, action=obs, reward=value, terminated=no, truncated=no, next_obs=obs + 0.5))


def test_wraps_around_and_stamps_insertion_steps():
    buffer = ReplayBuffer(5, (1,), (1,), Members((0, 1)))
    _fill(buffer, 0, 7)
    assert len(buffer) == 5 and buffer.num_inserted == 7 and buffer.position == 2
    # slots 0,1 were overwritten by transitions 5,6; slots 2..4 still hold 2..4 — in each member's own ring
    assert buffer.insertion_step.tolist() == [[5, 6, 2, 3, 4]] * 2
    assert buffer.obs[0, :, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert buffer.next_obs[0, :, 0].tolist() == [5.5, 6.5, 2.5, 3.5, 4.5]
    assert buffer.obs[1, :, 0].tolist() == [1005.0, 1006.0, 1002.0, 1003.0, 1004.0]


def test_batched_add_wraps_across_the_end():
    buffer = ReplayBuffer(5, (1,), (1,), one())
    _fill(buffer, 0, 6, num_envs=3)  # second batch of 3 lands in slots 3, 4, 0
    assert buffer.insertion_step.tolist() == [[5, 1, 2, 3, 4]]
    assert buffer.position == 1 and len(buffer) == 5


def test_slots_by_age_finds_newest_first():
    buffer = ReplayBuffer(5, (1,), (1,), one())
    _fill(buffer, 0, 7)
    slots = buffer.slots_by_age(torch.arange(5))
    ages = buffer.num_inserted - 1 - buffer.insertion_step[0, slots]
    assert ages.tolist() == [0, 1, 2, 3, 4]


def test_sample_returns_consistent_rows_and_only_stored_ones():
    buffer = ReplayBuffer(100, (1,), (1,), Members((0, 1)))
    _fill(buffer, 0, 10)
    batch = buffer.sample(512)
    assert batch.obs.shape == (2, 512, 1) and batch.rewards.shape == (2, 512)
    assert torch.equal(batch.obs[..., 0], batch.rewards)
    # each member's rows are its own transitions (member k stored 1000·k + the insertion counter)
    offsets = 1000 * torch.arange(2.0).unsqueeze(1)
    assert torch.equal(batch.insertion_step.float() + offsets, batch.rewards)
    assert all(set(batch.insertion_step[k].tolist()) == set(range(10)) for k in range(2))


def test_state_dict_round_trip():
    buffer = ReplayBuffer(5, (1,), (1,), one())
    _fill(buffer, 0, 7)
    copy = ReplayBuffer(5, (1,), (1,), one())
    copy.load_state_dict(buffer.state_dict())
    for name in ("obs", "next_obs", "actions", "rewards", "terminated", "insertion_step"):
        assert torch.equal(getattr(copy, name), getattr(buffer, name))
    assert (copy.position, copy.size, copy.num_inserted) == (2, 5, 7)


# ---- n-step returns (NStepReplay) -----------------------------------------------------------------------------------
# Three envs, six vector steps, γ = 0.5, n = 3. Env 0 terminates at step 2 and is truncated at step 4; env 1 never
# ends; env 2 is truncated at step 1 and terminates at step 4. s'[t, e] = 100·e + t + 0.5.
N_STEP_REWARDS = [[1, 10, 100], [2, 20, 200], [3, 30, 300], [4, 40, 400], [5, 50, 500], [6, 60, 600]]
TERMINATED = {(2, 0), (4, 2)}
TRUNCATED = {(4, 0), (1, 2)}
# by hand, per (step, env): (R = Σ_{k<m} γ^k r_{t+k}, the step whose s' is bootstrapped from, terminated there, γ^m)
HAND_N_STEP = {
    (0, 0): (1 + 0.5 * 2 + 0.25 * 3, 2, 1, 0.125),  # the window runs into the termination at step 2
    (1, 0): (2 + 0.5 * 3, 2, 1, 0.25),
    (2, 0): (3, 2, 1, 0.5),
    (3, 0): (4 + 0.5 * 5, 4, 0, 0.25),  # a truncation at step 4: bootstrap from its true final observation
    (4, 0): (5, 4, 0, 0.5),
    (5, 0): (6, 5, 0, 0.5),  # the newest step: nothing after it is stored yet
    (0, 1): (10 + 0.5 * 20 + 0.25 * 30, 2, 0, 0.125),
    (1, 1): (20 + 0.5 * 30 + 0.25 * 40, 3, 0, 0.125),
    (2, 1): (30 + 0.5 * 40 + 0.25 * 50, 4, 0, 0.125),
    (3, 1): (40 + 0.5 * 50 + 0.25 * 60, 5, 0, 0.125),
    (4, 1): (50 + 0.5 * 60, 5, 0, 0.25),
    (5, 1): (60, 5, 0, 0.5),
    (0, 2): (100 + 0.5 * 200, 1, 0, 0.25),
    (1, 2): (200, 1, 0, 0.5),
    (2, 2): (300 + 0.5 * 400 + 0.25 * 500, 4, 1, 0.125),
    (3, 2): (400 + 0.5 * 500, 4, 1, 0.25),
    (4, 2): (500, 4, 1, 0.5),
    (5, 2): (600, 5, 0, 0.5),
}


def _n_step_buffer(capacity: int, n_step: int = 3):
    from cleanrl_plus.replay import NStepReplay

    buffer = NStepReplay(capacity, (1,), (1,), one(), num_envs=3, n_step=n_step, gamma=0.5)
    for t, rewards in enumerate(N_STEP_REWARDS):
        obs = torch.tensor([[[100.0 * e + t] for e in range(3)]])
        terminated = torch.tensor([[(t, e) in TERMINATED for e in range(3)]])
        truncated = torch.tensor([[(t, e) in TRUNCATED for e in range(3)]])
        reward = torch.tensor([rewards], dtype=torch.float32)
        buffer.add(
            Transition(obs=obs, action=obs, reward=reward, terminated=terminated, truncated=truncated, next_obs=obs + 0.5)
        )
    return buffer


def _check_hand_n_step(buffer, steps):
    index = torch.tensor([[buffer.slots_by_age(torch.tensor(3 * (5 - t) + 2 - e)).item() for t in steps for e in range(3)]])
    batch = buffer.n_step_batch(index)
    batch = type(batch)(*(x[0] for x in batch))  # the one member's rows
    for row, (t, e) in enumerate((t, e) for t in steps for e in range(3)):
        returns, bootstrap_step, terminated, discount = HAND_N_STEP[t, e]
        assert batch.obs[row, 0] == 100 * e + t and batch.insertion_step[row] == 3 * t + e
        assert batch.rewards[row].item() == returns, (t, e)
        assert batch.next_obs[row, 0].item() == 100 * e + bootstrap_step + 0.5, (t, e)
        assert batch.terminated[row].item() == terminated and batch.discount[row].item() == discount, (t, e)


def test_n_step_returns_stop_at_episode_ends_per_env_as_computed_by_hand():
    _check_hand_n_step(_n_step_buffer(capacity=30), steps=range(6))


def test_n_step_returns_ignore_rows_of_an_older_lap_of_the_ring():
    # 9 rows keep steps 3–5 only: the slots after step 5 hold steps 3 and 4 again, which must not extend its windows
    buffer = _n_step_buffer(capacity=9)
    assert buffer.insertion_step.tolist() == [[9, 10, 11, 12, 13, 14, 15, 16, 17]]
    _check_hand_n_step(buffer, steps=range(3, 6))


def test_n_step_replay_with_n_1_samples_todays_one_step_batch():
    from cleanrl_plus.replay import NStepReplay

    # two members each, of the same seeds: the two buffers draw the same rows
    one_step = ReplayBuffer(12, (1,), (1,), Members((0, 7)))
    n_step = NStepReplay(12, (1,), (1,), Members((0, 7)), num_envs=3, n_step=1, gamma=0.9)
    for t, rewards in enumerate(N_STEP_REWARDS):
        obs = torch.randn(2, 3, 1)
        transition = Transition(
            obs=obs,
            action=torch.randn(2, 3, 1),
            reward=torch.tensor([rewards, rewards], dtype=torch.float32) + torch.randn(2, 3),
            terminated=torch.tensor([[t == 2, False, t == 4], [False, t == 1, False]]),
            truncated=torch.tensor([[False, t == 3, False], [t == 5, False, False]]),
            next_obs=obs + 1,
        )
        one_step.add(transition)
        n_step.add(transition)
    expected = one_step.sample(64)
    batch = n_step.sample(64)
    for name in expected._fields[:-1]:
        assert torch.equal(getattr(batch, name), getattr(expected, name)), name
    assert expected.discount is None and torch.equal(batch.discount, torch.full((2, 64), 0.9))


def test_n_step_replay_round_trips_its_episode_ends_and_refuses_a_partial_vector_step():
    from cleanrl_plus.replay import NStepReplay

    buffer = _n_step_buffer(capacity=30)
    copy = NStepReplay(30, (1,), (1,), one(), num_envs=3, n_step=3, gamma=0.5)
    copy.load_state_dict(buffer.state_dict())
    assert torch.equal(copy.episode_end, buffer.episode_end) and copy.episode_end.sum() == 4
    with pytest.raises(ValueError, match="one vector step"):
        no = torch.zeros(1, 2, dtype=torch.bool)
        obs = torch.zeros(1, 2, 1)
        copy.add(Transition(obs=obs, action=obs, reward=torch.zeros(1, 2), terminated=no, truncated=no, next_obs=obs))


@pytest.mark.parametrize("n_step", [1, 3])
def test_add_puts_each_field_of_a_transition_where_it_belongs(n_step):
    from cleanrl_plus.replay import make_replay

    args = SimpleNamespace(buffer_size=12, n_step=n_step, gamma=0.9)
    buffer = make_replay(args, (2,), (1,), Members((0, 1)), None, num_envs=3)
    steps = []
    for t in range(2):
        value = torch.arange(6.0).view(2, 3) + 10 * t  # (members, num_envs): each member's env and step its own number
        steps.append(
            Transition(
                obs=torch.stack([value + 0.1, value + 0.15], dim=-1),
                action=value[..., None] + 0.2,
                reward=value + 0.3,
                # every (terminated, truncated) pair, in other envs at each step
                terminated=value % 3 == 0,
                truncated=value % 2 == 0,
                next_obs=torch.stack([value + 0.4, value + 0.45], dim=-1),
            )
        )
        buffer.add(steps[-1])
    for t, step in enumerate(steps):
        rows = slice(3 * t, 3 * t + 3)  # one vector step: 3 rows in env order
        assert torch.equal(buffer.obs[:, rows], step.obs) and torch.equal(buffer.next_obs[:, rows], step.next_obs)
        assert torch.equal(buffer.actions[:, rows], step.action) and torch.equal(buffer.rewards[:, rows], step.reward)
        assert torch.equal(buffer.terminated[:, rows], step.terminated.float()), "terminated holds the truncations"
        if n_step > 1:
            assert torch.equal(buffer.episode_end[:, rows], step.terminated | step.truncated)
    assert buffer.insertion_step[:, :6].tolist() == [list(range(6))] * 2 and len(buffer) == 6


def test_make_replay_gives_n_step_returns_only_when_asked():
    from cleanrl_plus.replay import NStepReplay, ReplayBuffer, make_replay

    one_step = make_replay(SimpleNamespace(buffer_size=64, n_step=1, gamma=0.9), (3,), (1,), one(), None, num_envs=2)
    n_step = make_replay(SimpleNamespace(buffer_size=64, n_step=3, gamma=0.9), (3,), (1,), one(), None, num_envs=2)
    assert type(one_step) is ReplayBuffer and type(n_step) is NStepReplay
    assert (n_step.n_step, n_step.num_envs) == (3, 2)
    torch.testing.assert_close(n_step.powers, 0.9 ** torch.arange(4.0))


def test_batch_gamma_is_gamma_for_one_step_batches_and_each_transitions_power_for_n_step_ones():
    from cleanrl_plus.replay import Batch, batch_gamma, bootstrap_discount

    one = Batch(*(torch.zeros(2, 1) for _ in range(4)), torch.tensor([0.0, 1.0]), torch.zeros(2))
    n_step = one._replace(discount=torch.tensor([0.81, 0.9]))
    assert batch_gamma(one, 0.9) == 0.9 and torch.equal(batch_gamma(n_step, 0.9), torch.tensor([0.81, 0.9]))
    torch.testing.assert_close(bootstrap_discount(n_step, 0.9), torch.tensor([0.81, 0.0]))
