import torch

from cleanrl_plus.replay import ReplayBuffer


def _fill(buffer, start, n, num_envs=1):
    for k in range(start, start + n, num_envs):
        value = torch.arange(k, k + num_envs, dtype=torch.float32)
        buffer.add(value[:, None], value[:, None], value, value[:, None] + 0.5, torch.zeros(num_envs, dtype=torch.bool))


def test_wraps_around_and_stamps_insertion_steps():
    buffer = ReplayBuffer(5, (1,), (1,))
    _fill(buffer, 0, 7)
    assert len(buffer) == 5 and buffer.num_inserted == 7 and buffer.position == 2
    # slots 0,1 were overwritten by transitions 5,6; slots 2..4 still hold 2..4
    assert buffer.insertion_step.tolist() == [5, 6, 2, 3, 4]
    assert buffer.obs[:, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert buffer.next_obs[:, 0].tolist() == [5.5, 6.5, 2.5, 3.5, 4.5]


def test_batched_add_wraps_across_the_end():
    buffer = ReplayBuffer(5, (1,), (1,))
    _fill(buffer, 0, 6, num_envs=3)  # second batch of 3 lands in slots 3, 4, 0
    assert buffer.insertion_step.tolist() == [5, 1, 2, 3, 4]
    assert buffer.position == 1 and len(buffer) == 5


def test_slots_by_age_finds_newest_first():
    buffer = ReplayBuffer(5, (1,), (1,))
    _fill(buffer, 0, 7)
    slots = buffer.slots_by_age(torch.arange(5))
    ages = buffer.num_inserted - 1 - buffer.insertion_step[slots]
    assert ages.tolist() == [0, 1, 2, 3, 4]


def test_sample_returns_consistent_rows_and_only_stored_ones():
    torch.manual_seed(0)
    buffer = ReplayBuffer(100, (1,), (1,))
    _fill(buffer, 0, 10)
    batch = buffer.sample(512)
    assert batch.obs.shape == (512, 1) and batch.rewards.shape == (512,)
    assert torch.equal(batch.obs[:, 0], batch.rewards) and torch.equal(batch.insertion_step.float(), batch.rewards)
    assert set(batch.insertion_step.tolist()) == set(range(10))


def test_state_dict_round_trip():
    buffer = ReplayBuffer(5, (1,), (1,))
    _fill(buffer, 0, 7)
    copy = ReplayBuffer(5, (1,), (1,))
    copy.load_state_dict(buffer.state_dict())
    for name in ("obs", "next_obs", "actions", "rewards", "terminated", "insertion_step"):
        assert torch.equal(getattr(copy, name), getattr(buffer, name))
    assert (copy.position, copy.size, copy.num_inserted) == (2, 5, 7)


def test_ring_slots_place_selected_rows_in_order_wrap_and_send_the_rest_to_scratch():
    from cleanrl_plus.replay import ring_slots

    selected = torch.tensor([True, False, True, True])
    assert ring_slots(selected, torch.tensor(2), capacity=3).tolist() == [2, 3, 0, 1]
