"""The estimator registry: names declared once, pure functions checked by hand, one clear line
for an unknown name, and a new estimator that is one function plus its registration."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from marft_agents import group_math as gm
from marft_agents.config import ConfigError, load_config
from marft_agents.learners import estimators as est
from marft_agents.settings import estimators as registry
from marft_agents.run_plan import decide_critic
from marft_agents.settings.advantage import BASELINES, GROUP_BASELINES
from marft_agents.settings.grpo import GROUPINGS, NORMALISATIONS


def test_config_choices_are_the_registered_names_and_every_function_resolves():
    assert BASELINES == registry.estimator_names("baseline")
    assert GROUPINGS == registry.estimator_names("grouping")
    assert NORMALISATIONS == registry.estimator_names("normalisation")
    assert set(GROUP_BASELINES) == {e.name for e in registry.ESTIMATORS if e.family == "baseline" and e.needs_groups}
    for spec in registry.ESTIMATORS:
        fn = registry.estimator_function(spec.family, spec.name)
        assert callable(fn) and fn.__doc__, spec
    assert [decide_critic("state", b) == "state" for b in BASELINES] == [
        registry.estimator("baseline", b).uses_critic for b in BASELINES]  # the run plan reads the registry


@pytest.mark.parametrize("key, family", [("advantage.baseline", "baseline"), ("learner.grouping", "grouping"),
                                         ("learner.normalisation", "normalisation")])
def test_an_unknown_name_is_one_line_listing_the_registered_ones(key, family):
    overrides = {key: "no_such_estimator"} | ({"algorithm": "grpo"} if key.startswith("learner") else {})
    with pytest.raises(ConfigError) as caught:
        load_config({}, overrides=overrides)
    message = str(caught.value)
    assert "\n" not in message and "no_such_estimator" in message
    assert set(registry.estimator_names(family)) <= set(re.findall(r"'(\w+)'", message))
    with pytest.raises(ValueError, match=rf"unknown {family} estimator 'x'; registered: "
                                         rf"{', '.join(registry.estimator_names(family))}$"):
        registry.estimator(family, "x")


# -- the baseline estimators by hand ---------------------------------------------------------------
def _tables(values=None, lam=1.0):
    # two episodes of one group; episode 0: two decisions (rewards 0, 1; gamma 0.5 between them),
    # episode 1: two decisions (rewards 0, 0); an empty third episode in a group of its own
    rewards = [[0.0, 1.0], [0.0, 0.0], []]
    gammas = [[0.5, 0.5], [0.5, 0.5], []]
    returns = [[0.5, 1.0], [0.0, 0.0], []]
    return est.EpisodeTables(rewards, gammas, [[0.0, 1.0], [0.0, 1.0], []], returns, values, [[0, 1], [2]], lam)


def test_group_loo_is_the_return_minus_the_other_episodes_return_at_the_position():
    out = est.group_loo(_tables())
    assert out.advantages == [[0.5, 1.0], [-0.5, -1.0], []]
    assert out.targets == [[0.0, 0.0], [0.0, 0.0], []]


def test_group_critic_adds_the_value_difference_from_the_second_position_on():
    out = est.group_critic(_tables(values=[[9.0, 0.25], [7.0, 0.75], []]))
    # position 0: the anchor alone (values ignored); position 1: 1 - (0 + 0.25 - 0.75) = 1.5
    assert out.advantages == [[0.5, 1.5], [-0.5, -1.5], []]
    assert out.targets == [[0.5, 1.0], [-0.5, -1.0], []]


def test_critic_gae_bootstraps_into_the_next_decision_and_skips_empty_episodes():
    out = est.critic_gae(_tables(values=[[0.2, 0.6], [0.0, 0.0], []], lam=0.5))
    # episode 0: delta_1 = 1 - 0.6 = 0.4; delta_0 = 0 + 0.5 * 0.6 - 0.2 = 0.1; A_0 = 0.1 + 0.5 * 0.5 * 0.4
    assert out.advantages[0] == pytest.approx([0.2, 0.4])
    assert out.targets[0] == pytest.approx([0.4, 1.0])  # A + V
    assert out.advantages[2] == [] and out.advantages[1] == [0.0, 0.0]


def test_a_new_normalisation_is_one_function_plus_its_registration(monkeypatch):
    def sign_only(xs, eps):
        """Test normalisation: the sign of x - mean."""
        return torch.sign(xs - xs.mean())

    spec = registry.Estimator("sign", "normalisation", f"{__name__}:sign_only")
    monkeypatch.setitem(registry._BY_NAME, ("normalisation", "sign"), spec)
    monkeypatch.setitem(registry._FUNCTIONS, spec.function, sign_only)
    out = gm.group_relative([0.0, 3.0, 1.0, 2.0, 2.0], ["g", "g", "g", "h", "h"], "sign")
    assert out.tolist() == [-1.0, 1.0, -1.0, 0.0, 0.0]  # the equal group h still gets 0


def test_estimators_are_frozen_plain_data():
    spec = registry.estimator("baseline", "group")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.uses_critic = True  # type: ignore[misc]
