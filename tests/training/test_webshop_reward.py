"""WebShop's purchase reward against hand-computed cases (training.envs.webshop.reward)."""

from __future__ import annotations

import pytest

from training.envs.webshop.catalog import Goal, Product
from training.envs.webshop.reward import (normalize_color, purchase_reward, ratio, title_nouns, token_set_ratio,
                                          type_reward)

MUG = Product(asin="B0MUG00001", title="Acme Red Coffee Mug, Dishwasher Safe", category="furniture", query="mugs",
              product_category="Home & Kitchen › Kitchen › Mugs", price=12.5,
              attributes=("dishwasher safe", "microwave safe"),
              options=(("color", ("red", "blue")), ("size", ("12 oz", "16 oz"))),
              description="A sturdy mug for coffee.", bullets=("Holds coffee",))
GOAL = Goal(asin=MUG.asin, instruction="i need a coffee mug", name=MUG.title, query="mugs",
            product_category=MUG.product_category, category="furniture", attributes=("dishwasher safe", "lead free"),
            options=("red", "16 oz"), price_upper=20.0)


def _other(**kw) -> Product:
    base = dict(MUG.__dict__, asin="B0OTHER001", query="teapots", product_category="Kitchen › Teapots")
    base.update(kw)
    return Product(**base)


@pytest.mark.parametrize("a, b, expected", [
    ("red", "red", 100.0), ("navy blue", "blue", 100.0), ("12 oz", "16 oz", 80.0), ("", "red", 0.0),
    ("Red!", "red", 100.0), ("abc", "xyz", 0.0),
])
def test_token_set_ratio_hand_cases(a, b, expected):
    assert token_set_ratio(a, b) == pytest.approx(expected)
    assert token_set_ratio(b, a) == pytest.approx(expected)


def test_ratio_is_indel_similarity():
    assert ratio("oz 12", "oz 16") == pytest.approx(80.0)  # LCS "oz 1": 200 * 4 / 10
    assert ratio("", "") == 100.0 and ratio("ab", "") == 0.0


def test_colour_normalisation_and_title_nouns():
    assert normalize_color("navy blue a34") == "blue" and normalize_color("us5") == "us5"
    assert title_nouns("Acme Red Coffee Mug, 12 oz, for Women") == ["acme", "coffee", "mug"]


def test_purchase_reward_parts():
    # attributes: "dishwasher safe" is an attribute, "lead free" is nowhere -> 1 of 2; options: red yes,
    # 16 oz vs 12 oz has ratio 80 <= 85 -> 1 of 2; price 12.5 <= 20 -> 1; (1 + 1 + 1) / (2 + 2 + 1) * 1.0
    parts = purchase_reward(MUG, MUG.price, ["red", "12 oz"], GOAL)
    assert (parts.attributes, parts.options, parts.price_ok, parts.r_type) == (1, 1, True, 1.0)
    assert parts.total == pytest.approx(3 / 5)
    assert purchase_reward(MUG, MUG.price, ["red", "16 oz"], GOAL).total == pytest.approx(4 / 5)
    assert purchase_reward(MUG, 25.0, [], GOAL).total == pytest.approx(1 / 5)
    full = Goal(**{**GOAL.__dict__, "attributes": ("dishwasher safe",)})
    assert purchase_reward(MUG, MUG.price, ["16 oz", "red"], full).total == 1.0
    # an attribute found in the description counts
    assert purchase_reward(_other(query="mugs", attributes=(), description="lead free glaze"), 1.0, [],
                           Goal(**{**GOAL.__dict__, "attributes": ("lead free",), "options": ()})).total == 1.0


def test_type_reward_levels():
    assert type_reward(MUG, GOAL)["r_type"] == 1.0
    # no query or breadcrumb match, 1 of the goal's 5 title nouns (acme coffee mug dishwasher safe): 0.2 -> 0.5
    assert type_reward(_other(title="Acme Teapot"), GOAL) == {"r_type": 0.5, "query_match": False,
                                                               "category_match": False, "title_score": 0.2}
    assert type_reward(_other(title="Zeta Blue Teapot"), GOAL)["r_type"] == 0.0
    # breadcrumb: two shared levels are a category match
    shared = _other(title="Acme Teapot", product_category="Home & Kitchen › Kitchen › Teapots")
    assert type_reward(shared, GOAL)["r_type"] == 1.0
    assert purchase_reward(_other(title="Zeta Blue Teapot"), 1.0, ["red", "16 oz"], GOAL).total == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_token_set_ratio_equals_rapidfuzz_on_random_strings(seed):
    """The local token-set ratio against rapidfuzz's (the library thefuzz, which WebShop's goal.py calls,
    delegates to), with thefuzz's default processing: lower case, non-alphanumerics as spaces."""
    import re

    import numpy as np

    fuzz = pytest.importorskip("rapidfuzz.fuzz")
    rng = np.random.default_rng(seed)
    words = "red Red navy-blue 12 oz pack of 2 large small cotton shirt, t-shirt".split()

    def process(text: str) -> str:
        return " ".join(re.findall(r"[a-z0-9]+", text.lower()))

    for _ in range(500):
        a, b = (" ".join(rng.choice(words, int(rng.integers(0, 6)))) for _ in range(2))
        assert token_set_ratio(a, b) == pytest.approx(fuzz.token_set_ratio(a, b, processor=process), abs=1e-9)
