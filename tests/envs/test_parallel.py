"""The D_t-respecting parallel view: waves, parents' outputs, and PettingZoo's parallel API."""

from __future__ import annotations

import pytest
from pettingzoo.test import parallel_api_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

import marft_envs
from marft_envs.core.parallel import DependencyParallelEnv

MARKER = "PARENT-SAYS-417"


@pytest.mark.parametrize("kwargs", [
    {"profile": "dual"}, {"profile": "trio"}, {"profile": "quartet"}, {"profile": "solo"},
    {"profile": "orchestrated"}, {"profile": "trio", "dependency": "independent"},
    {"profile": "quartet", "dependency": {"dag": [["planner_0", "actor_0"], ["reasoner_0", "verifier_0"]]}},
])
def test_parallel_api(kwargs) -> None:
    parallel_api_test(DependencyParallelEnv(marft_envs.make("marft/Arithmetic-v0", **kwargs)),
                      num_cycles=30)


def test_code_env_parallel_api() -> None:
    parallel_api_test(DependencyParallelEnv(marft_envs.make("marft/HumanEval-v0", limit=2,
                                                            profile="coder_reviewer", horizon=2)),
                      num_cycles=6)


def test_child_sees_its_parents_output_this_round() -> None:
    par = DependencyParallelEnv(marft_envs.make("marft/Arithmetic-v0", profile="dual"))
    obs, infos = par.reset(seed=0)
    assert par.wave == ("reasoner_0",) and infos["reasoner_0"]["acts_in_wave"]
    assert not infos["actor_0"]["acts_in_wave"] and MARKER not in obs["actor_0"]["text"]
    obs, rewards, term, trunc, infos = par.step({"reasoner_0": MARKER, "actor_0": "ignored"})
    assert par.wave == ("actor_0",)
    assert MARKER in obs["actor_0"]["text"]  # the actor decides with the reasoner's output
    assert rewards == {"reasoner_0": 0.0, "actor_0": 0.0} and par.agents == ["reasoner_0", "actor_0"]
    # The plain conversion: the actor's action is chosen from its reset observation, without it.
    plain = turn_based_aec_to_parallel(marft_envs.make("marft/Arithmetic-v0", profile="dual"))
    plain_obs, _ = plain.reset(seed=0)
    assert MARKER not in plain_obs["actor_0"]["text"]


def test_independent_agents_form_one_wave_and_layers_follow_the_dag() -> None:
    par = DependencyParallelEnv(marft_envs.make("marft/Arithmetic-v0", profile="trio",
                                                dependency="independent"))
    par.reset(seed=0)
    assert par.wave == ("reasoner_0", "actor_0", "verifier_0")
    dag = {"dag": [["planner_0", "actor_0"], ["reasoner_0", "verifier_0"]]}
    par = DependencyParallelEnv(marft_envs.make("marft/Arithmetic-v0", profile="quartet",
                                                dependency=dag))
    par.reset(seed=0)
    assert par.wave == ("planner_0", "reasoner_0")
    obs, *_ = par.step({"planner_0": MARKER, "reasoner_0": "r"})
    assert par.wave == ("actor_0", "verifier_0")
    assert MARKER in obs["actor_0"]["text"] and MARKER not in obs["verifier_0"]["text"]


def test_same_episode_as_the_aec_env() -> None:
    """Rewards, terminations and transcript equal those of the AEC env fed the same actions."""
    replies = {"reasoner_0": "Let me think: it is 4.", "actor_0": "The answer is \\boxed{4}."}
    aec = marft_envs.make("marft/Arithmetic-v0", profile="dual", horizon=2)
    aec.reset(seed=3)
    aec_rewards = {a: 0.0 for a in aec.possible_agents}
    for agent in aec.agent_iter():
        _, reward, term, trunc, _ = aec.last()
        aec_rewards[agent] += reward
        aec.step(None if term or trunc else replies[agent])
    par = DependencyParallelEnv(marft_envs.make("marft/Arithmetic-v0", profile="dual", horizon=2))
    par.reset(seed=3)
    par_rewards = {a: 0.0 for a in par.possible_agents}
    steps = 0
    while par.agents:
        _, rewards, _, _, _ = par.step(dict(replies))
        for a, r in rewards.items():
            par_rewards[a] += r
        steps += 1
    assert par_rewards == aec_rewards
    assert par.aec_env.transcript() == aec.transcript()
    assert steps == 2 * len(par.aec_env.history)  # one wave per agent in a chain


def test_missing_wave_action_is_named() -> None:
    par = DependencyParallelEnv(marft_envs.make("marft/Arithmetic-v0", profile="dual"))
    par.reset(seed=0)
    with pytest.raises(KeyError, match="reasoner_0"):
        par.step({"actor_0": "x"})
    with pytest.raises(TypeError, match="TextTaskEnv"):
        DependencyParallelEnv(object())
