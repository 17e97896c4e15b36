"""LEAST: learn to stop episodes early.

Paper: Liu, Obando-Ceron, Castro, Courville, Pan, "The Courage to Stop: Overcoming Sunk Cost Fallacy
in Deep Reinforcement Learning" (ICML 2025, arXiv 2506.13672). We found no official code, and the
paper's own text was not available to us: the rule below follows descriptions of its method, so what
it attributes to the paper (the step-indexed histories B_Q and B_G of the last K episodes, the
median threshold ε_i, the learning-potential weight ω_i, the two-sided stop rule, t_start and the
robust range of c) is unchecked against the paper's equations, and everything we chose is marked
[our choice].

At within-episode step i of each env, with Q̂ = min(Q₁, Q₂)(s, a) of the action taken [our
choice] and Ḡ_i the mean, over the episode so far, of the acting transitions' TD errors
|r + γ(1 − terminated)·V̄(s') − Q̂| [our choice: a single transition's TD error is so noisy
that testing it at every step stopped ~97% of Pendulum episodes within a few steps; the running mean
keeps the "learning potential" meaning]:

    ε_i = median_k B_Q[k, i]            Q̂ at step index i over the last K episodes (median, not mean)
    ω_i = median_k B_G[k, i] / Ḡ_i      learning potential: a surprising episode (large Ḡ) loosens the bar
    stop if Q̂ < c·ω_i·ε_i   (ε_i ≥ 0)     or   Q̂ < ε_i / (c·ω_i)   (ε_i < 0)

only after `start` of the run (t_start: 10–20% on MuJoCo in the paper; 15% [our choice]) and once
≥ `min_history` episodes reached step i (10 [our choice]). c = 0.5 [our choice, inside the range
[0.3, 0.6] the paper reports robust]; K = 250 episodes [our choice].

A stopped episode is a **truncation**: its last transition is stored with terminated = 0
(bootstrapped from s'), the env is reset, and the episode counts in the statistics with the steps it
really took. Logged: least/stop_rate (fraction of finished episodes that were stopped) and
least/steps_saved (time-limit steps the stopped episodes did not use). The entropy-aware window and
the exploration-noise schedule of the paper are not implemented (we could not read their formulas).
"""

from __future__ import annotations

import dataclasses

import torch

from envs.errors import UserError
from envs.ranges import AtLeastOne, Fraction, Positive


@dataclasses.dataclass
class LEASTArgs:
    enabled: bool = False
    """stop unpromising episodes early (stored as truncations, never as terminations)"""
    start: Fraction = 0.15
    """fraction of --total-timesteps before any stop (t_start: 10–20% on MuJoCo)"""
    window: AtLeastOne = 250
    """K: episodes whose step-indexed Q and TD-error histories set the thresholds"""
    weight: Positive = 0.5
    """c: the stop threshold is c·ω·ε (ε ≥ 0) or ε/(c·ω) (ε < 0); the paper reports [0.3,
    0.6] robust"""
    min_history: AtLeastOne = 10
    """episodes that must have reached step i before step i can stop an episode [our choice]"""


class EpisodeStopper:
    """Per-step-index histories of Q̂ and G over the last K episodes, and the stop rule, for each
    member's batch of envs: every tensor holds the members of a group first (cleanrl_plus.members),
    so a member's stops read its own episodes."""

    def __init__(
        self,
        args: LEASTArgs,
        num_envs: int,
        max_episode_steps: int,
        total_timesteps: int,
        device: torch.device,
        members: int = 1,
    ) -> None:
        if max_episode_steps <= 0:
            raise UserError(
                "LEAST needs a time limit (its thresholds are indexed by the step "
                "within the episode)"
            )
        self.args, self.length = args, max_episode_steps
        self.start_step = int(args.start * total_timesteps)
        nan = float("nan")
        # K rows of history plus one scratch row that absorbs the writes of envs whose episode did
        # not end
        self.history_q = torch.full(
            (members, args.window + 1, max_episode_steps), nan, device=device
        )
        self.history_g = torch.full(
            (members, args.window + 1, max_episode_steps), nan, device=device
        )
        self.current_q = torch.full((members, num_envs, max_episode_steps), nan, device=device)
        self.current_g = torch.full((members, num_envs, max_episode_steps), nan, device=device)
        self.step_index = torch.zeros(members, num_envs, dtype=torch.long, device=device)
        self.td_error_sum = torch.zeros(members, num_envs, device=device)
        self.next_row = torch.zeros(members, dtype=torch.long, device=device)
        self.finished = torch.zeros(members, device=device)
        self.stopped = torch.zeros(members, device=device)
        self.steps_saved = torch.zeros(members, device=device)
        # (members, 1): indexes each member's rows
        self.member_rows = torch.arange(members, device=device).unsqueeze(1)

    def should_stop(
        self, q: torch.Tensor, td_error: torch.Tensor, global_step: int
    ) -> torch.Tensor:
        """Record this step's (Q̂, G) for each env, (members, num_envs), and return which episodes
        to stop now."""
        members, envs = q.shape
        index = self.step_index.clamp_max(self.length - 1)
        self.td_error_sum += td_error
        td_error = self.td_error_sum / (self.step_index + 1)  # Ḡ_i, the episode's running mean
        env_rows = torch.arange(envs, device=q.device)
        self.current_q[self.member_rows, env_rows, index] = q
        self.current_g[self.member_rows, env_rows, index] = td_error
        self.step_index += 1
        if global_step < self.start_step:
            return torch.zeros_like(q, dtype=torch.bool)
        at_index = index.unsqueeze(1).expand(-1, self.args.window, -1)  # (members, K, num_envs)
        past_q = self.history_q[:, :-1].gather(2, at_index)
        past_g = self.history_g[:, :-1].gather(2, at_index)
        enough = (~past_q.isnan()).sum(dim=1) >= self.args.min_history
        epsilon = past_q.nanmedian(dim=1).values
        omega = past_g.nanmedian(dim=1).values / td_error.clamp_min(1e-8)
        scale = self.args.weight * omega
        threshold = torch.where(epsilon >= 0, scale * epsilon, epsilon / scale.clamp_min(1e-8))
        return enough & (q < threshold)

    def end_episodes(self, done: torch.Tensor, stopped: torch.Tensor) -> None:
        """Move finished episodes' rows into each member's history ring, oldest overwritten first
        (no host sync)."""
        self.finished += done.sum(dim=-1)
        self.stopped += stopped.sum(dim=-1)
        self.steps_saved += ((self.length - self.step_index) * stopped).sum(dim=-1)
        window = self.args.window
        order = self.next_row.unsqueeze(1) + torch.cumsum(done.long(), dim=-1) - 1
        # the ring row of each ended episode; the scratch row otherwise
        rows = torch.where(done, order % window, window)
        self.history_q[self.member_rows, rows] = self.current_q
        self.history_g[self.member_rows, rows] = self.current_g
        self.next_row = (self.next_row + done.sum(dim=-1)) % window
        self.current_q.masked_fill_(done[..., None], float("nan"))
        self.current_g.masked_fill_(done[..., None], float("nan"))
        self.step_index.masked_fill_(done, 0)
        self.td_error_sum.masked_fill_(done, 0.0)

    def after_env_step(
        self,
        env,
        step,
        q_taken: torch.Tensor,
        next_value: torch.Tensor,
        gamma: float,
        global_step: int,
    ) -> torch.Tensor:
        """The agent's hook after `env.step`: decide the stops, end those episodes as truncations,
        and return the observations to act on next (fresh initial ones where an episode was
        stopped)."""
        ended = step.terminated | step.truncated
        td_error = self.td_error(q_taken, step.reward, step.terminated, next_value, gamma)
        stop = self.should_stop(q_taken, td_error, global_step) & ~ended
        self.stopped_now = stop  # the agent stores these transitions as truncations
        self.end_episodes(ended | stop, stop)
        return env.reset_where(stop, step.obs)

    @staticmethod
    def td_error(
        q_taken: torch.Tensor,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        next_value: torch.Tensor,
        gamma: float,
    ) -> torch.Tensor:
        """G = |r + γ(1 − terminated)·V̄(s') − Q̂(s, a)| for the transition just taken."""
        return (reward + gamma * (1.0 - terminated.float()) * next_value - q_taken).abs()

    def report(self) -> dict[str, torch.Tensor]:
        """One value per member."""
        return {
            "least/stop_rate": self.stopped / self.finished.clamp_min(1),
            "least/steps_saved": self.steps_saved.clone(),
        }

    def state_dict(self) -> dict:
        return {
            name: getattr(self, name)
            for name in (
                "history_q",
                "history_g",
                "current_q",
                "current_g",
                "step_index",
                "td_error_sum",
                "next_row",
                "finished",
                "stopped",
                "steps_saved",
            )
        }

    def load_state_dict(self, state: dict) -> None:
        for name, value in state.items():
            setattr(self, name, value)
