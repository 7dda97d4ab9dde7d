"""The WebShop reward (Yao et al. 2022, Sec. 3.2 and the original ``engine/goal.py``).

    r = r_type * (n_att + n_opt + 1[price <= price_upper]) / (|U_att| + |U_opt| + 1)

* ``n_att``: goal attributes matched by the purchased product — fuzzy token-set similarity
  above 85 with one of its attributes, or the attribute string appearing in its title, bullet
  points or description (lower-cased).
* ``n_opt``: goal option values matched by one of the chosen option values — fuzzy token-set
  similarity above 85 after colour normalisation (``"black forest"`` -> ``"black"``).
* ``r_type`` in {1, 0.5, 0.1, 0}: from the overlap of product-type words between the purchased
  title and the goal's title (``title_score``), plus whether the scrape queries are equal or the
  category breadcrumbs share two or more parts.

Differences from the original, on purpose:

* Fuzzy matching uses ``rapidfuzz`` with the processing of ``thefuzz`` >= 0.20 (ASCII only,
  lower case, non-alphanumerics to spaces, score rounded to an int); ``thefuzz`` itself wraps
  rapidfuzz the same way.
* ``title_score``: the original keeps the title tokens that spaCy's ``en_core_web_lg`` tags
  NOUN/PROPN. Downloading a spaCy model is not possible here, so :func:`type_words` keeps
  *content words*: tokens with a letter, minus function words, minus a short list of adjectives
  and participles common in product titles. On the original's own test titles it gives 0.857,
  0.3125 and 0.1667 where spaCy gave 0.85, 0.31 and 0.17 (``tests/envs/webshop/test_reward.py``).
* Goal options given as a mapping use their values (the original passed ``.items()`` tuples
  there, which only worked by accident).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from marft_envs.webshop.schema import Goal, Product

FUZZY_THRESHOLD = 85
"""A fuzzy score strictly above this counts as a match (the original's ``> 85``)."""

# Colour words, alphabetical: normalisation returns the first one contained in the value, so
# the order decides ("violet lavender" -> "lavender"), as in the original normaliser.
COLOR_SET: tuple[str, ...] = tuple(sorted(set("""
alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown
burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac
copper coral cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite
grape graphite grass gray green grey heather indigo ivory ivy khaki lavender lemon leopard light
lilac lime magenta maroon mauve merlot midnight mint mocha multicolor mushroom mustard natural navy
nude olive orange peach pewter pink plum purple rainbow red rose royal rust sand sapphire seashell
silver skull slate steel stone stonewash sunflower tan taupe teal tiger turquoise violet walnut
wheat white wine yellow
""".split())))

# Function words (determiners, pronouns, prepositions, conjunctions, auxiliaries): never nouns.
_FUNCTION_WORDS = frozenset("""
a an the this that these those my your his her its our their me you he she it we they them
for of to in on at by with without from into onto over under about above below between among
through during per via vs and or nor but so if as than then also not no only very too just
is are was were be been being am do does did has have had will would can could should may might
must shall up down out off all any each every both either neither some such more most other
""".split())

# Adjectives and participles frequent in product titles that a POS tagger would not call nouns.
_NON_NOUNS = frozenset("""
new best great good better premium ultra super extra mini big small large little long short tall
high low soft hard heavy thin thick wide narrow deep flat round square slim light-weight
lightweight portable adjustable durable comfortable breathable waterproof washable reusable
rechargeable foldable compatible professional original classic modern vintage elegant cute
sexy casual formal multi multiple double single triple extra-large easy quick fast slow hot cold
warm cool fresh natural organic pure real true full half free compact strong
""".split())

_TOKEN = re.compile(r"[a-z0-9]+(?:\.[a-z0-9]+)+\.?|[a-z0-9]+(?:'[a-z]+)?")


def fuzzy_score(a: str, b: str) -> int:
    """Token-set similarity 0..100 as ``thefuzz.fuzz.token_set_ratio`` computes it."""
    a = default_process(a.encode("ascii", "ignore").decode())
    b = default_process(b.encode("ascii", "ignore").decode())
    if not a or not b:
        return 0
    return int(round(fuzz.token_set_ratio(a, b)))


def normalize_color(value: str) -> str:
    """The first colour word (alphabetically) contained in ``value``, else ``value`` itself."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def type_words(title: str) -> list[str]:
    """Product-type words of a title (stand-in for spaCy NOUN/PROPN tokens; duplicates kept)."""
    words = []
    for token in _TOKEN.findall(title.lower()):
        if not any(c.isalpha() for c in token) or token in _FUNCTION_WORDS or token in _NON_NOUNS:
            continue
        # Past participles ("listed", "padded", "upgraded") are verbs/adjectives, not types;
        # "-eed" words ("seed", "speed") and short ones ("bed") are nouns.
        if len(token) >= 5 and token.endswith("ed") and not token.endswith("eed"):
            continue
        words.append(token)
    return words


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward and every component, as the original's ``verbose`` info plus counts."""

    reward: float
    """Total reward in [0, 1]."""
    r_type: float
    """Type factor in {1, 0.5, 0.1, 0}."""
    r_att: float
    """Fraction of goal attributes matched."""
    r_option: float | None
    """Fraction of goal options matched (None when the goal asks for no option)."""
    r_price: bool
    """Whether the price is within the goal's bound."""
    w_att: float
    """Weight of the attribute part: |U_att| / (|U_att| + |U_opt| + 1)."""
    w_option: float
    """Weight of the option part: |U_opt| / (|U_att| + |U_opt| + 1)."""
    w_price: float
    """Weight of the price part: 1 / (|U_att| + |U_opt| + 1)."""
    query_match: bool
    """Purchased and goal products were scraped with the same query."""
    category_match: bool
    """Their category breadcrumbs share at least two parts."""
    title_score: float
    """Share of the goal title's type words found in the purchased title."""
    num_attr_matches: int
    """Goal attributes matched."""
    num_option_matches: int
    """Goal options matched."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def type_reward(purchased: Product, goal: Goal) -> tuple[float, bool, bool, float]:
    """``(r_type, query_match, category_match, title_score)``."""
    query_match = purchased.query == goal.query
    purchased_cats = {x.strip() for x in purchased.product_category.split("›")}
    goal_cats = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(purchased_cats & goal_cats) >= 2
    desired = type_words(goal.name)
    if desired:
        title_score = len(set(type_words(purchased.name)) & set(desired)) / len(desired)
    else:
        title_score = 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def attribute_matches(purchased: Product, goal_attributes: Sequence[str]) -> int:
    """Number of goal attributes the purchased product has (fuzzy, or found in its text)."""
    title = purchased.name.lower()
    bullets = " ".join(purchased.bullet_points).lower()
    description = purchased.description.lower()
    matches = 0
    for wanted in goal_attributes:
        if any(fuzzy_score(have, wanted) > FUZZY_THRESHOLD for have in purchased.attributes):
            matches += 1
        elif wanted in title or wanted in bullets or wanted in description:
            matches += 1
    return matches


def option_matches(chosen_values: Sequence[str], goal_options: Sequence[str]) -> int:
    """Number of goal option values matched by one of the chosen values (colours normalised)."""
    chosen = [normalize_color(v) for v in chosen_values]
    matches = 0
    for wanted in (normalize_color(g) for g in goal_options):
        if any(fuzzy_score(have, wanted) > FUZZY_THRESHOLD for have in chosen):
            matches += 1
    return matches


def compute_reward(
    purchased: Product,
    goal: Goal,
    price: float | None = None,
    chosen_options: Mapping[str, str] | Sequence[str] = (),
) -> RewardBreakdown:
    """Score buying ``purchased`` with ``chosen_options`` (name -> value, or values) for ``goal``.

    ``price`` defaults to ``purchased.price``.
    """
    price = purchased.price if price is None else float(price)
    values = list(chosen_options.values()) if isinstance(chosen_options, Mapping) else list(chosen_options)
    r_type, query_match, category_match, title_score = type_reward(purchased, goal)
    n_att = attribute_matches(purchased, goal.attributes)
    n_opt = option_matches(values, goal.goal_options)
    r_price = price <= goal.price_upper
    denominator = len(goal.attributes) + len(goal.goal_options) + 1
    total = (n_att + n_opt + int(r_price)) / denominator * r_type
    return RewardBreakdown(
        reward=total,
        r_type=r_type,
        r_att=n_att / len(goal.attributes) if goal.attributes else 0.0,
        r_option=n_opt / len(goal.goal_options) if goal.goal_options else None,
        r_price=bool(r_price),
        w_att=len(goal.attributes) / denominator,
        w_option=len(goal.goal_options) / denominator,
        w_price=1 / denominator,
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
        num_attr_matches=n_att,
        num_option_matches=n_opt,
    )
