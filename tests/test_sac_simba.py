from pathlib import Path

import gymnasium as gym
import pytest
import torch
from conftest import cpu_fingerprint, digests_for_this_cpu
from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

from agents.sac_simba import Actor, Args, main
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.normalization import RunningMeanStd
from cleanrl_plus.simba import MLPEncoder, ResidualBlock, SimbaEncoder, make_encoder

TINY = dict(
    actor_width=16, critic_width=16, critic_blocks=1, batch_size=32, eval_episodes=2, progress=False, buffer_size=10_000
)


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


def test_mlp_orthogonal_initialisation_is_simbas_plain_sac_mlp_block():
    """--mlp-init orthogonal: each hidden layer's weight orthogonal with gain √2 (W·Wᵀ = 2I over the shorter side),
    biases zero, as SimBa's MLPBlock (orthogonal_init(√2)); the default keeps nn.Linear's uniform ±1/√fan_in."""
    torch.manual_seed(0)
    encoder = MLPEncoder(ensemble_size=2, in_features=20, hidden=(64, 64), init="orthogonal")
    for layer in encoder.layers:
        for w in layer.weight:  # (in, out) per entry
            short = min(w.shape)
            gram = w @ w.T if w.shape[0] == short else w.T @ w
            torch.testing.assert_close(gram, 2 * torch.eye(short), atol=1e-4, rtol=0)
        assert layer.bias.abs().max() == 0
    default = MLPEncoder(ensemble_size=1, in_features=20, hidden=(64,))
    assert default.layers[0].bias.abs().max() > 0 and default.layers[0].weight.abs().max() <= 20**-0.5
    critic = Args(network="mlp", mlp_hidden_sizes=(32, 32), mlp_init="orthogonal")
    built = make_encoder(critic, ("none", "relu"), 2, 7, critic.critic_width, critic.critic_blocks)
    assert isinstance(built, MLPEncoder) and built.layers[1].bias.abs().max() == 0


def test_running_mean_std_merges_batches_exactly():
    data = torch.randn(1000, 3) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([2.0, -1.0, 0.0])
    stats = RunningMeanStd((3,))
    for chunk in data.split(137):
        stats.update(chunk)
    torch.testing.assert_close(stats.mean[0], data.mean(0), atol=1e-5, rtol=1e-5)  # one member's statistics
    torch.testing.assert_close(stats.var[0], data.var(0, unbiased=False), atol=1e-4, rtol=1e-4)
    assert stats.count.item() == 1000
    known = torch.tensor([[[3.0, 4.0, 0.5]]])
    torch.testing.assert_close(stats(known), (known - stats.mean) / torch.sqrt(stats.var + 1e-8))


def test_actor_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    space = gym.spaces.Box(-2.0, 2.0, (3,))
    actor = Actor(Args(actor_width=8), obs_dim=4, action_space=space)
    x = torch.randn(1, 5, 4)  # one member's batch
    torch.manual_seed(1)
    actions, log_prob = actor.sample(x, torch.randn(1, 5, 3))
    mean, log_std = actor._distribution(x)
    reference = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform(), AffineTransform(0.0, 2.0)])
    torch.testing.assert_close(log_prob, reference.log_prob(actions).sum(-1), atol=1e-3, rtol=1e-4)
    assert actions.abs().max() <= 2.0
    assert ((-10 <= log_std) & (log_std <= 2)).all()


def _checkpoint(result: dict) -> dict:
    return load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")


def _statistics(state: dict) -> dict:
    """The observation statistics, which the actor (like the critics) holds as its `normalize` module."""
    return {key.removeprefix("normalize."): value for key, value in state["actor"].items() if key.startswith("normalize.")}


def test_normaliser_sees_only_acting_observations_and_critic_mode_follows_the_task(runs_dir):
    result = main(
        Args(env_id="Pendulum-v1", total_timesteps=300, learning_starts=100, eval_every=0, runs_dir=runs_dir, **TINY)
    )
    state = _checkpoint(result)
    normalizer, replay = _statistics(state), state["replay"]
    assert normalizer["count"].item() == 300  # one update per acting step; replay batches never touch it
    torch.testing.assert_close(normalizer["mean"], replay["obs"].mean(1), atol=1e-5, rtol=1e-4)  # (1, obs): one member
    assert state["critic"]["head.weight"].shape[0] == 1  # Pendulum never terminates: one critic
    result = main(Args(env_id="Hopper-v5", total_timesteps=150, learning_starts=100, eval_every=0, runs_dir=runs_dir, **TINY))
    assert _checkpoint(result)["critic"]["head.weight"].shape[0] == 2  # Hopper can terminate: clipped double-Q


def test_dmc_time_limit_is_stored_as_truncation(runs_dir):
    result = main(
        Args(env_id="dmc:cheetah-run", total_timesteps=520, learning_starts=500, eval_every=0, runs_dir=runs_dir, **TINY)
    )
    replay = _checkpoint(result)["replay"]
    assert result["frames"] == 1040  # action repeat 2: 500 agent steps per 1000-frame episode
    assert replay["terminated"].sum() == 0
    assert not torch.equal(replay["next_obs"][0, 499], replay["obs"][0, 500])  # the final obs, not the reset one
    assert torch.equal(replay["next_obs"][0, 498], replay["obs"][0, 499])


def test_resume_continues_bit_identically_with_normaliser_and_temperature(runs_dir):
    common = dict(env_id="Pendulum-v1", learning_starts=100, eval_every=0, runs_dir=runs_dir, **TINY)
    straight = main(Args(total_timesteps=400, exp_name="straight", **common))
    half = main(Args(total_timesteps=230, exp_name="split", **common))
    resumed = main(Args(total_timesteps=400, exp_name="split", resume=half["run_dir"], **common))
    a, b = _checkpoint(straight), _checkpoint(resumed)
    assert torch.equal(a["temperature"]["log_alpha"], b["temperature"]["log_alpha"])
    assert not torch.equal(a["temperature"]["log_alpha"], torch.tensor(0.01).log())
    for name in ("actor", "critic", "critic_target", "temperature"):  # the statistics are inside the networks
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"


def test_plain_mlp_variant_and_same_batch_reuse_run_and_log_the_kl_churn_of_the_tanh_gaussian(runs_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from plasticity.diagnostics import DiagnosticsArgs

    result = main(
        Args(
            env_id="Pendulum-v1",
            network="mlp",
            mlp_hidden_sizes=(16, 16),
            reuse_batch=True,
            total_timesteps=150,
            learning_starts=100,
            eval_every=0,
            runs_dir=runs_dir,
            diagnostics=DiagnosticsArgs(churn_every=25, churn_batch=32),
            **TINY,
        )
    )
    assert result["num_updates"] == 100 and "encoder.layers.0.weight" in _checkpoint(result)["critic"]
    kl_churn = EventAccumulator(result["run_dir"]).Reload().Scalars("plasticity/actor_kl_churn")
    assert len(kl_churn) == 4 and all(event.value > 0 for event in kl_churn)


def test_the_acting_step_samples_the_policy_on_the_observation_normalised_with_statistics_that_include_it(
    runs_dir, monkeypatch
):
    """x = (s − μ)/√(σ² + ε) with μ, σ² over every observation acted on so far, this one included (SimBa's RSNorm), and
    a = tanh(m(x) + σ(x)·noise) with noise ~ N(0, I) drawn for this step."""
    acted = []
    sample = Actor.sample

    def recording_sample(self, obs, noise):
        if obs.shape[1] == 1:  # one env: the acting step (updates sample batches of 32); x as the actor normalises s
            acted.append((self.normalize(obs).clone(), noise.clone()))
        return sample(self, obs, noise)

    monkeypatch.setattr(Actor, "sample", recording_sample)
    result = main(
        Args(env_id="Pendulum-v1", total_timesteps=260, learning_starts=200, eval_every=0, runs_dir=runs_dir, **TINY)
    )
    obs = _checkpoint(result)["replay"]["obs"][0]  # raw, in acting order (the one member's)
    assert len(acted) == 60
    for t, (x, noise) in zip(range(200, 260), acted):
        seen = obs[: t + 1]
        expected = (obs[t] - seen.mean(0)) / torch.sqrt(seen.var(0, unbiased=False) + 1e-8)
        torch.testing.assert_close(x[0, 0], expected, atol=1e-4, rtol=1e-4)
    noise = torch.cat([noise for _, noise in acted])
    assert abs(noise.mean().item()) < 0.4 and noise.std().item() == pytest.approx(
        1.0, abs=0.3
    )  # 3 standard errors at 60 draws


# ---- many-env flags (FastTD3's recipe, as FastSAC; docs/agents/sac_simba.md) -----------------------------------------
def _scale_flags(**overrides):
    from cleanrl_plus.distributional import CriticArgs

    return (
        dict(num_envs=2, n_step=3, critic=CriticArgs(distributional=True, num_atoms=21, v_min=-200.0, v_max=10.0)) | overrides
    )


# sha256 prefixes of actor, critic, critic_target, normalizer and log_alpha after 300 steps (200 updates), recorded at
# 2908a16, before the many-env flags existed, on the AMD box; on a 2-core Xeon at a7952b8 and an AVX2-only AMD box at
# f721952 (the same code). torch's kernels may round differently in another version, and other CPUs round differently
# (tests/conftest.py cpu_fingerprint)
DEFAULT_RUN_DIGESTS = digests_for_this_cpu(
    {
        "AuthenticAMD": {"simba": "4464b9d7f9540824", "mlp-cdq-least": "dcad39cf00c51616"},
        "GenuineIntel AVX512": {"simba": "2632a99bb3c9c2fb", "mlp-cdq-least": "f6cbf2d3b4a10267"},
        "rounding edbab6e58151": {"simba": "4464b9d7f9540824", "mlp-cdq-least": "dcad39cf00c51616"},
    }
)
DIGEST_TORCH = "2.13.0+cpu"


@pytest.mark.skipif(torch.__version__ != DIGEST_TORCH, reason=f"digests recorded with torch {DIGEST_TORCH}")
@pytest.mark.skipif(
    DEFAULT_RUN_DIGESTS is None, reason=f"no digests recorded for this machine ({', '.join(cpu_fingerprint()[:2])})"
)
@pytest.mark.parametrize("name", ["simba", "mlp-cdq-least"])
def test_runs_without_the_many_env_flags_are_unchanged_bit_for_bit(name, runs_dir):
    """The flags are off by default: a run without them draws, stores and updates exactly as before they existed
    (one SimBa critic; twin MLP critics with LEAST, whose stops now also reach the replay as truncations)."""
    import hashlib

    from plasticity.least import LEASTArgs

    flags = (
        dict(network="mlp", clipped_double_q="on", least=LEASTArgs(enabled=True, start=0.0, min_history=1))
        if name != "simba"
        else {}
    )
    result = main(
        Args(
            env_id="Pendulum-v1",
            total_timesteps=300,
            learning_starts=200,
            batch_size=32,
            actor_width=16,
            critic_width=16,
            critic_blocks=1,
            mlp_hidden_sizes=(16, 16),
            eval_episodes=1,
            eval_every=0,
            progress=False,
            buffer_size=5_000,
            runs_dir=runs_dir,
            **flags,
        )
    )
    state, digest = _checkpoint(result), hashlib.sha256()
    # as recorded: each network without the statistics it now holds inside, then the statistics, then log α
    parts = {
        network: {key: value for key, value in state[network].items() if "normalize." not in key}
        for network in ("actor", "critic", "critic_target")
    } | {"normalizer": _statistics(state)}
    for network in ("actor", "critic", "critic_target", "normalizer"):
        for key, value in sorted(parts[network].items()):
            digest.update(key.encode())
            digest.update(value.numpy().tobytes())
    digest.update(state["temperature"]["log_alpha"].numpy().tobytes())
    assert digest.hexdigest()[:16] == DEFAULT_RUN_DIGESTS[name]


def test_scale_flags_resume_bit_identically(runs_dir):
    """The n-step replay's episode ends, the C51 critics, the statistics and the temperature are checkpointed."""
    common = (
        dict(env_id="Pendulum-v1", learning_starts=100, eval_every=0, clipped_double_q="on", runs_dir=runs_dir, **TINY)
        | _scale_flags()
    )
    straight = main(Args(total_timesteps=400, exp_name="straight", **common))
    half = main(Args(total_timesteps=230, exp_name="split", **common))
    resumed = main(Args(total_timesteps=400, exp_name="split", resume=half["run_dir"], **common))
    a, b = _checkpoint(straight), _checkpoint(resumed)
    assert torch.equal(a["temperature"]["log_alpha"], b["temperature"]["log_alpha"])
    assert a["critic"]["base.head.weight"].shape == (2, 16, 21)  # twin C51 heads
    for name in ("actor", "critic", "critic_target", "temperature"):  # the statistics are inside the networks
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"
    assert torch.equal(a["replay"]["episode_end"], b["replay"]["episode_end"]) and a["replay"]["episode_end"].any()


def test_least_stops_end_n_step_windows_like_any_episode_end(runs_dir):
    """As TD3's: a LEAST stop resets the env after the transition is stored, so that row must close its n-step windows.
    Read independently: an env's episode ended at a row exactly where its next stored s is not this row's s'."""
    from plasticity.least import LEASTArgs

    result = main(
        Args(
            env_id="Pendulum-v1",
            num_envs=2,
            total_timesteps=1_200,
            learning_starts=200,
            n_step=3,
            runs_dir=runs_dir,
            eval_every=0,
            least=LEASTArgs(enabled=True, start=0.0, min_history=2, window=10),
            **TINY,
        )
    )
    replay = _checkpoint(result)["replay"]
    obs, next_obs, ended = (
        replay[name][0].reshape(600, 2, *replay[name].shape[2:]) for name in ("obs", "next_obs", "episode_end")
    )
    restarted = (next_obs[:-1] != obs[1:]).any(dim=-1)
    assert torch.equal(ended[:-1], restarted)
    assert ended.sum() > 2 * 3  # more episode ends than Pendulum's time limit gives (every 200 steps): LEAST stopped some
    assert replay["terminated"].sum() == 0


def test_the_command_line_takes_the_critic_flags_beside_the_critic_width_and_refuses_a_bad_support(runs_dir):
    from conftest import run_script

    done = run_script(
        "agents/sac_simba.py",
        "--env-id",
        "Pendulum-v1",
        "--critic-width",
        "16",
        "--critic.distributional",
        "--critic.v-min",
        "5",
        "--critic.v-max",
        "-5",
        "--runs-dir",
        runs_dir,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "--critic.v-min < --critic.v-max" in done.stderr
    assert not Path(runs_dir).exists()
