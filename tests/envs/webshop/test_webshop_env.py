"""marft/WebShop-v0: PettingZoo checks, the three profiles through D_t, hostile play."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel
from webshop_builders import raw_official_product

import marft_envs
from marft_envs.envs.webshop import WebShopEnv
from marft_envs.webshop.policies import oracle_action

PROFILES = ["shopper", "planner_shopper", "shopper_verifier"]


@pytest.mark.parametrize("profile", PROFILES)
def test_pettingzoo_api_seed_and_parallel(profile):
    api_test(WebShopEnv(profile=profile), num_cycles=40)
    seed_test(lambda: WebShopEnv(profile=profile), num_cycles=20)
    parallel_api_test(turn_based_aec_to_parallel(WebShopEnv(profile=profile)), num_cycles=20)


def test_registered():
    assert "marft/WebShop-v0" in marft_envs.list_envs()
    env = marft_envs.make("marft/WebShop-v0", profile="planner_shopper", max_steps=5)
    env.reset(seed=0)
    assert env.unwrapped.possible_agents == ["planner_0", "shopper_0"] and env.unwrapped.horizon == 5


def play(env, verdicts=("APPROVE",), seed=0, task_index=0, shopper=None):
    """Drive every agent: oracle shopper, fixed planner text, verifier verdicts in turn."""
    env.reset(seed=seed, options={"task_index": task_index})
    rng, verdicts, turns, rewards = random.Random(0), list(verdicts), [], {}
    env.ends, env.final_infos = {}, {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        rewards[agent] = rewards.get(agent, 0.0) + reward
        if term or trunc:
            env.ends[agent] = (term, trunc)
            env.final_infos[agent] = info
            env.step(None)
            continue
        turns.append((info["round"], agent, obs["text"], info))
        role = info["role"]
        if role == "planner":
            action = "Search for the product type and its attributes; pick the options; check the price."
        elif role == "verifier":
            action = verdicts.pop(0) if verdicts else "APPROVE"
        else:
            action = shopper(env.unwrapped.session) if shopper else oracle_action(env.unwrapped.session, rng)
        env.step(action)
    return turns, rewards


@pytest.mark.parametrize("profile", PROFILES)
def test_oracle_team_gets_full_reward(profile):
    env = WebShopEnv(profile=profile)
    turns, rewards = play(env)
    assert all(r == pytest.approx(1.0) for r in rewards.values())
    final = env.final_infos["shopper_0"]
    assert final["webshop"]["executed"] == "click[buy now]" and final["success"] is True
    assert final["reward_info"]["r_type"] == 1.0 and final["last_outcome"]["solved"] is True
    assert env.ends["shopper_0"] == (True, False)
    last_info = turns[-1][3]
    roles = [info["role"] for _, _, _, info in turns]
    if profile == "planner_shopper":
        assert roles.count("planner") == 1 and turns[0][1] == "planner_0"
        # From round 1 on, the plan is shown to the shopper instead of re-running the planner.
        assert "Plan (planner_0):" in turns[-1][2]
        assert turns[1][3]["parents"] == ["planner_0"] and turns[-1][3]["parents"] == []
    if profile == "shopper_verifier":
        assert roles.count("verifier") == 1 and roles[-1] == "verifier"
        dependency = last_info["dependency"]
        assert ["shopper_0", "verifier_0"] in dependency["edges"] and dependency["active"] == ["shopper_0", "verifier_0"]
        assert turns[0][3]["turn_order"] == ["shopper_0"]
        assert "Selected options:" in turns[-1][2] and "shopper_0 (shopper) wrote:\nclick[buy now]" in turns[-1][2]


def test_verifier_rejection_blocks_the_purchase():
    env = WebShopEnv(profile="shopper_verifier")
    turns, rewards = play(env, verdicts=("REJECT: wrong colour", "I approve."))
    verifier_rounds = [r for r, agent, _, _ in turns if agent == "verifier_0"]
    assert len(verifier_rounds) == 2 and rewards["shopper_0"] == pytest.approx(1.0)
    after_reject = next(t for t in turns if t[0] == verifier_rounds[0] + 1)
    assert "invalid: The verifier rejected the purchase" in after_reject[2]
    assert after_reject[3]["page"] == "item"  # still on the item page, nothing bought


def test_unclear_verdict_rejects_unless_configured():
    _, rewards = play(WebShopEnv(profile="shopper_verifier", max_steps=8), verdicts=["hmm"] * 10)
    assert rewards["shopper_0"] == 0.0
    _, rewards = play(WebShopEnv(profile="shopper_verifier", approve_when_unclear=True), verdicts=["hmm"])
    assert rewards["shopper_0"] == pytest.approx(1.0)


def test_hostile_shopper_never_crashes_and_truncates_at_max_steps():
    hostile = iter(["click[buy now]", "search[" + "a" * 100_000 + "]", "click[buy now", "]][[", "click[next >]",
                    "\ud800", "click[back to search]", "click[xyz]", "search[]", ""] * 3)
    env = WebShopEnv(max_steps=12)
    turns, rewards = play(env, shopper=lambda session: next(hostile))
    assert len(turns) == 12 and rewards["shopper_0"] == 0.0
    assert env.ends == {"shopper_0": (False, True)}
    errors = [info["webshop"].get("valid") for _, _, _, info in turns[1:]]
    assert errors.count(False) >= 8  # the invalid ones were reported, none ended the episode


def test_observation_and_infos():
    env = WebShopEnv(action_mask=True, max_valid_actions=16)
    env.reset(seed=3)
    info = env.infos["shopper_0"]
    assert env.observe("shopper_0")["text"].startswith("WebShop [SEP] Instruction: [SEP] ")
    assert info["valid_actions"] == ["search[<query>]"] and info["has_search_bar"]
    assert info["valid_action_mask"].dtype == np.int8 and info["valid_action_mask"].sum() == 0
    env.step("search[shampoo]")
    info = env.infos["shopper_0"]
    assert info["page"] == "results" and info["valid_action_mask"].tolist()[:12] == [1] * 12
    # An integer utterance picks valid_actions[k] when the mask allows it.
    target = info["valid_actions"][2]
    env.step("2")
    assert env.infos["shopper_0"]["webshop"]["executed"] == target and env.infos["shopper_0"]["page"] == "item"


def test_official_catalog_through_the_env(tmp_path, data_dir):
    shutil.copy(data_dir / "webshop" / "items_ins_v2_1000.json", tmp_path)
    ins = json.loads((tmp_path / "items_ins_v2_1000.json").read_text())
    asins = [a for a, v in ins.items() if v.get("instruction")][:4]
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps([raw_official_product(a, i) for i, a in enumerate(asins)]))
    env = WebShopEnv(catalog="official", data_dir=str(tmp_path), human_goals=False, split="all")
    turns, rewards = play(env)
    assert rewards["shopper_0"] == pytest.approx(1.0)
    assert env.unwrapped.task.task_id.startswith("webshop/official-small-synthetic/all/")


def test_bad_arguments_explain_themselves():
    with pytest.raises(ValueError, match="max_steps"):
        WebShopEnv(horizon=3)
    with pytest.raises(ValueError, match="data_dir"):
        WebShopEnv(catalog="official")
    with pytest.raises(ValueError, match="shopper"):
        WebShopEnv(profile={"roles": [{"name": "planner", "system_prompt": "p"}]})
