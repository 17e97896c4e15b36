"""PPO and GTR on Atari: CleanRL's ppo_atari recipe and network, uint8 rollouts, evaluation, remedies, resume."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_states_equal

from agents import gtr, ppo
from cleanrl_plus.checkpoint import load_checkpoint
from cleanrl_plus.config import parse_args
from cleanrl_plus.encoders import NatureCNN
from cleanrl_plus.policy import evaluation_policy, make_actor_critic
from envs.errors import UserError
from plasticity.resets import ResetArgs

# a few tiny updates: 2 envs × 32 steps per rollout, one evaluation game at the end (ε-greedy, so it ends)
BREAKOUT = dict(
    num_envs=2, num_steps=32, num_minibatches=2, update_epochs=2, eval_episodes=1, eval_every=0, progress=False, threads=1
)


def breakout_args(module=ppo, **flags):
    return module.Args.defaults_for("ALE/Breakout-v5", **(BREAKOUT | flags))


def test_atari_ids_take_cleanrls_ppo_atari_defaults_and_flags_override_them():
    atari = parse_args(ppo.Args, ["--env-id", "ALE/Breakout-v5", "--clip-coef", "0.2"])
    recipe = (
        atari.num_envs,
        atari.num_steps,
        atari.learning_rate,
        atari.anneal_lr,
        atari.num_minibatches,
        atari.update_epochs,
        atari.gamma,
        atari.gae_lambda,
        atari.ent_coef,
        atari.vf_coef,
        atari.clip_vloss,
        atari.max_grad_norm,
        atari.total_timesteps,
    )
    assert recipe == (8, 128, 2.5e-4, True, 4, 4, 0.99, 0.95, 0.01, 0.5, True, 0.5, 10_000_000)
    assert atari.clip_coef == 0.2  # given: overrides CleanRL's 0.1
    assert (
        not atari.normalize_obs
        and not atari.normalize_reward
        and atari.hidden_sizes == ()
        and ppo.network_settings(atari)[1] == "relu"
    )
    assert ppo.Args.defaults_for("ALE/Pong-v5").clip_coef == 0.1
    assert gtr.Args.defaults_for("ALE/Breakout-v5").num_steps == 128  # GTR runs PPO's loop with PPO's recipe
    vector = parse_args(ppo.Args, ["--env-id", "CartPole-v1"])
    assert (vector.num_envs, vector.num_steps, vector.clip_coef, vector.normalize_obs, vector.hidden_sizes) == (
        1,
        2048,
        0.2,
        True,
        (64, 64),
    )


def _orthogonal_gain(weight: torch.Tensor) -> float:
    """g for a weight (out, in, ...) initialised orthogonal_(W, g) with fewer rows than inputs: W·Wᵀ = g²·I."""
    rows = weight.reshape(weight.shape[0], -1)
    gram = rows.detach() @ rows.detach().T
    gain = math.sqrt(float(gram[0, 0]))
    torch.testing.assert_close(gram, gain**2 * torch.eye(rows.shape[0]), atol=1e-4, rtol=1e-4)
    return gain


def test_the_torso_is_the_nature_cnn_shared_by_two_heads_with_cleanrls_init():
    from cleanrl_plus.nn import MemberConv2d

    torch.manual_seed(0)
    K = 2  # two members, each its own CleanRL network: member k's blocks of every parameter
    agent = make_actor_critic(K, (4, 84, 84), gym.spaces.Discrete(4), (), "relu")
    torso = agent.torso
    assert isinstance(torso, NatureCNN) and agent.critic[0] is torso  # one torso, two heads
    convs = [m for m in torso.convs if isinstance(m, MemberConv2d)]
    # MemberConv2d weights are (members, out, in, k, k); EnsembleLinear weights (members, in, out)
    assert [(c.weight.shape[0], c.weight.shape[1], tuple(c.weight.shape[3:]), c.stride) for c in convs] == [
        (K, 32, (8, 8), 4),
        (K, 64, (4, 4), 2),
        (K, 64, (3, 3), 1),
    ]
    assert tuple(torso.fc.weight.shape) == (K, 64 * 7 * 7, 512)
    policy_head, value_head = agent.policy.net[1][0], agent.critic[1][0]
    assert (policy_head.weight.shape[1:], value_head.weight.shape[2]) == ((512, 4), 1)
    for k in range(K):
        for layer in convs:
            assert _orthogonal_gain(layer.weight[k]) == pytest.approx(math.sqrt(2), rel=1e-4)
        assert _orthogonal_gain(torso.fc.weight[k].T) == pytest.approx(math.sqrt(2), rel=1e-4)
        assert _orthogonal_gain(policy_head.weight[k].T) == pytest.approx(0.01, rel=1e-4)
        assert _orthogonal_gain(value_head.weight[k].T) == pytest.approx(1.0, rel=1e-4)
    assert not torch.equal(convs[0].weight[0], convs[0].weight[1])  # each member its own draw
    assert all(float(layer.bias.detach().abs().max()) == 0 for layer in (*convs, torso.fc, policy_head, value_head))
    # one set of parameters for the optimiser: 3 convs, the dense layer, two heads
    assert len(list(agent.parameters())) == 12

    # frames are bytes scaled by 1/255: the logits and value the network gives are CleanRL's forward, written out per member
    frames = torch.randint(0, 256, (K, 3, 4, 84, 84), dtype=torch.uint8)
    logits, values = agent.heads(frames)
    actions = torch.tensor([[0, 1, 3], [2, 2, 0]])
    log_probs, entropy, evaluated_values = agent.evaluate(frames, actions)
    for k in range(K):
        x = frames[k].float() / 255.0
        for conv in convs:
            x = F.relu(F.conv2d(x, conv.weight[k], conv.bias[k], conv.stride))
        hidden = F.relu(F.linear(x.flatten(1), torso.fc.weight[k].T, torso.fc.bias[k, 0]))
        torch.testing.assert_close(logits[k], F.linear(hidden, policy_head.weight[k].T, policy_head.bias[k, 0]))
        torch.testing.assert_close(values[k], F.linear(hidden, value_head.weight[k].T, value_head.bias[k, 0]).squeeze(-1))
        torch.testing.assert_close(log_probs[k], torch.log_softmax(logits[k], -1)[torch.arange(3), actions[k]])
    torch.testing.assert_close(evaluated_values, values)


def test_a_breakout_run_stores_uint8_frame_stacks_as_the_env_gave_them(runs_dir, monkeypatch):
    stored = []

    class RecordingStorage(ppo.RolloutStorage):
        def add(self, t, transition):
            stored.append((transition.obs.clone(), transition.next_obs.clone(), transition.terminated | transition.truncated))
            super().add(t, transition)

    storages = []
    for_env = RecordingStorage.for_env.__func__
    monkeypatch.setattr(
        ppo.RolloutStorage,
        "for_env",
        classmethod(lambda cls, *a, **k: storages.append(for_env(RecordingStorage, *a, **k)) or storages[-1]),
    )
    result = ppo.main(breakout_args(total_timesteps=128, runs_dir=runs_dir))
    assert result["global_step"] == 128 and result["num_updates"] == 8  # 2 rollouts × 2 epochs × 2 minibatches
    storage = storages[0]
    assert storage.obs.dtype == storage.next_obs.dtype == torch.uint8
    assert storage.obs.shape == storage.next_obs.shape == (1, 32, 2, 4, 84, 84)  # (members, steps, envs, ...)
    # the last rollout, as stored: the frames the env gave, and s' of a step is the next step's s within an episode
    last = stored[-32:]
    torch.testing.assert_close(storage.obs, torch.stack([obs for obs, _, _ in last], dim=1), rtol=0, atol=0)
    for (_, next_obs, done), (obs, _, _) in zip(last[:-1], last[1:]):
        assert torch.equal(next_obs[~done], obs[~done])
    assert int(storage.obs.max()) > 0


def test_evaluation_is_epsilon_greedy_in_the_most_probable_action():
    from cleanrl_plus.members import Members

    torch.manual_seed(0)
    agent = make_actor_critic(1, (4, 84, 84), gym.spaces.Discrete(4), (), "relu")
    normalizer = ppo.ObservationNormalizer((4, 84, 84), enabled=False)
    frames = torch.randint(0, 256, (1, 800, 4, 84, 84), dtype=torch.uint8)  # one member's
    greedy = agent.policy.net(frames).argmax(-1)
    evaluation = Members((0,))  # the evaluation's generators
    assert torch.equal(
        evaluation_policy(agent, normalizer, gym.spaces.Discrete(4), 0.0, torch.device("cpu"))(frames, evaluation), greedy
    )
    random = evaluation_policy(agent, normalizer, gym.spaces.Discrete(4), 1.0, torch.device("cpu"))(frames, evaluation)
    assert torch.bincount(random[0], minlength=4).min() > 120  # uniform over the 4 actions (200 each expected)


@pytest.mark.parametrize("module", [ppo, gtr])
def test_a_breakout_run_resumed_after_one_rollout_ends_exactly_as_the_straight_run(module, runs_dir):
    """The emulators come back mid-game (ALE state and RNGs: envs/gymnasium_backend.py), the learner, its uint8 frames
    and counters with them."""
    straight = module.main(breakout_args(module, total_timesteps=192, exp_name="straight", runs_dir=runs_dir))
    half = module.main(breakout_args(module, total_timesteps=64, exp_name="split", runs_dir=runs_dir))  # one rollout
    resumed = module.main(
        breakout_args(module, total_timesteps=192, exp_name="split", resume=half["run_dir"], runs_dir=runs_dir)
    )
    assert (resumed["global_step"], resumed["num_updates"]) == (192, 12)
    a, b = (load_checkpoint(Path(run["run_dir"]) / "checkpoint.pt") for run in (straight, resumed))
    assert b["obs"].dtype == torch.uint8 and b["obs"].shape == (1, 2, 4, 84, 84)  # (members, envs, ...)
    for name in ("agent", "agent_optimizer", "obs", "global_step", "num_updates") + (
        ("trust_region",) if module is gtr else ()
    ):
        assert_states_equal(a[name], b[name], name)


def test_redo_recycles_the_shared_dense_layer_and_diagnostics_watch_both_heads(runs_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # τ = 1 marks every unit below the layer's mean activity dormant: many units of the torso's dense layer are recycled
    result = ppo.main(
        breakout_args(
            total_timesteps=64,
            runs_dir=runs_dir,
            log_every=32,
            reset=ResetArgs(method="redo", every=4, redo_tau=1.0),
            diagnostics=ppo.DiagnosticsArgs(every=4),
        )
    )
    events = EventAccumulator(result["run_dir"]).Reload()
    tags = set(events.Tags()["scalars"])
    assert result["num_updates"] == 4 and events.Scalars("plasticity/agent_recycled_fraction")[-1].value > 0.2
    # ReDo ran after the last update: a recycled unit is read by neither head, so both outputs are what they were
    agent = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")["agent"]
    unread_by_policy = (agent["policy.net.1.0.weight"] == 0).all(dim=-1)  # (members, in, out): inputs no output reads
    unread_by_value = (agent["critic.1.0.weight"] == 0).all(dim=-1)
    assert unread_by_policy.any() and torch.equal(unread_by_policy, unread_by_value)
    assert {"plasticity/policy_active_units", "plasticity/critic_active_units"} <= tags, sorted(tags)


@pytest.mark.parametrize(
    "reset, message",
    [
        (ResetArgs(method="redo", networks="actor"), "share one torso"),
        (ResetArgs(method="inject"), "feed two heads"),
        (ResetArgs(method="cbp"), "feed two heads"),
    ],
)
def test_resets_that_cannot_follow_the_shared_torso_are_one_line(reset, message, runs_dir):
    with pytest.raises(UserError, match=message):
        ppo.main(breakout_args(total_timesteps=64, runs_dir=runs_dir, reset=reset))
    assert not Path(runs_dir).exists()


def test_normalising_frames_is_refused(runs_dir):
    with pytest.raises(UserError, match="--no-normalize-obs"):
        ppo.main(breakout_args(total_timesteps=64, runs_dir=runs_dir, normalize_obs=True))
