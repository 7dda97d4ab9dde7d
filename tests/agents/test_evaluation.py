"""evaluate(): a fixed, seeded problem set, deterministic scores, RNG left untouched."""

from __future__ import annotations

import random

import numpy as np
import torch

import marft_envs
from agent_helpers import LETTERS_ID, tiny  # noqa: F401 (fixture)
import math

from marft_agents.evaluation import clustered_stderr, evaluate, problem_indices


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
    from marft_agents.policy import MultiAgentPolicy
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
    from marft_agents.policy import MultiAgentPolicy
    from marft_agents.settings.sampling import SamplingConfig

    model, tokenizer = tiny
    policy = MultiAgentPolicy(model, tokenizer, ["actor_0"])
    result = evaluate(policy, "marft/Arithmetic-v0", {"profile": "solo", "horizon": 1}, n_problems=2,
                      sampling=SamplingConfig(max_new_tokens=3), num_envs=2)
    assert result.accuracy == 0.0 and result.n == 2 and result.stderr == 0.0 and 1 <= result.distinct <= 2
