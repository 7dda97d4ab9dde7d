"""Load the official WebShop files, unchanged, into a :class:`Catalog`.

Files (see ``../shared/data/webshop/SCHEMA.md``):

================  ===========================  ======================
setting           products                     attributes / goals
================  ===========================  ======================
``small``         ``items_shuffle_1000.json``  ``items_ins_v2_1000.json``
``full``          ``items_shuffle.json``       ``items_ins_v2.json``
human goals       ``items_human_ins.json`` (both settings)
================  ===========================  ======================

Products are normalised as the original ``engine.load_products`` does: ASINs ``"nan"`` or
longer than 10 characters and duplicates are skipped; prices are parsed from ``"$a"`` or
``"$a - $b"`` (no price: 100.0); option names and values are lower-cased, values stripped and
``/`` replaced by ``" | "``; attributes come from the ``items_ins_v2`` file (``DUMMY_ATTR`` when
missing).

Goals as the original ``engine.goal`` builds them: human goals (default) are the labelled
instructions with at least one instruction attribute, in product order; synthetic goals are
the generated instructions, one per combination of option values. Each gets a price bound
(two of the four round tens above the product price, the larger), then all goals are shuffled
with ``random.seed(233)`` and the paper's splits apply: test = goals[0:500], validation =
goals[500:1500], train = the rest. The order is exactly the original's (the shuffle depends
only on the goal count). Two random draws that the original left unseeded — the price inside a
price range and the price bounds — are drawn here from ``random.Random(price_seed)``, so bounds
are reproducible but not the ones of any particular run of the original. The reviews file is
not read: ratings show ``N.A.`` and the Reviews sub-page is empty.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from marft_envs.webshop.catalog_embedded import price_text, sample_price_upper
from marft_envs.webshop.schema import PAPER_SPLITS, Catalog, Goal, Product, as_tuple

FILES = {
    "small": ("items_shuffle_1000.json", "items_ins_v2_1000.json"),
    "full": ("items_shuffle.json", "items_ins_v2.json"),
}
HUMAN_GOALS_FILE = "items_human_ins.json"
GOAL_SHUFFLE_SEED = 233


@dataclass(frozen=True)
class OfficialConfig:
    """Where the official files are and which goals to build."""

    data_dir: str
    """Folder holding the WebShop ``data/`` files."""
    setting: str = "small"
    """``"small"`` (1,000 products) or ``"full"``."""
    human_goals: bool = True
    """Human-written goals (``items_human_ins.json``) or the generated ones (``items_ins_v2``)."""
    num_products: int | None = None
    """Use only the first N products of the (already shuffled) product file."""
    price_seed: int = 0
    """Seed for the draws the original left unseeded (price in a range, price bounds)."""


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(
            f"WebShop file {path} not found. The official files come with WebShop's setup "
            "(setup.sh downloads items_shuffle_1000.json, items_ins_v2_1000.json and "
            "items_human_ins.json); pass their folder as data_dir, or use the embedded catalog."
        )
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def parse_pricing(pricing: Any) -> tuple[float, ...]:
    """``"$877.80"`` -> (877.8,), ``"$10.99 - $15.99"`` -> (10.99, 15.99), ``""`` -> ()."""
    if not pricing or not isinstance(pricing, str):
        return ()
    values = []
    for part in pricing.split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", part)
        if digits.count(".") > 1 or not digits.strip("."):
            continue  # malformed fragment: skip rather than crash on a user's file
        values.append(float(Decimal(digits)))
    return tuple(values[:2])


def parse_options(customization: Any) -> dict[str, tuple[str, ...]]:
    """``customization_options`` -> {lower-case name: lower-case values}."""
    options: dict[str, tuple[str, ...]] = {}
    if not isinstance(customization, Mapping):
        return options
    for name, contents in customization.items():
        if contents is None:
            continue
        values = [str(c.get("value", "") if isinstance(c, Mapping) else c).strip().replace("/", " | ").lower()
                  for c in contents]
        options[str(name).lower()] = tuple(values)
    return options


def _product(raw: Mapping[str, Any], attributes: Mapping[str, Any], rng: random.Random) -> Product:
    asin = raw["asin"]
    pricing = parse_pricing(raw.get("pricing"))
    if not pricing:
        price = 100.0
    elif len(pricing) == 1:
        price = pricing[0]
    else:
        price = rng.uniform(*pricing)
    attrs = attributes.get(asin, {}).get("attributes") if isinstance(attributes.get(asin), Mapping) else None
    return Product(
        asin=asin,
        name=str(raw.get("name", "")),
        query=str(raw.get("query", "")).lower().strip(),
        category=str(raw.get("category", "")),
        product_category=str(raw.get("product_category", "")),
        bullet_points=as_tuple(raw.get("small_description")),
        description=str(raw.get("full_description") or ""),
        attributes=as_tuple(attrs) if attrs else ("DUMMY_ATTR",),
        options=parse_options(raw.get("customization_options")),
        pricing=pricing if pricing else (100.0,),
        price=price,
    )


def _goal(product: Product, text: str, attributes, options, names, rng: random.Random, **meta) -> Goal:
    upper = sample_price_upper(product.price, rng)
    return Goal(
        asin=product.asin, instruction_text=text + price_text(upper), attributes=as_tuple(attributes),
        goal_options=tuple(o for o in as_tuple(options) if o), price_upper=upper, name=product.name,
        query=product.query, category=product.category, product_category=product.product_category,
        option_names=tuple(names), search_query=product.query, metadata=meta,
    )


def _human_goals(products: list[Product], human: Mapping[str, Any], rng: random.Random) -> list[Goal]:
    goals = []
    for product in products:
        for entry in human.get(product.asin, []) or []:
            if not entry.get("instruction_attributes"):
                continue  # the original skips goals without attributes
            options = [o for o in as_tuple(entry.get("instruction_options")) if o]
            goals.append(_goal(
                product, str(entry["instruction"]).strip("."), entry["instruction_attributes"], options,
                [""] * len(options), rng, source="human", assignment_id=entry.get("assignment_id", ""),
            ))
    return goals


def _synthetic_goals(products: list[Product], attributes: Mapping[str, Any], rng: random.Random) -> list[Goal]:
    goals = []
    counts: dict[str, int] = {}
    for product in products:
        info = attributes.get(product.asin) or {}
        if not info.get("instruction") or not info.get("instruction_attributes"):
            continue
        # One price bound per product, shared by all its option combinations (as the original).
        upper = sample_price_upper(product.price, rng)
        names = sorted(product.options)
        for combo in itertools.product(*(product.options[n] for n in names)):
            option_text = ", and ".join(f"{n}: {v}" for n, v in zip(names, combo))
            text = info["instruction"] + (f" with {option_text}" if option_text else "")
            goals.append(Goal(
                asin=product.asin, instruction_text=text + price_text(upper),
                attributes=as_tuple(info["instruction_attributes"]), goal_options=tuple(combo),
                price_upper=upper, name=product.name, query=product.query, category=product.category,
                product_category=product.product_category, option_names=tuple(names),
                search_query=product.query, metadata={"source": "synthetic"},
            ))
            for a in info["instruction_attributes"]:
                counts[a] = counts.get(a, 0) + 1
    # The original weights synthetic goals by the rarity of their attributes.
    return [replace(g, weight=sum(1.0 / counts[a] for a in g.attributes) / len(g.attributes)) for g in goals]


@functools.lru_cache(maxsize=4)
def load_official_catalog(config: OfficialConfig) -> Catalog:
    """Read the official files named by ``config`` (unchanged) into a catalog with paper splits.

    Read once per config per process (envs built for tests and parallel rollouts share it)."""
    if config.setting not in FILES:
        raise ValueError(f"setting must be one of {sorted(FILES)}, got {config.setting!r}")
    root = Path(config.data_dir).expanduser()
    products_file, attributes_file = FILES[config.setting]
    raw_products = _read_json(root / products_file)
    attributes = _read_json(root / attributes_file)
    if not isinstance(raw_products, list) or not isinstance(attributes, Mapping):
        raise ValueError(f"{products_file} must hold a JSON list and {attributes_file} a JSON object")
    if config.num_products is not None:
        raw_products = raw_products[: config.num_products]
    rng = random.Random(config.price_seed)
    products, seen = [], set()
    for raw in raw_products:
        asin = raw.get("asin")
        if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(_product(raw, attributes, rng))
    if config.human_goals:
        goals = _human_goals(products, _read_json(root / HUMAN_GOALS_FILE), rng)
    else:
        goals = _synthetic_goals(products, attributes, rng)
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    kind = "human" if config.human_goals else "synthetic"
    return Catalog(name=f"official-{config.setting}-{kind}", products=products, goals=goals, splits=dict(PAPER_SPLITS))
