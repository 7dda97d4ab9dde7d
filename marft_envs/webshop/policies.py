"""Reference policies for WebShop: an oracle (knows the goal), the paper's rule baseline and a
random valid-action policy.

Both map ``(session, rng)`` to an action string, so they drive a :class:`WebShopSession` or, by
reading the same state, the multi-agent env. Used by ``benchmarks/webshop_oracle.py`` and the
tests; they are yardsticks, not agents.
"""

from __future__ import annotations

import random

from marft_envs.webshop.pages import NEXT_PAGE, PageKind
from marft_envs.webshop.reward import fuzzy_score, normalize_color
from marft_envs.webshop.session import SEARCH_TEMPLATE, WebShopSession


def _option_to_click(session: WebShopSession) -> str | None:
    """The first goal option not yet chosen, as the product's own value (exact, else fuzzy)."""
    product, goal = session.product, session.goal
    chosen = set(session.state.options.values())
    for wanted in goal.goal_options:
        candidates = [v for values in product.options.values() for v in values]
        exact = [v for v in candidates if v.lower() == wanted.lower()]
        if exact:
            best = exact[0]
        else:
            scored = [(fuzzy_score(normalize_color(v), normalize_color(wanted)), v) for v in candidates]
            score, best = max(scored, default=(0, None), key=lambda sv: sv[0])
            if best is None or score <= 85:
                continue
        if best not in chosen:
            return best
    return None


def oracle_action(session: WebShopSession, rng: random.Random | None = None) -> str:
    """Search the goal's query, page to the goal's product, pick its options, buy."""
    goal, state = session.goal, session.state
    if state.kind is PageKind.SEARCH:
        return f"search[{goal.search_query or goal.query or goal.instruction_text}]"
    if state.kind is PageKind.RESULTS:
        if any(p.asin == goal.asin for p in state.page_results()):
            return f"click[{goal.asin.lower()}]"
        if NEXT_PAGE.lower() in session.clickables():
            return f"click[{NEXT_PAGE.lower()}]"
        # Not found: buy the top hit rather than wander (a fair oracle does not use the catalog).
        top = state.page_results()[:1]
        return f"click[{top[0].asin.lower()}]" if top else "click[back to search]"
    if state.kind is PageKind.SUB_PAGE:
        return "click[< prev]"
    if state.kind is PageKind.ITEM:
        option = _option_to_click(session) if state.asin == goal.asin else None
        return f"click[{option}]" if option else "click[buy now]"
    return "click[buy now]"


def first_result_action(session: WebShopSession, rng: random.Random | None = None) -> str:
    """The paper's rule baseline: search the instruction text, open the first hit, buy it."""
    state = session.state
    if state.kind is PageKind.SEARCH:
        return f"search[{session.goal.instruction_text}]"
    if state.kind is PageKind.RESULTS and state.page_results():
        return f"click[{state.page_results()[0].asin.lower()}]"
    return "click[buy now]"


def random_action(session: WebShopSession, rng: random.Random) -> str:
    """A uniformly random valid action; the search query is 1-4 random words of the instruction."""
    action = rng.choice(session.valid_actions() or [SEARCH_TEMPLATE])
    if action == SEARCH_TEMPLATE:
        words = session.goal.instruction_text.replace(",", " ").split()
        return f"search[{' '.join(rng.sample(words, min(len(words), rng.randint(1, 4))))}]"
    return action


def run_episode(session: WebShopSession, goal, policy, rng: random.Random) -> tuple[float, int, dict]:
    """Play one goal with ``policy``; returns ``(reward, steps, last info)``."""
    session.reset(goal)
    while True:
        result = session.step(policy(session, rng))
        if result.done or result.truncated:
            return result.reward, session.steps, result.info
