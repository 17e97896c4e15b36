"""Runs give the same numbers, bit for bit (CPU), as when these digests were recorded.

Written before the agents' wiring was redesigned (one description per network, resume inside the session) and
kept: a refactor that moves code must not change what a run computes. Each case is a small real run of one agent
with remedies on; its digest covers every TensorBoard scalar (tag, step, value), the summary's evaluation history
and the outputs of the evaluation policy that `cleanrl-plus eval` rebuilds from the checkpoint, on fixed
observations. None of these depend on how the checkpoint names its tensors.

A digest changes only when a run's numbers do: record new ones (`CLEANRL_PLUS_RECORD_DIGESTS=1 pytest
tests/test_same_numbers.py -s` prints them) only for a change that is meant to change results, and say so in the
commit. torch's kernels may round differently in another version, hence the skip.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import struct
from pathlib import Path

import pytest
import torch
from conftest import cpu_fingerprint, digests_for_this_cpu, rounding_fingerprint

DIGEST_TORCH = "2.13.0+cpu"
RECORD = os.environ.get("CLEANRL_PLUS_RECORD_DIGESTS") == "1"


def _remedies(activation: str, reset: dict | None = None) -> dict:
    from plasticity.architecture import NaPArgs, NetArgs
    from plasticity.cchain import CChainArgs
    from plasticity.optimizers import OptimArgs
    from plasticity.regularizers import RegArgs, WeightClipArgs
    from plasticity.resets import ResetArgs

    return dict(
        net=NetArgs(norm="layer", activation=activation),
        nap=NaPArgs(enabled=True),
        reg=RegArgs(l2=1e-4, l2_init=1e-3, parseval=1e-4),
        clip=WeightClipArgs(kappa=3.0),
        cchain=CChainArgs(enabled=True, warmup=20),
        optim=OptimArgs(trac=True),
        reset=ResetArgs(**(reset or dict(method="layers", every=25))),
    )


def _diagnostics(every: int = 20) -> dict:
    from plasticity.diagnostics import DiagnosticsArgs

    return dict(
        diagnostics=DiagnosticsArgs(
            every=every, probe_size=64, ntk_every=2 * every, ntk_batch=8, churn_every=every // 2 + 1, churn_batch=32
        )
    )


def _relu() -> dict:  # PPO's ReLU networks (recorded as --activation relu, now --net.activation relu: one flag)
    from plasticity.architecture import NetArgs

    return dict(net=NetArgs(activation="relu"))


def _reset(**kwargs) -> dict:
    from plasticity.resets import ResetArgs

    return dict(reset=ResetArgs(**kwargs))


def _least() -> dict:
    from plasticity.least import LEASTArgs

    return dict(least=LEASTArgs(enabled=True, start=0.0, min_history=1))


def _swd() -> dict:
    from plasticity.swd import SWDArgs

    return dict(swd=SWDArgs(enabled=True))


def _c51(v_min: float = -200.0, v_max: float = 10.0) -> dict:
    from cleanrl_plus.distributional import CriticArgs

    return dict(critic=CriticArgs(distributional=True, num_atoms=21, v_min=v_min, v_max=v_max))


def _continual(**kwargs) -> dict:
    from envs.continual import ContinualArgs

    return dict(continual=ContinualArgs(**kwargs))


_TD3 = dict(
    env_id="Pendulum-v1", total_timesteps=300, learning_starts=100, batch_size=32, hidden_sizes=(16, 16), buffer_size=1_000
)
_SAC = dict(
    env_id="Pendulum-v1",
    total_timesteps=260,
    learning_starts=100,
    batch_size=32,
    actor_width=16,
    critic_width=16,
    critic_blocks=1,
    mlp_hidden_sizes=(16, 16),
    buffer_size=1_000,
)
_DDQN = dict(
    total_timesteps=700,
    learning_starts=100,
    train_frequency=50,
    gradient_steps=8,
    batch_size=32,
    hidden_sizes=(16, 16),
    buffer_size=1_000,
)
_PPO = dict(
    env_id="CartPole-v1", total_timesteps=768, num_steps=128, num_minibatches=4, update_epochs=2, hidden_sizes=(16, 16)
)

# name → (agent, flags, env id for Args.defaults_for or None)
CASES: dict[str, tuple[str, dict]] = {
    "td3-remedies": ("td3", _TD3 | _remedies("fourier") | _swd() | _least() | _diagnostics() | dict(normalize_obs=True)),
    "td3-scale-redo": (
        "td3",
        _TD3
        | dict(
            num_envs=2, n_step=3, normalize_obs=True, weight_decay=0.1, exploration_noise_min=0.05, exploration_noise_max=0.4
        )
        | _c51()
        | _reset(method="redo", every=20)
        | _diagnostics(),
    ),
    "td3-cbp-oracle": (
        "td3",
        _TD3
        | dict(env_id="continual:obs-offset:Pendulum-v1", total_timesteps=400)
        | _continual(steps_per_task=200, num_tasks=2, oracle=True)
        | _reset(method="cbp", cbp_maturity=20, cbp_replacement_rate=0.05),
    ),
    "td3-inject-cir": ("td3", _TD3 | dict(cir=None) | _reset(method="inject", every=60)),
    "sac-mlp-remedies": (
        "sac_simba",
        _SAC | dict(network="mlp", clipped_double_q="on") | _remedies("crelu") | _swd() | _least() | _diagnostics(),
    ),
    "sac-simba-cbp": ("sac_simba", _SAC | _reset(method="cbp", cbp_maturity=20, cbp_replacement_rate=0.05) | _diagnostics()),
    "sac-c51-inject": (
        "sac_simba",
        _SAC | dict(network="mlp", num_envs=2, n_step=2) | _c51() | _reset(method="inject", every=40, networks="critic"),
    ),
    "sac-regrama-oracle": (
        "sac_simba",
        _SAC
        | dict(env_id="continual:obs-offset:Pendulum-v1", total_timesteps=400, network="mlp")
        | _reset(method="regrama", every=30)
        | _continual(steps_per_task=200, num_tasks=2, oracle=True),
    ),
    "ddqn-remedies": ("ddqn", _DDQN | dict(env_id="CartPole-v1") | _remedies("crelu") | _swd() | _diagnostics(8)),
    "ddqn-minatar-redo": (
        "ddqn",
        _DDQN | dict(env_id="MinAtar/Breakout-v1", total_timesteps=400) | _reset(method="redo", every=8) | _diagnostics(8),
    ),
    "ddqn-oracle-sp": (
        "ddqn",
        _DDQN
        | dict(env_id="continual:obs-offset:CartPole-v1", total_timesteps=800)
        | _continual(steps_per_task=400, num_tasks=2, oracle=True)
        | _reset(method="shrink-perturb", every=16),
    ),
    "ppo-remedies": ("ppo", _PPO | _remedies("fourier") | _diagnostics(8)),
    "ppo-continuous-redo": (
        "ppo",
        _PPO | dict(env_id="Pendulum-v1", total_timesteps=512) | _relu() | _reset(method="redo", every=8) | _diagnostics(8),
    ),
    "ppo-oracle-cbp": (
        "ppo",
        _PPO
        | dict(env_id="continual:obs-offset:CartPole-v1", total_timesteps=1024)
        | _relu()
        | _continual(steps_per_task=512, num_tasks=2, oracle=True)
        | _reset(method="cbp", cbp_maturity=10, cbp_replacement_rate=0.05),
    ),
    "ppo-atari-regrama": (
        "ppo",
        dict(env_id="ALE/Breakout-v5", total_timesteps=256, num_envs=2, num_steps=64, num_minibatches=2, update_epochs=1)
        | _reset(method="regrama", every=2)
        | _diagnostics(2),
    ),
    "gtr-remedies": ("gtr", _PPO | _remedies("crelu", dict(method="full", every=4)) | _diagnostics(8)),
}
_COMMON = dict(eval_every=256, eval_episodes=2, log_every=32, progress=False)

# sha256 prefixes recorded at 03c5bcc, before the wiring redesign (issue #26); re-recorded for issue #27 (remedies as their
# authors run them) where a remedy changed (the five *-remedies cases and the two ReGraMa cases), and for issue #30 (every
# member draws from its own generators through batched layers: 13 of 16 changed), and for issue #36 on the AuthenticAMD box
# (NaP leaves the heads free, full and layer resets count environment steps, ReGraMa is the official code's: the five
# *-remedies cases and the two ReGraMa cases; the other two tables still hold these seven from before #36).
# Kept per CPU (tests/conftest.py cpu_fingerprint: other CPUs round differently), under the machine's rounding fingerprint,
# "vendor capability" or the vendor alone. "AuthenticAMD": the 2-core AMD EPYC box where CI has run them;
# "GenuineIntel AVX512": a 2-core Xeon at a7952b8, the same code as the AMD table's; "rounding edbab6e58151": a 2-core
# AMD EPYC with AVX2 only at f721952 (the same code), where 4 of 16 cases round apart from the first AMD box (below).
# A CPU with no table skips; record one (CLEANRL_PLUS_RECORD_DIGESTS=1) at a commit whose numbers another table vouches
# for. A case whose numbers changed after a table was recorded holds None there: it skips on that box until recorded.
# The AuthenticAMD table's five #47 cases were recorded at 6e68f7d (rounding d0e47618f6ca), four equal to the AVX2 box's.
DIGESTS_BY_CPU: dict[str, dict[str, str | None]] = {
    "AuthenticAMD": {
        "td3-remedies": "1fd8a22e053c3fe2",
        "td3-scale-redo": "807bedd6ecc4e15a",
        "td3-cbp-oracle": "62b706d9a05f2c1c",  # changed by #47; recorded at 6e68f7d
        "td3-inject-cir": "d942517f44ed916d",
        "sac-mlp-remedies": "f2ea04265af6c564",
        "sac-simba-cbp": "b8276433483a57c3",
        "sac-c51-inject": "8b0e704d8de91628",
        "sac-regrama-oracle": "b61309b46c4a1865",  # changed by #47; recorded at 6e68f7d
        "ddqn-remedies": "7fbbd5dce9b72f4b",
        "ddqn-minatar-redo": "84560073cf838db0",
        "ddqn-oracle-sp": "ec065e5b011bdc7c",
        "ppo-remedies": "93abeea035c590de",  # changed by #47; recorded at 6e68f7d
        "ppo-continuous-redo": "e50184f6ce8e7c4d",
        "ppo-oracle-cbp": "f0546b7e2126b44a",  # changed by #47; recorded at 6e68f7d
        "ppo-atari-regrama": "25ee6623a23204a1",
        "gtr-remedies": "0578b3c24bdc70e0",  # changed by #47; recorded at 6e68f7d
    },
    "GenuineIntel AVX512": {
        "td3-remedies": None,  # changed by #36; not recorded on this box since
        "td3-scale-redo": "e877a3854eda4de4",
        "td3-cbp-oracle": None,  # changed by #47; not recorded on this box since
        "td3-inject-cir": "bdc9ed93c66d549f",
        "sac-mlp-remedies": None,  # changed by #36; not recorded on this box since
        "sac-simba-cbp": "7c2eb276bcd6fb34",
        "sac-c51-inject": "d55d6a1977b4f6d9",
        "sac-regrama-oracle": None,  # changed by #47; not recorded on this box since
        "ddqn-remedies": None,  # changed by #36; not recorded on this box since
        "ddqn-minatar-redo": "6808a8cd91cd3999",
        "ddqn-oracle-sp": "978d7643929d55d9",
        "ppo-remedies": None,  # changed by #47; not recorded on this box since
        "ppo-continuous-redo": "685f8154b586d284",
        "ppo-oracle-cbp": None,  # changed by #47; not recorded on this box since
        "ppo-atari-regrama": None,  # changed by #36; not recorded on this box since
        "gtr-remedies": None,  # changed by #47; not recorded on this box since
    },
}

# the AVX2-only AMD box rounds as the first AMD box in 12 cases and apart in td3-scale-redo, sac-c51-inject, ppo-atari-regrama
# and (before #47) td3-cbp-oracle; it is the box where #47's changed cases were recorded
DIGESTS_BY_CPU["rounding edbab6e58151"] = DIGESTS_BY_CPU["AuthenticAMD"] | {
    "td3-scale-redo": "6bcdceb40f5cedca",
    "sac-c51-inject": "8a7b511a706bfb50",
    "ppo-atari-regrama": "c3ce7dba95daa744",  # rounds apart here (recorded at 14f03dd)
    # changed by #47 (the level switch, C-CHAIN's PPO details), recorded here at 14f03dd
    "td3-cbp-oracle": "e4cb69efbf8be5a0",
    "sac-regrama-oracle": "b61309b46c4a1865",
    "ppo-remedies": "93abeea035c590de",
    "ppo-oracle-cbp": "f0546b7e2126b44a",
    "gtr-remedies": "0578b3c24bdc70e0",
}

DIGESTS = digests_for_this_cpu(DIGESTS_BY_CPU)


def _args(agent: str, flags: dict, runs_dir: str):
    module = importlib.import_module(f"agents.{agent}")
    flags = dict(flags)
    if flags.pop("cir", 0) is None:
        from plasticity.cir import CIRArgs

        flags["cir"] = CIRArgs(critic=True, width=16, convex_lambda=0.3)
    env_id = flags.pop("env_id")
    return module, module.Args.defaults_for(env_id, **(_COMMON | flags | dict(runs_dir=runs_dir)))


def _scalars_digest(run_dir: str, digest) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0}).Reload()
    for tag in sorted(events.Tags()["scalars"]):
        if tag in ("charts/SPS",):  # wall-clock
            continue
        for event in events.Scalars(tag):
            digest.update(tag.encode() + struct.pack("<qf", event.step, event.value))
    return sum(len(events.Scalars(tag)) for tag in events.Tags()["scalars"])


def _policy_digest(module, args, run_dir: str, digest) -> None:
    from cleanrl_plus.checkpoint import load_checkpoint
    from cleanrl_plus.evaluator import Evaluator

    evaluator = Evaluator(args.env_id, 4, 123, torch.device("cpu"), continual=args.continual)
    state = load_checkpoint(Path(run_dir) / "checkpoint.pt")
    policy = module.load_policy(args, evaluator.env, state, torch.device("cpu"))
    obs = evaluator.env.reset(seed=123)
    with torch.no_grad():
        actions = policy(obs, evaluator.members_rng())  # (members, E, ...) observations and their generators
    evaluator.close()
    digest.update(actions.detach().float().numpy().tobytes() if actions.is_floating_point() else actions.numpy().tobytes())


@pytest.mark.skipif(torch.__version__ != DIGEST_TORCH, reason=f"digests recorded with torch {DIGEST_TORCH}")
@pytest.mark.skipif(
    DIGESTS is None and not RECORD, reason=f"no digests recorded for this machine ({', '.join(cpu_fingerprint()[:2])})"
)
@pytest.mark.parametrize("name", list(CASES))
def test_a_run_gives_the_numbers_it_gave_when_recorded(name, runs_dir):
    agent, flags = CASES[name]
    module, args = _args(agent, flags, runs_dir)
    result = module.main(args)
    digest = hashlib.sha256()
    assert _scalars_digest(result["run_dir"], digest) > 50  # a digest of a few points would miss what changed
    summary = json.loads((Path(result["run_dir"]) / "summary.json").read_text())
    digest.update(json.dumps([summary["eval_history"], summary.get("tasks"), summary["num_updates"]]).encode())
    if args.reset.method != "inject":  # load_policy did not rebuild an injected head when these were recorded
        _policy_digest(module, args, result["run_dir"], digest)
    if RECORD:
        print(f'\n    "{name}": "{digest.hexdigest()[:16]}",')
        return
    if DIGESTS[name] is None:
        pytest.skip(f"{name}: its numbers changed since this machine's table was recorded (CLEANRL_PLUS_RECORD_DIGESTS=1)")
    assert digest.hexdigest()[:16] == DIGESTS[name], f"{name}: the run's numbers changed"


def test_the_table_of_this_machine_is_found_by_its_most_specific_key():
    """A table under this machine's rounding fingerprint wins over one under its vendor and capability, which wins over
    one under its vendor alone (a table recorded on another box of the same vendor rounds apart in places)."""
    vendor = cpu_fingerprint()[-1]
    rounding, vendor_capability = f"rounding {rounding_fingerprint()}", f"{vendor} {torch.backends.cpu.get_cpu_capability()}"
    tables = {vendor: {"case": "vendor"}, vendor_capability: {"case": "capability"}, rounding: {"case": "rounding"}}
    assert digests_for_this_cpu(tables) == {"case": "rounding"}
    del tables[rounding]
    assert digests_for_this_cpu(tables) == {"case": "capability"}
    del tables[vendor_capability]
    assert digests_for_this_cpu(tables) == {"case": "vendor"}
    assert digests_for_this_cpu({"rounding 000000000000": {}, "OtherVendor AVX2": {}}) is None


def _fingerprint_in_a_new_process(threads: int, capability: str = "") -> str:
    import subprocess
    import sys

    code = f"import sys, torch; torch.set_num_threads({threads}); sys.path.insert(0, 'tests'); import conftest; "
    code += "print(conftest.rounding_fingerprint())"
    env = os.environ | ({"ATEN_CPU_CAPABILITY": capability} if capability else {})
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_rounding_fingerprint_names_the_kernels_not_the_thread_count():
    """The same on one thread and on two (reductions split by threads round apart: the tests run on one), and different
    where torch runs its plain C++ kernels instead of this CPU's vector ones."""
    fingerprint = _fingerprint_in_a_new_process(threads=1)
    assert fingerprint == _fingerprint_in_a_new_process(threads=2)
    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":
        assert fingerprint != _fingerprint_in_a_new_process(threads=1, capability="default")
