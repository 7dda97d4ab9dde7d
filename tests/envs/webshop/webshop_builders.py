"""Hand-built products and goals for the WebShop tests (imported by the test modules)."""

from __future__ import annotations

from marft_envs.webshop import Goal, Product


def make_product(**overrides) -> Product:
    """A small hand-built product; override any field."""
    fields = dict(
        asin="B000000001", name="Acme Tea Tree Shampoo", query="shampoo", category="beauty",
        product_category="Beauty › Hair Care › Shampoos", bullet_points=("Gentle daily wash.",),
        description="A gentle shampoo.", attributes=("tea tree", "sulfate free", "argan oil"),
        options={"scent": ("lavender", "vanilla"), "volume": ("16 fl oz", "32 fl oz")},
        pricing=(25.0,), price=25.0,
    )
    fields.update(overrides)
    return Product(**fields)


def make_goal(**overrides) -> Goal:
    """The goal the default product satisfies perfectly; override any field."""
    fields = dict(
        asin="B000000001", instruction_text="i need a tea tree sulfate free shampoo, and price lower than 30.00 dollars",
        attributes=("tea tree", "sulfate free"), goal_options=("lavender", "16 fl oz"), price_upper=30.0,
        name="Acme Tea Tree Shampoo", query="shampoo", category="beauty",
        product_category="Beauty › Hair Care › Shampoos", option_names=("scent", "volume"),
        search_query="tea tree sulfate free shampoo",
    )
    fields.update(overrides)
    return Goal(**fields)


def raw_official_product(asin: str, i: int, **extra) -> dict:
    """One product in the raw items_shuffle format (see shared/data/webshop/SCHEMA.md)."""
    raw = {
        "asin": asin, "name": f"Product {i} Shampoo Bottle", "query": " Shampoo ", "category": "beauty",
        "product_category": "Beauty & Personal Care › Hair Care › Shampoos", "small_description": [f"bullet {i}"],
        "full_description": f"description {i}", "pricing": "$12.50", "images": ["u"],
        "customization_options": {"Color": [{"value": "Black/White", "image": "u"}, {"value": "Blue"}],
                                  "Size": [{"value": "12 Inch"}], "Style": None},
    }
    raw.update(extra)
    return raw
