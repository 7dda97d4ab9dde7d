"""The embedded WebShop catalog: a seeded generator of products and goals (no download).

Products follow the official schema (title, scrape query, category breadcrumb, bullet points,
description, attributes, option groups, price or price range, reviews) over the vocabulary in
:mod:`marft_envs.webshop.embedded_vocab`: 30 product types in 5 categories, about
``num_products / 30`` products per type, so a query must name the right attributes to find one
product among its look-alikes. Every goal is written for one product and knows its attributes
(2-3 of the product's), its option values (one per asked group) and its price bound (the
original's rule: two of the four round tens above the price, the larger one).

Determinism: the catalog is a pure function of :class:`EmbeddedConfig` (Python's
``random.Random`` with the config's seed; no global state), and is built once per config.
"""

from __future__ import annotations

import functools
import random
import string
from dataclasses import dataclass

from marft_envs.webshop.embedded_vocab import (
    BRAND_SYLLABLES, DESCRIPTION_OPENINGS, INSTRUCTION_OPENINGS, OPTION_PHRASES, OPTION_POOLS,
    PRODUCT_TYPES, REVIEW_LINES, ProductType,
)
from marft_envs.webshop.reward import FUZZY_THRESHOLD, fuzzy_score, normalize_color
from marft_envs.webshop.schema import Catalog, Goal, Product, Review

PRICE_RANGE = [10.0 * i for i in range(1, 100)]
"""Candidate price bounds (the original's ``PRICE_RANGE``)."""
NO_PRICE_BOUND = 1_000_000.0
"""Bound used when no candidate fits (prices of 990 dollars or more), as in the original."""
_SMALL_WORDS = {"for", "and", "with", "of", "in", "the", "a"}


@dataclass(frozen=True)
class EmbeddedConfig:
    """Size and seed of the embedded catalog."""

    seed: int = 0
    """Seed of the generator; the same seed gives the same catalog on every platform."""
    num_products: int = 1000
    """Number of products (the original small setting has 1,000)."""
    goals_per_product: int = 2
    """Goals written for each product (each with its own attributes, options and bound)."""
    test_size: int = 500
    """Goals in the test split (the first ones after the seeded shuffle)."""
    val_size: int = 500
    """Goals in the validation split (the next ones); the rest is the train split."""

    def __post_init__(self) -> None:
        for name in ("num_products", "goals_per_product"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"EmbeddedConfig.{name} must be a positive int, got {getattr(self, name)!r}")
        if self.test_size < 0 or self.val_size < 0:
            raise ValueError("EmbeddedConfig.test_size and val_size must be >= 0")


def sample_price_upper(price: float, rng: random.Random) -> float:
    """The original's bound: of the first four multiples of ten above ``price``, pick two at random
    and keep the larger (``NO_PRICE_BOUND`` when fewer than two exist)."""
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_BOUND
    return max(rng.sample(candidates, 2))


def price_text(price_upper: float) -> str:
    """The instruction suffix for a bound (empty when unbounded)."""
    return "" if price_upper >= NO_PRICE_BOUND else f", and price lower than {price_upper:.2f} dollars"


def _title_case(text: str) -> str:
    words = text.split()
    return " ".join(w if (w in _SMALL_WORDS and i) else w[:1].upper() + w[1:] for i, w in enumerate(words))


def _distinct_values(pool: tuple[str, ...], k: int, rng: random.Random) -> tuple[str, ...]:
    """Up to ``k`` values of ``pool`` no two of which the reward's fuzzy option match confuses
    (e.g. not both "large" and "x-large"), so each product's choices are distinguishable."""
    chosen: list[str] = []
    for value in rng.sample(pool, len(pool)):
        norm = normalize_color(value)
        if all(fuzzy_score(normalize_color(c), norm) <= FUZZY_THRESHOLD for c in chosen):
            chosen.append(value)
        if len(chosen) == k:
            break
    return tuple(chosen)


def _brands(rng: random.Random, n: int = 90) -> list[str]:
    brands: set[str] = set()
    while len(brands) < n:
        brands.add("".join(rng.sample(BRAND_SYLLABLES, rng.choice((2, 2, 3)))).capitalize())
    return sorted(brands)


def _make_product(kind: ProductType, asin: str, brand: str, rng: random.Random) -> Product:
    attributes = tuple(rng.sample(kind.attributes, rng.randint(3, min(5, len(kind.attributes)))))
    groups = list(kind.options) if len(kind.options) < 2 or rng.random() < 0.7 else [kind.options[0]]
    options = {g: _distinct_values(OPTION_POOLS[g], rng.randint(2, 5), rng) for g in groups}
    shown = attributes[: rng.choice((1, 2))]
    use = f" {rng.choice(kind.uses)}" if kind.uses and rng.random() < 0.6 else ""
    title = _title_case(f"{brand.lower()} {' '.join(shown)} {kind.noun}{use}")
    bullets = [f"{a.upper()}: this {kind.noun} is {a} so it fits the way you live." if i % 2 == 0
               else f"{_title_case(a)} - made with care, {a} and tested for everyday use."
               for i, a in enumerate(attributes)]
    bullets.append(f"What you get: one {brand} {kind.noun} and our friendly customer service.")
    opener = rng.choice(DESCRIPTION_OPENINGS).format(brand=brand, noun=kind.noun)
    description = (f"{opener} It is {', '.join(attributes[:-1])} and {attributes[-1]}. "
                   + " ".join(f"Choose your {g}: {', '.join(v)}." for g, v in options.items()))
    low, high = kind.price
    base = round(rng.uniform(low, high)) - 0.01
    if rng.random() < 0.15:
        top = round(base + rng.uniform(2, 0.3 * high + 2)) - 0.01
        pricing, price = (base, top), round(rng.uniform(base, top), 2)
    else:
        pricing, price = (base,), base
    reviews = tuple(Review(*line) for line in rng.sample(REVIEW_LINES, rng.randint(0, 2)))
    rating = f"{sum(r.score for r in reviews) / len(reviews):.1f}" if reviews else "N.A."
    return Product(
        asin=asin, name=title, query=kind.noun, category=kind.category,
        product_category=" › ".join(kind.crumbs), bullet_points=tuple(bullets), description=description,
        attributes=attributes, options=options, pricing=pricing, price=price, rating=rating, reviews=reviews,
    )


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _make_goal(product: Product, rng: random.Random) -> Goal:
    attrs = rng.sample(product.attributes, min(len(product.attributes), rng.randint(2, 3)))
    groups = list(product.options)
    if len(groups) > 1 and rng.random() < 0.2:
        groups.remove(rng.choice(groups))  # some buyers do not care about every option
    values = [rng.choice(product.options[g]) for g in groups]
    noun = product.query
    item = (f"{_join(attrs)} {noun}" if rng.random() < 0.5 else f"a {noun} that is {_join(attrs)}")
    phrases = [OPTION_PHRASES.get(g, "with {g} {v}").format(v=v, g=g) for g, v in zip(groups, values)]
    upper = sample_price_upper(product.price, rng)
    text = rng.choice(INSTRUCTION_OPENINGS).format(item=item)
    if phrases:
        text += " " + _join(phrases)
    return Goal(
        asin=product.asin, instruction_text=text + price_text(upper), attributes=tuple(attrs),
        goal_options=tuple(values), price_upper=upper, name=product.name, query=product.query,
        category=product.category, product_category=product.product_category,
        option_names=tuple(groups), search_query=f"{' '.join(attrs)} {noun}",
        metadata={"source": "embedded"},
    )


@functools.lru_cache(maxsize=8)
def build_embedded_catalog(config: EmbeddedConfig = EmbeddedConfig()) -> Catalog:
    """Generate (once per config) the embedded catalog with its goals and splits."""
    rng = random.Random(f"marft-webshop-{config.seed}")
    brands = _brands(rng)
    asins: set[str] = set()
    products = []
    for i in range(config.num_products):
        kind = PRODUCT_TYPES[i % len(PRODUCT_TYPES)]  # balanced: ~num_products / 30 per type
        asin = ""
        while not asin or asin in asins:
            asin = "B0" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=8))
        asins.add(asin)
        products.append(_make_product(kind, asin, rng.choice(brands), rng))
    rng.shuffle(products)  # catalog order (and search tie-breaks) independent of the type cycle
    goals = [_make_goal(p, rng) for p in products for _ in range(config.goals_per_product)]
    rng.shuffle(goals)
    t, v = config.test_size, config.val_size
    splits = {"test": (0, t), "val": (t, t + v), "train": (t + v, None)}
    return Catalog(name=f"embedded-s{config.seed}-n{config.num_products}", products=products, goals=goals, splits=splits)
