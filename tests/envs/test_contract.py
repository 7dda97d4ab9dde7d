"""Every env id on the registry passes the env contract of ``marft_envs.testing``.

The ids are read from ``marft_envs.list_envs()`` when the tests are collected (built-ins and the
plugins installed in this environment), so a newly registered env is checked without being added
here. ``SETUP`` only supplies what makes an env constructible on this machine; an id missing from
it is checked with its defaults.
"""

from __future__ import annotations

import pytest

import marft_envs
from marft_envs.registry import BUILTIN_ENVS
from marft_envs.testing import CHECKS, PASSED, EnvContractError, check_env
from registered import DATA_ENVS, constructible_kwargs

ENV_IDS = marft_envs.list_envs()
STDIO_SPLIT = ("split names a Hugging Face split; a local problems file (what this suite passes) has one "
               "split, so 'train' and 'test' are the same file")

KNOWN_FAILURES = {
    ("marft/MATH-v0", "splits"): "the MATH data files hold one problem in both splits (train "
                                 "geometry/6032 = test precalculus/24307); strict, so a fix must drop this mark",
}
"""(env id, check) -> why it fails today; run as a strict xfail so a fix is noticed."""

VARIANTS = [
    ("marft/Arithmetic-v0", {"profile": "orchestrated"}),
    ("marft/Arithmetic-v0", {"profile": "quartet",
                             "dependency": {"dag": [["planner_0", "actor_0"], ["reasoner_0", "verifier_0"]]}}),
    ("marft/Arithmetic-v0", {"profile": "trio", "dependency": "full"}),
    ("marft/Arithmetic-v0", {"profile": "trio", "dependency": "independent"}),
    ("marft/Relay-v0", {"level": 4}),
    ("marft/Relay-v0", {"profile": "solo_two_calls"}),
    ("marft/WebShop-v0", {"profile": "planner_shopper"}),
    ("marft/HumanEval-v0", {"profile": "planner_coder_tester", "limit": 3}),
]
"""Multi-agent teams and time-varying D_t beyond the default profiles, for the D_t-sensitive checks."""


def setup(env_id: str, tmp_path_factory) -> tuple[dict, dict]:
    """(kwargs, skipped checks with reasons) that make ``env_id`` constructible here."""
    kwargs = constructible_kwargs(env_id, tmp_path_factory)
    return kwargs, ({"splits": STDIO_SPLIT} if env_id == "marft/StdioCode-v0" else {})


def _cases():
    for env_id in ENV_IDS:
        for check in CHECKS:
            reason = KNOWN_FAILURES.get((env_id, check))
            marks = [pytest.mark.xfail(raises=EnvContractError, strict=True, reason=reason)] if reason else []
            yield pytest.param(env_id, check, marks=marks, id=f"{env_id}-{check}")


@pytest.mark.parametrize("env_id,check", list(_cases()))
def test_registered_env_meets_the_contract(env_id, check, tmp_path_factory):
    kwargs, skip = setup(env_id, tmp_path_factory)
    outcome = check_env(env_id, checks=[check], skip=skip, **kwargs)[check]
    if outcome != PASSED:
        pytest.skip(f"{env_id} {check}: {outcome}")


@pytest.mark.parametrize("env_id,kwargs", VARIANTS, ids=[f"{e}-{sorted(k.items())}" for e, k in VARIANTS])
def test_teams_and_time_varying_dependencies_meet_the_contract(env_id, kwargs):
    outcomes = check_env(env_id, checks=["parallel", "state", "dependency"], **kwargs)
    assert outcomes == dict.fromkeys(["parallel", "state", "dependency"], PASSED)


def test_the_contract_runs_over_every_registered_id_and_this_file_names_only_registered_ids():
    assert {env_id for env_id, _, _ in BUILTIN_ENVS} <= set(ENV_IDS)
    named = set(DATA_ENVS) | {"marft/StdioCode-v0"} | {e for e, _ in KNOWN_FAILURES} | {e for e, _ in VARIANTS}
    assert named <= set(ENV_IDS), f"stale ids in this file: {sorted(named - set(ENV_IDS))}"
