"""evaluate(): a fixed, seeded problem set, deterministic scores, RNG left untouched; sampled avg@k / pass@k."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch

import marft_envs
from agent_helpers import LETTERS_ID, tiny, tiny_on_device  # noqa: F401 (fixture)
import math

from marft_agents.evaluation.problem_set import clustered_stderr, evaluate, problem_indices


def test_problem_set_is_fixed_by_seed():
    assert problem_indices(100, 10, seed=3) == problem_indices(100, 10, seed=3)
    assert problem_indices(100, 10, seed=3) != problem_indices(100, 10, seed=4)
    assert sorted(problem_indices(5, 10, seed=0)) == [0, 1, 2, 3, 4]  # capped at the source size


def test_clustered_stderr_is_binomial_for_distinct_problems_and_grows_with_repeats():
    outcomes = [1.0, 0.0, 1.0, 0.0]
    assert math.isclose(clustered_stderr(outcomes, ["a", "b", "c", "d"]), math.sqrt(0.5 * 0.5 / 4))
    # The same two problems played twice each: effectively n = 2, so the error is sqrt(2) larger.
    assert math.isclose(clustered_stderr(outcomes, ["a", "b", "a", "b"]), math.sqrt(0.5 * 0.5 / 2))
    assert clustered_stderr([1.0, 1.0, 1.0], ["a", "a", "b"]) == 0.0


def test_greedy_evaluation_is_deterministic_and_leaves_rng_alone(tiny):
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.settings.sampling import SamplingConfig

    model, tokenizer = tiny
    agents = marft_envs.make(LETTERS_ID).possible_agents
    policy = MultiAgentPolicy(model, tokenizer, agents)
    sampling = SamplingConfig(max_new_tokens=4)
    torch.manual_seed(0)
    state = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    cuda_state = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    first = evaluate(policy, LETTERS_ID, {}, n_problems=3, greedy=True, seed=5, sampling=sampling, num_envs=2)
    assert random.getstate() == state[0] and (np.random.get_state()[1] == state[1]).all()
    assert torch.equal(torch.get_rng_state(), state[2])
    if cuda_state:  # evaluate seeds the CUDA generators too, inside a fork
        assert all(torch.equal(a, b) for a, b in zip(torch.cuda.get_rng_state_all(), cuda_state))
    second = evaluate(policy, LETTERS_ID, {}, n_problems=3, greedy=True, seed=5, sampling=sampling, num_envs=3)
    assert first.per_task == second.per_task  # batch layout does not change greedy results
    assert first.n == 3 and first.distinct == 3 and [t["task_index"] for t in first.per_task] == problem_indices(20, 3, 5)
    assert 0.0 <= first.accuracy <= 1.0 and first.stderr >= 0.0
    assert [t["task_id"] for t in first.per_task] == [f"letters/{i}" for i in problem_indices(20, 3, 5)]


def test_arithmetic_env_accuracy_with_random_model_is_zero(tiny):
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.settings.sampling import SamplingConfig

    model, tokenizer = tiny
    policy = MultiAgentPolicy(model, tokenizer, ["actor_0"])
    result = evaluate(policy, "marft/Arithmetic-v0", {"profile": "solo", "horizon": 1}, n_problems=2,
                      sampling=SamplingConfig(max_new_tokens=3), num_envs=2)
    assert result.accuracy == 0.0 and result.n == 2 and result.stderr == 0.0 and 1 <= result.distinct <= 2


def test_pass_at_k_is_the_unbiased_estimator_on_hand_computed_counts():
    from marft_agents.evaluation.problem_set import pass_at_k

    assert math.isclose(pass_at_k(5, 2, 2), 1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert math.isclose(pass_at_k(10, 3, 1), 0.3)  # pass@1 = c / n
    assert math.isclose(pass_at_k(6, 1, 3), 1 - 10 / 20)  # 1 - C(5,3)/C(6,3)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0  # k = n: any solved
    assert pass_at_k(3, 2, 2) == 1.0  # n - c < k: every draw of k holds a solved one
    for bad in [(3, 4, 1), (3, 1, 0), (3, 1, 4)]:
        with pytest.raises(ValueError, match="pass@k needs"):
            pass_at_k(*bad)


def test_sampled_scores_cluster_a_problems_samples():
    from marft_agents.evaluation.problem_set import score

    # three problems, two samples each: solved [1, 1], [1, 0], [0, 0]
    outcomes = [[True, True], [True, False], [False, False]]
    per_task = [{"samples": [{"solved": s, "reward": float(s)} for s in row]} for row in outcomes]
    result = score(per_task, ["p0", "p1", "p2"], k=2)
    assert result.accuracy == result.avg_at_k == 0.5 and result.n == 3 and result.samples_per_problem == 2
    # residual sums per problem: +1, 0, -1 -> sqrt(2) / 6 (the unclustered binomial would be sqrt(.25 / 6))
    assert math.isclose(result.avg_at_k_stderr, math.sqrt(2) / 6) and result.stderr == result.avg_at_k_stderr
    # pass@2 per problem: 1, 1, 0 -> 2/3 with residuals 1/3, 1/3, -2/3 -> sqrt(6/9) / 3
    assert math.isclose(result.pass_at_k, 2 / 3) and math.isclose(result.pass_at_k_stderr, math.sqrt(6) / 9)
    assert result.mean_reward == 0.5
    assert result.figures()["pass_at_k"] == result.pass_at_k and "pass_at_k" not in score(
        [{"solved": True, "reward": 1.0}], ["p0"]).figures()  # one sample: the figures of old
    with pytest.raises(ValueError, match="needs 2 samples"):
        score([{"samples": [{"solved": True, "reward": 1.0}]}], ["p0"], k=2)


def test_sampled_evaluation_plays_k_seeded_passes(tiny):
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.settings.sampling import SamplingConfig

    model, tokenizer = tiny
    policy = MultiAgentPolicy(model, tokenizer, marft_envs.make(LETTERS_ID).possible_agents)
    sampling = SamplingConfig(max_new_tokens=6)
    args = dict(n_problems=3, greedy=False, seed=5, sampling=sampling, num_envs=2)
    torch.manual_seed(0)
    rng = torch.get_rng_state()
    sampled = evaluate(policy, LETTERS_ID, {}, samples_per_problem=3, **args)
    assert torch.equal(torch.get_rng_state(), rng)
    assert sampled.samples_per_problem == 3 and sampled.n == 3
    assert all([s["pass"] for s in t["samples"]] == [0, 1, 2] for t in sampled.per_task)
    # pass 0 is the one-sample sampled evaluation, transcript and all
    single = evaluate(policy, LETTERS_ID, {}, **args)
    for one, many in zip(single.per_task, sampled.per_task):
        assert {k: one[k] for k in ("solved", "reward", "rounds")} == {k: many["samples"][0][k] for k in
                                                                       ("solved", "reward", "rounds")}
        assert one["transcript"] == many["transcript"]
    # the passes draw differently (rewards are letter shares of sampled text) and reproducibly
    assert any(len({s["reward"] for s in t["samples"]}) > 1 for t in sampled.per_task)
    assert evaluate(policy, LETTERS_ID, {}, samples_per_problem=3, **args).per_task == sampled.per_task
    solved = [[s["solved"] for s in t["samples"]] for t in sampled.per_task]
    assert sampled.avg_at_k == sampled.accuracy == sum(map(sum, solved)) / 9
    assert sampled.pass_at_k == sum(any(row) for row in solved) / 3
    with pytest.raises(ValueError, match="greedy"):
        evaluate(policy, LETTERS_ID, {}, samples_per_problem=2, n_problems=1, greedy=True, sampling=sampling)


# -- per-stage outcomes ---------------------------------------------------------------------------
def test_stage_pass_rates_on_hand_computed_plays():
    from marft_agents.evaluation.problem_set import STAGE_FIGURES, score

    # four problems, p0 and p1 the same statement: reduce passed 1, 1, 0, 1; answer 0, 1, 1, 0
    stages = [{"reduce": True, "answer": False}, {"reduce": True, "answer": True},
              {"reduce": False, "answer": True}, {"reduce": True, "answer": False}]
    per_task = [{"solved": s["reduce"] and s["answer"], "reward": 0.0, "stages": s} for s in stages]
    result = score(per_task, ["p0", "p0", "p2", "p3"])
    assert result.stage_pass == {"reduce": 0.75, "answer": 0.5} and list(result.stage_pass) == ["reduce", "answer"]
    assert result.stage_n == {"reduce": 4, "answer": 4}
    # reduce: residuals +.25 +.25 | -.75 | +.25 -> clusters .5, -.75, .25 -> sqrt(.875) / 4
    assert math.isclose(result.stage_stderr["reduce"], math.sqrt(0.875) / 4)
    # answer: residuals -.5 +.5 | +.5 | -.5 -> clusters 0, .5, -.5 -> sqrt(.5) / 4
    assert math.isclose(result.stage_stderr["answer"], math.sqrt(0.5) / 4)
    figures = result.figures()
    assert {k: figures[k] for k in STAGE_FIGURES} == {"stage_pass": result.stage_pass,
                                                      "stage_stderr": result.stage_stderr, "stage_n": result.stage_n}
    # a play that reports no stages is not counted; an env that reports none adds no figures
    partial = score(per_task[:2] + [{"solved": False, "reward": 0.0}], ["p0", "p1", "p2"])
    assert partial.stage_pass == {"reduce": 1.0, "answer": 0.5} and partial.stage_n == {"reduce": 2, "answer": 2}
    plain = score([{"solved": True, "reward": 1.0}], ["p0"])
    assert plain.stage_pass == {} and not set(STAGE_FIGURES) & set(plain.figures())
    # with k samples, every sample's stages count
    sampled = score([{"samples": [{"solved": False, "reward": 0.0, "stages": s} for s in stages[:2]]},
                     {"samples": [{"solved": False, "reward": 0.0, "stages": s} for s in stages[2:]]}], ["p0", "p1"], k=2)
    assert sampled.stage_pass == {"reduce": 0.75, "answer": 0.5} and sampled.stage_n == {"reduce": 4, "answer": 4}


def _reducer_wrong_when_a_is_odd(agent, observation, info):
    """A Relay level-4 seat: the oracle, but the reducer passes A + B + 1 when A is odd."""
    from marft_envs.tasks.scripted_teams import relay_oracle_seat

    said = relay_oracle_seat(agent, observation, info)
    a = int(re.search(r"A = (\d+)", observation["text"]).group(1)) if agent == "reducer_0" else 0
    return f"\\boxed{{{int(said[7:-1]) + 1}}}" if a % 2 else said


def _answerer_one_off(agent, observation, info):
    """The oracle answerer plus one: never right, whatever it heard."""
    from marft_envs.tasks.scripted_teams import relay_oracle_seat

    return f"\\boxed{{{int(relay_oracle_seat(agent, observation, info)[7:-1]) + 1}}}"


def test_evaluation_reports_the_stages_the_env_reports(tiny):
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.settings.sampling import SamplingConfig
    from marft_envs.tasks.scripted_teams import relay_oracle_seat

    model, tokenizer = tiny
    env_kwargs = {"level": 4, "split": "test", "horizon": 1}
    env = marft_envs.make("marft/Relay-v0", **env_kwargs)
    policy = MultiAgentPolicy(model, tokenizer, env.possible_agents)
    args = dict(n_problems=12, seed=3, sampling=SamplingConfig(max_new_tokens=4), num_envs=5)
    indices = problem_indices(len(env.unwrapped.tasks), 12, 3)
    odd = [env.unwrapped.tasks[i].metadata["values"]["A"] % 2 == 1 for i in indices]
    assert 0 < sum(odd) < 12  # both kinds of problem are in the set

    # reducer right on even A only, oracle answerer: right given what it heard on every problem
    result = evaluate(policy, "marft/Relay-v0", env_kwargs, scripted={
        "reducer_0": _reducer_wrong_when_a_is_odd, "answerer_0": relay_oracle_seat}, **args)
    assert [t["stages"] for t in result.per_task] == [{"reduce": not o, "answer": True} for o in odd]
    assert result.stage_pass == {"reduce": (12 - sum(odd)) / 12, "answer": 1.0} == result.figures()["stage_pass"]
    assert result.stage_n == {"reduce": 12, "answer": 12} and result.accuracy == (12 - sum(odd)) / 12

    # the oracle reducer, an answerer one off: stage 1 passed, stage 2 never
    result = evaluate(policy, "marft/Relay-v0", env_kwargs, scripted={
        "reducer_0": relay_oracle_seat, "answerer_0": _answerer_one_off}, **args)
    assert result.stage_pass == {"reduce": 1.0, "answer": 0.0} and result.accuracy == 0.0

    # sampled passes keep every sample's stages (scripted seats play the same each pass)
    sampled = evaluate(policy, "marft/Relay-v0", env_kwargs, scripted={
        "reducer_0": _reducer_wrong_when_a_is_odd, "answerer_0": relay_oracle_seat}, samples_per_problem=2,
        greedy=False, **args)
    assert all([s["stages"] for s in t["samples"]] == [t["stages"]] * 2 for t in sampled.per_task)
    assert sampled.stage_pass["reduce"] == (12 - sum(odd)) / 12 and sampled.stage_n == {"reduce": 24, "answer": 24}

    # an env without stages: no key in per_task, no stage figures
    fresh, fresh_tokenizer = tiny_on_device(seed=0, hidden_size=32, num_layers=1)  # adapters for other agents
    level1 = evaluate(MultiAgentPolicy(fresh, fresh_tokenizer, ["holder_0", "answerer_0"]), "marft/Relay-v0",
                      {"level": 1, "split": "test", "horizon": 1},
                      scripted={"holder_0": relay_oracle_seat, "answerer_0": relay_oracle_seat}, **args)
    assert level1.accuracy == 1.0 and level1.stage_pass == {} and not any("stages" in t for t in level1.per_task)
