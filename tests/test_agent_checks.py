"""Each agent's `check(args)`: every start-up check a run makes before anything exists, callable on its own
(`cleanrl-plus sweep` runs it for every configuration), refusing what a run refuses with the same message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cleanrl_plus.names import AGENTS
from commands.agent_modules import agent_module
from envs.errors import UserError
from plasticity.architecture import NetArgs
from plasticity.least import LEASTArgs
from plasticity.resets import ResetArgs

# one flag combination per agent that the agent's own checks refuse (beyond the run's: ranges, env id, run names)
REFUSED = {
    "td3": (dict(exploration_noise_min=0.3, exploration_noise_max=0.2), "--exploration-noise-min 0.3 is above"),
    "sac_simba": (dict(network="simba", net=NetArgs(norm="layer")), "SimBa blocks already hold LayerNorms"),
    "ddqn": (dict(reset=ResetArgs(method="redo"), net=NetArgs(activation="crelu")), "ReDo recycles dormant units"),
    "ppo": (dict(env_id="CartPole-v1", target_kl=0.01, seeds=(1, 2)), "--target-kl stops an iteration's epochs"),
    "gtr": (dict(env_id="CartPole-v1", least=LEASTArgs(enabled=True)), "LEAST (--least.enabled) does not apply to gtr"),
}


@pytest.mark.parametrize("agent", AGENTS)
def test_check_refuses_what_a_run_refuses_with_the_same_message(agent, tmp_path):
    module = agent_module(agent)
    flags, message = REFUSED[agent]
    args = module.Args(runs_dir=str(tmp_path / "runs"), progress=False, **flags)
    with pytest.raises(UserError, match=re.escape(message)) as checked:
        module.check(args)
    with pytest.raises(UserError) as ran:
        module.main(args)
    assert str(ran.value) == str(checked.value)
    assert not Path(tmp_path / "runs").exists()


@pytest.mark.parametrize("agent", AGENTS)
def test_check_makes_the_runs_own_checks_too_and_passes_the_defaults_creating_nothing(agent, tmp_path):
    module = agent_module(agent)
    with pytest.raises(UserError, match="repeats a seed"):
        module.check(module.Args(seeds=(3, 3)))
    with pytest.raises(UserError, match="Hoper-v5"):
        module.check(module.Args(env_id="Hoper-v5"))
    module.check(module.Args(runs_dir=str(tmp_path / "runs")))
    assert not Path(tmp_path / "runs").exists()
