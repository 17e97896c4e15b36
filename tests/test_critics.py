"""TD3's and SAC's critic targets (td3_target, soft_target; C51's through distributional.categorical_target) and the
losses they share (cleanrl_plus/critics.py), by hand, for scalar and C51 critics."""

import torch
import torch.nn as nn

from agents.sac_simba import soft_target
from agents.td3 import td3_target
from cleanrl_plus.critics import critic_losses, critic_report
from cleanrl_plus.distributional import CategoricalCritic, CriticArgs
from cleanrl_plus.replay import Batch


class Fixed(nn.Module):
    """A one-member 'critic' whose output on any batch is the given tensor (Q-values (copies, B), or logits (copies, B, K)),
    with the member dimension in front."""

    def __init__(self, output: torch.Tensor) -> None:
        super().__init__()
        self.output = output

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.output[None]


def _categorical(probs: torch.Tensor, atoms: torch.Tensor) -> CategoricalCritic:
    critic = CategoricalCritic(
        Fixed(probs.log()), CriticArgs(num_atoms=len(atoms), v_min=float(atoms[0]), v_max=float(atoms[-1]))
    )
    torch.testing.assert_close(critic.atoms, atoms)
    return critic


def _batch(rewards: list[float], terminated: list[float]) -> Batch:
    """One member's replay batch: only r and terminated matter (the fixed critics ignore s and a)."""
    n = len(rewards)
    return Batch(
        torch.zeros(1, n, 1),
        torch.zeros(1, n, 1),
        torch.tensor([rewards]),
        torch.zeros(1, n, 1),
        torch.tensor([terminated]),
        torch.arange(n)[None],
    )


ANY_ACTIONS = torch.zeros(1, 2, 1)


def test_soft_target_by_hand_for_twin_and_single_critics():
    batch = _batch([1.0, 0.0], [0.0, 1.0])  # the second transition is terminal
    next_log_prob, alpha = torch.tensor([-1.0, 2.0]), torch.tensor(0.5)
    twin = soft_target(Fixed(torch.tensor([[1.0, 5.0], [2.0, 3.0]])), batch, ANY_ACTIONS, next_log_prob, alpha, 0.9)
    # min(1, 2) = 1 → 1 + 0.9·(1 − 0.5·(−1)) = 2.35; second is terminal → 0
    torch.testing.assert_close(twin[0], torch.tensor([2.35, 0.0]))
    single = soft_target(
        Fixed(torch.tensor([[2.0, 3.0]])), _batch([1.0, 0.0], [0.0, 0.0]), ANY_ACTIONS, next_log_prob, alpha, 0.9
    )
    # 1 + 0.9·(2 + 0.5) = 3.25;  0 + 0.9·(3 − 1) = 1.8
    torch.testing.assert_close(single[0], torch.tensor([3.25, 1.8]))
    # TD3's: no entropy term; CIR's convex target λ·min + (1 − λ)·max
    torch.testing.assert_close(
        td3_target(Fixed(torch.tensor([[1.0, 5.0], [2.0, 3.0]])), batch, ANY_ACTIONS, 0.9, convex_lambda=0.25)[0],
        torch.tensor([1.0 + 0.9 * (0.25 * 1 + 0.75 * 2), 0.0]),
    )


def test_soft_categorical_target_shifts_the_support_by_the_entropy_term_by_hand():
    """Φ(r + d·(z − α·log π)) on atoms −1, 0, 1, 2 from the target critic with the smaller mean, d = γ^m(1 − terminated)."""
    atoms = torch.tensor([-1.0, 0.0, 1.0, 2.0])
    on_zero, on_two = torch.tensor([0.0, 1.0, 0.0, 0.0]), torch.tensor([0.0, 0.0, 0.0, 1.0])  # means 0 and 2
    twin = torch.stack([torch.stack([on_two, on_zero]), torch.stack([on_zero, on_two])])  # the smaller: on_zero, both rows
    batch = _batch([0.5, 0.5], [0.0, 1.0])
    target = soft_target(_categorical(twin, atoms), batch, ANY_ACTIONS, torch.tensor([-1.0, -1.0]), torch.tensor(0.5), 0.5)
    # row 0: 0.5 + 0.5·(0 + 0.5) = 0.75 → ¼ on z = 0, ¾ on z = 1; row 1 terminal: 0.5 → ½ and ½
    torch.testing.assert_close(target[0], torch.tensor([[0.0, 0.25, 0.75, 0.0], [0.0, 0.5, 0.5, 0.0]]))
    one = soft_target(
        _categorical(on_two[None, None], atoms),
        _batch([0.0], [0.0]),
        ANY_ACTIONS[:, :1],
        torch.tensor([2.0]),
        torch.tensor(0.5),
        0.5,
    )
    # 0 + 0.5·(2 − 0.5·2) = 0.5 from the only critic
    torch.testing.assert_close(one[0], torch.tensor([[0.0, 0.5, 0.5, 0.0]]))
    # TD3's C51 target: no shift by an entropy term
    torch.testing.assert_close(
        td3_target(_categorical(twin, atoms), batch, ANY_ACTIONS, 0.5)[0],
        torch.tensor([[0.0, 0.5, 0.5, 0.0], [0.0, 0.5, 0.5, 0.0]]),
    )


def test_critic_losses_are_each_critics_mean_squared_error_or_cross_entropy():
    q = torch.tensor([[1.0, 2.0], [0.0, 4.0]], requires_grad=True)
    losses, values = critic_losses(Fixed(q), torch.zeros(1, 2, 1), ANY_ACTIONS, torch.tensor([[1.0, 1.0]]))
    torch.testing.assert_close(losses[0], torch.tensor([(0 + 1) / 2, (1 + 9) / 2]))
    assert torch.equal(values[0], q)
    atoms = torch.tensor([0.0, 1.0])
    probs = torch.tensor([[[0.5, 0.5]], [[0.25, 0.75]]])
    target = torch.tensor([[[1.0, 0.0]]])
    losses, values = critic_losses(_categorical(probs, atoms), torch.zeros(1, 1, 1), ANY_ACTIONS[:, :1], target)
    torch.testing.assert_close(losses[0], -torch.tensor([0.5, 0.25]).log())  # −log p(z = 0) of each critic
    torch.testing.assert_close(values[0], torch.tensor([[0.5], [0.75]]))


def test_critic_report_has_cleanrls_tags_for_one_and_two_critics():
    twin = critic_report(torch.tensor([[[1.0, 3.0], [5.0, 7.0]]]), torch.tensor([[0.5, 1.5]]))  # one member's
    assert {k: float(v) for k, v in twin.items()} == {
        "losses/qf_loss": 1.0,
        "losses/qf1_values": 2.0,
        "losses/qf1_loss": 0.5,
        "losses/qf2_values": 6.0,
        "losses/qf2_loss": 1.5,
    }
    assert set(critic_report(torch.ones(1, 1, 2), torch.ones(1, 1))) == {
        "losses/qf_loss",
        "losses/qf1_values",
        "losses/qf1_loss",
    }
