import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel
from toy import ToyEnv

from marft_envs import RoundOutcome, Task, TextTaskEnv, load_profile
from marft_envs.envs.arithmetic import ArithmeticEnv


def play(env, answers):
    """Step through an episode; ``answers`` maps agent id -> list of utterances per round."""
    seen = []
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            seen.append((agent, "done", reward))
            env.step(None)
            continue
        seen.append((agent, info["round"], obs["text"]))
        env.step(answers[agent][info["round"]])
    return seen


@pytest.mark.parametrize("profile, dependency", [
    ("dual", None), ("trio", None), ("quartet", "full"), ("solo", None),
    ("orchestrated", None), ("dual", "independent"), ("trio", {"dag": [["actor", "reasoner"]]}),
])
def test_pettingzoo_api_seed_and_parallel(profile, dependency):
    api_test(ToyEnv(profile=profile, dependency=dependency), num_cycles=60)
    seed_test(lambda: ToyEnv(profile=profile, dependency=dependency), num_cycles=30)
    parallel_api_test(turn_based_aec_to_parallel(ToyEnv(profile=profile, dependency=dependency)), num_cycles=30)


def test_observation_composes_task_parents_and_feedback():
    env = ToyEnv(profile="dual", horizon=2)
    env.reset(options={"task_index": 3})
    seen = play(env, {"reasoner_0": ["think A", "think B"], "actor_0": ["20", "21"]})
    obs = {(a, r): t for a, r, t in seen if r != "done"}
    assert obs[("reasoner_0", 0)] == "What is 3 * 7?"
    assert obs[("actor_0", 0)] == "What is 3 * 7?\n\nreasoner_0 (reasoner) wrote:\nthink A"
    # Round 2: earlier graded answer + feedback, then this round's parent output.
    assert obs[("actor_0", 1)] == (
        "What is 3 * 7?\n\nEarlier attempts:\n[Attempt 1] 20\nFeedback: '20' is wrong.\n\n"
        "reasoner_0 (reasoner) wrote:\nthink B"
    )
    rewards = {a: r for a, tag, r in seen if tag == "done"}
    assert rewards == {"reasoner_0": 1.0, "actor_0": 1.0}


def test_full_dependency_shows_every_agents_earlier_output():
    env = ToyEnv(profile="dual", dependency="full", horizon=2)
    env.reset(options={"task_index": 1})
    seen = play(env, {"reasoner_0": ["r1", "r2"], "actor_0": ["0", "7"]})
    reasoner_round2 = next(t for a, r, t in seen if a == "reasoner_0" and r == 1)
    assert "[Attempt 1] reasoner_0: r1" in reasoner_round2 and "[Attempt 1] actor_0: 0" in reasoner_round2


def test_independent_agents_do_not_see_each_other():
    env = ToyEnv(profile="dual", dependency="independent")
    env.reset(options={"task_index": 2})
    seen = play(env, {"reasoner_0": ["secret"] * 3, "actor_0": ["14"] * 3})
    assert all("secret" not in t for a, r, t in seen if a == "actor_0" and r != "done")


def test_turn_order_follows_dag_and_is_exposed_in_infos_and_state():
    env = ToyEnv(profile="trio", dependency={"dag": [["verifier", "reasoner"], ["reasoner", "actor"]]})
    env.reset(options={"task_index": 0})
    order = []
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            env.step(None)
            continue
        order.append(agent)
        assert info["turn_order"] == ["verifier_0", "reasoner_0", "actor_0"]
        adjacency = np.array(info["dependency"]["adjacency"])
        assert adjacency[2, 0] == 1 and adjacency[0, 1] == 1 and adjacency.sum() == 2
        assert env.state()["dependency"] == info["dependency"]  # one format in both
        env.step("0")
    assert order == ["verifier_0", "reasoner_0", "actor_0"]


def test_horizon_truncates_and_solved_terminates():
    env = ToyEnv(profile="solo", horizon=3)
    env.reset(options={"task_index": 5})
    steps = 0
    for agent in env.agent_iter():
        _, reward, term, trunc, _ = env.last()
        if term or trunc:
            assert trunc and not term and reward == 0.0
            env.step(None)
            continue
        steps += 1
        env.step("wrong")
    assert steps == 3 and env.agents == []
    env.reset(options={"task_index": 5})
    env.step("35")
    assert all(env.terminations.values()) and env.rewards["actor_0"] == 1.0


def test_per_agent_rewards_reported_in_infos_not_rewards():
    env = ToyEnv(profile="dual")
    env.reset(options={"task_index": 1})
    env.step("some reasoning")
    env.step("7")
    assert env.rewards == {"reasoner_0": 1.0, "actor_0": 1.0}
    assert env.infos["reasoner_0"]["agent_reward"] == pytest.approx(0.1)
    assert env.infos["actor_0"]["last_outcome"]["solved"] is True


def test_same_seed_same_problems_in_same_order():
    def ids(seed):
        env = ToyEnv(n=1000)
        out = []
        env.reset(seed=seed)
        out.append(env.task.task_id)
        for _ in range(9):
            env.reset()
            out.append(env.task.task_id)
        return out

    assert ids(3) == ids(3)
    assert ids(3) != ids(4)
    assert len(set(ids(3))) == 10  # a permutation: no repeats within an epoch


def test_reset_options_choose_the_task():
    env = ToyEnv()
    env.reset(options={"task_index": 7})
    assert env.task.task_id == "toy/7"
    env.reset(options={"task": Task("custom", "What is 1 * 7?", "7")})
    assert env.observe("reasoner_0")["text"] == "What is 1 * 7?"
    with pytest.raises(ValueError, match="task_index"):
        env.reset(options={"task_index": 50})


@pytest.mark.parametrize("action", ["", "x" * 100_000, "\ud800bad\udfff", "🙂" * 10])
def test_hostile_text_actions_never_crash(action):
    env = ToyEnv(profile="solo", max_action_chars=1000)
    env.reset(seed=0)
    env.step(action)
    info = env.infos["actor_0"]
    assert info["action_truncated"] == (len(action) > 1000)
    assert env.history[-1].outputs["actor_0"] == action[:1000].encode("utf-8", "replace").decode()
    assert not env.terminations["actor_0"]


@pytest.mark.parametrize("action, name", [(42, "int"), (None, "NoneType"), (["a"], "list"), (b"7", "bytes")])
def test_non_str_actions_raise_type_error_naming_str(action, name):
    env = ToyEnv(profile="solo")
    env.reset(seed=0)
    with pytest.raises(TypeError, match=f"must be a str.*{name}"):
        env.step(action)


def test_render_ansi_transcript():
    env = ToyEnv(profile="dual", render_mode="ansi")
    env.reset(options={"task_index": 2})
    env.step("two times seven")
    env.step("14")
    text = env.render()
    assert "[round 0] reasoner_0: two times seven" in text
    assert "[round 0] grade: reward=1 solved=True" in text


def test_profiles_load_and_bad_profiles_explain():
    assert load_profile("quartet").agent_ids == ("planner_0", "reasoner_0", "actor_0", "verifier_0")
    with pytest.raises(FileNotFoundError, match="shipped profile"):
        load_profile("no-such-profile")
    with pytest.raises(ValueError, match="unknown profile keys"):
        load_profile({"roles": [{"name": "a", "system_prompt": "x"}], "colour": 1})
    twins = load_profile({"roles": [{"name": "solver", "system_prompt": "x"}] * 2})
    assert twins.agent_ids == ("solver_0", "solver_1") and twins.roles[-1].graded


def test_bad_constructor_arguments_are_explained():
    with pytest.raises(ValueError, match="horizon"):
        ToyEnv(horizon=0)
    with pytest.raises(ValueError, match="cycle"):
        ToyEnv(profile="dual", dependency={"dag": [["actor", "reasoner"], ["reasoner", "actor"]]})


class _OutsideEnv(TextTaskEnv):
    """A minimal env built on the public base class only, as another package would write one."""

    def __init__(self, **kwargs):
        tasks = [Task(task_id=f"outside/{i}", prompt=f"Say {i}.", answer=str(i)) for i in range(3)]
        super().__init__(tasks, **kwargs)

    def grade_round(self, task, outputs, round_index):
        correct = self.graded_output(outputs).strip() == task.answer
        return RoundOutcome(team_reward=float(correct), solved=correct, feedback="" if correct else "no.")


def _play_to_the_end(env, utterance):
    for agent in env.agent_iter():
        _, _, term, trunc, info = env.last()
        env.step(None if term or trunc else utterance(agent, info["round"]))


@pytest.mark.parametrize("make_env, horizon, solve_in_round", [
    (lambda h: ArithmeticEnv(level=1, profile="dual", horizon=h), 2, None),  # truncated
    (lambda h: _OutsideEnv(profile="dual", horizon=h), 2, None),  # truncated
    (lambda h: _OutsideEnv(profile="dual", horizon=h), 3, 1),  # solved (terminated) in round 1
    (lambda h: _OutsideEnv(profile="solo", horizon=h), 1, None),  # one round, one agent
], ids=["arithmetic-truncated", "outside-truncated", "outside-solved", "outside-solo-one-round"])
def test_transcript_shows_each_round_once_then_its_grade(make_env, horizon, solve_in_round):
    env = make_env(horizon)
    env.reset(options={"task_index": 1})
    answer = env.task.answer

    def utterance(agent, round_index):
        return answer if round_index == solve_in_round else f"{agent} try {round_index}"

    _play_to_the_end(env, utterance)
    rounds = horizon if solve_in_round is None else solve_in_round + 1
    assert len(env.history) == rounds and env.agents == []
    expected = [f"TASK {env.task.task_id}: {env.task.prompt}"]
    for r, record in enumerate(env.history):
        expected += [f"[round {r}] {agent}: {utterance(agent, r)}" for agent in env.possible_agents]
        o = record.outcome
        expected.append(f"[round {r}] grade: reward={o.team_reward:g} solved={o.solved} {o.feedback}".rstrip())
    assert env.transcript().splitlines() == expected  # nothing after the last grade line
    assert env.state()["text"] == env.transcript()


def test_transcript_mid_round_shows_the_open_round_once_without_a_grade():
    env = _OutsideEnv(profile="dual", horizon=2)
    env.reset(options={"task_index": 0})
    env.step("plan")
    env.step("wrong")  # round 0 graded; round 1 begins
    assert env.transcript().splitlines()[1:] == [
        "[round 0] reasoner_0: plan", "[round 0] actor_0: wrong", "[round 0] grade: reward=0 solved=False no."]
    env.step("plan 2")
    assert env.transcript().splitlines()[-1] == "[round 1] reasoner_0: plan 2"
    assert env.transcript().count("plan 2") == 1


@pytest.mark.parametrize("profile, dependency", [
    ("trio", {"dag": [["verifier", "reasoner"], ["reasoner", "actor"]]}), ("orchestrated", None),
    ("quartet", "full"), ("dual", "independent"),
])
def test_state_dependency_is_the_infos_dependency_format(profile, dependency):
    env = ToyEnv(profile=profile, dependency=dependency, horizon=2)
    env.reset(options={"task_index": 4})
    steps = 0
    for agent in env.agent_iter():
        _, _, term, trunc, info = env.last()
        state = env.state()
        assert type(state["dependency"]) is type(info["dependency"]) is dict  # one format ...
        assert state["dependency"] == info["dependency"]  # ... and the same D_t
        assert all(state["dependency"] == env.infos[a]["dependency"] for a in env.agents)
        assert env.state_space.contains(state)
        d = state["dependency"]
        assert set(d) == {"agents", "active", "edges", "adjacency", "history"}
        assert d["agents"] == env.possible_agents and d["active"] == info["turn_order"]
        assert np.array_equal(np.array(d["adjacency"]), env.graph.adjacency())
        steps += 1
        env.step(None if term or trunc else "NEXT: actor_0" if agent == "orchestrator_0" else "0")
    assert steps > len(env.possible_agents)
    space = env.state_space["dependency"]
    assert all(space.contains(space.sample()) for _ in range(50))
    assert not space.contains(env.graph.adjacency())  # the bare matrix is not the format


def test_a_step_after_the_episode_ended_says_so_in_one_line():
    env = ToyEnv(profile="dual", horizon=1)
    with pytest.raises(RuntimeError, match=r"^ToyEnv.step\(\) before reset\(\): call reset\(\)"):
        env.step("7")
    env.reset(seed=0)
    for agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else "0")
    assert env.agents == []
    for action in ("0", None):
        with pytest.raises(RuntimeError) as caught:
            env.step(action)
        message = str(caught.value)
        assert "\n" not in message and "the episode has ended" in message and "call reset()" in message
    env.reset(seed=0)  # and reset() starts a new one
    env.step("0")


def test_the_parallel_view_says_the_same_after_the_episode():
    from marft_envs import DependencyParallelEnv

    par = DependencyParallelEnv(ToyEnv(profile="dual", horizon=1))
    par.reset(seed=0)
    while par.agents:
        par.step({a: "0" for a in par.agents})
    with pytest.raises(RuntimeError, match=r"^DependencyParallelEnv.step\(\): the episode has ended .* call reset\(\)"):
        par.step({"reasoner_0": "0", "actor_0": "0"})


def test_info_messages_are_the_chat_the_agent_sees():
    """``infos[agent]["messages"]``: the system prompt, then the observation text, at every step."""
    env = ToyEnv(profile="trio", horizon=2)
    env.reset(seed=0)
    checked = 0
    for agent in env.agent_iter():
        obs, _, term, trunc, info = env.last()
        prompt = env.profile.role_of(agent).system_prompt
        assert prompt and info["system_prompt"] == prompt
        assert info["messages"] == [{"role": "system", "content": prompt}, {"role": "user", "content": obs["text"]}]
        assert info["messages"] == env.chat_messages(agent)
        for other in env.agents:  # every agent's, not only the one acting
            assert env.infos[other]["messages"][-1]["content"] == env.observe(other)["text"]
        env.step(None if term or trunc else f"utterance of {agent} in round {info['round']}")
        checked += 1
    assert checked >= 6
    # The actor's turn shows its parents' utterances of the round, as its observation does.
    env.reset(seed=0)
    env.step("REASONER-SAYS-9")
    assert "REASONER-SAYS-9" in env.infos["actor_0"]["messages"][-1]["content"]


def test_an_empty_system_prompt_sends_no_system_turn():
    profile = {"name": "bare", "roles": [{"name": "actor", "graded": True, "system_prompt": ""}]}
    env = ToyEnv(profile=profile)
    env.reset(seed=0)
    assert env.infos["actor_0"]["messages"] == [{"role": "user", "content": env.observe("actor_0")["text"]}]
