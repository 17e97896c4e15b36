from pathlib import Path

import gymnasium as gym
import pytest
import torch
from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

from agents.sac_simba import Actor, Args, main, soft_q_target
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.normalization import RunningMeanStd
from cleanrl_plus.simba import ResidualBlock, SimbaEncoder

TINY = dict(actor_width=16, critic_width=16, critic_blocks=1, batch_size=32, eval_episodes=2, progress=False, buffer_size=10_000)


def test_simba_encoder_shapes_and_final_layer_norm():
    torch.manual_seed(0)
    encoder = SimbaEncoder(ensemble_size=2, in_features=5, width=8, num_blocks=2)
    assert encoder.embed.weight.shape == (2, 5, 8)
    assert encoder.blocks[0].expand.weight.shape == (2, 8, 32) and encoder.blocks[0].contract.weight.shape == (2, 32, 8)
    features = encoder(torch.randn(2, 3, 5) * 10)
    assert features.shape == (2, 3, 8)
    torch.testing.assert_close(features.mean(-1), torch.zeros(2, 3), atol=1e-5, rtol=0)
    torch.testing.assert_close(features.var(-1, unbiased=False), torch.ones(2, 3), atol=1e-3, rtol=0)


def test_residual_block_keeps_the_linear_path():
    block = ResidualBlock(ensemble_size=1, width=4)
    with torch.no_grad():
        block.contract.weight.zero_()
    h = torch.randn(1, 3, 4)
    torch.testing.assert_close(block(h), h)


def test_simba_initialisation():
    torch.manual_seed(0)
    encoder = SimbaEncoder(ensemble_size=1, in_features=64, width=512, num_blocks=1)
    w = encoder.embed.weight[0]  # (64, 512): orthonormal rows
    torch.testing.assert_close(w @ w.T, torch.eye(64), atol=1e-4, rtol=0)
    expand = encoder.blocks[0].expand.weight  # He normal over fan_in = 512
    assert expand.std().item() == pytest.approx((2 / 512) ** 0.5, rel=0.03)
    assert encoder.blocks[0].expand.bias.abs().max() == 0


def test_running_mean_std_merges_batches_exactly():
    data = torch.randn(1000, 3) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([2.0, -1.0, 0.0])
    stats = RunningMeanStd((3,))
    for chunk in data.split(137):
        stats.update(chunk)
    torch.testing.assert_close(stats.mean, data.mean(0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(stats.var, data.var(0, unbiased=False), atol=1e-4, rtol=1e-4)
    assert stats.count.item() == 1000
    known = torch.tensor([[3.0, 4.0, 0.5]])
    torch.testing.assert_close(stats(known), (known - stats.mean) / torch.sqrt(stats.var + 1e-8))


def test_actor_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    space = gym.spaces.Box(-2.0, 2.0, (3,))
    actor = Actor(Args(actor_width=8), obs_dim=4, action_space=space)
    x = torch.randn(5, 4)
    torch.manual_seed(1)
    actions, log_prob = actor.sample(x, torch.randn(5, 3))
    mean, log_std = actor._distribution(x)
    reference = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform(), AffineTransform(0.0, 2.0)])
    torch.testing.assert_close(log_prob, reference.log_prob(actions).sum(-1), atol=1e-3, rtol=1e-4)
    assert actions.abs().max() <= 2.0
    assert ((-10 <= log_std) & (log_std <= 2)).all()


def test_soft_q_target_by_hand_for_twin_and_single_critics():
    rewards, terminated = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    next_log_prob, alpha = torch.tensor([-1.0, 2.0]), torch.tensor(0.5)
    twin = soft_q_target(rewards, terminated, torch.tensor([[1.0, 5.0], [2.0, 3.0]]), next_log_prob, alpha, gamma=0.9)
    # min(1, 2) = 1 → 1 + 0.9·(1 − 0.5·(−1)) = 2.35; second is terminal → 0
    torch.testing.assert_close(twin, torch.tensor([2.35, 0.0]))
    single = soft_q_target(rewards, torch.zeros(2), torch.tensor([[2.0, 3.0]]), next_log_prob, alpha, gamma=0.9)
    # 1 + 0.9·(2 + 0.5) = 3.25;  0 + 0.9·(3 − 1) = 1.8
    torch.testing.assert_close(single, torch.tensor([3.25, 1.8]))


def _checkpoint(result: dict) -> dict:
    return load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")


def test_normaliser_sees_only_acting_observations_and_critic_mode_follows_the_task(runs_dir):
    result = main(Args(env_id="Pendulum-v1", total_timesteps=300, learning_starts=100, eval_every=0, runs_dir=runs_dir, **TINY))
    state = _checkpoint(result)
    normalizer, replay = state["normalizer"], state["replay"]
    assert normalizer["count"].item() == 300  # one update per acting step; replay batches never touch it
    torch.testing.assert_close(normalizer["mean"], replay["obs"].mean(0), atol=1e-5, rtol=1e-4)
    assert state["critic"]["head.weight"].shape[0] == 1  # Pendulum never terminates: one critic
    result = main(Args(env_id="Hopper-v5", total_timesteps=150, learning_starts=100, eval_every=0, runs_dir=runs_dir, **TINY))
    assert _checkpoint(result)["critic"]["head.weight"].shape[0] == 2  # Hopper can terminate: clipped double-Q


def test_dmc_time_limit_is_stored_as_truncation(runs_dir):
    result = main(Args(env_id="dmc:cheetah-run", total_timesteps=520, learning_starts=500, eval_every=0, runs_dir=runs_dir, **TINY))
    replay = _checkpoint(result)["replay"]
    assert result["frames"] == 1040  # action repeat 2: 500 agent steps per 1000-frame episode
    assert replay["terminated"].sum() == 0
    assert not torch.equal(replay["next_obs"][499], replay["obs"][500])  # the final obs, not the reset one
    assert torch.equal(replay["next_obs"][498], replay["obs"][499])


def test_resume_continues_bit_identically_with_normaliser_and_temperature(runs_dir):
    common = dict(env_id="Pendulum-v1", learning_starts=100, eval_every=0, runs_dir=runs_dir, **TINY)
    straight = main(Args(total_timesteps=400, exp_name="straight", **common))
    half = main(Args(total_timesteps=230, exp_name="split", **common))
    resumed = main(Args(total_timesteps=400, exp_name="split", resume=half["run_dir"], **common))
    a, b = _checkpoint(straight), _checkpoint(resumed)
    assert torch.equal(a["log_alpha"], b["log_alpha"]) and not torch.equal(a["log_alpha"], torch.tensor(0.01).log())
    for name in ("actor", "critic", "critic_target", "normalizer"):
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"


def test_plain_mlp_variant_and_same_batch_reuse_run_and_log_the_kl_churn_of_the_tanh_gaussian(runs_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from plasticity.diagnostics import DiagnosticsArgs

    result = main(Args(env_id="Pendulum-v1", network="mlp", mlp_hidden_sizes=(16, 16), reuse_batch=True, total_timesteps=150, learning_starts=100,
                       eval_every=0, runs_dir=runs_dir, diagnostics=DiagnosticsArgs(churn_every=25, churn_batch=32), **TINY))
    assert result["num_updates"] == 100 and "encoder.layers.0.weight" in _checkpoint(result)["critic"]
    kl_churn = EventAccumulator(result["run_dir"]).Reload().Scalars("plasticity/actor_kl_churn")
    assert len(kl_churn) == 4 and all(event.value > 0 for event in kl_churn)


def test_the_acting_step_samples_the_policy_on_the_observation_normalised_with_statistics_that_include_it(runs_dir, monkeypatch):
    """x = (s − μ)/√(σ² + ε) with μ, σ² over every observation acted on so far, this one included (SimBa's RSNorm), and
    a = tanh(m(x) + σ(x)·noise) with noise ~ N(0, I) drawn for this step."""
    acted = []
    sample = Actor.sample

    def recording_sample(self, x, noise):
        if x.shape[0] == 1:  # one env: the acting step (updates sample batches of 32)
            acted.append((x.clone(), noise.clone()))
        return sample(self, x, noise)

    monkeypatch.setattr(Actor, "sample", recording_sample)
    result = main(Args(env_id="Pendulum-v1", total_timesteps=260, learning_starts=200, eval_every=0, runs_dir=runs_dir, **TINY))
    obs = _checkpoint(result)["replay"]["obs"]  # raw, in acting order
    assert len(acted) == 60
    for t, (x, noise) in zip(range(200, 260), acted):
        seen = obs[: t + 1]
        expected = (obs[t] - seen.mean(0)) / torch.sqrt(seen.var(0, unbiased=False) + 1e-8)
        torch.testing.assert_close(x[0], expected, atol=1e-4, rtol=1e-4)
    noise = torch.cat([noise for _, noise in acted])
    assert abs(noise.mean().item()) < 0.4 and noise.std().item() == pytest.approx(1.0, abs=0.3)  # 3 standard errors at 60 draws
