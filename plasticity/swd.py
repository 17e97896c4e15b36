"""Sample Weight Decay (SWD): replay sampling whose probability decays linearly with a transition's
age.

Paper: Wu, Tang, Ma, Liu, Zheng, Hao, "The Rank and Gradient Lost in Non-stationarity: Sample Weight
Decay for Mitigating Plasticity Loss in Reinforcement Learning" (2026, arXiv 2604.01913). Official
code, linked from the paper's abstract: wzhhasadream/CleanRL-JAX,
`cleanrl_jax/utils/ReplayBuffer.py` (`_sample_with_bias`). Rule [code]: age a = t − tᵢ in
insertion steps, weight w(a) = max(w_min, 1 − a/T), indices drawn i.i.d. with replacement with p
∝ w; the loss stays an unweighted mean. Defaults [code]: T = 80,000 (`linear_decay_steps` in
`train_td3.py` and `train_sac.py`), w_min = 0.1 (the buffer's `min_weight`). T = 0 is uniform
sampling, as there. The "augment" ablation (SWA) up-weights old data: w = min(1, w_min + a/T) (the
code's negative `linear_decay_steps`).

Exact O(1) sampling, never an O(N) weight vector: write w(a) = w_min + (a* − a)/T on a
< a* = T(1 − w_min) (and w_min beyond). For integer ages this is a mixture of uniform pieces and
one discrete triangle ∝ (L − 1 − a), each drawn in closed form; the piece is picked with
probability ∝ its mass. The augment variant is the mirror image, w(a) = w_min + min(a, a*)/T: a
uniform floor, a rising triangle ∝ a on a < a* and a uniform plateau beyond, drawn as the same
kind of mixture [ours: a rejection sampler's loop would wait on the device]. Ages count vector-env
steps, as in the official code: with n envs all transitions of one step share an age, so a step is
drawn first and then an env slot. Sampling never waits on the device (no host sync): the pieces are
chosen on the host, and each piece's draws go to their rows with one scatter. In a group
(cleanrl_plus.members) each member's batch is drawn from its own generators.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any, Literal

import torch

from envs.ranges import Count, Range


@dataclasses.dataclass
class SWDArgs:
    enabled: bool = False
    """sample replay by age with Sample Weight Decay instead of uniformly"""
    decay_steps: Count = 80_000
    """T: age (in vector-env steps) at which the weight reaches its floor; 0 = uniform"""
    min_weight: Annotated[float, Range(gt=0, le=1)] = 0.1
    """w_min: the weight floor of old transitions"""
    mode: Literal["decay", "augment"] = "decay"
    """'decay': w = max(w_min, 1 − age/T) (SWD); 'augment': w = min(1, w_min + age/T) (the SWA
    ablation)"""


def _triangle(
    count: torch.Tensor, length: int, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """`count` draws of a ∈ {0, …, length−2} with P(a) ∝ length − 1 − a (exact: uniform
    pairs a ≤ k ≤ length−2)."""
    rows = length - 1
    pairs = rows * (rows + 1) // 2
    r = torch.randint(
        0, pairs, (int(count),), device=device, generator=generator, dtype=torch.int64
    )
    k = ((torch.sqrt(8.0 * r.double() + 1.0) - 1.0) / 2.0).floor().long()
    # float rounding guards: k(k+1)/2 ≤ r < (k+1)(k+2)/2
    k += ((k + 1) * (k + 2) // 2 <= r).long()
    k -= (k * (k + 1) // 2 > r).long()
    return r - k * (k + 1) // 2


def age_weights(ages: torch.Tensor, args: SWDArgs) -> torch.Tensor:
    """w(age) as defined above (used by tests and diagnostics; the sampler never builds it over the
    buffer)."""
    ages = ages.double()
    if args.decay_steps == 0:
        return torch.ones_like(ages)
    if args.mode == "decay":
        return torch.clamp(1.0 - ages / args.decay_steps, min=args.min_weight)
    return torch.clamp(args.min_weight + ages / args.decay_steps, max=1.0)


class SWDSampler:
    """Replay sampler with p(age) ∝ w(age): plugs into `ReplayBuffer(sampler=...)`."""

    def __init__(self, args: SWDArgs, num_envs: int = 1) -> None:
        if args.decay_steps < 0 or not 0.0 < args.min_weight <= 1.0:
            raise ValueError("SWD needs decay_steps >= 0 and 0 < min_weight <= 1")
        self.args, self.num_envs = args, num_envs

    def sample_ages(
        self,
        num_steps: int,
        batch_size: int,
        device: torch.device,
        generator: torch.Generator | None = None,
        host_generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Ages in vector-env steps, 0 = newest, drawn exactly from p(a) ∝ w(a) on {0, …,
        num_steps − 1}, the draws on `device` from `generator` and the host's choice of pieces
        from `host_generator`."""
        args, g = self.args, generator
        if args.decay_steps == 0:
            return torch.randint(0, num_steps, (batch_size,), device=device, generator=g)
        ramp_end = args.decay_steps * (1.0 - args.min_weight)  # a*: the weight stops changing here

        def uniform(high: int, offset: int = 0):
            return lambda count: (
                offset + torch.randint(0, high, (count,), device=device, generator=g)
            )

        # (mass × T, draw)
        floor = (args.min_weight * args.decay_steps * num_steps, uniform(num_steps))
        # w·T = w_min·T + min(a, a*): floor, rising triangle ∝ a below a*, plateau a* beyond
        if args.mode == "augment":
            rise_len = min(num_steps, math.ceil(ramp_end))  # ages 0 … rise_len − 1 lie below a*
            plateau_len = num_steps - rise_len
            rising = (
                rise_len * (rise_len - 1) / 2,
                lambda count: rise_len - 1 - _triangle(count, rise_len, g, device),
            )
            return self._draw_mixture(
                [floor, rising, (ramp_end * plateau_len, uniform(plateau_len, rise_len))],
                batch_size,
                device,
                host_generator,
            )
        # ages with extra weight: 0 … ramp_len − 1
        ramp_len = min(num_steps, math.ceil(ramp_end))
        # c ∈ (0, 1]: a* − a = c + (ceil(a*) − 1 − a)
        top = ramp_end - (math.ceil(ramp_end) - 1)
        full_len = math.ceil(ramp_end)
        # mixture pieces (unnormalised masses, times T): floor, offset c, the part of the triangle
        # cut by N, triangle
        return self._draw_mixture(
            [
                floor,
                (top * ramp_len, uniform(ramp_len)),
                ((full_len - ramp_len) * ramp_len, uniform(ramp_len)),
                (
                    ramp_len * (ramp_len - 1) / 2,
                    lambda count: _triangle(count, ramp_len, g, device),
                ),
            ],
            batch_size,
            device,
            host_generator,
        )

    def _draw_mixture(
        self,
        pieces: list,
        batch_size: int,
        device: torch.device,
        host_generator: torch.Generator | None,
    ) -> torch.Tensor:
        """Each row's piece drawn on the host with probability ∝ its mass (so counting them needs
        no device sync), then every piece's draws written to its rows at once (a boolean-mask write
        per piece would sync a GPU)."""
        masses = torch.tensor([mass for mass, _ in pieces], dtype=torch.float64)
        piece = torch.multinomial(
            masses / masses.sum(), batch_size, replacement=True, generator=host_generator
        )
        counts = torch.bincount(piece, minlength=len(pieces)).tolist()
        draws = [draw(count) for (_, draw), count in zip(pieces, counts) if count]
        # the rows of piece 0 in order, then those of piece 1, …
        rows = torch.argsort(piece, stable=True)
        ages = torch.empty(batch_size, dtype=torch.int64, device=device)
        ages[_to_device(rows, device)] = torch.cat(draws)
        return ages

    def sample_indices(self, buffer: Any, batch_size: int) -> torch.Tensor:
        """(members, batch_size) slots, each member's drawn with its own generators."""
        n = self.num_envs
        if buffer.capacity % n:
            raise ValueError(
                f"SWD needs a replay capacity divisible by num_envs={n} (got {buffer.capacity})"
            )
        ages = []
        for host, generator in zip(buffer.members.host, buffer.members.generators):
            step_ages = self.sample_ages(
                buffer.size // n, batch_size, buffer.device, generator, host
            )
            slot = (
                torch.randint(0, n, (batch_size,), device=buffer.device, generator=generator)
                if n > 1
                else 0
            )
            ages.append(step_ages * n + slot)
        return buffer.slots_by_age(torch.stack(ages))

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def _to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the device: a plain copy to a GPU synchronises
    its stream, a copy from pinned memory does not."""
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def make_sampler(args: SWDArgs, num_envs: int) -> SWDSampler | None:
    """The replay sampler an agent should use: SWD when enabled, else None (the buffer's uniform
    default)."""
    return SWDSampler(args, num_envs) if args.enabled else None
