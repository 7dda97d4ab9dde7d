"""The cooperative envs: Relay (partial observability) and SolveCheck (solver + checker)."""

import random

import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

import marft_envs
from marft_envs.envs.relay import RelayEnv
from marft_envs.envs.solve_check import parse_verdict
from marft_envs.tasks.procedural import split_of
from marft_envs.tasks.relay import MIXED_SIZES, TASK_REVISIONS, LEVELS, RelayTasks, deal, evaluate_expression, operand_key
from marft_envs.tasks.scripted_teams import TEAMS, play

COOP = ["marft/Relay-v0", "marft/SolveCheck-v0"]
TEAM_PROFILES = {"marft/Relay-v0": ["relay", "relay_anonymous", "solo"],
                 "marft/SolveCheck-v0": ["solver_checker", "solver_checker_anonymous", "solo"]}


def _step_round(env, utterances):
    """Play one round: ``utterances`` maps agent id -> text (every scheduled agent must have one)."""
    for _ in range(len(env.unwrapped.graph.active)):
        env.step(utterances[env.agent_selection])


@pytest.mark.parametrize("env_id", COOP)
def test_registered_and_pass_pettingzoo_checks(env_id):
    assert env_id in marft_envs.list_envs()
    for profile in TEAM_PROFILES[env_id]:
        api_test(marft_envs.make(env_id, profile=profile), num_cycles=12)
    seed_test(lambda: marft_envs.make(env_id, level=2), num_cycles=8)
    parallel_api_test(turn_based_aec_to_parallel(marft_envs.make(env_id)), num_cycles=8)


@pytest.mark.parametrize("env_id", COOP)
def test_same_seed_same_problems(env_id):
    def tasks(seed):
        env = marft_envs.make(env_id, level=2)
        out = []
        for k in range(5):
            env.reset(seed=seed if k == 0 else None)
            out.append((env.unwrapped.task.prompt, env.unwrapped.task.answer))
        return out

    assert tasks(3) == tasks(3)
    assert tasks(3) != tasks(4)


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_relay_items_are_pure_and_splits_disjoint(level):
    train = RelayTasks(level, "train", seed=0)
    test = RelayTasks(level, "test", seed=0)
    assert [train[i] for i in range(20)] == [RelayTasks(level, "train", seed=0)[i] for i in range(20)]
    train_prompts = {train[i].prompt for i in range(600)}
    test_prompts = {test[i].prompt for i in range(150)}
    assert not train_prompts & test_prompts
    for i in range(50):
        task = test[i]
        assert int(task.answer) == evaluate_expression(task.metadata["expression"], task.metadata["values"])

def _level1_split(revision: int) -> dict[tuple[int, int], str]:
    """Every level-1 problem (A + B, values 2..20) -> its split under task ``revision``."""
    key = TASK_REVISIONS[revision].key
    return {(a, b): split_of(f"{LEVELS[1]}|{key('A + B', {'A': a, 'B': b})}")
            for a in range(2, 21) for b in range(2, 21)}


@pytest.mark.parametrize("revision, test_problems, twin_in_train", [(0, 78, 58), (1, None, 0)])
def test_relay_split_keeps_commuted_twins_together(revision, test_problems, twin_in_train):
    """Revision 0 hashed operand order, so most test problems had their twin B + A in training;
    revision 1 (the default) hashes the operand multiset: no test problem's twin is in training."""
    splits = _level1_split(revision)
    test = [(a, b) for (a, b), split in splits.items() if split == "test"]
    leaked = [(a, b) for a, b in test if splits[(b, a)] == "train"]
    assert len(leaked) == twin_in_train
    if test_problems is not None:
        assert len(test) == test_problems
    assert test  # the split still holds out problems
    # the tasks the source draws follow the same split: every drawn test problem is a test key
    tasks = RelayTasks(1, "test", seed=0, task_revision=revision)
    drawn = {(t.metadata["values"]["A"], t.metadata["values"]["B"]) for t in (tasks[i] for i in range(200))}
    assert drawn <= set(test) and len(drawn) > len(test) // 2
    # level 3: a twin of A + B - C is B + A - C, and of A - B + C is A + C - B: the same split
    if revision == 1:
        train3 = RelayTasks(3, "train", seed=0)
        train_keys = {operand_key(t.metadata["expression"], t.metadata["values"]) for t in (train3[i] for i in range(400))}
        test3 = RelayTasks(3, "test", seed=0)
        assert not train_keys & {operand_key(t.metadata["expression"], t.metadata["values"])
                                 for t in (test3[i] for i in range(150))}


def test_relay_task_revision_is_a_checked_keyword():
    assert marft_envs.make("marft/Relay-v0").unwrapped.task_revision == max(RelayEnv.task_revisions)

    def test_problems(**kwargs):
        env = marft_envs.make("marft/Relay-v0", split="test", **kwargs)
        out = []
        for i in range(20):
            env.reset(seed=0, options={"task_index": i})
            out.append(env.unwrapped.task.prompt)
        return out

    assert test_problems(task_revision=0) != test_problems()  # revision 0 reproduces the old problems
    assert test_problems(task_revision=0)[0] == RelayTasks(1, "test", task_revision=0)[0].prompt
    with pytest.raises(ValueError, match="task_revision"):
        marft_envs.make("marft/Relay-v0", task_revision=7)



def test_deal_leaves_every_agent_of_a_team_missing_a_value():
    assert deal(["A", "B"], 2) == [["A"], ["B"]]
    assert deal(["A", "B", "C"], 2) == [["A", "C"], ["B"]]
    assert deal(["A", "B"], 1) == [["A", "B"]]
    for variables in (["A", "B"], ["A", "B", "C"]):
        for n in (2, 3):
            assert all(len(hand) < len(variables) for hand in deal(variables, n))
    with pytest.raises(ValueError, match="num_agents"):
        deal(["A"], 0)


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_relay_observations_are_partial(level):
    env = marft_envs.make("marft/Relay-v0", level=level, channel="text")  # the raw message, on every level
    env.reset(seed=level)
    task = env.unwrapped.task
    values, expression = task.metadata["values"], task.metadata["expression"]
    holder, answerer = env.possible_agents
    held = {a: env.infos[a]["holds"] for a in env.possible_agents}
    assert sorted(held[holder] + held[answerer]) == sorted(values)
    holder_obs, answerer_obs = env.observe(holder)["text"], env.observe(answerer)["text"]
    for name in held[answerer]:
        assert f"{name} = {values[name]}" in answerer_obs and f"{name} = {values[name]}" not in holder_obs
    for name in held[holder]:
        assert f"{name} = {values[name]}" in holder_obs and f"{name} = {values[name]}" not in answerer_obs
    question = env.unwrapped.question(task)
    assert answerer_obs.endswith(question) and "What is" not in holder_obs
    assert expression.split()[0] in question  # the holder's first variable is left for the holder
    assert task.prompt not in holder_obs and task.prompt not in answerer_obs
    # The answerer learns the holder's values only through the holder's utterance this round.
    env.step("a = 1000" + " and some rambling" * 10)
    answerer_obs = env.observe(answerer)["text"]
    assert "a = 1000" in answerer_obs
    assert answerer_obs.count("rambling") == 1  # the message is cut at message_chars (40)


def test_relay_solo_sees_the_whole_problem():
    env = marft_envs.make("marft/Relay-v0", level=3, profile="solo")
    env.reset(seed=0)
    (agent,) = env.possible_agents
    text = env.observe(agent)["text"]
    assert env.unwrapped.task.prompt in text
    assert all(f"{n} = {v}" in text for n, v in env.unwrapped.task.metadata["values"].items())


def test_relay_team_needs_the_holder_to_speak():
    env = marft_envs.make("marft/Relay-v0", level=1, horizon=1)
    env.reset(seed=0, options={"task_index": 0})
    task = env.unwrapped.task
    holder, answerer = env.possible_agents
    (name,) = env.infos[holder]["holds"]
    env.step(f"{name} = {task.metadata['values'][name]}")
    env.step(f"\\boxed{{{task.answer}}}")
    assert env.terminations[answerer] and env.rewards[answerer] == 1.0 == env.rewards[holder]


@pytest.mark.parametrize("env_id", COOP)
@pytest.mark.parametrize("level", [1, 2, 3])
def test_scripted_oracle_solves_every_problem(env_id, level):
    for profile in TEAM_PROFILES[env_id]:
        result = play(env_id, TEAMS[env_id]["oracle"], n=40, level=level, split="test", profile=profile)
        assert result.accuracy == 1.0 and result.rounds == 1.0, (profile, result)


def test_relay_mixed_sizes_draws_both_sizes_and_the_oracle_solves_them():
    """Level 5: each problem a level-1 sum or a three-digit one by a fair coin, in both splits."""
    for split in ("train", "test"):
        tasks = RelayTasks("mixed_sizes", split, seed=0)
        sizes = [max(tasks[i].metadata["values"].values()) >= 100 for i in range(400)]
        for i in range(400):
            values = tasks[i].metadata["values"].values()
            low, high = MIXED_SIZES[sizes[i]]
            assert all(low <= v <= high for v in values) and tasks[i].answer == str(sum(values))
        assert 0.4 < sum(sizes) / len(sizes) < 0.6, (split, sum(sizes))  # 400 fair coins: 5.1 s.d. of 2.5 pts
    for profile in TEAM_PROFILES["marft/Relay-v0"]:
        result = play("marft/Relay-v0", TEAMS["marft/Relay-v0"]["oracle"], n=40, level=5, split="test", profile=profile)
        assert result.accuracy == 1.0, (profile, result)
    assert play("marft/Relay-v0", TEAMS["marft/Relay-v0"]["mute"], n=100, level=5, split="test", horizon=1).accuracy <= 0.1


def test_relay_without_communication_fails():
    result = play("marft/Relay-v0", TEAMS["marft/Relay-v0"]["mute"], n=100, level=2, split="test", horizon=1)
    assert result.accuracy <= 0.1


# -- SolveCheck ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, verdict", [
    ("CORRECT", "CORRECT"), ("The answer is correct.", "CORRECT"), ("WRONG \\boxed{3}", "WRONG"),
    ("That is incorrect", "WRONG"), ("Incorrect, not correct", "WRONG"), ("I agree.", None),
    ("correctly done", None), ("", None),
])
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) == verdict


def _solve_check(**kwargs):
    env = marft_envs.make("marft/SolveCheck-v0", level=1, **kwargs)
    env.reset(seed=0, options={"task_index": 5})
    return env, env.unwrapped.task, int(env.unwrapped.task.answer)


@pytest.mark.parametrize("solver_right, checker, solved, checker_reward, submitted_by", [
    (True, "CORRECT", True, 1.0, "solver_0"),
    (False, "CORRECT", False, 0.0, "solver_0"),          # rubber-stamps a wrong answer
    (True, "WRONG", False, 0.0, None),                   # rejects a right answer: nothing submitted
    (False, "WRONG", False, 1.0, None),                  # right verdict, no correction
    (False, "WRONG \\boxed{ANSWER}", True, 1.0, "checker_0"),  # right verdict and correction
    (True, "I think so.", True, 0.0, "solver_0"),        # no verdict: the solver's answer goes in
    (False, "incorrect, it is \\boxed{ANSWER}", True, 1.0, "checker_0"),
])
def test_checker_verdict_is_rewarded_when_right(solver_right, checker, solved, checker_reward, submitted_by):
    env, task, answer = _solve_check(horizon=2)
    solver_text = f"\\boxed{{{answer if solver_right else answer + 1}}}"
    _step_round(env, {"solver_0": solver_text, "checker_0": checker.replace("ANSWER", str(answer))})
    info = env.infos["solver_0"]
    outcome = info["last_outcome"]
    assert outcome["solved"] is solved and outcome["team_reward"] == float(solved)
    assert outcome["info"]["submitted_by"] == submitted_by
    assert env.infos["checker_0"]["agent_reward"] == checker_reward
    assert info["agent_reward"] == float(solver_right)
    if not solved:  # another round, with feedback that never reveals the reference
        assert env.unwrapped.round_index == 1 and outcome["feedback"]
        assert str(answer) not in outcome["feedback"] or solver_right
        assert outcome["feedback"] in env.observe("solver_0")["text"]


def test_rejected_answer_gets_a_second_round_and_then_truncates():
    env, task, answer = _solve_check(horizon=2)
    _step_round(env, {"solver_0": "\\boxed{0}", "checker_0": "WRONG"})
    assert "nothing was submitted" in env.observe("solver_0")["text"]
    assert "\\boxed{0}" in env.observe("solver_0")["text"]  # the history quotes the solver's attempt
    _step_round(env, {"solver_0": "\\boxed{0}", "checker_0": "WRONG"})
    assert all(env.truncations.values()) and not any(env.terminations.values())


def test_checker_sees_the_protocol_and_the_solver_answer_but_solver_does_not_see_the_protocol():
    env, task, answer = _solve_check()
    assert "CORRECT" not in env.observe("solver_0")["text"]
    env.step("\\boxed{41}")
    checker_obs = env.observe("checker_0")["text"]
    assert "\\boxed{41}" in checker_obs and "Reply CORRECT" in checker_obs and task.prompt in checker_obs


def test_solo_answer_is_submitted_as_is():
    env, task, answer = _solve_check(profile="solo")
    env.step(f"The answer is {answer}.")
    assert env.terminations["actor_0"] and env.rewards["actor_0"] == 1.0


def test_three_agent_profile_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="solver_checker"):
        marft_envs.make("marft/SolveCheck-v0", profile="trio")


def test_scripted_checker_is_what_lifts_a_noisy_solver():
    teams = TEAMS["marft/SolveCheck-v0"]
    kwargs = {"n": 100, "level": 2, "split": "test", "horizon": 1}
    checked = play("marft/SolveCheck-v0", teams["noisy+oracle_checker"], **kwargs)
    stamped = play("marft/SolveCheck-v0", teams["noisy+rubber_stamp"], **kwargs)
    assert checked.accuracy == 1.0 and checked.agent_rewards["checker_0"] == 1.0
    assert stamped.accuracy < 0.7 and stamped.agent_rewards["checker_0"] == pytest.approx(stamped.accuracy)


def test_scripted_policies_read_only_observations():
    rng = random.Random(0)
    assert TEAMS["marft/Relay-v0"]["oracle"]("holder_0", "You know A = 7, C = 2. Tell.", rng) == "A = 7, C = 2"
    assert TEAMS["marft/Relay-v0"]["oracle"]("x", "B = 3 ... A = 4 Compute A - 3.", rng) == "\\boxed{1}"


def test_coop_oracle_benchmark_prints_every_team_and_passes():
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "coop_oracle.py"), "--n", "10", "--levels", "1"],
                          cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    import re

    assert re.search(r"marft/Relay-v0\s+1\s+relay\s+oracle\s+1\.000", done.stdout), done.stdout
    assert "noisy+rubber_stamp" in done.stdout and "oracle: 1.000 on every env" in done.stdout


def test_relay_message_chars_must_be_positive():
    with pytest.raises(ValueError, match="message_chars must be a positive int"):
        marft_envs.make("marft/Relay-v0", message_chars=0)
