"""Every applicable remedy on at once, per agent, on a real small task; the catalogue's start-up checks and table."""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cleanrl_plus.checkpoint import load_checkpoint
from envs.errors import UserError
from plasticity import catalogue
from plasticity.architecture import NaPArgs, NetArgs
from plasticity.cchain import CChainArgs
from plasticity.optimizers import OptimArgs
from plasticity.regularizers import RegArgs, WeightClipArgs
from plasticity.resets import ResetArgs

REPO = Path(__file__).resolve().parent.parent

# One --reset.method at a time; CIR's critic torso excludes --net.*; Kron excludes the reset family: these are the only
# applicable remedies a single run leaves out (each in the other configuration, or covered by its own tests).
OTHER_RESETS = {"full reset", "shrink & perturb", "ReDo", "ReGraMa", "plasticity injection", "continual backprop (CBP)"}


def _loss_and_optimiser_remedies(optimiser: str, activation: str) -> dict:
    return dict(
        net=NetArgs(norm="layer", activation=activation),
        nap=NaPArgs(enabled=True),
        reg=RegArgs(l2=1e-4, l2_init=1e-3, parseval=1e-4),
        clip=WeightClipArgs(kappa=3.0),
        cchain=CChainArgs(enabled=True, warmup=20),
        optim=OptimArgs(name=optimiser, trac=True),
        reset=ResetArgs(method="layers", every=25) if optimiser == "adam" else ResetArgs(),
    )


def _td3(runs_dir, remedies):
    from agents.td3 import Args, main
    from plasticity.least import LEASTArgs
    from plasticity.swd import SWDArgs

    return main(
        Args(
            env_id="Pendulum-v1",
            total_timesteps=200,
            learning_starts=100,
            batch_size=32,
            hidden_sizes=(16, 16),
            eval_every=0,
            eval_episodes=1,
            progress=False,
            buffer_size=1_000,
            log_every=100,
            runs_dir=runs_dir,
            swd=SWDArgs(enabled=True),
            least=LEASTArgs(enabled=True),
            **remedies,
        )
    )


def _sac(runs_dir, remedies):
    from agents.sac_simba import Args, main
    from plasticity.least import LEASTArgs
    from plasticity.swd import SWDArgs

    return main(
        Args(
            env_id="Pendulum-v1",
            network="mlp",
            mlp_hidden_sizes=(16, 16),
            total_timesteps=160,
            learning_starts=100,
            batch_size=32,
            eval_every=0,
            eval_episodes=1,
            progress=False,
            buffer_size=1_000,
            log_every=50,
            runs_dir=runs_dir,
            swd=SWDArgs(enabled=True),
            least=LEASTArgs(enabled=True),
            **remedies,
        )
    )


def _ddqn(runs_dir, remedies):
    from agents.ddqn import Args, main
    from plasticity.swd import SWDArgs

    return main(
        Args.defaults_for(
            "CartPole-v1",
            total_timesteps=600,
            learning_starts=100,
            train_frequency=50,
            gradient_steps=8,
            batch_size=32,
            hidden_sizes=(16, 16),
            eval_every=0,
            eval_episodes=1,
            progress=False,
            buffer_size=1_000,
            log_every=100,
            runs_dir=runs_dir,
            swd=SWDArgs(enabled=True),
            **remedies,
        )
    )


def _ppo(agent: str):
    def run(runs_dir, remedies):
        module = __import__(f"agents.{agent}", fromlist=["Args", "main"])
        return module.main(
            module.Args(
                env_id="CartPole-v1",
                total_timesteps=512,
                num_steps=128,
                num_minibatches=4,
                update_epochs=2,
                hidden_sizes=(16, 16),
                eval_every=0,
                eval_episodes=1,
                progress=False,
                log_every=128,
                runs_dir=runs_dir,
                **remedies,
            )
        )

    return run


AGENTS = {
    "td3": (_td3, "fourier"),
    "sac_simba": (_sac, "crelu"),
    "ddqn": (_ddqn, "crelu"),
    "ppo": (_ppo("ppo"), "fourier"),
    "gtr": (_ppo("gtr"), "crelu"),
}
NETWORKS = {
    "td3": ("actor", "critic"),
    "sac_simba": ("actor", "critic"),
    "ddqn": ("critic",),
    "ppo": ("agent",),
    "gtr": ("agent",),
}


def _final_scalars(run_dir: str) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir).Reload()
    return {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}


@pytest.mark.parametrize("optimiser", ["adam", "kron"])
@pytest.mark.parametrize("agent", list(AGENTS))
def test_every_applicable_remedy_at_once_runs_finite_and_each_acts(agent, optimiser, runs_dir):
    run, activation = AGENTS[agent]
    remedies = _loss_and_optimiser_remedies(optimiser, activation)
    from types import SimpleNamespace

    on = catalogue.active(
        SimpleNamespace(
            **remedies,
            swd=SimpleNamespace(enabled=agent in ("td3", "sac_simba", "ddqn")),
            least=SimpleNamespace(enabled=agent in ("td3", "sac_simba")),
        )
    )
    left_out = {"CIR", "CReLU" if activation == "fourier" else "deep Fourier features"} | OTHER_RESETS
    left_out |= {"layer resetting"} if optimiser == "kron" else {"Kron (PSGD)"}
    assert on == {r.name for r in catalogue.REMEDIES if r.applies_to(agent)} - left_out

    result = run(runs_dir, remedies)
    scalars = _final_scalars(result["run_dir"])
    losses = {tag: value for tag, value in scalars.items() if tag.startswith("losses/")}
    assert losses and all(math.isfinite(v) for v in losses.values()), losses
    for remedy in ("l2", "l2_init", "parseval", "cchain", "trac", "nap", "clip"):
        assert scalars.get(f"remedies/{remedy}_events", 0) > 0, f"{remedy} never acted"
    assert any(tag.endswith("_trac_scale") for tag in scalars) and any(tag.endswith("_cchain_coef") for tag in scalars)
    if optimiser == "adam":
        assert scalars["plasticity/resets"] >= 1  # layer resetting fired
    state = load_checkpoint(Path(result["run_dir"]) / "checkpoint.pt")
    weights = {k: v for name in NETWORKS[agent] for k, v in state[name].items()}
    assert any(".norm." in key for key in weights)  # LayerNorm reached the torso
    assert all(torch.isfinite(v).all() for v in weights.values() if v.is_floating_point())


def _scale_flags(agent: str) -> dict:
    from cleanrl_plus.distributional import CriticArgs

    flags = dict(
        num_envs=2,
        n_step=3,
        critic=CriticArgs(distributional=True, num_atoms=21, v_min=-200.0, v_max=10.0),
        normalize_obs=True,
        weight_decay=0.1,
    )
    return flags | (dict(exploration_noise_min=0.05, exploration_noise_max=0.4) if agent == "td3" else {})


@pytest.mark.parametrize("agent", ["td3", "sac_simba"])
@pytest.mark.parametrize(
    "extra",
    [
        dict(),  # with every loss and optimiser remedy, layer resetting, SWD and LEAST (as above)
        dict(
            reset=ResetArgs(method="inject", every=30, networks="critic")
        ),  # the C51 head is the injected one (a reset method alone)
        dict(reset=ResetArgs(method="redo", every=20)),
        dict(reset=ResetArgs(method="cbp")),
        dict(cir="torso"),  # CIR's torso with a C51 head and its convex target as a mixture of the twins' distributions
    ],
    ids=["loss-optimiser-layers", "inject", "redo", "cbp", "cir"],
)
def test_scale_flags_run_with_the_remedies(agent, extra, runs_dir):
    """TD3's and SAC's many-env flags (C51 critics, n-step returns, normalised observations; TD3's per-env noise) leave
    no remedy inapplicable: each acts."""
    from plasticity.cir import CIRArgs

    remedies = extra or _loss_and_optimiser_remedies("adam", "fourier")
    if extra.get("cir"):
        remedies = dict(cir=CIRArgs(critic=True, width=16, convex_lambda=0.3))
    result = (_td3 if agent == "td3" else _sac)(runs_dir, remedies | _scale_flags(agent))
    scalars = _final_scalars(result["run_dir"])
    assert all(math.isfinite(v) for tag, v in scalars.items() if tag.startswith("losses/"))
    assert -200.0 <= scalars["losses/qf1_values"] <= 10.0  # an expected value on the C51 support
    assert "least/stop_rate" in scalars and "replay/sample_age" in scalars
    if not extra:
        for remedy in ("l2", "l2_init", "parseval", "cchain", "trac", "nap", "clip"):
            assert scalars.get(f"remedies/{remedy}_events", 0) > 0, f"{remedy} never acted"
    if not extra or extra.get("reset", ResetArgs()).method in ("inject", "redo"):
        assert scalars["plasticity/resets"] >= 1


def test_remedy_state_survives_a_resume_bit_identically(runs_dir):
    from agents.td3 import Args, main

    remedies = _loss_and_optimiser_remedies("adam", "fourier")
    common = dict(
        env_id="Pendulum-v1",
        learning_starts=100,
        batch_size=32,
        hidden_sizes=(16, 16),
        eval_every=0,
        eval_episodes=1,
        progress=False,
        buffer_size=1_000,
        runs_dir=runs_dir,
        **remedies,
    )
    straight = main(Args(total_timesteps=300, exp_name="straight", **common))
    half = main(Args(total_timesteps=180, exp_name="split", **common))
    resumed = main(Args(total_timesteps=300, exp_name="split", resume=half["run_dir"], **common))
    a = load_checkpoint(Path(straight["run_dir"]) / "checkpoint.pt")
    b = load_checkpoint(Path(resumed["run_dir"]) / "checkpoint.pt")
    for name in ("actor", "critic"):
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}.{key} differs after resume"
    trac_a, trac_b = (state["plasticity"]["remedies"]["networks"]["critic"]["trac"] for state in (a, b))
    assert torch.equal(trac_a["s"], trac_b["s"]) and trac_a["steps"] == trac_b["steps"] > 0
    churn_a, churn_b = (state["plasticity"]["remedies"]["networks"]["critic"]["churn"] for state in (a, b))
    for key in ("coef", "points", "scale_values", "churn_values"):  # C-CHAIN's schedule went on where it stopped
        assert torch.equal(churn_a[key], churn_b[key]), key
    assert float(churn_a["coef"]) != 50.0  # past the warm-up: rescaled from the recorded values


@pytest.mark.parametrize(
    "agent, flags, message",
    [
        ("ppo", ["--least.enabled"], "LEAST needs a Q function"),
        ("gtr", ["--reset.method", "inject"], "plasticity injection"),
        ("td3", ["--net.activation", "crelu", "--reset.method", "redo"], "ReDo recycles dormant units one-to-one"),
        ("ddqn", ["--optim.name", "kron", "--reset.method", "full"], "Kron does not keep"),
        ("td3", ["--cir.critic", "--net.norm", "layer"], "CIR's critic torso"),
        ("sac_simba", ["--net.norm", "layer"], "SimBa blocks already hold LayerNorms"),
        (
            "ppo",
            ["--env-id", "continual:cartpole-offset-small", "--continual.oracle", "--reset.method", "inject"],
            "--continual.oracle gives a fresh",
        ),
        ("ppo", ["--reset.method", "redo"], "with tanh units has none — add --net.activation relu"),
        ("ppo", ["--env-id", "ALE/Breakout-v5", "--reset.method", "cbp"], "Nature-CNN units feed two heads"),
        ("ppo", ["--env-id", "continual:cartpole-offset-small", "--continual.random-steps-per-task", "10"], "is on-policy"),
    ],
)
def test_an_inapplicable_remedy_is_a_one_line_error_before_any_run_directory(agent, flags, message, tmp_path):
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, str(REPO / "agents" / f"{agent}.py"), "--runs-dir", str(runs), "--total-timesteps", "10", *flags],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not runs.exists() or not any(runs.iterdir())
    assert "logging to" not in proc.stdout  # refused before prepare_run, not cleaned up after it


def test_catalogue_check_refuses_exactly_the_declared_inapplicable_agents():
    for remedy in catalogue.REMEDIES:
        probe = _args_with(remedy)
        assert catalogue.active(probe) == {remedy.name}, remedy.name  # is_on reads the flag the table names
        for agent in catalogue.AGENTS:
            if remedy.applies_to(agent):
                catalogue.check(agent, probe)
            else:
                with pytest.raises(UserError, match=re.escape(remedy.not_for[agent])):
                    catalogue.check(agent, probe)


def _args_with(remedy):
    """A namespace on which `remedy` (and nothing else) is on, built from its first flag."""
    from types import SimpleNamespace

    tokens = remedy.flags.split()
    path = tokens[0].lstrip("-").replace("-", "_").split(".")
    value = tokens[1] if len(tokens) > 1 and not tokens[1].startswith("-") else True
    if value in ("λ", "κ"):
        value = 1.0
    root = SimpleNamespace()
    node = root
    for part in path[:-1]:
        setattr(node, part, SimpleNamespace())
        node = getattr(node, part)
    setattr(node, path[-1], value)
    return root


def test_remedies_command_prints_the_matrix_and_the_docs_table_matches_it():
    proc = subprocess.run(
        [sys.executable, "-m", "commands.cli", "remedies"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == catalogue.matrix()
    for remedy in catalogue.REMEDIES:
        assert f"| {remedy.name} |" in proc.stdout
    assert len(catalogue.REMEDIES) >= 19
    docs = (REPO / "docs" / "remedies" / "index.md").read_text()
    assert catalogue.matrix() in docs, (
        "docs/remedies/index.md is out of date: paste `cleanrl-plus remedies` between its markers"
    )


def benchmark_plan(plan: str) -> tuple[dict, type]:
    """A plan of benchmarks/ and its agent's Args."""
    import tomllib

    spec = tomllib.loads((REPO / "benchmarks" / plan).read_text())
    (agent,) = spec["agent"]
    return spec, __import__(f"agents.{agent}", fromlist=["Args"]).Args


def configuration_args(spec: dict, args_type: type, name: str):
    """A plan configuration's Args: the plan's flags, then the configuration's (a typo in a flag fails here)."""
    import shlex

    import tyro

    return tyro.cli(args_type, args=shlex.split(spec["flags"] + " " + spec["config"][name]))


@pytest.mark.parametrize("plan", ["remedies.toml", "remedies-ddqn.toml"])
def test_benchmark_plans_parse_and_every_configuration_is_applicable(plan):
    spec, args_type = benchmark_plan(plan)
    (agent,) = spec["agent"]
    names = {r.name for r in catalogue.REMEDIES if r.applies_to(agent)}
    covered = set()
    for name in spec["config"]:
        args = configuration_args(spec, args_type, name)
        catalogue.check(agent, args)
        covered |= catalogue.active(args)
    assert covered == names - {"CIR"}, names - covered  # every applicable remedy has a configuration
    assert len(spec["seeds"]) >= 5 and {"baseline", "oracle"} <= set(spec["config"])


@pytest.mark.parametrize("plan", ["remedies.toml", "remedies-permute.toml"])
def test_the_ppo_plans_reset_as_often_as_their_first_reading(plan):
    """Full and layer resets count environment steps per member (plasticity/resets.py ENV_STEP_METHODS): over the
    plans' 3 tasks × 40k steps the intervals give the 3 full and 9 layer resets that 3,000 and 1,000 updates gave
    (20 updates per 256 steps) — an interval written in updates would reset 40 and 120 times."""
    spec, args_type = benchmark_plan(plan)
    resets = {}
    for name in ("full-reset", "layer-reset"):
        args = configuration_args(spec, args_type, name)
        steps = args.continual.steps_per_task * args.continual.num_tasks
        resets[name] = steps // args.reset.every
    assert resets == {"full-reset": 3, "layer-reset": 9}
