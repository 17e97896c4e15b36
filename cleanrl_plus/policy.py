"""PPO's and GTR's networks: the policy π_θ(a|s) (a categorical or a diagonal Gaussian, whose actions come from noise
drawn outside the acting step: cleanrl_plus/sampling.py), the actor-critic of a policy and a value network (separate
MLPs, or two heads on one Nature CNN), and the evaluation policy. Every member of a group has its own:
observations (members, B, ...) → outputs (members, B, ...). agents/ppo.py builds them from its flags (`make_agent`);
plasticity/actor_critic.py describes them to the remedies and diagnostics."""

from __future__ import annotations

from typing import Callable

import gymnasium as gym
import torch
import torch.nn as nn
from torch import Tensor

from cleanrl_plus.encoders import orthogonal_nature_cnn, ppo_mlp
from cleanrl_plus.exploration import epsilon_greedy, exploration_draws
from cleanrl_plus.members import Members
from cleanrl_plus.normalization import ObservationNormalizer
from cleanrl_plus.sampling import action_noise, sample_actions


class Policy(nn.Module):
    """π_θ(a|s): categorical logits for Discrete spaces; a diagonal Gaussian with
    state-independent log σ for Box. `net` maps observations to those outputs: an MLP on
    `in_features` inputs, or `torso` then that MLP (the head). Every member of the group has its
    own: observations (members, B, ...) → outputs (members, B, ...)."""

    def __init__(
        self,
        members: int,
        in_features: int,
        action_space: gym.Space,
        hidden: tuple[int, ...],
        activation: str,
        norm="none",
        torso=None,
        init="orthogonal",
        categorical_from="logits",
    ):
        super().__init__()
        self.continuous = isinstance(action_space, gym.spaces.Box)
        self.categorical_from = categorical_from
        # action dimensions or actions
        self.outputs = int(action_space.shape[0]) if self.continuous else int(action_space.n)
        head = ppo_mlp(members, in_features, self.outputs, hidden, activation, out_std=0.01, norm=norm, init=init)
        self.net = head if torso is None else nn.Sequential(torso, head)
        if self.continuous:
            self.log_std = nn.Parameter(torch.zeros(members, self.outputs))

    def distribution(self, obs: Tensor) -> torch.distributions.Distribution:
        return self.distribution_from(self.net(obs))

    def distribution_from(self, outputs: Tensor) -> torch.distributions.Distribution:
        """π(·|s) from the network's outputs: the mean (Box) or the logits (Discrete)."""
        if self.continuous:
            std = self.log_std.exp().unsqueeze(1).expand_as(outputs)
            return torch.distributions.Normal(outputs, std)
        if self.categorical_from == "probs":  # --categorical-from: torch clamps these probabilities
            return torch.distributions.Categorical(probs=torch.softmax(outputs, dim=-1))
        return torch.distributions.Categorical(logits=outputs)

    def distribution_parameters(self, obs: Tensor) -> dict[str, Tensor]:
        """{"mean", "log_std"} (Box) or {"logits"} (Discrete): what the KL churn diagnostic compares
        across an update."""
        if self.continuous:
            return {"mean": self.net(obs), "log_std": self.log_std.unsqueeze(1)}
        return {"logits": self.net(obs)}

    def log_prob(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """(log π(a|s), entropy H[π(·|s)]), one value per sample."""
        return self.log_prob_from(self.net(obs), actions)

    def log_prob_from(self, outputs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        dist = self.distribution_from(outputs)
        if self.continuous:
            return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1)
        return dist.log_prob(actions), dist.entropy()

    def noise(self, members: Members, steps: int, batch: int) -> Tensor:
        """The random numbers of `steps` batches of actions, drawn before the rollout (cleanrl_plus/sampling.py)."""
        return action_noise(members, steps, batch, self.outputs, self.continuous)

    def sample(self, obs: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
        """(a ~ π(·|s), log π(a|s)) from `noise`: the actions `dist.sample()` would give, without its host sync."""
        return sample_actions(self.distribution(obs), noise)

    def greedy(self, obs: Tensor) -> Tensor:
        return self.net(obs) if self.continuous else self.net(obs).argmax(dim=-1)


class ActorCritic(nn.Module):
    """Policy and value network: separate MLPs, or two heads on the features of one torso (`critic`
    then is `nn.Sequential(torso, value head)` on the policy's torso), whose gradient sums both
    losses' (CleanRL's ppo_atari). make_actor_critic builds either; plasticity/actor_critic.py
    describes it to the remedies and diagnostics."""

    def __init__(self, policy: Policy, critic: nn.Module, shares_torso: bool):
        super().__init__()
        self.policy, self.critic, self.shares_torso = policy, critic, shares_torso

    @property
    def torso(self) -> nn.Module:
        return self.policy.net[0]

    def value(self, obs: Tensor) -> Tensor:
        return self.critic(obs).squeeze(-1)

    def heads(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """(policy outputs, V(s)) with a shared torso run once."""
        if not self.shares_torso:
            return self.policy.net(obs), self.value(obs)
        features = self.torso(obs)
        return self.policy.net[1](features), self.critic[1](features).squeeze(-1)

    def evaluate(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(log π(a|s), H[π(·|s)], V(s)) of a minibatch."""
        if not self.shares_torso:  # the two networks one after the other, as they always ran
            return (*self.policy.log_prob(obs, actions), self.value(obs))
        outputs, values = self.heads(obs)
        return (*self.policy.log_prob_from(outputs, actions), values)


def make_actor_critic(
    members: int,
    obs_shape: tuple[int, ...],
    action_space: gym.Space,
    hidden: tuple[int, ...],
    activation: str,
    norm: str = "none",
    init: str = "orthogonal",
    categorical_from: str = "logits",
) -> ActorCritic:
    """Separate MLPs (of `hidden`, initialised as `init` says) for vector observations; for frame
    stacks, the Nature CNN shared by a policy head and a value head (MLPs of `hidden`; () = one
    linear layer)."""
    frames = len(obs_shape) > 1
    torso = orthogonal_nature_cnn(members, obs_shape, norm, activation) if frames else None
    in_features = obs_shape[0] if torso is None else torso.features
    policy = Policy(members, in_features, action_space, hidden, activation, norm, torso, init, categorical_from)
    value_head = ppo_mlp(members, in_features, 1, hidden, activation, out_std=1.0, norm=norm, init=init)
    critic = value_head if torso is None else nn.Sequential(torso, value_head)
    return ActorCritic(policy, critic, torso is not None)


def evaluation_policy(
    agent: ActorCritic, obs_normalizer: ObservationNormalizer, space: gym.Space, epsilon: float, device: torch.device
) -> Callable[[Tensor, Members], Tensor]:
    """(observations (members, E, ...), the evaluation's generators) → the mean action clipped to
    the bounds (Box), or the most probable action, ε-greedy with ε = --eval-epsilon (Discrete)."""
    if isinstance(space, gym.spaces.Box):
        low, high = (torch.as_tensor(bound, device=device, dtype=torch.float32) for bound in (space.low, space.high))
        return lambda obs, members: agent.policy.greedy(obs_normalizer(obs)).clamp(low, high)

    def epsilon_greedy_policy(obs: Tensor, members: Members) -> Tensor:
        logits = agent.policy.net(obs_normalizer(obs))
        return epsilon_greedy(logits, epsilon, exploration_draws(members, logits.shape[1], logits.shape[2]))

    return epsilon_greedy_policy
