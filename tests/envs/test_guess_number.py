"""marft/GuessNumber-v0: a multi-turn task whose later rounds read feedback the first cannot see."""

import pickle

import pytest
from pettingzoo.test import api_test

import marft_envs
from marft_envs.core.task import Task
from marft_envs.envs.guess_number import GuessNumberEnv
from marft_envs.tasks.guess_number import (LEVELS, GuessTasks, binary_search, constant_guess, narrow, parse_guess,
                                           random_guess, rounds_needed)
from marft_envs.testing import check_env

ENV_ID = "marft/GuessNumber-v0"
TASK = Task(task_id="t", prompt="Find the hidden integer from 11 to 17.", answer="13",
            metadata={"low": 11, "high": 17, "hidden": 13})


def _play(env, policy, seed=0, options=None):
    """One episode; returns the agents in the order they acted."""
    env.reset(seed=seed, options=options)
    acted = []
    for agent in env.agent_iter():
        obs, _, terminated, truncated, info = env.last()
        if not (terminated or truncated):
            acted.append(agent)
        env.step(None if terminated or truncated else policy(agent, obs["text"], info))
    return acted


def _success(policy, level=1, n=60, **kwargs):
    env = marft_envs.make(ENV_ID, level=level, **kwargs)
    wins = 0
    for i in range(n):
        _play(env, policy, seed=i, options={"task_index": i})
        wins += env.unwrapped.history[-1].outcome.solved
    return wins / n


@pytest.mark.parametrize("kwargs", [{}, {"profile": "solo"}, {"dependency": "chain", "level": 2},
                                    {"dependency": "independent"}, {"feedback": "interval", "level": 3}])
def test_meets_the_env_contract(kwargs):
    assert ENV_ID in marft_envs.list_envs()
    results = check_env(ENV_ID, **kwargs)
    assert results["splits"] == "passed" and results["dependency"] == "passed"
    api_test(marft_envs.make(ENV_ID, **kwargs), num_cycles=10)


def test_tasks_are_pure_and_the_splits_share_no_range():
    for level in LEVELS:
        a, b = GuessTasks(level, "train", seed=3), GuessTasks(level, "train", seed=3)
        assert [a[i] for i in range(20)] == [b[i] for i in range(20)]
        tasks = [a[i] for i in range(500)]
        assert all(t.metadata["low"] <= t.metadata["hidden"] <= t.metadata["high"] for t in tasks)
        assert {t.metadata["high"] - t.metadata["low"] + 1 for t in tasks} == {a.width}
        test = {GuessTasks(level, "test")[i].prompt for i in range(500)}
        assert test and not test & {t.prompt for t in tasks}
    assert [rounds_needed(w) for w in (7, 15, 31, 8)] == [3, 4, 5, 4]


def test_same_seed_plays_the_same_tasks():
    def ids(seed):
        env = marft_envs.make(ENV_ID)
        out = []
        for _ in range(5):
            env.reset(seed=seed) if not out else env.reset()
            out.append(env.unwrapped.task.task_id)
        return out
    assert ids(7) == ids(7) and ids(7) != ids(8)


@pytest.mark.parametrize("text, guess", [("\\boxed{14}", 14), ("between 11 and 17, so 14", 14),
                                         ("I say \\boxed{x} then 12", 12), ("no idea", None), ("\\boxed{-3}", -3)])
def test_parse_guess(text, guess):
    assert parse_guess(text) == guess


def test_feedback_narrows_and_is_what_the_next_round_shows():
    env = marft_envs.make(ENV_ID)
    env.reset(seed=0, options={"task": TASK})
    guesses = iter(["\\boxed{15}", "\\boxed{11}", "\\boxed{14}"])
    for agent in env.agent_iter():
        _, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else next(guesses))
    outcomes = [r.outcome for r in env.unwrapped.history]
    assert [o.feedback for o in outcomes] == ["15 is too high.", "11 is too low.", "14 is too high."]
    assert [(o.info["possible_before"], o.info["possible_after"]) for o in outcomes] == [(7, 4), (4, 3), (3, 2)]
    assert [o.info["narrowing"] for o in outcomes] == pytest.approx([3 / 7, 1 / 4, 1 / 3])
    assert [list(o.agent_rewards) for o in outcomes] == [["prober_0"], ["prober_0"], ["answerer_0"]]
    assert [sum(o.agent_rewards.values()) for o in outcomes] == pytest.approx([3 / 7, 1 / 4, 1 / 3])
    env.reset(seed=0, options={"task": TASK})
    env.step("\\boxed{15}")
    assert env.observe("prober_0")["text"] == ("Find the hidden integer from 11 to 17.\nGuess 1: 15 is too high.\n"
                                               "Guess 2 of 3: give one integer in \\boxed{}.")


def test_interval_feedback_states_what_is_left_and_no_guess_rules_nothing_out():
    env = marft_envs.make(ENV_ID, feedback="interval")
    env.reset(seed=0, options={"task": TASK})
    env.step("\\boxed{15}")
    env.step("hmm")
    outcomes = [r.outcome for r in env.unwrapped.history]
    assert outcomes[0].feedback == "15 is too high, so it is from 11 to 14."
    assert outcomes[1].feedback == "No guess found: give one integer in \\boxed{}."
    assert (outcomes[1].info["possible_after"], outcomes[1].info["narrowing"]) == (4, 0.0)
    assert narrow((11, 14), 20, "too high") == (11, 14)  # a guess outside the possible numbers narrows nothing
    with pytest.raises(ValueError, match="feedback must be one of"):
        GuessNumberEnv(feedback="hot_cold")


def test_a_hit_pays_every_agent_and_ends_the_episode_a_miss_truncates_with_nothing():
    env = marft_envs.make(ENV_ID)
    env.reset(seed=0, options={"task": TASK})
    env.step("\\boxed{13}")
    assert all(env.terminations.values()) and env.rewards == {"prober_0": 1.0, "answerer_0": 1.0}
    assert env.unwrapped.history[-1].outcome.agent_rewards == {"prober_0": 1.0}
    env.reset(seed=0, options={"task": TASK})
    for _ in range(3):
        env.step("\\boxed{12}")
    assert all(env.truncations.values()) and not any(env.terminations.values())
    assert [r.outcome.team_reward for r in env.unwrapped.history] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_the_prober_probes_and_the_answerer_answers_last(level):
    horizon = rounds_needed(GuessTasks(level).width)
    def never(agent, observation, info):  # every range starts at 1 or above: 0 never hits
        return "\\boxed{0}"
    assert _play(marft_envs.make(ENV_ID, level=level), never) == ["prober_0"] * (horizon - 1) + ["answerer_0"]
    solo = marft_envs.make(ENV_ID, level=level, profile="solo", horizon=horizon + 1)
    assert _play(solo, never) == ["actor_0"] * (horizon + 1)


def test_with_a_chain_the_answerer_reads_its_teammates_number_and_makes_the_guess():
    env = marft_envs.make(ENV_ID, dependency="chain")
    env.reset(seed=0, options={"task": TASK})
    env.step("I would try 16 here")
    assert env.observe("answerer_0")["text"].splitlines()[-2] == "Your teammate suggests 16."
    env.step("\\boxed{13}")
    assert env.unwrapped.history[-1].outcome.info["guessed_by"] == "answerer_0" and all(env.terminations.values())


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_binary_search_always_wins_and_feedback_blind_policies_do_not(level):
    assert _success(binary_search, level) == 1.0
    assert _success(binary_search, level, profile="solo") == 1.0
    assert _success(random_guess, level) < 0.5
    assert _success(constant_guess, level) < 0.25


def test_round_zero_is_shared_by_a_range_and_later_observations_recur_with_the_history():
    env = marft_envs.make(ENV_ID)
    seen = []
    for hidden in (15, 16):  # both above 14: the same feedback, the same observations
        env.reset(seed=0, options={"task": Task("t", TASK.prompt, str(hidden), {**TASK.metadata, "hidden": hidden})})
        texts = [env.observe("prober_0")["text"]]
        env.step("\\boxed{14}")
        texts.append(env.observe("prober_0")["text"])
        seen.append(texts)
    assert seen[0] == seen[1]
    env.reset(seed=0, options={"task": TASK})
    env.step("\\boxed{14}")
    assert env.observe("prober_0")["text"] != seen[0][1]  # 13 < 14: other feedback, another observation


def test_the_env_pickles_mid_episode_and_plays_on_alike():
    env = marft_envs.make(ENV_ID)
    env.reset(seed=5)
    env.step("\\boxed{20}")
    twin = pickle.loads(pickle.dumps(env))
    for copy in (env, twin):
        copy.step("\\boxed{21}")
    assert env.unwrapped.transcript() == twin.unwrapped.transcript()
    assert env.observe("answerer_0") == twin.observe("answerer_0")
    assert env.unwrapped.possible == twin.unwrapped.possible
    env.reset()
    twin.reset()
    assert env.unwrapped.task == twin.unwrapped.task  # the task RNG travelled too
