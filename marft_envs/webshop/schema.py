"""Products, goals and catalogs: the data a WebShop session runs on.

The field names follow the original WebShop (Yao et al. 2022, arXiv 2207.01206) after its loader
has normalised a raw product (``Title``, ``BulletPoints``, ``Description``, lower-cased option
names and values, ``pricing`` parsed to floats); see ``../shared/data/webshop/SCHEMA.md`` for the
raw file formats. Both catalogs (the official files and the embedded generator) produce these
objects, so the search engine, the pages and the reward never see where a product came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The paper's goal splits for the official files: test = goals[0:500], validation =
# goals[500:1500], train = the rest (after the fixed shuffle with seed 233).
PAPER_SPLITS: dict[str, tuple[int, int | None]] = {"test": (0, 500), "val": (500, 1500), "train": (1500, None)}


@dataclass(frozen=True)
class Review:
    """One customer review shown on the Reviews sub-page."""

    title: str
    """Review headline."""
    score: int
    """Stars, 1..5."""
    body: str
    """Review text."""


@dataclass(frozen=True)
class Product:
    """One catalog item, normalised as the original loader does."""

    asin: str
    """Product id in upper case (``B06Y3VLDFB``); pages show it, clicks use it lower-cased."""
    name: str
    """The product title (the original's ``name`` == ``Title``)."""
    query: str
    """The search query the product was scraped with, lower-cased (used by the type reward)."""
    category: str
    """Top-level group (``beauty``, ``electronics``, ``fashion``, ``garden``, ``grocery``)."""
    product_category: str
    """Breadcrumb joined by ``" › "`` (used by the type reward)."""
    bullet_points: tuple[str, ...]
    """The "Features" sub-page (the original's ``BulletPoints``)."""
    description: str
    """The "Description" sub-page (the original's ``Description``)."""
    attributes: tuple[str, ...]
    """Short attribute phrases (``"machine wash"``); ``("DUMMY_ATTR",)`` when unknown, as in the
    original."""
    options: Mapping[str, tuple[str, ...]]
    """Option name (lower case) -> values (lower case, ``/`` replaced by ``" | "``)."""
    pricing: tuple[float, ...]
    """One price or a ``(low, high)`` range in dollars."""
    price: float
    """The price the reward checks: the single price, a value drawn once (seeded) inside a range,
    or 100.0 when the product has no price (as the original)."""
    rating: str = "N.A."
    """Shown on the item page as ``Rating: ...``."""
    reviews: tuple[Review, ...] = ()
    """Shown on the Reviews sub-page."""

    @property
    def price_tag(self) -> str:
        """The price as pages show it: ``$12.5`` or ``$10.99 to $15.99`` (the original's format)."""
        if len(self.pricing) >= 2:
            return f"${self.pricing[0]} to ${self.pricing[1]}"
        return f"${self.pricing[0]}" if self.pricing else "$100.0"

    def search_text(self) -> str:
        """The text the search engine indexes: title, description, first bullet and the options,
        lower-cased (the original's ``convert_product_file_format.py`` layout)."""
        option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in self.options.items())
        first_bullet = self.bullet_points[0] if self.bullet_points else ""
        return " ".join([self.name, self.description, first_bullet, option_text]).lower()


@dataclass(frozen=True)
class Goal:
    """One shopping instruction and what a perfect purchase looks like."""

    asin: str
    """The product the instruction was written for."""
    instruction_text: str
    """What the shopper is told (ends with ", and price lower than X dollars" when bounded)."""
    attributes: tuple[str, ...]
    """The attributes the buyer asked for (the original's ``instruction_attributes``)."""
    goal_options: tuple[str, ...]
    """The option values the buyer asked for (``"blue"``, ``"x-large"``)."""
    price_upper: float
    """Price bound in dollars (1,000,000 when the instruction states none)."""
    name: str
    """Title of the goal's product (the type reward compares it with the purchased title)."""
    query: str
    """Scrape query of the goal's product (type reward)."""
    category: str
    """Top-level category of the goal's product."""
    product_category: str
    """Breadcrumb of the goal's product (type reward)."""
    option_names: tuple[str, ...] = ()
    """Option name for each entry of ``goal_options`` when known ("" otherwise); the reward does
    not use it, oracles and analyses do."""
    search_query: str = ""
    """A good search query for this goal (embedded goals; official goals use the product's
    scrape query). Never shown to agents: oracles and planners' references use it."""
    weight: float = 1.0
    """Sampling weight (the original's synthetic goals weight rare attributes up)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Free-form extras (assignment id, source)."""


@dataclass
class Catalog:
    """Products, a search index over them, and goals with named splits."""

    name: str
    """``"embedded"`` or ``"official-small"`` / ``"official-full"`` (appears in task ids)."""
    products: list[Product]
    """All products in catalog order (the search engine's document order)."""
    goals: list[Goal]
    """All goals in their fixed order; splits are index ranges into this list."""
    splits: dict[str, tuple[int, int | None]] = field(default_factory=lambda: dict(PAPER_SPLITS))
    """Split name -> ``(start, stop)`` slice bounds into ``goals``."""
    by_asin: dict[str, Product] = field(init=False, repr=False)
    """Products keyed by upper-case ASIN."""
    cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Objects derived from the products (search engines per config), built once and shared by
    every session and env that uses this catalog."""

    def __post_init__(self) -> None:
        self.by_asin = {p.asin: p for p in self.products}
        missing = sorted({g.asin for g in self.goals} - set(self.by_asin))
        if missing:
            raise ValueError(
                f"catalog {self.name!r}: {len(missing)} goal(s) name products that are not in the "
                f"catalog (first: {missing[:3]}); load the product file that matches the goals"
            )

    def split(self, name: str) -> list[Goal]:
        """The goals of split ``name`` (``"all"`` for every goal)."""
        if name == "all":
            return list(self.goals)
        if name not in self.splits:
            raise ValueError(f"unknown split {name!r} for catalog {self.name!r}; choose from {sorted(self.splits) + ['all']}")
        start, stop = self.splits[name]
        return self.goals[start:stop]


def as_tuple(values: Sequence[str] | str | None) -> tuple[str, ...]:
    """Normalise a list-or-string field (raw files mix both) to a tuple of strings."""
    if values is None:
        return ()
    if isinstance(values, str):
        return (values,)
    return tuple(str(v) for v in values)
