"""A single-agent WebShop session: goal in, text pages out, ``search[...]`` / ``click[...]`` in.

Usable without PettingZoo::

    from marft_envs.webshop import WebShopSession, build_embedded_catalog
    catalog = build_embedded_catalog()
    session = WebShopSession(catalog)
    obs = session.reset(catalog.split("test")[0])
    result = session.step("search[tea tree shampoo]")
    result.observation, result.reward, result.done, result.info["valid_actions"]

Actions: ``search[<keywords>]`` (on a page with a search bar) and ``click[<element>]`` with an
element of ``info["valid_actions"]`` (case-insensitive). An invalid action (unknown button,
malformed brackets, empty query, a click that is not on the page, anything else) changes
nothing: the page stays, ``info["valid"]`` is False and ``info["error"]`` says why. Every step
counts towards ``max_steps``; reaching it without buying ends the episode with reward 0
(``truncated``). ``click[buy now]`` on an item page ends it with the WebShop reward, whose
components are in ``info["reward_info"]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marft_envs.webshop.pages import (
    END_BUTTON, PageKind, PageState, clickables, click, has_search_bar, render, search_results_state,
)
from marft_envs.webshop.reward import RewardBreakdown, compute_reward
from marft_envs.webshop.schema import Catalog, Goal, Product
from marft_envs.webshop.search import SearchConfig, SearchEngine

SEARCH_TEMPLATE = "search[<query>]"
"""How ``valid_actions`` lists the search action (the query is free text)."""
_STRICT = re.compile(r"\s*(search|click)\s*\[(.*)\]\s*", re.IGNORECASE | re.DOTALL)
_LENIENT = re.compile(r"(search|click)\s*\[([^\[\]\n]*)\]", re.IGNORECASE)


@dataclass(frozen=True)
class SessionConfig:
    """Rules of a session."""

    max_steps: int = 15
    """Actions per episode (valid or not) before it is truncated with reward 0."""
    show_attrs: bool = False
    """Show the "Attributes" sub-page button (the original's ``show_attrs``)."""
    search_anywhere: bool = False
    """Accept ``search[...]`` on every page (the original text env did; its valid-action list
    offered search only on the search page, which is the default here)."""
    strict_parse: bool = False
    """True: the whole action must be ``search[...]`` or ``click[...]``. False: the last
    ``search[...]``/``click[...]`` in the text is used, so "Thought: ... Action: click[x]" works."""
    search: SearchConfig = field(default_factory=SearchConfig)
    """Search engine settings."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError(f"SessionConfig.max_steps must be a positive int, got {self.max_steps!r}")


@dataclass
class StepResult:
    """What one action produced."""

    observation: str
    """The page text after the action."""
    reward: float
    """The WebShop reward when this action bought something, else 0."""
    done: bool
    """The episode ended by a purchase."""
    truncated: bool
    """The episode ended by the step limit."""
    info: dict[str, Any]
    """``valid``, ``error``, ``page``, ``valid_actions``, ``has_search_bar``, ``steps`` and, after a
    purchase, ``reward_info``, ``purchased_asin``, ``purchased_options``."""


def parse_action(action: Any, strict: bool = False) -> tuple[str | None, str | None, str]:
    """``(name, argument, error)``: name is "search"/"click" or None when unparseable."""
    if not isinstance(action, str):
        return None, None, f"an action must be a str, got {type(action).__name__}"
    if strict:
        match = _STRICT.fullmatch(action)
    else:
        matches = list(_LENIENT.finditer(action))
        match = matches[-1] if matches else None
    if match is None:
        return None, None, "expected search[<query>] or click[<element>]"
    return match.group(1).lower(), match.group(2).strip(), ""


def engine_for(catalog: Catalog, config: SearchConfig) -> SearchEngine:
    """The catalog's search engine for ``config`` (built once, then shared)."""
    key = ("search", config)
    if key not in catalog.cache:
        catalog.cache[key] = SearchEngine(catalog.products, config)
    return catalog.cache[key]


class WebShopSession:
    """One shopper on one catalog; :meth:`reset` starts an episode for a goal."""

    def __init__(self, catalog: Catalog, config: SessionConfig | None = None):
        self.catalog = catalog
        self.config = config or SessionConfig()
        self.engine = engine_for(catalog, self.config.search)
        self.goal: Goal | None = None
        self.state = PageState()
        self.steps = 0
        self.done = False
        self.truncated = False
        self.reward_info: RewardBreakdown | None = None

    # -- state views -----------------------------------------------------------------------------
    @property
    def product(self) -> Product | None:
        """The product of the current item page / sub-page."""
        return self.catalog.by_asin.get(self.state.asin) if self.state.asin else None

    @property
    def observation(self) -> str:
        if self.goal is None:
            raise RuntimeError("call reset(goal) before reading the observation")
        return render(self.state, self.goal.instruction_text, self.product, self.config.show_attrs)

    def clickables(self) -> dict[str, Any]:
        if self.done or self.truncated:
            return {}
        return clickables(self.state, self.product, self.config.show_attrs)

    def search_allowed(self) -> bool:
        return not (self.done or self.truncated) and (has_search_bar(self.state) or self.config.search_anywhere)

    def valid_actions(self) -> list[str]:
        """Actions that do something on this page (the search entry is a template)."""
        actions = [SEARCH_TEMPLATE] if self.search_allowed() else []
        return actions + [f"click[{key}]" for key in self.clickables()]

    def action_mask(self, size: int) -> np.ndarray:
        """``[size]`` int8, 1 where ``valid_actions()[i]`` is a concrete click (not the template)."""
        mask = np.zeros(size, dtype=np.int8)  # [size]
        for i, action in enumerate(self.valid_actions()[:size]):
            mask[i] = action != SEARCH_TEMPLATE
        return mask

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "page": self.state.kind.value,
            "valid_actions": self.valid_actions(),
            "has_search_bar": self.search_allowed(),
            "steps": self.steps,
            "max_steps": self.config.max_steps,
            "selected_asin": self.state.asin,
            "selected_options": dict(self.state.options),
        }
        if self.reward_info is not None:
            info["reward_info"] = self.reward_info.as_dict()
        return info

    # -- episode ---------------------------------------------------------------------------------
    def reset(self, goal: Goal) -> str:
        """Start at the search page with ``goal``; returns the first observation."""
        if not isinstance(goal, Goal):
            raise TypeError(f"reset needs a webshop Goal, got {type(goal).__name__}")
        if goal.asin not in self.catalog.by_asin:
            raise ValueError(f"goal product {goal.asin} is not in catalog {self.catalog.name!r}")
        self.goal, self.state, self.steps = goal, PageState(), 0
        self.done = self.truncated = False
        self.reward_info = None
        return self.observation

    def step(self, action: Any) -> StepResult:
        """Apply one action (never raises for a bad action; see the module docstring)."""
        if self.goal is None:
            raise RuntimeError("call reset(goal) before step()")
        if self.done or self.truncated:
            info = {**self.info(), "valid": False, "error": "the episode is over; call reset()"}
            return StepResult(self.observation, 0.0, self.done, self.truncated, info)
        self.steps += 1
        error, reward, extra = self._apply(action), 0.0, {}
        if self.state.kind is PageKind.DONE and self.reward_info is not None and not self.done:
            self.done, reward = True, self.reward_info.reward
            extra = {"purchased_asin": self.state.asin, "purchased_options": dict(self.state.options)}
        if not self.done and self.steps >= self.config.max_steps:
            self.truncated = True
        info = {**self.info(), **extra, "valid": not error, "error": error}
        return StepResult(self.observation, reward, self.done, self.truncated, info)

    def _apply(self, action: Any) -> str:
        """Change the page for ``action``; returns "" or why the action was invalid."""
        name, arg, error = parse_action(action, self.config.strict_parse)
        if error:
            return error
        if name == "search":
            if not self.search_allowed():
                return "there is no search bar on this page; click[back to search] first"
            # Lower-cased and split on spaces as the original; the engine caps the length.
            query = arg.lower()[: self.config.search.max_query_chars].strip()
            if not query:
                return "empty search query"
            keywords = tuple(query.split(" "))
            self.state = search_results_state(keywords, tuple(self.engine.search(query)))
            return ""
        key = arg.lower()
        elements = self.clickables()
        if key not in elements:
            if key == "search":
                return "type a query with search[<query>] instead of clicking the search button"
            return f"{arg[:80]!r} is not clickable on this page; see valid_actions"
        element = elements[key]
        if element.kind == "button" and element.value == END_BUTTON:
            product = self.product
            self.reward_info = compute_reward(product, self.goal, product.price, self.state.options)
            self.state = PageState(kind=PageKind.DONE, asin=product.asin, options=dict(self.state.options),
                                   reward=self.reward_info.reward)
            return ""
        self.state = click(self.state, element)
        return ""
