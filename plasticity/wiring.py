"""One object per agent that owns every remedy and diagnostic of its networks: `Plasticity`.

    # each a plasticity.network.Network
    plasticity = Plasticity(args, critic, actor, logger=run.logger, members=K)
    # (K,) per member + L2, L2-init, Parseval, C-CHAIN
    loss = plasticity.loss("critic", td_loss, reference)
    # the agent's own zero_grad, backward and gradient clipping, then the step: TRAC's or the
    # optimiser's, then NaP's projection, weight clipping and C-CHAIN's schedule
    optimizer.zero_grad(set_to_none=True)
    loss.sum().backward()
    plasticity.step("critic")
    # diagnostics, then resets
    plasticity.after_update(num_updates, replay, global_step)
    # LEAST's early stops
    next_obs, truncated = plasticity.after_env_step(env, step, obs, actions, global_step)
    # what a continual switch resets
    plasticity.on_task_switch(args.continual, replay, normalizers)

Every network holds the K members of a group (cleanrl_plus.members) along the leading, member-major
dimension of each tensor; losses are one value per member, and every remedy acts on each member on
its own (a global gradient norm or a statistic over all parameters would mix seeds). Adding a remedy
touches plasticity/ and its catalogue entry, not the agents. Its state (resets, diagnostics, loss
and step remedies, LEAST) is one entry of the agent's checkpoint; the resets load first, so that an
injected head exists again before the networks' weights arrive: `checkpointed()` lists it first,
then the networks.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
import torch.nn as nn

from plasticity.diagnostics import PlasticityMonitor
from plasticity.hooks import RemedyHooks
from plasticity.least import EpisodeStopper
from plasticity.network import Network
from plasticity.resets import Resetter, full_reset

# (obs, actions, next_obs) → (Q̂(s, a) of the actions taken, V̄(s')): how LEAST judges an
# agent's episodes
EpisodeValues = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]


class Plasticity:
    """The remedy hooks, resets, diagnostics and LEAST of an agent's networks (module docstring)."""

    def __init__(
        self,
        args: Any,
        *networks: Network,
        logger: Any,
        members: int = 1,
        env: Any = None,
        episode_values: EpisodeValues | None = None,
    ) -> None:
        self.args, self.logger, self.networks, self.members = args, logger, networks, members
        self.reset_units = [unit for net in networks for unit in net.reset_units()]
        watched = [part for net in networks for part in (net.parts or (net,))]
        self.monitor = (
            PlasticityMonitor(args.diagnostics, watched, members)
            if hasattr(args, "diagnostics")
            else None
        )
        self.resetter = Resetter(args.reset, self.reset_units, members)
        self.hooks = RemedyHooks(args, list(networks), members)
        least = getattr(args, "least", None)
        self.stopper, self.episode_values = None, episode_values
        if least is not None and least.enabled:
            self.stopper = EpisodeStopper(
                least,
                env.envs_per_member,
                env.max_episode_steps,
                args.total_timesteps,
                env.device,
                members,
            )

    def loss(
        self,
        name: str,
        main_loss: torch.Tensor,
        reference: Any = None,
        scale_against: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """main_loss (one value per member) + the named network's regularisers; `reference` is
        C-CHAIN's batch (`reference_batch`), `scale_against` the loss C-CHAIN's coefficient is
        scaled against (default main_loss; PPO: the policy loss)."""
        return self.hooks.loss(name, main_loss, reference, scale_against)

    def step(self, name: str) -> None:
        """The named network's optimiser step (through TRAC when on), then NaP's projection, weight
        clipping and C-CHAIN's schedule: what follows the agent's zero_grad, backward and clipping."""
        self.hooks.step(name)

    def reference_batch(self, source: Any, batch_size: int) -> Any:
        """C-CHAIN's reference batch, drawn from the replay (or rollout) apart from the training
        batch; None when off."""
        return source.sample(batch_size) if self.args.cchain.enabled else None

    def reference_pass(self, storage: Any, num_minibatches: int) -> list[Any]:
        """C-CHAIN's reference batches of one PPO epoch: a second shuffled pass over the rollout, cut
        as the training pass is, so each reference batch is drawn without replacement (both PPO
        scripts of bluecontra/C-CHAIN: `reg_data_loader` in crl_gym_classic_control/
        control_train_aligned_c_chain.py, `b_reg_inds` in crl_dmc/crl_run_ppo_c_chain_dmc.py);
        Nones when off."""
        if not self.args.cchain.enabled:
            return [None] * num_minibatches
        return [storage.gather(indices) for indices in storage.minibatch_indices(num_minibatches)]

    def after_update(
        self, num_updates: int, source: Any, global_step: int, last_of_step: bool | None = None
    ) -> None:
        """After each gradient update: the diagnostics that are due, then the reset that is due
        (`last_of_step`: no more updates follow at this environment step; full and layer resets wait
        for it and land at its end, `at_step_end`; None: an update outside the env loop's steps,
        PPO's, where they land at once)."""
        if self.monitor is not None:
            self.monitor.after_update(num_updates, source, self.logger, global_step)
        self.resetter.after_update(num_updates, source, self.logger, global_step, last_of_step)

    def at_step_end(self, num_updates: int, global_step: int) -> None:
        """After the step's evaluation, before its checkpoint (TrainingSession.after_step): a full or
        layer reset that fell due in the step."""
        self.resetter.at_step_end(num_updates, self.logger, global_step)

    def after_env_step(
        self, env: Any, step: Any, obs: torch.Tensor, actions: torch.Tensor, global_step: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(observations to act on next, truncated): LEAST's stops end their episodes as
        truncations; without LEAST the step's own."""
        if self.stopper is None:
            return step.obs, step.truncated
        with torch.no_grad():
            q_taken, next_value = self.episode_values(obs, actions, step.next_obs)
        next_obs = self.stopper.after_env_step(
            env, step, q_taken, next_value, self.args.gamma, global_step
        )
        return next_obs, step.truncated | self.stopper.stopped_now

    def report(self) -> dict[str, torch.Tensor]:
        """remedies/* of the last update and least/* (device tensors, no sync)."""
        return self.hooks.report() | (self.stopper.report() if self.stopper is not None else {})

    def on_task_switch(
        self,
        settings: Any,
        replay: Any = None,
        normalizers: Iterable[nn.Module] = (),
        also_on_fresh_start: Iterable[Callable[[], None]] = (),
    ) -> None:
        """What the agent keeps across a continual task switch (--continual.*): everything by
        default; the oracle gets a fresh agent (networks re-drawn, optimiser moments dropped,
        targets re-synced, replay emptied, normalisers restarted, and `also_on_fresh_start`, e.g.
        SAC's temperature); C-CHAIN restarts its schedule where its authors do."""
        self.hooks.on_task_switch()
        if settings.oracle:
            for network in self.reset_units:
                full_reset(network)
            for reset in also_on_fresh_start:
                reset()
        if replay is not None and (settings.oracle or settings.reset_replay):
            replay.clear()
        if settings.oracle or settings.reset_obs_norm:
            for normalizer in normalizers:
                normalizer.reset()

    def checkpointed(self) -> dict[str, Any]:
        """What a checkpoint holds of the networks, for the agent's TrainingSession, in loading
        order: this object first (an injected head must exist again before the weights arrive), then
        each network, its target and optimiser ('critic', 'critic_target', 'critic_optimizer',
        …)."""
        state: dict[str, Any] = {"plasticity": self}
        for net in self.networks:
            state |= {net.name: net.module, f"{net.name}_optimizer": net.optimizer}
            if net.target is not None:
                state[f"{net.name}_target"] = net.target
        return state

    def state_dict(self) -> dict:
        state = {"resets": self.resetter.state_dict(), "remedies": self.hooks.state_dict()}
        if self.monitor is not None:
            state["diagnostics"] = self.monitor.state_dict()
        if self.stopper is not None:
            state["least"] = self.stopper.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        # first: an injected head must exist again before the weights arrive
        self.resetter.load_state_dict(state["resets"])
        self.hooks.load_state_dict(state["remedies"])
        if self.monitor is not None:
            self.monitor.load_state_dict(state["diagnostics"])
        if self.stopper is not None:
            self.stopper.load_state_dict(state["least"])
