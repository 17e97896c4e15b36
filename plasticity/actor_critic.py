"""An on-policy actor-critic (PPO, GTR) as the plasticity code sees it: one network in two parts.

One loss and one optimiser train the policy and the value network together, so the loss and step
remedies treat them as one network, "agent" (C-CHAIN keeps the policy's mean or probabilities close,
rescaling once an iteration). The diagnostics watch each part: "critic", and "actor" under the label
"policy". The resets act on each part, or on the whole when the two heads share one torso (PPO's
Nature CNN on Atari), whose units then feed both.

The agent module it describes has `policy` (whose `net` maps observations to the policy's outputs,
with `continuous` and `distribution_parameters(obs)`), `critic` (observations → V(s)),
`value(obs)`, `heads(obs)` (the policy's outputs and V(s), a shared torso run once) and
`shares_torso`: agents/ppo.py's `ActorCritic`.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from cleanrl_plus.nn import EnsembleLinear
from plasticity.cchain import policy_churn
from plasticity.network import Network


def actor_critic_network(
    agent: nn.Module,
    optimizer: torch.optim.Optimizer,
    rebuild: Callable[[], nn.Module],
    rebuild_policy: Callable[[], nn.Module],
    activation: str,
    updates_per_iteration: int,
) -> Network:
    """`agent` (its policy and value network, trained by `optimizer`) as the network "agent" with
    the parts "critic" and "actor". `rebuild` and `rebuild_policy` make freshly initialised copies
    of the agent and of its policy; `activation` names the hidden nonlinearity (the probe counts a
    tanh unit dormant when |tanh| is small, any other as ReLU); C-CHAIN rescales once every
    `updates_per_iteration` updates."""
    policy, critic = agent.policy, agent.critic
    policy_linears, value_linears = (ensemble_linears(net) for net in (policy.net, critic))
    probe_activation = torch.tanh if activation == "tanh" else torch.relu

    def policy_outputs(batch) -> torch.Tensor:
        return policy.net(batch.obs)

    def joint_outputs(batch) -> torch.Tensor:
        outputs, values = agent.heads(batch.obs)
        return torch.cat([outputs, values.unsqueeze(-1)], dim=-1)

    value_part = Network(
        "critic",
        critic,
        optimizer,
        lambda batch: agent.value(batch.obs),
        lambda: rebuild().critic,
        hidden=value_linears[:-1],
        heads=value_linears[-1:],
        activation=probe_activation,
    )
    policy_part = Network(
        "actor",
        policy,
        optimizer,
        policy_outputs,
        rebuild_policy,
        hidden=policy_linears[:-1],
        heads=policy_linears[-1:],
        activation=probe_activation,
        label="policy",
        distribution=lambda batch: policy.distribution_parameters(batch.obs),
    )
    return Network(
        "agent",
        agent,
        optimizer,
        joint_outputs,
        rebuild,
        heads=(policy_linears[-1], value_linears[-1]),
        unit_pairs=shared_torso_pairs(policy_linears, value_linears) if agent.shares_torso else [],
        parts=(value_part, policy_part),
        churn=policy_churn(policy_outputs, policy.continuous, updates_per_iteration),
    )


def ensemble_linears(net: nn.Module) -> list[nn.Module]:
    """The dense layers of `net`, input to output."""
    return [module for module in net.modules() if isinstance(module, EnsembleLinear)]


def shared_torso_pairs(policy_linears: list[nn.Module], value_linears: list[nn.Module]) -> list:
    """(layer feeding a unit, a layer reading it) for two heads on one torso, in the order a forward
    reaches them: the torso's last layer (the first of each list) feeds both heads' first layers,
    and each head's layers feed their next."""
    pairs = [(policy_linears[0], policy_linears[1]), (value_linears[0], value_linears[1])]
    pairs += list(zip(policy_linears[1:-1], policy_linears[2:]))
    return pairs + list(zip(value_linears[1:-1], value_linears[2:]))
