"""marft/MATH-v0, marft/GSM8K-v0, marft/Arithmetic-v0: rewards, feedback, hostile actions, API."""

import json

import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

import marft_envs
from marft_envs.envs.arithmetic import ArithmeticEnv
from marft_envs.envs.gsm8k import GSM8KEnv
from marft_envs.envs.math import MathEnv


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    (root / "math").mkdir()
    (root / "gsm8k").mkdir()
    math = [
        {"unique_id": "test/algebra/1.json", "problem": "Expand $(x+1)^2$.", "solution": "$\\boxed{x^2+2x+1}$",
         "level": "Level 2", "type": "Algebra"},
        {"unique_id": "test/prealgebra/2.json", "problem": "Half of one?", "solution": "$\\boxed{\\frac{1}{2}}$",
         "level": "Level 1", "type": "Prealgebra"},
    ]
    (root / "math" / "MATH_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in math), encoding="utf-8")
    gsm = [{"question": "Natalia sold 48 clips and then 24. How many?", "answer": "48+24=72\n#### 72"},
           {"question": "A big one?", "answer": "#### 1,200"}]
    (root / "gsm8k" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gsm), encoding="utf-8")
    return root


@pytest.fixture(params=["arithmetic", "math", "gsm8k"])
def make_env(request, tiny_root):
    def make(**kwargs):
        if request.param == "arithmetic":
            return ArithmeticEnv(level=4, **kwargs)
        if request.param == "math":
            return MathEnv(data_dir=tiny_root, **kwargs)
        return GSM8KEnv(data_dir=tiny_root, **kwargs)

    return make


def play(env, actor_actions, reasoner_action="Let me think: 3 + 4 = 7."):
    """One episode; returns (final rewards, last outcome, actor observations); final infos in
    ``env.final_infos``."""
    actions = iter(actor_actions)
    observations, rewards, outcome = [], {}, None
    env.final_infos = {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            rewards[agent], outcome = reward, info.get("last_outcome")
            env.final_infos[agent] = info
            env.step(None)
            continue
        if agent.startswith("actor"):
            observations.append(obs["text"])
            env.step(next(actions))
        else:
            env.step(reasoner_action)
    return rewards, outcome, observations


def test_right_answer_gets_reward_1(make_env):
    env = make_env()
    for index in range(2):
        env.reset(seed=0, options={"task_index": index})
        answer = env.task.answer
        rewards, outcome, _ = play(env, [f"Working it out, we get 3 and 5.\nSo the final answer is $\\boxed{{{answer}}}$."])
        assert rewards == {"reasoner_0": 1.0, "actor_0": 1.0}
        assert outcome["solved"] and outcome["info"]["correct"] and outcome["info"]["extracted"] == answer


def test_wrong_answer_gets_0_and_feedback_without_the_reference(make_env):
    env = make_env(horizon=2)
    env.reset(seed=0, options={"task_index": 0})
    answer = env.task.answer
    rewards, outcome, observations = play(env, ["\\boxed{123457}", "I am not sure."])
    assert rewards == {"reasoner_0": 0.0, "actor_0": 0.0}
    assert not outcome["solved"] and outcome["info"]["extracted"] is None
    assert "Put the final answer in \\boxed{}" in outcome["feedback"]
    assert "The answer '123457' is not correct" in observations[1]  # round-1 feedback shown in round 2
    assert f"\\boxed{{{answer}}}" not in observations[1]


def test_format_reward_and_grading_info(make_env):
    env = make_env()
    env.reset(seed=0, options={"task_index": 0})
    play(env, [f"The answer is {env.task.answer}."])
    info = env.final_infos["actor_0"]
    assert info["last_outcome"]["info"]["method"] == "phrase" and info["agent_reward"] == 0.0
    env.reset(seed=0, options={"task_index": 0})
    play(env, [f"\\boxed{{{env.task.answer}}}"])
    assert env.final_infos["actor_0"]["agent_reward"] == 1.0
    assert env.final_infos["reasoner_0"]["agent_reward"] == 0.0


@pytest.mark.parametrize("action", ["", "x" * 100_000, "\ud800\\boxed{\udfff}\ud83d", "\x00" * 10, "}{" * 5000])
def test_hostile_actions_give_reward_0(make_env, action):
    env = make_env(horizon=1)
    env.reset(seed=0)
    rewards, outcome, _ = play(env, [action], reasoner_action=action)
    assert rewards == {"reasoner_0": 0.0, "actor_0": 0.0} and not outcome["solved"]
    json.dumps(outcome)  # infos stay serialisable (no lone surrogates leak out)


def test_long_action_is_truncated_and_reported(make_env):
    env = make_env(horizon=1)
    env.reset(seed=0)
    env.step("y" * 100_000)
    assert env.infos["reasoner_0"]["action_truncated"] is True


@pytest.mark.parametrize("bad", [None, 42, b"\\boxed{1}", ["\\boxed{1}"]])
def test_non_str_action_raises_type_error(make_env, bad):
    env = make_env()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be a str"):
        env.step(bad)


def test_solo_profile_and_equivalent_forms(tiny_root):
    env = MathEnv(data_dir=tiny_root, profile="solo")
    env.reset(seed=0, options={"task_index": 0})
    env.step("Expanding, $\\boxed{(x+1)(x+1)}$")
    assert env.rewards == {"actor_0": 1.0}
    env.reset(seed=0, options={"task_index": 1})
    env.step("\\boxed{0.5}")
    assert env.rewards == {"actor_0": 1.0}
    gsm = GSM8KEnv(data_dir=tiny_root, profile="solo")
    gsm.reset(seed=0, options={"task_index": 1})
    gsm.step("So she has 1,200 in all.\n#### 1,200")
    assert gsm.rewards == {"actor_0": 1.0}


def test_arithmetic_fraction_level():
    env = ArithmeticEnv(level=6, profile="solo")
    env.reset(seed=3)
    num, _, den = env.task.answer.partition("/")
    latex = f"\\frac{{{num}}}{{{den}}}" if den else num
    env.step(f"\\boxed{{{latex}}}")
    assert env.rewards == {"actor_0": 1.0}


def test_pettingzoo_api_seed_and_parallel(make_env):
    api_test(make_env(), num_cycles=40)
    seed_test(lambda: make_env(), num_cycles=20)
    parallel_api_test(turn_based_aec_to_parallel(make_env()), num_cycles=20)


def test_registered_and_made_by_id(tiny_root):
    assert {"marft/MATH-v0", "marft/GSM8K-v0", "marft/Arithmetic-v0"} <= set(marft_envs.list_envs())
    assert isinstance(marft_envs.make("marft/Arithmetic-v0", level=2, split="test"), ArithmeticEnv)
    assert isinstance(marft_envs.make("marft/GSM8K-v0", data_dir=tiny_root), GSM8KEnv)
    math = marft_envs.make("marft/MATH-v0", data_dir=tiny_root, levels=[1])
    assert isinstance(math, MathEnv) and len(math.tasks) == 1


def test_math500_from_shared_data(data_dir):
    env = MathEnv(subset="math500", data_dir=data_dir, profile="solo")
    assert len(env.tasks) == 500 and env.tasks.split == "test"
    env.reset(seed=0, options={"task_index": 0})
    env.step("\\boxed{\\left(3, \\frac{\\pi}{2}\\right)}")
    assert env.rewards == {"actor_0": 1.0}
