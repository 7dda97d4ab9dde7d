"""Embedded generator, official loader (on files built from the shared data) and BM25 search."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from webshop_builders import make_goal, make_product, raw_official_product

from marft_envs.webshop import (
    EmbeddedConfig, OfficialConfig, SearchEngine, build_embedded_catalog, load_official_catalog,
)
from marft_envs.webshop.catalog_embedded import NO_PRICE_BOUND, sample_price_upper
from marft_envs.webshop.catalog_official import parse_options, parse_pricing
from marft_envs.webshop.reward import compute_reward

# -- embedded ------------------------------------------------------------------------------------


def test_embedded_is_deterministic_and_seeded(catalog):
    again = build_embedded_catalog.__wrapped__(EmbeddedConfig())  # bypass the cache
    assert [p.asin for p in again.products] == [p.asin for p in catalog.products]
    assert [g.instruction_text for g in again.goals] == [g.instruction_text for g in catalog.goals]
    other = build_embedded_catalog(EmbeddedConfig(seed=1, num_products=60))
    assert other.products[0].asin != catalog.products[0].asin and len(other.products) == 60


def test_embedded_schema_and_goals(catalog):
    assert len(catalog.products) == 1000 and len({p.asin for p in catalog.products}) == 1000
    assert len(catalog.goals) == 2000
    assert [len(catalog.split(s)) for s in ("test", "val", "train")] == [500, 500, 1000]
    assert len({p.query for p in catalog.products}) == 30 and len({p.category for p in catalog.products}) == 5
    for goal in catalog.goals[:300]:
        product = catalog.by_asin[goal.asin]
        assert set(goal.attributes) <= set(product.attributes) and 1 <= len(goal.attributes) <= 3
        for name, value in zip(goal.option_names, goal.goal_options):
            assert value in product.options[name]
        # The original's bound: one of the first four multiples of ten above the price.
        assert goal.price_upper == NO_PRICE_BOUND or 0 < goal.price_upper - product.price <= 40
        assert goal.instruction_text.endswith(f"price lower than {goal.price_upper:.2f} dollars")
        best = compute_reward(product, goal, None, dict(zip(goal.option_names, goal.goal_options)))
        assert best.reward == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown split"):
        catalog.split("dev")


def test_price_bound_rule():
    rng = random.Random(0)
    assert {sample_price_upper(25.0, rng) for _ in range(200)} == {40.0, 50.0, 60.0}
    assert sample_price_upper(985.0, rng) == NO_PRICE_BOUND


def test_official_vocabulary_as_test_input(data_dir, catalog):
    """Real attribute phrases score like ours: the reward handles the official vocabulary."""
    ins = json.loads((data_dir / "webshop" / "items_ins_v2_1000.json").read_text())
    phrases = sorted({a for v in ins.values() for a in v["attributes"]})[:200]
    for phrase in phrases:
        product = make_product(attributes=(phrase,), description="", bullet_points=(), name="Acme Shampoo")
        goal_attrs = {"attributes": (phrase,), "goal_options": (), "option_names": ()}
        assert compute_reward(product, make_goal(**goal_attrs, name="Acme Shampoo"), 1.0, {}).reward == 1.0
    ours = {a for p in catalog.products for a in p.attributes}
    theirs = {a for v in ins.values() for a in v["attributes"]}
    assert len(ours - theirs) > len(ours & theirs)  # our own vocabulary, not a copy


# -- official ------------------------------------------------------------------------------------


@pytest.fixture
def official_dir(tmp_path, data_dir):
    """items_ins_v2_1000.json from the shared data; a product file and human goals built from it."""
    shutil.copy(data_dir / "webshop" / "items_ins_v2_1000.json", tmp_path / "items_ins_v2_1000.json")
    ins = json.loads((tmp_path / "items_ins_v2_1000.json").read_text())
    asins = [a for a, v in ins.items() if v.get("instruction")][:6]
    products = [raw_official_product(a, i) for i, a in enumerate(asins)]
    products[1]["pricing"] = "$10.99 - $15.99"
    products[2]["pricing"] = ""
    products.append(raw_official_product(asins[0], 99))  # duplicate: skipped
    products.append(raw_official_product("nan", 98))  # skipped as the original
    products.append(raw_official_product("B0NOTINSV2", 97))  # no attributes: DUMMY_ATTR
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products))
    human = {a: [{"asin": a, "instruction": f"i need shampoo number {i}.", "attributes": [],
                  "instruction_attributes": ins[a]["attributes"][:1], "instruction_options": ["blue", ""]}]
             for i, a in enumerate(asins)}
    human[asins[0]].append({"asin": asins[0], "instruction": "no attrs", "instruction_attributes": [],
                            "instruction_options": []})
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    return tmp_path, asins, ins


def test_official_loader_normalises_like_the_original(official_dir):
    root, asins, ins = official_dir
    cat = load_official_catalog(OfficialConfig(data_dir=str(root)))
    assert [p.asin for p in cat.products] == asins + ["B0NOTINSV2"]
    p0, p1, p2 = cat.products[:3]
    assert p0.options == {"color": ("black | white", "blue"), "size": ("12 inch",)}
    assert p0.attributes == tuple(ins[asins[0]]["attributes"]) and cat.products[-1].attributes == ("DUMMY_ATTR",)
    assert (p0.query, p0.price, p0.price_tag) == ("shampoo", 12.5, "$12.5")
    assert p1.pricing == (10.99, 15.99) and 10.99 <= p1.price <= 15.99 and p1.price_tag == "$10.99 to $15.99"
    assert p2.price == 100.0
    # Human goals: the one without attributes is skipped; "" options dropped; shuffled with seed 233.
    assert len(cat.goals) == 6 and all(g.goal_options == ("blue",) for g in cat.goals)
    order = list(range(6))
    random.Random(233).shuffle(order)
    assert [g.asin for g in cat.goals] == [asins[i] for i in order]
    assert cat.split("test") == cat.goals and cat.split("val") == []
    assert not cat.goals[0].instruction_text.endswith(".")


def test_official_synthetic_goals(official_dir):
    root, asins, ins = official_dir
    cat = load_official_catalog(OfficialConfig(data_dir=str(root), human_goals=False))
    # One goal per combination of option values: color (2) x size (1) per product.
    assert len(cat.goals) == 2 * len(asins)
    goal = next(g for g in cat.goals if g.goal_options == ("black | white", "12 inch"))
    assert goal.instruction_text.startswith(ins[goal.asin]["instruction"] + " with color: black | white, and size: 12 inch")
    assert goal.attributes == tuple(ins[goal.asin]["instruction_attributes"])


def test_official_missing_files_explain_themselves(tmp_path):
    with pytest.raises(FileNotFoundError, match="items_shuffle_1000.json"):
        load_official_catalog(OfficialConfig(data_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="setting"):
        load_official_catalog(OfficialConfig(data_dir=str(tmp_path), setting="huge"))


def test_parsers():
    assert parse_pricing("$877.80") == (877.8,)
    assert parse_pricing("$1,299.00 - $1,499.99") == (1299.0, 1499.99)
    assert parse_pricing("") == () and parse_pricing(None) == ()
    assert parse_options("") == {} and parse_options({"Size": None}) == {}


# -- search --------------------------------------------------------------------------------------


def test_search_ranks_and_is_reproducible(catalog):
    engine = SearchEngine(catalog.products)
    goal = catalog.split("test")[0]
    hits = engine.search(goal.search_query)
    assert len(hits) == 50 and goal.asin in [p.asin for p in hits[:10]]
    assert [p.asin for p in SearchEngine(catalog.products).search(goal.search_query)] == [p.asin for p in hits]
    scores = engine.scores(goal.search_query)
    ranked = [scores[catalog.products.index(p)] for p in hits]
    assert ranked == sorted(ranked, reverse=True)


def test_search_stems_and_handles_odd_queries(catalog):
    engine = SearchEngine(catalog.products)
    assert engine.tokenize("The Shampoos") == ["shampoo"]  # stop word removed, Porter stem
    assert engine.search("") == [] and engine.search("the of and") == [] and engine.search("zzqx") == []
    assert len(engine.search("shampoo " * 50_000)) == 34  # capped query, every shampoo found
    assert all(p.query == "shampoo" for p in engine.search("shampoo"))
    # Ties (identical texts) resolve by catalog order.
    twins = [make_product(asin=f"B00000000{i}") for i in range(3)]
    assert [p.asin for p in SearchEngine(twins).search("shampoo")] == ["B000000000", "B000000001", "B000000002"]
