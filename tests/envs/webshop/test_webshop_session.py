"""Page flow, text format, valid actions, invalid/hostile actions and the step limit."""

from __future__ import annotations

import random

import pytest

from marft_envs.webshop import SessionConfig, WebShopSession, compute_reward, parse_action
from marft_envs.webshop.pages import SEP
from marft_envs.webshop.policies import oracle_action, random_action, run_episode


@pytest.fixture
def session(catalog):
    return WebShopSession(catalog)


@pytest.fixture
def goal(catalog):
    return catalog.split("test")[0]


def _to_item(session, goal):
    session.reset(goal)
    session.step(f"search[{goal.search_query}]")
    while f"click[{goal.asin.lower()}]" not in session.valid_actions():
        session.step("click[next >]")
    return session.step(f"click[{goal.asin.lower()}]")


def test_search_page_text_and_actions(session, goal):
    obs = session.reset(goal)
    assert obs == f"WebShop{SEP}Instruction:{SEP}{goal.instruction_text}{SEP}Search"
    assert session.valid_actions() == ["search[<query>]"]
    assert session.info()["has_search_bar"] is True


def test_results_pages_and_paging(session, goal):
    session.reset(goal)
    result = session.step("search[free]")  # a word of many products: a full 50-hit list
    parts = result.observation.split(SEP)
    assert parts[:4] == ["Instruction:", goal.instruction_text, "Back to Search", "Page 1 (Total results: 50)"]
    assert parts[4] == "Next >" and "< Prev" not in parts
    # ASIN, title, price triples; clicks use the lower-cased ASIN.
    first = session.state.page_results()[0]
    assert parts[5:8] == [first.asin, first.name, first.price_tag]
    assert f"click[{first.asin.lower()}]" in result.info["valid_actions"]
    assert "click[buy now]" not in result.info["valid_actions"]
    page2 = session.step("click[Next >]")  # case-insensitive like the original
    assert "Page 2 (Total results: 50)" in page2.observation and "< Prev" in page2.observation
    assert session.step("click[< prev]").observation == result.observation


def test_item_options_sub_pages_and_back(session, goal, catalog):
    item = _to_item(session, goal)
    product = catalog.by_asin[goal.asin]
    parts = item.observation.split(SEP)
    assert parts[2:4] == ["Back to Search", "< Prev"]
    assert parts[-7:] == [product.name, f"Price: {product.price_tag}", f"Rating: {product.rating}",
                          "Description", "Features", "Reviews", "Buy Now"]
    for name, values in product.options.items():
        assert name in parts and all(f"click[{v}]" in item.info["valid_actions"] for v in values)
    value = next(iter(product.options.values()))[0]
    assert session.step(f"click[{value}]").info["selected_options"] == {next(iter(product.options)): value}
    features = session.step("click[features]")
    assert features.observation.split(SEP)[4:] == list(product.bullet_points)
    assert features.info["valid_actions"] == ["click[back to search]", "click[< prev]"]
    back = session.step("click[< prev]")
    assert back.info["page"] == "item" and back.info["selected_options"] == {next(iter(product.options)): value}
    assert session.step("click[< prev]").info["page"] == "results"
    assert session.step("click[back to search]").observation == session.reset(goal)


def test_buy_gives_the_reward_function_value(session, goal, catalog):
    _to_item(session, goal)
    result = session.step("click[buy now]")  # no option chosen
    expected = compute_reward(catalog.by_asin[goal.asin], goal, None, {})
    assert result.done and not result.truncated
    assert result.reward == pytest.approx(expected.reward) and result.reward < 1.0
    assert result.info["reward_info"]["r_option"] == expected.r_option
    assert result.observation.startswith("Thank you for shopping with us!")
    after = session.step("click[buy now]")
    assert after.reward == 0.0 and after.done and after.info["valid"] is False


HOSTILE = [
    "click[unknown button]", "click[buy now]", "search[" + "x" * 100_000 + "]", "click[buy now",
    "search]]tea[[", "[click]", "", "   ", "search[]", "click[]", "click[search]", "CLICK[[buy now]]",
    "\ud800\x00\x1b[31m", "search[\u202e\U0001F600 ünïcödé ]", 12345, None, ["click[buy now]"],
]


@pytest.mark.parametrize("action", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_actions_never_crash_or_end_on_results_page(session, goal, action):
    session.reset(goal)
    session.step("search[shampoo]")
    before = session.observation
    result = session.step(action)
    assert not result.done and not result.truncated and result.reward == 0.0
    assert result.info["valid"] is False and result.info["error"]
    assert result.observation == before


def test_long_and_unicode_searches_are_valid_on_the_search_page(session, goal):
    session.reset(goal)
    result = session.step("search[" + "shampoo " * 20_000 + "]")
    assert result.info["valid"] and result.info["page"] == "results"
    session.reset(goal)
    assert session.step("search[ünïcödé \U0001F600]").info["page"] == "results"  # zero hits is fine
    assert session.state.results == ()
    session.reset(goal)
    assert session.step("Thought: I should look.\nAction: search[tea tree shampoo]").info["valid"]


def test_strict_parse_and_search_anywhere(catalog, goal):
    strict = WebShopSession(catalog, SessionConfig(strict_parse=True, search_anywhere=True))
    strict.reset(goal)
    assert not strict.step("Action: search[shampoo]").info["valid"]
    assert strict.step("search[shampoo]").info["valid"]
    assert strict.step("search[lip balm]").info["valid"]  # search from the results page
    assert parse_action("search[a[b]c]", strict=True) == ("search", "a[b]c", "")
    assert parse_action("click[x] then click[y]")[:2] == ("click", "y")


def test_step_limit_truncates_without_reward(catalog, goal):
    session = WebShopSession(catalog, SessionConfig(max_steps=3))
    session.reset(goal)
    results = [session.step("click[nothing]") for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    assert all(r.reward == 0.0 and not r.done for r in results)
    assert session.step("search[x]").info["error"].startswith("the episode is over")


def test_oracle_and_random_policies(catalog, session):
    goals = catalog.split("test")
    rng = random.Random(0)
    oracle = [run_episode(session, g, oracle_action, rng)[0] for g in goals]
    rand = [run_episode(session, g, random_action, rng)[0] for g in goals]
    assert len(goals) == 500
    assert sum(oracle) / len(oracle) >= 0.95
    assert sum(rand) / len(rand) < 0.4
