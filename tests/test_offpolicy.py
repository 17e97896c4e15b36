"""The plumbing Double DQN, TD3 and SAC share (cleanrl_plus/offpolicy.py), and each one's `check`: the start-up checks
that need no machine, env or network, refusing what a run refuses with the same message."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from agents import ddqn, sac_simba, td3
from cleanrl_plus.distributional import CategoricalCritic, CriticArgs
from cleanrl_plus.evaluator import DeterministicPolicy
from cleanrl_plus.members import GroupNetwork, Members
from cleanrl_plus.normalization import with_normalizer
from cleanrl_plus.offpolicy import DeferredUpdates, act_in_box, on_obs, q_on_batch, update_batches
from cleanrl_plus.replay import Batch
from envs.errors import UserError
from plasticity.architecture import NetArgs
from plasticity.optimizers import OptimArgs
from plasticity.resets import ResetArgs


class CountingReplay:
    """A replay whose n-th sample is the batch n."""

    def __init__(self) -> None:
        self.samples = 0

    def sample(self, batch_size: int) -> int:
        self.samples += 1
        return self.samples


@pytest.mark.parametrize("reuse, batches", [(False, [1, 2, 3]), (True, [1, 1, 1])])
def test_update_batches_samples_as_each_update_begins_or_reuses_each_steps_first(reuse, batches):
    replay = CountingReplay()
    phase = update_batches(replay, 3, 32, reuse)
    first, last = next(phase)
    assert (first, last, replay.samples) == (1, False, 1)  # drawn when the first update asks, not before
    assert [first, *(batch for batch, _ in phase)] == batches
    assert [last for _, last in update_batches(CountingReplay(), 3, 32, reuse)] == [False, False, True]
    # a phase of --update-every 2 at 3 gradient steps a step: with reuse, one batch for each step's three updates
    batches = [1, 1, 1, 2, 2, 2] if reuse else [1, 2, 3, 4, 5, 6]
    assert [batch for batch, _ in update_batches(CountingReplay(), 6, 32, reuse, per_step=3)] == batches


def test_deferred_updates_pay_every_f_th_step_what_the_learning_steps_since_owe():
    # (terminated, truncated): running, cut by a time limit, ended by a termination (a hopper that falls)
    running, ended = (torch.tensor([[False]]), torch.tensor([[False]])), (torch.tensor([[False]]), torch.tensor([[True]]))
    fell = (torch.tensor([[True]]), torch.tensor([[False]]))
    # F = 1: each learning step's gradient steps at once, none before learning starts (CleanRL's loop)
    every_step = DeferredUpdates(1)
    learns = [False, True, True]
    assert [every_step.after_step(learn, 2, v, *running) for v, learn in enumerate(learns, start=1)] == [0, 2, 2]
    # F = 3, learning from the 2nd step: blocks end at steps 3 and 6; the 2nd and 3rd owe one each, then three
    blocks = DeferredUpdates(3)
    learns = [False, True, True, True, True, True, True]
    assert [blocks.after_step(learn, 1, v, *ended) for v, learn in enumerate(learns, start=1)] == [0, 0, 2, 0, 0, 3, 0]
    # what a block owes goes into the checkpoint: a run stopped at step 7 owes the 7th's update after resume
    resumed = DeferredUpdates(3)
    resumed.load_member_state_dicts([blocks.member_state_dict(k) for k in range(2)])
    assert [resumed.after_step(True, 1, v, *ended) for v in (8, 9)] == [0, 3]
    # F = 0: paid when an episode ends, whatever the step
    episodes = DeferredUpdates(0)
    ends = [running, ended, running, running, fell]
    assert [episodes.after_step(True, 1, v, *end) for v, end in enumerate(ends, start=1)] == [0, 2, 0, 0, 3]


def _critic(members: int) -> nn.Module:
    return td3.make_critic(members, 3, 1, td3.Args(hidden_sizes=(8,)))


def test_a_group_network_is_each_members_own_network_reading_the_normalizer():
    normalizer = nn.Identity()
    built = GroupNetwork(Members((1, 2)), _critic, torch.device("cpu"), normalizer)()
    alone = [Members((seed,)).build(_critic) for seed in (1, 2)]  # each member's network in a one-seed run
    for name, tensor in built.state_dict().items():
        torch.testing.assert_close(tensor, torch.cat([single.state_dict()[name] for single in alone]), msg=name)
    assert built.normalize is normalizer
    categorical = CategoricalCritic(_critic(1), CriticArgs(num_atoms=5))
    assert with_normalizer(categorical, normalizer).base.normalize is normalizer  # a C51 critic's base reads it


def test_batch_forwards_and_the_deterministic_policy_call_the_network_on_the_batch():
    critic, obs, actions = _critic(1), torch.randn(1, 4, 3), torch.randn(1, 4, 1)
    batch = Batch(obs, actions, torch.zeros(1, 4), obs, torch.zeros(1, 4), torch.zeros(1, 4))
    torch.testing.assert_close(q_on_batch(critic, batch), critic(obs, actions))
    torch.testing.assert_close(on_obs(torch.tanh, batch), torch.tanh(obs))
    policy = DeterministicPolicy(torch.tanh)
    torch.testing.assert_close(policy(obs, Members((1,))), torch.tanh(obs))


class Statistics:
    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def update(self, obs: torch.Tensor) -> None:
        self.seen.append(obs)


@pytest.mark.parametrize("act_randomly", [True, False])
def test_acting_in_a_box_is_uniform_before_learning_and_the_exploring_policy_after(act_randomly):
    """The observation statistics see s before the actions are chosen; the actions stay in the Box."""
    session = SimpleNamespace(
        off_policy_phase=lambda global_step, num_updates, starts, random_steps: (act_randomly, not act_randomly)
    )
    actor = SimpleNamespace(bounds=(torch.tensor([-2.0]), torch.tensor([2.0])))
    statistics = Statistics()
    agent = SimpleNamespace(
        session=session,
        args=SimpleNamespace(learning_starts=10),
        normalizer=statistics,
        actor=actor,
        members=Members((1,)),
        explore=lambda obs, noise: torch.full_like(noise, 0.5) if statistics.seen else None,
    )
    obs = torch.zeros(1, 3, 4)
    learn, actions = act_in_box(agent, obs, 0, 0)
    assert learn is not act_randomly and statistics.seen == [obs] and actions.shape == (1, 3, 1)
    if act_randomly:
        assert actions.abs().max() <= 2 and len(set(actions.flatten().tolist())) == 3  # uniform draws
    else:
        assert torch.equal(actions, torch.full((1, 3, 1), 0.5))


BAD_FLAGS = {
    "td3": (td3, td3.Args(env_id="Pendulum-v1", exploration_noise_min=0.3, exploration_noise_max=0.2)),
    "sac_simba": (sac_simba, sac_simba.Args(env_id="Pendulum-v1", net=NetArgs(norm="layer"))),
    "ddqn": (
        ddqn,
        ddqn.Args.defaults_for("CartPole-v1", optim=OptimArgs(name="kron"), reset=ResetArgs(method="full")),
    ),
}
MESSAGES = {
    "td3": "--exploration-noise-min 0.3 is above --exploration-noise-max 0.2",
    "sac_simba": "SimBa blocks already hold LayerNorms",
    "ddqn": "Kron does not keep",
}


@pytest.mark.parametrize("agent", list(BAD_FLAGS))
def test_check_refuses_what_a_run_refuses_with_the_same_message_and_creates_nothing(agent, runs_dir):
    module, args = BAD_FLAGS[agent]
    args.runs_dir = runs_dir
    with pytest.raises(UserError, match=MESSAGES[agent]) as checked:
        module.check(args)
    with pytest.raises(UserError) as ran:
        module.main(args)
    assert str(checked.value) == str(ran.value)
    with pytest.raises(UserError, match="did you mean 'Pendulum-v1'"):  # the run's own checks too
        module.check(type(args)(env_id="Pendolum-v1", runs_dir=runs_dir))
    module.check(type(args)(env_id=args.env_id, runs_dir=runs_dir))  # what a run takes passes
    assert not Path(runs_dir).exists()
