"""WebShop pages: state, text rendering, clickable elements and transitions.

Page flow (as the original site): search -> results (10 per page, 50 hits at most) -> item
(options, Buy Now) <-> sub-pages (Description / Features / Reviews, and Attributes when
``show_attrs``) -> done. "Back to Search" returns to the search page from any page; "< Prev"
goes from a sub-page to its item, from an item to its results page, and from results page n to
page n - 1; "Next >" goes to the next results page.

Text rendering follows the original text env's ``simple`` mode: the page's visible strings in
document order joined by ``" [SEP] "`` (templates of the WebShop version whose item and sub
pages carry a "< Prev" button), e.g.::

    Instruction: [SEP] i need a lip balm ... [SEP] Back to Search [SEP] Page 1 (Total results:
    50) [SEP] Next > [SEP] B0K4M5P8QJ [SEP] Solmar Cruelty Free Lip Balm [SEP] $3.99 [SEP] ...

Deliberate differences: "Next >" appears only while more results exist (the original always
showed it and served empty pages), and the done page shows just the thank-you line and the score
(the original page also held hidden debugging text and an MTurk code).

Clickables are keyed like the original's ``text_to_clickable``: button texts and product ASINs
lower-cased, option values as they are (the catalogs lower-case them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from marft_envs.webshop.schema import Product

SEP = " [SEP] "
PRODUCT_WINDOW = 10
"""Products per results page (the original's ``PRODUCT_WINDOW``)."""
BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
END_BUTTON = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")


class PageKind(str, Enum):
    """Which page the browser shows."""

    SEARCH = "search"
    RESULTS = "results"
    ITEM = "item"
    SUB_PAGE = "item_sub_page"
    DONE = "done"


@dataclass(frozen=True)
class PageState:
    """Everything needed to render the current page."""

    kind: PageKind = PageKind.SEARCH
    """The page type."""
    keywords: tuple[str, ...] = ()
    """The last search's keywords (lower case, split on spaces, as the original)."""
    results: tuple[Product, ...] = ()
    """All hits of the last search, best first."""
    page: int = 1
    """Results page number, from 1."""
    asin: str | None = None
    """The product of the item page and its sub-pages."""
    options: dict[str, str] = field(default_factory=dict)
    """Option name -> chosen value on the current item."""
    sub_page: str | None = None
    """Which sub-page (one of ``SUB_PAGES``)."""
    reward: float | None = None
    """The score, on the done page."""

    def page_results(self) -> tuple[Product, ...]:
        """The products listed on the current results page."""
        return self.results[(self.page - 1) * PRODUCT_WINDOW : self.page * PRODUCT_WINDOW]


@dataclass(frozen=True)
class Clickable:
    """One element a ``click[...]`` can reach."""

    kind: str
    """``"button"``, ``"product"`` or ``"option"``."""
    value: str
    """Button text, ASIN (upper case) or option value."""
    group: str = ""
    """Option name, for options."""


def has_search_bar(state: PageState) -> bool:
    """Only the search page has a search box."""
    return state.kind is PageKind.SEARCH


def clickables(state: PageState, product: Product | None, show_attrs: bool = False) -> dict[str, Clickable]:
    """Key (what goes inside ``click[...]``) -> element, in page order."""
    out: dict[str, Clickable] = {}

    def button(text: str) -> None:
        out[text.lower()] = Clickable("button", text)

    if state.kind is PageKind.RESULTS:
        button(BACK_TO_SEARCH)
        if state.page > 1:
            button(PREV_PAGE)
        if state.page * PRODUCT_WINDOW < len(state.results):
            button(NEXT_PAGE)
        for p in state.page_results():
            out[p.asin.lower()] = Clickable("product", p.asin)
    elif state.kind is PageKind.ITEM and product is not None:
        button(BACK_TO_SEARCH)
        button(PREV_PAGE)
        for name, values in product.options.items():
            for value in values:
                out[value] = Clickable("option", value, name)  # a value shared by two groups: the last wins, as the original
        for sub in SUB_PAGES[: 4 if show_attrs else 3]:
            button(sub)
        button(END_BUTTON)
    elif state.kind is PageKind.SUB_PAGE:
        button(BACK_TO_SEARCH)
        button(PREV_PAGE)
    return out


def render(state: PageState, instruction: str, product: Product | None, show_attrs: bool = False) -> str:
    """The page as text: visible strings joined by ``" [SEP] "``."""
    head = ["Instruction:", instruction]
    if state.kind is PageKind.SEARCH:
        parts = ["WebShop", *head, "Search"]
    elif state.kind is PageKind.RESULTS:
        parts = [*head, BACK_TO_SEARCH, f"Page {state.page} (Total results: {len(state.results)})"]
        parts += [PREV_PAGE] if state.page > 1 else []
        parts += [NEXT_PAGE] if state.page * PRODUCT_WINDOW < len(state.results) else []
        for p in state.page_results():
            parts += [p.asin, p.name, p.price_tag]
    elif state.kind is PageKind.ITEM and product is not None:
        parts = [*head, BACK_TO_SEARCH, PREV_PAGE]
        for name, values in product.options.items():
            parts += [name, *values]
        parts += [product.name, f"Price: {product.price_tag}", f"Rating: {product.rating}"]
        parts += list(SUB_PAGES[: 4 if show_attrs else 3]) + [END_BUTTON]
    elif state.kind is PageKind.SUB_PAGE and product is not None:
        parts = [*head, BACK_TO_SEARCH, PREV_PAGE, *_sub_page_lines(state.sub_page, product)]
    elif state.kind is PageKind.DONE:
        parts = ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{state.reward}"]
    else:  # an item page without a product cannot be reached; render something readable anyway
        parts = [*head, BACK_TO_SEARCH]
    return SEP.join(s.strip() for s in parts if s and s.strip())


def _sub_page_lines(sub_page: str | None, product: Product) -> list[str]:
    if sub_page == "Description":
        return [product.description or "No Description"]
    if sub_page == "Features":
        return list(product.bullet_points) or ["No Features"]
    if sub_page == "Reviews":
        return [line for r in product.reviews for line in (f'"{r.title}"', str(r.score), r.body)]
    if sub_page == "Attributes":
        return list(product.attributes)
    return []


def click(state: PageState, element: Clickable) -> PageState:
    """The page after clicking ``element`` (assumed to be one of ``clickables(state)``).

    "Buy Now" is handled by the session (it needs the reward); here it is a no-op.
    """
    if element.kind == "product":
        return replace(state, kind=PageKind.ITEM, asin=element.value, options={}, sub_page=None)
    if element.kind == "option":
        return replace(state, kind=PageKind.ITEM, options={**state.options, element.group: element.value})
    text = element.value
    if text == BACK_TO_SEARCH:
        return PageState()
    if text == NEXT_PAGE and state.kind is PageKind.RESULTS:
        return replace(state, page=state.page + 1)
    if text == PREV_PAGE:
        if state.kind is PageKind.RESULTS:
            return replace(state, page=max(1, state.page - 1))
        if state.kind is PageKind.SUB_PAGE:
            return replace(state, kind=PageKind.ITEM, sub_page=None)
        if state.kind is PageKind.ITEM:
            # Back to the results page the item was opened from; the choice of options is dropped.
            return replace(state, kind=PageKind.RESULTS, asin=None, options={})
    if text in SUB_PAGES:
        return replace(state, kind=PageKind.SUB_PAGE, sub_page=text)
    return state


def search_results_state(keywords: tuple[str, ...], results: tuple[Product, ...]) -> PageState:
    """The first results page of a new search."""
    return PageState(kind=PageKind.RESULTS, keywords=keywords, results=results, page=1)
