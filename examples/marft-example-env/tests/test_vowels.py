"""This package's own tests: the env meets marft's env contract (``marft_envs.testing``).

Run with the package installed (``pip install -e .``), so that its entry points are seen::

    pytest tests
"""

from marft_envs.testing import PASSED, check_env

ENV_ID = "example/VowelCount-v0"


def test_vowel_count_meets_the_marft_env_contract():
    # PettingZoo's api, seed and parallel tests, disjoint train/test splits, state() only growing
    # and D_t (plan_then_solo: planner -> solver, then the solver alone) consistent with what each
    # agent observes. A failure names the check and what went wrong.
    outcomes = check_env(ENV_ID)
    assert all(outcome == PASSED for outcome in outcomes.values()), outcomes
