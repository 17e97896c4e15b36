"""C51 pieces (cleanrl_plus/distributional.py) on hand-computed cases: the projection, clipped double-Q on
distributions, the categorical critic's expected values."""

from __future__ import annotations

import pytest
import torch

from cleanrl_plus.distributional import (
    CategoricalCritic,
    CriticArgs,
    clipped_double,
    cross_entropy,
    expected_value,
    project,
    support,
)

ATOMS = torch.tensor([-1.0, 0.0, 1.0, 2.0])  # K = 4, Δz = 1
P = torch.tensor([0.1, 0.2, 0.3, 0.4])


@pytest.mark.parametrize(
    "reward, discount, expected",
    [
        # r + d·z = −0.5, 0.5, 1.5, 2.5 → the last clipped to 2; each atom splits between its neighbours
        (0.5, 1.0, [0.05, 0.05 + 0.1, 0.1 + 0.15, 0.15 + 0.4]),
        # 0.5, 1, 1.5, 2: two land on atoms exactly
        (1.0, 0.5, [0.0, 0.05, 0.05 + 0.2 + 0.15, 0.15 + 0.4]),
        # all below v_min: −3.5 … −2 → all the mass on z_0
        (-3.0, 0.5, [1.0, 0.0, 0.0, 0.0]),
        # all above v_max
        (5.0, 0.9, [0.0, 0.0, 0.0, 1.0]),
        # a terminal transition (d = 0): every atom moves to r = 0.25, 3/4 of it to z_1 and 1/4 to z_2
        (0.25, 0.0, [0.0, 0.75, 0.25, 0.0]),
        # a terminal transition whose reward is outside the support
        (-7.0, 0.0, [1.0, 0.0, 0.0, 0.0]),
    ],
)
def test_projection_by_hand(reward, discount, expected):
    projected = project(ATOMS, torch.tensor([reward]), torch.tensor([discount]), P[None])
    torch.testing.assert_close(projected, torch.tensor([expected]))


def test_projection_keeps_the_mass_and_is_applied_per_transition_and_per_twin():
    torch.manual_seed(0)
    atoms = torch.linspace(-10.0, 10.0, 51)
    probs = torch.randn(2, 64, 51).softmax(dim=-1)
    rewards, discount = 2 * torch.rand(64) - 1, 0.8 * (torch.rand(64) > 0.2)  # |r + d·z| ≤ 9: inside the support …
    rewards[:8] *= 20  # … but for 8 transitions, clipped
    projected = project(atoms, rewards, discount, probs)
    torch.testing.assert_close(projected.sum(dim=-1), torch.ones(2, 64))
    assert (projected >= 0).all()
    # where nothing is clipped, the mean moves exactly as the return does: E[Φ(r + d·Z)] = r + d·E[Z]
    inside = ((rewards[:, None] + discount[:, None] * atoms).abs() <= 10).all(dim=1)
    assert 40 < inside.sum() < 60
    shifted_means = rewards + discount * (probs * atoms).sum(-1)
    torch.testing.assert_close((projected * atoms).sum(-1)[:, inside], shifted_means[:, inside], rtol=1e-5, atol=1e-4)
    # one row at a time gives the same as the batch
    torch.testing.assert_close(project(atoms, rewards[3:4], discount[3:4], probs[1, 3:4]), projected[1, 3:4])


def test_clipped_double_takes_the_twin_with_the_smaller_mean_per_transition():
    low, high = torch.tensor([0.7, 0.1, 0.1, 0.1]), torch.tensor([0.1, 0.1, 0.1, 0.7])  # means −0.4 and 1.4
    probs = torch.stack([torch.stack([low, high]), torch.stack([high, low])])  # twin 0: low, high; twin 1: high, low
    probs = torch.stack([probs, probs.flip(0)])  # two members: the second's twins swapped
    torch.testing.assert_close(clipped_double(probs, ATOMS), torch.stack([low, low]).expand(2, -1, -1))
    # CIR's convex target mixes: λ·p_min + (1 − λ)·p_max, whose mean is λ·min + (1 − λ)·max
    mixed = clipped_double(probs, ATOMS, convex_lambda=0.3)[0]
    torch.testing.assert_close(mixed, (0.3 * low + 0.7 * high).expand(2, -1))
    torch.testing.assert_close((mixed * ATOMS).sum(-1), torch.full((2,), 0.3 * -0.4 + 0.7 * 1.4))


def test_clipped_double_of_one_critic_is_its_own_distribution():
    """A single critic (SAC on a task that never terminates) has no twin: its distribution, for any λ."""
    probs = torch.tensor([[[[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.7]]]])  # one member's one critic
    torch.testing.assert_close(clipped_double(probs, ATOMS), probs[:, 0])
    torch.testing.assert_close(clipped_double(probs, ATOMS, convex_lambda=0.3), probs[:, 0])


def test_cross_entropy_and_expected_value():
    logits = torch.log(P)[None]
    torch.testing.assert_close(expected_value(logits, ATOMS), torch.tensor([0.1 * -1 + 0.3 * 1 + 0.4 * 2]))
    target = torch.tensor([[0.0, 0.5, 0.5, 0.0]])
    torch.testing.assert_close(
        cross_entropy(logits, target), -(0.5 * torch.log(torch.tensor(0.2)) + 0.5 * torch.log(torch.tensor(0.3)))[None]
    )


def test_categorical_critic_answers_like_a_scalar_critic_with_expected_values():
    from agents.td3 import TwinCritic

    args = CriticArgs(distributional=True, num_atoms=11, v_min=-5.0, v_max=5.0)
    critic = CategoricalCritic(TwinCritic(3, 1, (8,), outputs=11), args)
    obs, action = torch.randn(1, 6, 3), torch.randn(1, 6, 1)  # one member's batch
    logits = critic.logits(obs, action)
    assert logits.shape == (1, 2, 6, 11) and torch.equal(critic.atoms, support(args))
    torch.testing.assert_close(critic(obs, action), (logits.softmax(-1) * torch.linspace(-5, 5, 11)).sum(-1))
    torch.testing.assert_close(critic.q1(obs, action), critic(obs, action)[:, 0])
    assert critic.head is critic.base.layers[-1]
