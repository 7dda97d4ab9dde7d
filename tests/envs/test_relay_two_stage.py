r"""Relay level 4, ``two_stage``: the team splits A + B + C; one number passes between the stages.

The reducer holds A and B, the answerer C; the default channel passes the answerer one integer of
the reducer's utterance, so forwarding A and B does not work and the only useful message is
A + B. Levels 1-3 must play exactly as before: their observations below were captured with the
code before level 4 existed.
"""

import random
import re

import pytest
from pettingzoo.test import api_test, parallel_api_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

import marft_envs
from marft_envs.core.task import Task
from marft_envs.envs.relay import CHANNELS, NO_NUMBER, STAGES, heard_number
from marft_envs.tasks.relay import LEVEL_DEALS, LEVELS, RelayTasks, deal, full_prompt
from marft_envs.tasks.scripted_teams import TEAMS, play, relay_oracle

RELAY = "marft/Relay-v0"
ORACLE, MUTE = TEAMS[RELAY]["oracle"], TEAMS[RELAY]["mute"]


def _task(a=7, b=12, c=5) -> Task:
    values = {"A": a, "B": b, "C": c}
    return Task(task_id="relay/test/two_stage/fixed", prompt=full_prompt("A + B + C", values), answer=str(a + b + c),
                metadata={"expression": "A + B + C", "values": values})


def _env(task=None, **kwargs):
    kwargs = {"level": 4, "profile": "relay_reduce", **kwargs}
    env = marft_envs.make(RELAY, **kwargs)
    env.reset(seed=0, options={"task": task or _task()})
    return env


def forward_values(agent, observation, rng):
    """The level-1-3 holder on level 4: the reducer states its values ("A = 7, B = 12"); the oracle answers."""
    if "must compute" in observation:
        return ", ".join(f"{name} = {value}" for name, value in re.findall(r"\b([A-Z]) = (\d+)", observation))
    return relay_oracle(agent, observation, rng)


# -- the level and the deal ---------------------------------------------------------------------
def test_level_4_is_a_three_term_sum_of_level_1_sized_values():
    assert LEVELS[4] == "two_stage" and LEVEL_DEALS["two_stage"] == "last_to_answerer"
    tasks = RelayTasks(4, "test", seed=0)
    assert tasks.staged and not any(RelayTasks(level).staged for level in (1, 2, 3))
    for i in range(100):
        task = tasks[i]
        values = task.metadata["values"]
        assert task.metadata["expression"] == "A + B + C" and list(values) == ["A", "B", "C"]
        assert all(2 <= v <= 20 for v in values.values()) and int(task.answer) == sum(values.values())
        assert task.prompt == full_prompt("A + B + C", values)
    assert RelayTasks("two_stage", "test", seed=0)[0] == tasks[0]


def test_deal_rules():
    assert deal(["A", "B", "C"], 2, "last_to_answerer") == [["A", "B"], ["C"]]
    assert deal(["A", "B", "C"], 2, "last_to_answerer", answerer=0) == [["C"], ["A", "B"]]
    assert deal(["A", "B", "C"], 3, "last_to_answerer") == [["A"], ["B"], ["C"]]
    assert deal(["A", "B", "C"], 1, "last_to_answerer") == [["A", "B", "C"]]
    # levels 1-3 deal round-robin, as before (the default rule)
    assert all(LEVEL_DEALS[LEVELS[level]] == "round_robin" for level in (1, 2, 3))
    assert deal(["A", "B", "C"], 2) == deal(["A", "B", "C"], 2, "round_robin") == [["A", "C"], ["B"]]
    with pytest.raises(ValueError, match="rule must be one of"):
        deal(["A"], 2, "dealer_choice")
    with pytest.raises(ValueError, match="answerer must index"):
        deal(["A"], 2, "last_to_answerer", answerer=2)


@pytest.mark.parametrize("profile", ["relay_reduce", "relay", "relay_anonymous"])
def test_reducer_holds_a_and_b_and_the_answerer_c(profile):
    env = marft_envs.make(RELAY, level=4, profile=profile, split="test")
    reducer, answerer = env.possible_agents
    for i in range(5):
        env.reset(seed=0, options={"task_index": i})
        values = env.unwrapped.task.metadata["values"]
        assert env.infos[reducer]["holds"] == ["A", "B"] and env.infos[answerer]["holds"] == ["C"]
        reducer_obs, answerer_obs = env.observe(reducer)["text"], env.observe(answerer)["text"]
        assert f"A = {values['A']}, B = {values['B']}" in reducer_obs and f"C = {values['C']}" not in reducer_obs
        assert f"C = {values['C']}" in answerer_obs
        assert f"A = {values['A']}" not in answerer_obs and f"B = {values['B']}" not in answerer_obs


def test_views_of_the_reducer_the_answerer_and_the_solo():
    env = _env()
    assert env.observe("reducer_0")["text"] == (
        "You know A = 7, B = 12. Your teammate knows C and must compute A + B + C. Only one number of your "
        "message reaches your teammate: compute A + B and put it in \\boxed{}.")
    env.step("A = 7, B = 12, so \\boxed{19}")
    assert env.observe("answerer_0")["text"] == (
        "You know C = 5. Your teammate knows A and B and tells you the value of A + B.\n\n"
        "reducer_0 (reducer) wrote:\n19\n\n"
        "What is (A + B) + 5? Use the value of A + B from your teammate's number. Put the final answer in \\boxed{}.")
    for profile in ("solo", "solo_two_calls"):
        solo = _env(profile=profile)
        assert solo.observe(solo.possible_agents[0])["text"] == "The values are A = 7, B = 12, C = 5. Compute A + B + C."
        assert all(solo.infos[a]["holds"] == ["A", "B", "C"] for a in solo.possible_agents)


# -- the number channel -------------------------------------------------------------------------
@pytest.mark.parametrize("utterance, number", [
    ("A = 7, B = 12, so \\boxed{19}", "19"),
    ("\\boxed{19} and then 4", "19"),              # the box wins over a later integer
    ("A + B = 19", "19"),                           # no box: the last integer
    ("\\boxed{7 + 12}", "12"),                      # a box that is not an integer: the last integer
    ("It is \\boxed{-3}.", "-3"),
    ("\\boxed{ 019 }", "19"),
    ("Hello.", NO_NUMBER),
    ("", NO_NUMBER),
])
def test_heard_number(utterance, number):
    assert heard_number(utterance) == number


def test_the_answerer_reads_only_the_reducers_number():
    env = _env()
    env.step("A = 7, B = 12, so \\boxed{19}. Rambling about 33 and more.")
    text = env.observe("answerer_0")["text"]
    assert "reducer_0 (reducer) wrote:\n19\n\n" in text
    for said in ("12", "7", "33", "A = 7", "Rambling", "so"):
        assert said not in text, said
    env = _env()
    env.step("I will not say.")
    text = env.observe("answerer_0")["text"]
    assert f"reducer_0 (reducer) wrote:\n{NO_NUMBER}\n\n" in text


def test_the_text_channel_passes_the_message_and_the_views_say_message():
    env = _env(channel="text")
    assert "Only one number" not in env.observe("reducer_0")["text"]
    assert env.observe("reducer_0")["text"].endswith("Compute A + B and put it in \\boxed{}.")
    env.step("A = 7, B = 12, so \\boxed{19}")
    text = env.observe("answerer_0")["text"]
    assert "wrote:\nA = 7, B = 12, so \\boxed{19}\n\n" in text
    assert text.endswith("Use the value of A + B from your teammate's message. Put the final answer in \\boxed{}.")


def test_earlier_rounds_reach_the_answerer_through_the_channel_too():
    env = _env(dependency="full", horizon=2)  # history "all": every agent's earlier output is shown
    env.step("A = 7, B = 12, so \\boxed{19}")
    env.step("\\boxed{23}")
    text = env.observe("answerer_0")["text"]
    assert "[Attempt 1] reducer_0: 19\n" in text and "[Attempt 1] answerer_0: \\boxed{23}" in text
    assert "12" not in text


def test_the_channel_default_is_per_level_and_a_bad_one_is_refused():
    assert _env().unwrapped.channel == "number" and set(CHANNELS) == {"text", "number"}
    assert all(marft_envs.make(RELAY, level=level).unwrapped.channel == "text" for level in (1, 2, 3))
    with pytest.raises(ValueError, match="channel must be one of") as error:
        marft_envs.make(RELAY, level=4, channel="voice")
    assert "\n" not in str(error.value) and "'voice'" in str(error.value)
    with pytest.raises(ValueError, match="two-agent team"):
        marft_envs.make(RELAY, level=4, profile="trio")


def test_the_filled_question_writes_the_reducers_number_in():
    env = _env(question="filled")
    env.step("A = 7, B = 12, so \\boxed{18}")
    assert env.observe("answerer_0")["text"] == (
        "You know C = 5. Your teammate knows A and B and tells you the value of A + B.\n\n"
        "reducer_0 (reducer) wrote:\n18\n\n"
        "Your teammate's number 18 is A + B. What is 18 + 5? Put the final answer in \\boxed{}.")
    env.step("\\boxed{23}")  # right given what it heard, wrong for the team
    assert env.unwrapped.history[-1].outcome.info["stages"] == {"reduce": False, "answer": True}
    env = _env(question="filled")
    env.step("I will not say.")  # no number to write in: the symbolic question
    assert env.observe("answerer_0")["text"].endswith(
        "What is (A + B) + 5? Use the value of A + B from your teammate's number. Put the final answer in \\boxed{}.")
    assert _env().unwrapped.question_form == "symbolic"
    with pytest.raises(ValueError, match="question must be one of") as error:
        marft_envs.make(RELAY, level=4, question="spoken")
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="needs a staged level"):
        marft_envs.make(RELAY, level=1, question="filled")


@pytest.mark.parametrize("question", ["symbolic", "filled"])
def test_the_oracle_team_solves_level_4_whichever_question(question):
    result = play(RELAY, ORACLE, n=60, level=4, split="test", profile="relay_reduce", horizon=1, question=question)
    assert result.accuracy == 1.0, result


# -- stage accuracy in infos --------------------------------------------------------------------
@pytest.mark.parametrize("utterance, correct", [
    ("\\boxed{19}", True), ("A = 7, B = 12, so \\boxed{19}", True), ("A + B = 19", True),
    ("\\boxed{20}", False), ("A = 7, B = 12", False), ("Hello.", False),
])
def test_stage_correct(utterance, correct):
    env = _env(horizon=2)
    assert env.infos["reducer_0"]["stage_correct"] is None  # not spoken yet
    env.step(utterance)
    assert env.infos["reducer_0"]["stage_correct"] is correct
    env.step("\\boxed{0}")  # wrong: a second round, the reducer's last utterance is still round 1's
    assert env.unwrapped.round_index == 1 and env.infos["reducer_0"]["stage_correct"] is correct
    assert "stage_correct" not in env.infos["answerer_0"]
    level1 = marft_envs.make(RELAY, level=1)
    level1.reset(seed=0)
    assert all("stage_correct" not in level1.infos[a] for a in level1.possible_agents)


def test_a_right_stage_and_a_right_sum_solve_the_problem():
    env = _env(horizon=1)
    env.step("\\boxed{19}")
    env.step("19 + 5 = \\boxed{24}")
    assert env.terminations["answerer_0"] and env.rewards["reducer_0"] == 1.0 == env.rewards["answerer_0"]


# -- stages reported per round ------------------------------------------------------------------
def _off_by_one(seat):
    """The oracle team with ``seat``'s boxed number one more than the oracle's."""
    def policy(agent, observation, rng):
        said = relay_oracle(agent, observation, rng)
        return f"\\boxed{{{int(heard_number(said)) + 1}}}" if agent == seat else said
    return policy


off_by_one_answerer = _off_by_one("answerer_0")
"""Passes stage 1 (the oracle reducer) and fails stage 2: the oracle's answer plus one."""
off_by_one_reducer = _off_by_one("reducer_0")
"""Fails stage 1 (passes A + B + 1); the oracle answerer adds C to what it heard: stage 2 passed."""


def _stages_of_play(policy, index, **kwargs):
    """(stages of the last graded round, solved) of test problem ``index`` played by ``policy``."""
    env = marft_envs.make(RELAY, level=4, split="test", horizon=1, **kwargs)
    env.reset(seed=0, options={"task_index": index})
    rng = random.Random(0)
    for agent in env.agent_iter():
        _, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else policy(agent, env.observe(agent)["text"], rng))
    outcome = env.unwrapped.history[-1].outcome
    return outcome.info.get("stages"), outcome.solved


@pytest.mark.parametrize("policy, stages", [
    (ORACLE, {"reduce": True, "answer": True}),
    (off_by_one_answerer, {"reduce": True, "answer": False}),
    (off_by_one_reducer, {"reduce": False, "answer": True}),
    (MUTE, {"reduce": False, "answer": False}),   # "Hello.": no number passes, nothing to add C to
])
@pytest.mark.parametrize("channel", ["number", "text"])
def test_scripted_teams_get_their_stage_flags(policy, stages, channel):
    for index in range(20):
        reported, solved = _stages_of_play(policy, index, channel=channel)
        assert reported == stages and list(reported) == list(STAGES), (index, reported)
        assert solved == (stages["reduce"] and stages["answer"])


@pytest.mark.parametrize("reducer, answerer, stages", [
    ("\\boxed{19}", "\\boxed{24}", {"reduce": True, "answer": True}),
    ("A = 7, B = 12, so \\boxed{19}", "19 + 5 = 24", {"reduce": True, "answer": True}),
    ("\\boxed{19}", "\\boxed{25}", {"reduce": True, "answer": False}),
    ("\\boxed{20}", "\\boxed{25}", {"reduce": False, "answer": True}),    # right given the 20 it heard
    ("\\boxed{24}", "\\boxed{29}", {"reduce": False, "answer": True}),    # A + B + C passed: not stage 1
    ("\\boxed{20}", "\\boxed{24}", {"reduce": False, "answer": False}),   # the answer, but not from what it heard
    ("A = 7, B = 12", "\\boxed{17}", {"reduce": False, "answer": True}),    # heard 12 (the last integer)
    ("Hello.", "\\boxed{5}", {"reduce": False, "answer": False}),
])
def test_stage_flags_of_one_round(reducer, answerer, stages):
    env = _env(horizon=2)
    assert "last_outcome" not in env.infos["answerer_0"]
    env.step(reducer)
    env.step(answerer)
    assert all(env.infos[a]["last_outcome"]["info"]["stages"] == stages for a in env.possible_agents)
    assert env.unwrapped.history[-1].outcome.info["stages"] == stages
    assert env.infos["reducer_0"]["agent_reward"] == float(stages["reduce"])
    assert env.infos["reducer_0"]["stage_correct"] is stages["reduce"]


def test_levels_without_stages_and_solo_profiles_report_none():
    for level in (1, 2, 3, 5):
        env = marft_envs.make(RELAY, level=level, horizon=1)
        env.reset(seed=0, options={"task_index": 0})
        for agent in env.agent_iter():
            _, _, terminated, truncated, _ = env.last()
            env.step(None if terminated or truncated else "\\boxed{3}")
        assert "stages" not in env.unwrapped.history[-1].outcome.info, level
    for profile in ("solo", "solo_two_calls"):
        reported, _ = _stages_of_play(ORACLE, 0, profile=profile)
        assert reported is None, profile


# -- scripted teams -----------------------------------------------------------------------------
@pytest.mark.parametrize("profile", ["relay_reduce", "relay", "solo", "solo_two_calls"])
def test_the_oracle_solves_every_level_4_problem(profile):
    result = play(RELAY, ORACLE, n=60, level=4, split="test", profile=profile, horizon=1)
    assert result.accuracy == 1.0 and result.rounds == 1.0, result


def test_division_of_labour_is_structural():
    kwargs = {"n": 100, "level": 4, "split": "test", "profile": "relay_reduce", "horizon": 1}
    assert play(RELAY, MUTE, **kwargs).accuracy <= 0.05                       # the answerer alone
    assert play(RELAY, forward_values, **kwargs).accuracy <= 0.1               # forwarding A and B fails
    assert play(RELAY, forward_values, channel="text", **kwargs).accuracy == 1.0  # ... but not through text
    assert play(RELAY, ORACLE, channel="text", **kwargs).accuracy == 1.0


def test_the_scripted_reducer_boxes_the_first_stage():
    rng = random.Random(0)
    env = _env()
    assert ORACLE("reducer_0", env.observe("reducer_0")["text"], rng) == "\\boxed{19}"
    assert MUTE("reducer_0", env.observe("reducer_0")["text"], rng) == "Hello."
    env.step("\\boxed{19}")
    assert ORACLE("answerer_0", env.observe("answerer_0")["text"], rng) == "\\boxed{24}"


@pytest.mark.parametrize("profile", ["relay_reduce", "solo", "solo_two_calls"])
def test_level_4_passes_the_pettingzoo_checks(profile):
    api_test(marft_envs.make(RELAY, level=4, profile=profile), num_cycles=12)


def test_level_4_passes_the_parallel_api_check():
    parallel_api_test(turn_based_aec_to_parallel(marft_envs.make(RELAY, level=4, profile="relay_reduce")),
                      num_cycles=8)


# -- levels 1-3 are unchanged -------------------------------------------------------------------
# Captured with the code before level 4 existed (commit 5261fc9): test tasks 0-2 of each level, the
# relay profile, horizon 2; the holder says a long message, the answerer a wrong answer.
LEVELS_1_TO_3 = {  # (level, test task) -> holder, answerer after the holder spoke, holder in round 2, solo
    (1, 0): (
        'You know A = 17. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.',
        'You know B = 4. Your teammate knows A and tells you.\n'
        '\n'
        'holder_0 (holder) wrote:\n'
        'A = 1000, B = 2000, and some rambling af [...]\n'
        '\n'
        "What is A + 4? Use the value of A from your teammate's message. Put the final answer in \\boxed{}.",
        'You know A = 17. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.\n'
        '\n'
        'Earlier attempts:\n'
        '[Attempt 1] \\boxed{0}\n'
        "Feedback: The answer '0' is not correct. Check the work and try again.",
        'The values are A = 17, B = 4. Compute A + B.',
    ),
    (1, 1): (
        'You know A = 8. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.',
        'You know B = 10. Your teammate knows A and tells you.\n'
        '\n'
        'holder_0 (holder) wrote:\n'
        'A = 1000, B = 2000, and some rambling af [...]\n'
        '\n'
        "What is A + 10? Use the value of A from your teammate's message. "
        'Put the final answer in \\boxed{}.',
        'You know A = 8. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.\n'
        '\n'
        'Earlier attempts:\n'
        '[Attempt 1] \\boxed{0}\n'
        "Feedback: The answer '0' is not correct. Check the work and try again.",
        'The values are A = 8, B = 10. Compute A + B.',
    ),
    (1, 2): (
        'You know A = 2. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.',
        'You know B = 3. Your teammate knows A and tells you.\n'
        '\n'
        'holder_0 (holder) wrote:\n'
        'A = 1000, B = 2000, and some rambling af [...]\n'
        '\n'
        "What is A + 3? Use the value of A from your teammate's message. Put the final answer in \\boxed{}.",
        'You know A = 2. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.\n'
        '\n'
        'Earlier attempts:\n'
        '[Attempt 1] \\boxed{0}\n'
        "Feedback: The answer '0' is not correct. Check the work and try again.",
        'The values are A = 2, B = 3. Compute A + B.',
    ),
    (2, 0): (
        'You know A = 31. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.',
        'You know B = 18. Your teammate knows A and tells you.\n'
        '\n'
        'holder_0 (holder) wrote:\n'
        'A = 1000, B = 2000, and some rambling af [...]\n'
        '\n'
        "What is A + 18? Use the value of A from your teammate's message. "
        'Put the final answer in \\boxed{}.',
        'You know A = 31. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.\n'
        '\n'
        'Earlier attempts:\n'
        '[Attempt 1] \\boxed{0}\n'
        "Feedback: The answer '0' is not correct. Check the work and try again.",
        'The values are A = 31, B = 18. Compute A + B.',
    ),
    (2, 1): (
        'You know A = 80. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.',
        'You know B = 11. Your teammate knows A and tells you.\n'
        '\n'
        'holder_0 (holder) wrote:\n'
        'A = 1000, B = 2000, and some rambling af [...]\n'
        '\n'
        "What is A - 11? Use the value of A from your teammate's message. "
        'Put the final answer in \\boxed{}.',
        'You know A = 80. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.\n'
        '\n'
        'Earlier attempts:\n'
        '[Attempt 1] \\boxed{0}\n'
        "Feedback: The answer '0' is not correct. Check the work and try again.",
        'The values are A = 80, B = 11. Compute A - B.',
    ),
    (2, 2): (
        'You know A = 81. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.',
        'You know B = 79. Your teammate knows A and tells you.\n'
        '\n'
        'holder_0 (holder) wrote:\n'
        'A = 1000, B = 2000, and some rambling af [...]\n'
        '\n'
        "What is A + 79? Use the value of A from your teammate's message. "
        'Put the final answer in \\boxed{}.',
        'You know A = 81. Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.\n'
        '\n'
        'Earlier attempts:\n'
        '[Attempt 1] \\boxed{0}\n'
        "Feedback: The answer '0' is not correct. Check the work and try again.",
        'The values are A = 81, B = 79. Compute A + B.',
    ),
    (3, 0): (
        'You know A = 34, C = 38. '
        'Your teammate must compute an answer with it and does not know it. Tell your teammate your values.',
        'You know B = 15. Your teammate knows A, C and tells you.\n'
        '\n'
        'holder_0 (holder) wrote:\n'
        'A = 1000, B = 2000, and some rambling af [...]\n'
        '\n'
        "What is A + 15 - C? Use the value of A, C from your teammate's message. "
        'Put the final answer in \\boxed{}.',
        'You know A = 34, C = 38. '
        'Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.\n'
        '\n'
        'Earlier attempts:\n'
        '[Attempt 1] \\boxed{0}\n'
        "Feedback: The answer '0' is not correct. Check the work and try again.",
        'The values are A = 34, B = 15, C = 38. Compute A + B - C.',
    ),
    (3, 1): (
        'You know A = 17, C = 12. '
        'Your teammate must compute an answer with it and does not know it. Tell your teammate your values.',
        'You know B = 27. Your teammate knows A, C and tells you.\n'
        '\n'
        'holder_0 (holder) wrote:\n'
        'A = 1000, B = 2000, and some rambling af [...]\n'
        '\n'
        "What is A + 27 - C? Use the value of A, C from your teammate's message. "
        'Put the final answer in \\boxed{}.',
        'You know A = 17, C = 12. '
        'Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.\n'
        '\n'
        'Earlier attempts:\n'
        '[Attempt 1] \\boxed{0}\n'
        "Feedback: The answer '0' is not correct. Check the work and try again.",
        'The values are A = 17, B = 27, C = 12. Compute A + B - C.',
    ),
    (3, 2): (
        'You know A = 38, C = 5. '
        'Your teammate must compute an answer with it and does not know it. Tell your teammate your values.',
        'You know B = 6. Your teammate knows A, C and tells you.\n'
        '\n'
        'holder_0 (holder) wrote:\n'
        'A = 1000, B = 2000, and some rambling af [...]\n'
        '\n'
        "What is A + 6 - C? Use the value of A, C from your teammate's message. "
        'Put the final answer in \\boxed{}.',
        'You know A = 38, C = 5. '
        'Your teammate must compute an answer with it and does not know it. '
        'Tell your teammate your values.\n'
        '\n'
        'Earlier attempts:\n'
        '[Attempt 1] \\boxed{0}\n'
        "Feedback: The answer '0' is not correct. Check the work and try again.",
        'The values are A = 38, B = 6, C = 5. Compute A + B - C.',
    ),
}


@pytest.mark.parametrize("level, index", sorted(LEVELS_1_TO_3))
def test_levels_1_to_3_observations_are_unchanged(level, index):
    holder_text, answerer_text, holder_round_2, solo_text = LEVELS_1_TO_3[(level, index)]
    env = marft_envs.make(RELAY, level=level, split="test", horizon=2)
    env.reset(seed=0, options={"task_index": index})
    assert env.observe("holder_0")["text"] == holder_text
    assert env.infos["holder_0"]["holds"] == (["A", "C"] if level == 3 else ["A"])
    assert env.infos["answerer_0"]["holds"] == ["B"]
    env.step("A = 1000, B = 2000, and some rambling after it \\boxed{5}")
    assert env.observe("answerer_0")["text"] == answerer_text
    env.step("\\boxed{0}")
    assert env.observe("holder_0")["text"] == holder_round_2
    solo = marft_envs.make(RELAY, level=level, split="test", profile="solo")
    solo.reset(seed=0, options={"task_index": index})
    assert solo.observe("actor_0")["text"] == solo_text


@pytest.mark.parametrize(("reducer_says", "answer", "stage_reward", "team_reward"), [
    (r"A + B = \boxed{19}", r"\boxed{24}", 1.0, 1.0),
    (r"A + B = \boxed{19}", r"\boxed{23}", 1.0, 0.0),   # right stage, wrong second stage
    (r"\boxed{18}", r"\boxed{24}", 0.0, 1.0),           # the answerer fixed it: the team is paid, not the stage
    ("A = 7, B = 12", r"\boxed{24}", 0.0, 1.0),
])
def test_reducer_is_paid_its_own_stage(reducer_says, answer, stage_reward, team_reward):
    env = _env(horizon=1)
    env.step(reducer_says)
    env.step(answer)
    assert env.rewards["reducer_0"] == env.rewards["answerer_0"] == team_reward
    assert env.infos["reducer_0"]["agent_reward"] == stage_reward
    assert env.infos["answerer_0"]["agent_reward"] == 1.0  # the answerer's format reward (boxed)


def test_level_4_defaults_to_the_reducer_profile_and_other_levels_do_not():
    assert marft_envs.make(RELAY, level=4).possible_agents == ["reducer_0", "answerer_0"]
    assert marft_envs.make(RELAY, level="two_stage", profile="relay").possible_agents == ["holder_0", "answerer_0"]
    for level in (1, 2, 3):
        assert marft_envs.make(RELAY, level=level).possible_agents == ["holder_0", "answerer_0"]
