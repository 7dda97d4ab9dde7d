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


# -- where PettingZoo's own aec_to_parallel holds (metadata["is_parallelizable"]) ------------------
CYCLING = [
    ("marft/Arithmetic-v0", {"profile": "dual"}), ("marft/Arithmetic-v0", {"profile": "trio", "dependency": "independent"}),
    ("marft/Arithmetic-v0", {"profile": "trio", "dependency": "full"}), ("marft/Relay-v0", {}),
    ("marft/SolveCheck-v0", {}), ("marft/WebShop-v0", {"profile": "shopper"}),
]
"""Every agent acts every round, in profile order."""
SKIPPING = [
    ("marft/WebShop-v0", {"profile": "planner_shopper"}),  # the planner acts in round 0 only
    ("marft/WebShop-v0", {"profile": "shopper_verifier"}),  # the verifier only on a purchase attempt
    ("marft/Arithmetic-v0", {"profile": "orchestrated"}),  # the orchestrator picks who acts
    ("marft/Arithmetic-v0", {"profile": "dual", "dependency": {"dag": [["actor_0", "reasoner_0"]]}}),  # not profile order
]
"""Agents skip rounds or act out of profile order: PettingZoo's conversion cannot cycle them."""
WEB_ACTION = "search[red shirts]"  # a valid WebShop step that buys nothing (the episode goes on)


def _action(env_id: str) -> str:
    return WEB_ACTION if "WebShop" in env_id else "NEXT: actor\nI think 5."


def _pettingzoo_conversion_plays(env_id: str, kwargs: dict) -> bool:
    """Whether PettingZoo's aec_to_parallel, told the env is parallelizable, plays a whole episode."""
    from pettingzoo.utils.conversions import aec_to_parallel_wrapper

    env = marft_envs.make(env_id, **kwargs)
    env.metadata = {**env.metadata, "is_parallelizable": True}  # what PettingZoo's refusal suggests
    par = aec_to_parallel_wrapper(env)
    par.reset(seed=0)
    try:
        while par.agents:
            par.step({a: _action(env_id) for a in par.agents})
    except AssertionError as err:
        assert "expected agent" in str(err), err
        return False
    return True


@pytest.mark.parametrize("env_id,kwargs", CYCLING + SKIPPING, ids=[f"{e}-{sorted(k.items())}" for e, k in CYCLING + SKIPPING])
def test_is_parallelizable_is_true_exactly_where_pettingzoos_conversion_holds(env_id, kwargs) -> None:
    declared = marft_envs.make(env_id, **kwargs).metadata["is_parallelizable"]
    assert declared == _pettingzoo_conversion_plays(env_id, kwargs) == ((env_id, kwargs) in CYCLING)


@pytest.mark.parametrize("env_id,kwargs", SKIPPING, ids=[f"{e}-{sorted(k.items())}" for e, k in SKIPPING])
def test_where_it_does_not_hold_the_error_names_the_dependency_aware_view(env_id, kwargs) -> None:
    from pettingzoo.utils.conversions import aec_to_parallel as pettingzoo_aec_to_parallel

    env = marft_envs.make(env_id, **kwargs)
    with pytest.raises(AssertionError, match="is_parallelizable"):  # refused at once, not mid-episode
        pettingzoo_aec_to_parallel(env)
    with pytest.raises(ValueError) as caught:
        marft_envs.aec_to_parallel(env)
    message = str(caught.value)
    assert "\n" not in message and "DependencyParallelEnv" in message and "every agent act every round" in message
    # ... and that view plays the episode.
    par = marft_envs.DependencyParallelEnv(env)
    par.reset(seed=0)
    while par.agents:
        par.step({a: _action(env_id) for a in par.wave})
    assert env.history


def test_where_it_holds_marft_aec_to_parallel_is_pettingzoos() -> None:
    from pettingzoo.utils.conversions import aec_to_parallel_wrapper

    par = marft_envs.aec_to_parallel(marft_envs.make("marft/Arithmetic-v0", profile="dual"))
    assert isinstance(par, aec_to_parallel_wrapper)


def test_the_flag_follows_a_dependency_set_later() -> None:
    env = marft_envs.make("marft/Arithmetic-v0", profile="dual")
    assert env.metadata["is_parallelizable"]
    env.dependency = marft_envs.Dependency.orchestrated("reasoner")
    assert not env.metadata["is_parallelizable"]
    assert type(env).metadata["is_parallelizable"]  # the class's declaration is untouched


# -- np_random: SuperSuit's frame_skip_v0 draws from env.unwrapped.np_random ------------------------
def test_the_aec_envs_np_random_is_seeded_by_reset_and_separate_from_the_task_order() -> None:
    env = marft_envs.make("marft/Arithmetic-v0", profile="dual")
    assert env.np_random is env.np_random  # one generator before any reset, from OS entropy
    env.reset(seed=5)
    first = env.np_random.integers(1 << 30, size=4).tolist()
    task = env.task.task_id
    env.reset(seed=5)
    assert env.np_random.integers(1 << 30, size=4).tolist() == first
    env.np_random.integers(10, size=100)  # drawing from it ...
    env.reset(seed=5)
    assert env.task.task_id == task  # ... changes no episode
    assert env.np_random.integers(1 << 30, size=4).tolist() == first
    env.reset()  # an unseeded reset leaves it running on, as Gymnasium's does
    assert env.np_random.integers(1 << 30, size=4).tolist() != first
    env.reset(seed=6)
    assert env.np_random.integers(1 << 30, size=4).tolist() != first
    drawn, untouched = (marft_envs.make("marft/Arithmetic-v0", profile="dual") for _ in range(2))
    drawn.reset(seed=5)
    untouched.reset(seed=5)
    assert drawn.np_random.integers(1 << 30, size=4).tolist() == first  # another instance, same seed
    for _ in range(3):  # the task order of unseeded resets is not drawn from it either
        drawn.np_random.integers(10, size=100)
        drawn.reset()
        untouched.reset()
        assert drawn.task.task_id == untouched.task.task_id


def test_the_parallel_view_reads_the_aec_envs_np_random() -> None:
    env = marft_envs.make("marft/Arithmetic-v0", profile="dual")
    par = DependencyParallelEnv(env)
    par.reset(seed=3)
    assert par.np_random is env.np_random


def test_np_random_is_seeded_by_reset_and_separate_from_the_task_order() -> None:
    par = DependencyParallelEnv(marft_envs.make("marft/Arithmetic-v0", profile="dual"))
    par.reset(seed=5)
    first = par.np_random.integers(1 << 30, size=4).tolist()
    obs, _ = par.reset(seed=5)
    assert par.np_random.integers(1 << 30, size=4).tolist() == first
    par.np_random.integers(10, size=100)  # drawing from it ...
    again, _ = par.reset(seed=5)
    assert again == obs  # ... changes no episode
    par.reset(seed=6)
    assert par.np_random.integers(1 << 30, size=4).tolist() != first
    assert DependencyParallelEnv(marft_envs.make("marft/Arithmetic-v0")).np_random is not None  # before any reset


def test_supersuit_frame_skip_runs_on_the_parallel_view() -> None:
    supersuit = pytest.importorskip("supersuit")

    def play(num_frames):
        par = DependencyParallelEnv(marft_envs.make("marft/Arithmetic-v0", profile="dual", horizon=3))
        skipped = supersuit.frame_skip_v0(par, num_frames)
        skipped.reset(seed=0)
        steps = 0
        while skipped.agents:
            skipped.step({a: "I think \\boxed{5}" for a in skipped.agents})
            steps += 1
        return steps, par.aec_env.transcript()

    steps, transcript = play(2)
    assert steps == 3 and transcript.count("grade:") == 3  # one round (two waves) per skipping step
    assert play((1, 3)) == play((1, 3))  # the random skip counts come from the seeded np_random


def test_supersuit_frame_skip_runs_on_pettingzoos_conversion_of_the_aec_env() -> None:
    supersuit = pytest.importorskip("supersuit")

    def play(seed):
        """The rounds each skipping step played."""
        env = marft_envs.make("marft/Arithmetic-v0", profile="dual", horizon=12)
        skipped = supersuit.frame_skip_v0(marft_envs.aec_to_parallel(env), (1, 3))
        skipped.reset(seed=seed)
        rounds = []
        while skipped.agents:
            skipped.step({a: "I think \\boxed{5}" for a in skipped.agents})
            rounds.append(env.transcript().count("grade:") - sum(rounds))
        return rounds

    rounds = play(0)
    assert sum(rounds) == 12 and set(rounds) <= {1, 2, 3}  # 1 to 3 rounds per skipping step
    assert all(play(seed) == play(seed) for seed in range(3))  # the skip counts follow the seed ...
    assert len({tuple(play(seed)) for seed in range(6)}) > 1  # ... and differ between seeds
