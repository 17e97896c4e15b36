"""CIR: the convex min/max target, the constrained critic torso, and both wired into TD3 and SAC."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents import sac_simba, td3
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.critics import convex_min_max
from envs.errors import UserError
from plasticity.cir import CIRArgs, CIREncoder, avg_l1_norm
from plasticity.diagnostics import DiagnosticsArgs
from plasticity.resets import ResetArgs


def test_convex_target_is_the_hand_computed_combination_and_min_at_lambda_one():
    q = torch.tensor([[1.0, 5.0], [3.0, 2.0]])  # (critics, batch)
    combined = lambda q, convex_lambda: convex_min_max(q[None], convex_lambda)[0]  # one member's critics
    torch.testing.assert_close(combined(q, 0.3), torch.tensor([0.3 * 1 + 0.7 * 3, 0.3 * 2 + 0.7 * 5]))
    torch.testing.assert_close(combined(q, 0.3), q.mean(0) + 0.2 * (q[0] - q[1]).abs())  # mean + (½ − λ)|ΔQ|
    assert torch.equal(combined(q, 1.0), q.min(0).values)


def test_avg_l1_norm_sets_the_mean_absolute_value_to_a_tenth():
    z = torch.randn(5, 7) * 30
    torch.testing.assert_close(avg_l1_norm(z).abs().mean(-1), torch.full((5,), 0.1))


def test_cir_torso_constrains_the_first_representation_and_has_the_shallow_to_deep_skip():
    torch.manual_seed(0)
    encoder = CIREncoder(2, 6, 32, shared_layer_norm=True)
    first = []
    encoder.activations[0].register_forward_hook(lambda _m, _i, out: first.append(out))
    x = torch.randn(2, 64, 6) * 100
    encoder(x)
    assert first[0].min() > torch.expm1(torch.tensor(-1.0)) and first[0].max() < 1.0  # ELU(tanh(·)) ∈ (e⁻¹ − 1, 1)
    with torch.no_grad():
        encoder.down2.weight.zero_()  # cut the "down" path after z₁: the output still depends on x through the skip
    out_a, out_b = encoder(x), encoder(torch.randn(2, 64, 6))
    assert not torch.allclose(out_a, out_b)


def test_shared_layer_norm_ties_every_site_and_the_alternative_does_not():
    shared = CIREncoder(2, 6, 16, shared_layer_norm=True)
    separate = CIREncoder(2, 6, 16, shared_layer_norm=False)
    assert len({id(n) for n in shared.norms}) == 1 and shared.norms[0].weight.shape == (1, 1, 16)
    assert len({id(n) for n in separate.norms}) == CIREncoder.SITES and separate.norms[0].weight.shape == (2, 1, 16)


def test_td3_trains_with_the_cir_critic_convex_target_and_same_batch_reuse(runs_dir, monkeypatch):
    import cleanrl_plus.replay
    from cleanrl_plus.replay import ReplayBuffer

    sampled = []

    class CountingReplay(ReplayBuffer):
        def sample(self, batch_size):
            sampled.append(batch_size)
            return super().sample(batch_size)

    monkeypatch.setattr(cleanrl_plus.replay, "ReplayBuffer", CountingReplay)  # make_replay builds TD3's replay
    cir = CIRArgs(critic=True, width=32, convex_lambda=0.3)
    result = td3.main(
        td3.Args(
            env_id="Pendulum-v1",
            total_timesteps=400,
            learning_starts=200,
            gradient_steps=2,
            reuse_batch=True,
            eval_every=0,
            eval_episodes=1,
            runs_dir=runs_dir,
            progress=False,
            batch_size=32,
            hidden_sizes=(32, 32),
            cir=cir,
            diagnostics=DiagnosticsArgs(every=100, probe_size=64),
        )
    )
    assert result["finished"] and result["num_updates"] == 400
    # same-batch reuse: one training batch per env step for its two updates (the probe batches of the diagnostics
    # every 100 updates come on top); the convex target's wiring is checked in test_update_wiring.py
    assert sampled.count(32) == 200
    critic = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")["critic"]
    assert any("norm" in key for key in critic)  # the CIR torso, not TD3's MLP


def test_redo_on_the_cir_critic_is_a_clear_error_but_works_on_the_actor(runs_dir):
    common = dict(
        env_id="Pendulum-v1",
        total_timesteps=300,
        learning_starts=200,
        eval_every=0,
        eval_episodes=1,
        runs_dir=runs_dir,
        progress=False,
        batch_size=32,
        hidden_sizes=(32, 32),
        cir=CIRArgs(critic=True, width=32),
    )
    with pytest.raises(UserError, match="ReDo does not apply to this critic"):
        td3.main(td3.Args(reset=ResetArgs(method="redo"), exp_name="both", **common))
    assert td3.main(td3.Args(reset=ResetArgs(method="redo", networks="actor", every=50), exp_name="actor", **common))[
        "finished"
    ]


def test_sac_trains_with_the_cir_recipe(runs_dir):
    args = sac_simba.Args(
        env_id="Pendulum-v1",
        total_timesteps=300,
        learning_starts=200,
        eval_every=0,
        eval_episodes=1,
        runs_dir=runs_dir,
        progress=False,
        batch_size=32,
        network="mlp",
        mlp_hidden_sizes=(32, 32),
        clipped_double_q="on",
        normalize_obs=False,
        reuse_batch=True,
        actor_q="mean",
        cir=CIRArgs(critic=True, width=32, convex_lambda=0.3, shared_layer_norm=False),
    )
    assert sac_simba.main(args)["finished"]
