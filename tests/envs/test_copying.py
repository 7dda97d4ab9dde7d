"""Every registered env survives ``pickle``, ``copy.deepcopy`` and cloudpickle, and the copy plays on
exactly as the original: vector envs (SuperSuit's ``vectorize_aec_env_v0`` cloudpickles the env it
is given) and multiprocessing copy envs this way.

The ids are read from ``marft_envs.list_envs()``, so a newly registered env is covered without
being added here; an id whose data is absent here is skipped with the reason.
"""

from __future__ import annotations

import copy
import pickle

import pytest

import marft_envs
from registered import constructible_kwargs

try:
    import cloudpickle
except ImportError:  # optional: SuperSuit and Ray use it
    cloudpickle = None

COPIES = {
    "pickle": lambda env: pickle.loads(pickle.dumps(env)),
    "deepcopy": copy.deepcopy,
    "cloudpickle": (lambda env: cloudpickle.loads(cloudpickle.dumps(env))) if cloudpickle else None,
}
ACTIONS = ["\\boxed{7}", "search[red shirts with long sleeves]", "click[buy now]", "7",
           "```python\ndef f(x):\n    return x\n```", "APPROVE", "The answer is \\boxed{12}."]
"""Cycled through as the agents' utterances: something each env parses (answers, web actions,
programs, verdicts), so the rounds exercise grading, search and the verifier."""
VARIANTS = [
    ("marft/WebShop-v0", {"profile": "shopper_verifier"}),
    ("marft/Arithmetic-v0", {"profile": "orchestrated"}),
    ("marft/Arithmetic-v0", {"profile": "dual", "dependency": {"dag": [["actor_0", "reasoner_0"]]}}),
    ("marft/Arithmetic-v0", {"profile": "trio", "dependency": "independent"}),
]
"""Dependencies beyond the default profiles' (a verifier scheduled on purchase, orchestration, a DAG)."""


def _play(env, steps: int | None = None) -> list:
    """Step ``env`` (to the end, or ``steps`` times) with the cycled actions; what each step showed."""
    seen = []
    for k, agent in enumerate(env.agent_iter()):
        if steps is not None and k >= steps:
            break
        obs, reward, terminated, truncated, info = env.last()
        env.step(None if terminated or truncated else ACTIONS[(len(seen) + len(agent)) % len(ACTIONS)])
        seen.append((agent, obs["text"], reward, terminated, truncated, info, env.state()["text"]))
    return seen


def _cases():
    ids = [(env_id, {}) for env_id in marft_envs.list_envs()] + VARIANTS
    for env_id, kwargs in ids:
        for how, fn in COPIES.items():
            marks = [pytest.mark.skip(reason=f"{how} is not installed")] if fn is None else []
            yield pytest.param(env_id, kwargs, how, marks=marks, id=f"{env_id}-{sorted(kwargs.items())}-{how}")


@pytest.mark.parametrize("env_id,kwargs,how", list(_cases()))
def test_a_copy_plays_on_exactly_as_the_original(env_id, kwargs, how, tmp_path_factory):
    env = marft_envs.make(env_id, **constructible_kwargs(env_id, tmp_path_factory), **kwargs)
    env.reset(seed=3)
    _play(env, steps=1)  # mid-round: a copy must carry the open round too
    twin = COPIES[how](env)
    assert type(twin) is type(env) and twin is not env
    # The original plays first: a copy sharing state with it would then play differently.
    original, copied = _play(env), _play(twin)
    assert len(original) > 1 and copied == original
    # The next episode too: the task order's RNG was copied, not shared or re-seeded.
    env.reset()
    twin.reset()
    assert env.task.task_id == twin.task.task_id
    assert _play(twin) == _play(env)


def test_copies_are_independent_of_the_original():
    env = marft_envs.make("marft/WebShop-v0", profile="shopper_verifier")
    env.reset(seed=0)
    twin = copy.deepcopy(env)
    env.step("search[red shirts]")
    assert twin.session.steps == 0 and env.session.steps == 1
    assert twin.transcript() != env.transcript()
