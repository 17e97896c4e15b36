"""One factory for every environment backend: `envs.make(env_id, num_envs, seed, device)`.

Every backend returns a `TorchVecEnv` (see `envs/base.py`) whose `step` gives torch tensors on the
chosen device: the observation to act on, reward, terminated, truncated and the true next observation.
Backends are chosen from the id (`dmc:domain-task`, `ALE/Game-v5`, `torch:CartPole-v1`, `warp:Hopper-v5`) or by
`backend=`.
`continual:...` ids wrap any of them with a task schedule (envs/continual.py); `continual=` carries its flags.
`training=False` builds an evaluation env: backends that shape episodes or rewards for learning (Atari: a lost
life ends the episode, rewards clipped to their sign) then give full games and raw rewards.
`members=(s_1, …, s_K)` builds one env for a group of K seeds (cleanrl_plus/members.py): K·num_envs sub-envs,
member-major, member k's exactly `make(env_id, num_envs, seed=s_k)`'s (envs/base.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from envs.errors import UserError

if TYPE_CHECKING:  # imported where used: `import envs.errors` (every layer's UserError) stays free of torch and gymnasium
    import torch

    from envs.base import TorchVecEnv
    from envs.continual import ContinualArgs

BackendFactory = Callable[..., "TorchVecEnv"]
Seeds = int | tuple[int, ...]  # one seed, or a group's member seeds


def _gymnasium(env_id: str, num_envs: int, seed: Seeds, device: torch.device, training: bool, **kwargs: Any) -> TorchVecEnv:
    from envs.gymnasium_backend import GymnasiumVecEnv

    return GymnasiumVecEnv(env_id, num_envs, seed, device, **kwargs)


def _dmc(env_id: str, num_envs: int, seed: Seeds, device: torch.device, training: bool, **kwargs: Any) -> TorchVecEnv:
    from envs.dmc_backend import DMCVecEnv

    return DMCVecEnv(env_id, num_envs, seed, device, **kwargs)


def _torch(env_id: str, num_envs: int, seed: Seeds, device: torch.device, training: bool, **kwargs: Any) -> TorchVecEnv:
    from envs.torch_classic import make_torch_classic

    return make_torch_classic(env_id, num_envs, seed, device, **kwargs)


def _atari(env_id: str, num_envs: int, seed: Seeds, device: torch.device, training: bool, **kwargs: Any) -> TorchVecEnv:
    from envs.atari_backend import AtariVecEnv

    return AtariVecEnv(env_id, num_envs, seed, device, training=training, **kwargs)


def _envpool(env_id: str, num_envs: int, seed: Seeds, device: torch.device, training: bool, **kwargs: Any) -> TorchVecEnv:
    from envs.envpool_backend import EnvpoolAtariVecEnv

    return EnvpoolAtariVecEnv(env_id, num_envs, seed, device, training=training, **kwargs)


def _warp(env_id: str, num_envs: int, seed: Seeds, device: torch.device, training: bool, **kwargs: Any) -> TorchVecEnv:
    from envs.warp_backend import make_warp_env

    return make_warp_env(env_id, num_envs, seed, device, **kwargs)


# name -> factory
BACKENDS: dict[str, BackendFactory] = {
    "gymnasium": _gymnasium,
    "dmc": _dmc,
    "torch": _torch,
    "atari": _atari,
    "envpool": _envpool,
    "warp": _warp,
}
# id prefix -> backend name, for ids that say which backend they need.
PREFIXES: dict[str, str] = {"dmc:": "dmc", "ALE/": "atari", "torch:": "torch", "warp:": "warp"}


def backend_for(env_id: str) -> str:
    for prefix, backend in PREFIXES.items():
        if env_id.startswith(prefix):
            return backend
    return "gymnasium"


def validate_env_id(env_id: str) -> None:
    """Raise a one-line UserError for an id no backend knows (cheap: no environment is built)."""
    from envs.continual import PREFIX as CONTINUAL_PREFIX
    from envs.continual import validate as validate_continual_id

    if env_id.startswith(CONTINUAL_PREFIX):
        validate_continual_id(env_id)
        return
    backend = backend_for(env_id)
    if backend in ("gymnasium", "atari"):
        from envs.gymnasium_backend import check_env_id

        check_env_id(env_id)
    elif backend == "dmc":
        from envs.dmc_backend import parse_dmc_id

        parse_dmc_id(env_id)
    elif backend == "torch":
        from envs.torch_classic import task_for

        task_for(env_id)
    elif backend == "warp":
        from envs.warp_backend import task_for as warp_task_for

        warp_task_for(env_id)


def make(
    env_id: str,
    num_envs: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    backend: str = "auto",
    training: bool = True,
    continual: ContinualArgs | None = None,
    members: tuple[int, ...] | None = None,
    **env_kwargs: Any,
) -> TorchVecEnv:
    """Build `num_envs` copies of `env_id`, seeded `seed, seed+1, ...`, returning torch tensors on `device`.

    `training=False` asks for an evaluation env (full episodes, raw rewards; see the module docstring).
    `continual` holds the `--continual.*` flags; ids without the `continual:` prefix ignore it.
    `members`: the seeds of a group (then `seed` is ignored): `num_envs` sub-envs per member, member k's seeded from
    `members[k]` as a one-seed env of that seed; `members=(s,)` is `seed=s`."""
    import torch

    from envs.base import member_seeds
    from envs.continual import PREFIX as CONTINUAL_PREFIX
    from envs.continual import ContinualVecEnv

    if num_envs < 1:
        raise UserError(f"num_envs must be at least 1, got {num_envs}")
    seed = member_seeds(members) if members is not None else seed
    if env_id.startswith(CONTINUAL_PREFIX):
        return ContinualVecEnv(env_id, num_envs, seed, torch.device(device), training, continual, backend, **env_kwargs)
    name = backend_for(env_id) if backend == "auto" else backend
    if name not in BACKENDS:
        raise UserError(f"unknown env backend '{name}' — choose one of {sorted(BACKENDS)} or 'auto'")
    env = BACKENDS[name](env_id, num_envs, seed, torch.device(device), training, **env_kwargs)
    return env


__all__ = ["make", "validate_env_id", "BACKENDS"]


def action_clipper(space: Any, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """What an env gets from a policy's actions: clipped to a Box's bounds (a Gaussian policy's sample may leave them; the
    agent keeps the unclipped action), Discrete actions as they are."""
    import torch

    if space.__class__.__name__ != "Box":
        return lambda actions: actions
    low, high = (torch.as_tensor(bound, device=device, dtype=torch.float32) for bound in (space.low, space.high))
    return lambda actions: actions.clamp(low, high)


def check_actions(env: TorchVecEnv, env_id: str, space: type, agent: str, instead: str) -> None:
    """One-line UserError when `env`'s actions are not of the `space` type (gymnasium.spaces.Box or Discrete) `agent`
    needs; `instead` names the agents that take them."""
    if not isinstance(env.single_action_space, space):
        kind = "continuous (Box)" if space.__name__ == "Box" else "discrete"
        raise UserError(f"{agent} needs {kind} actions; {env_id} has {env.single_action_space} — use {instead}")
