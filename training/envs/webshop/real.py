"""A catalogue built around real WebShop goals: the 100 fixed evaluation instructions (``fixed_0`` ...
``fixed_99``) with their target products, plus generated distractors.

The goals file (``webshop_goals_fixed100.json``, a list of ``{"session_idx", "task", "key": {"asin",
"name", "query", "goal_options"}}``) gives each instruction, its target's ASIN, title, search query and the
goal options. It does not give the target's attributes, category, breadcrumb, price, option groups or
texts, nor the rest of the catalogue, so these are built here and differ from WebShop's:

* Goal attributes are the known attribute phrases found in the instruction (:data:`EXTRA_ATTRIBUTES` and
  the generated catalogue's, hyphens read as spaces); an instruction without one has no attribute part.
* The price bound is the one the instruction names; the target costs 50-95% of it.
* The category (the task type) is read from the search query and title by keywords (:func:`category_of`).
* The target offers each goal option in an option group (colour, size or style) beside generated values.
* Distractors per target: three near misses (same title and query, but without the attributes, above
  the bound, or without the goal options) and six generated products of its category.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ocsd.cli import InputError
from training.envs.webshop.catalog import NO_BOUND, Goal, Product, make_product, new_asin
from training.envs.webshop.reward import normalize_color
from training.envs.webshop.vocab import BRANDS, CATEGORIES, TYPES, all_attributes

__all__ = ["EXTRA_ATTRIBUTES", "GOALS_FILE", "category_of", "load_real_goals", "real_catalogue"]

GOALS_FILE = "webshop_goals_fixed100.json"
"""The goals file's name inside a ``data`` folder."""

EXTRA_ATTRIBUTES = tuple("""
natural looking|hand painted|lead free|sensitive teeth|high power|surround sound|leak proof|bpa free|gold plated
easy to clean|easy to install|stainless steel|dermatologist tested|long handle|faux leather|dining room
high performance|synthetic hair|artificial ingredients|light weight|engineered wood|double sided|stereo sound
sound quality|birthday party|high heel|wireless charging|heavy duty|human hair|tea tree|soy wax|day comfort
non toxic|anti aging|zero sugar|plant based|memory foam|easy to carry|certified organic|fluoride free
""".replace("\n", "|").strip("|").split("|"))
"""Attribute phrases of WebShop instructions beyond the generated catalogue's."""

_KEYWORDS = {
    "beauty": "hair wig makeup fragrance perfume skin tooth toothbrush dental teeth tongue bath body face scalp "
              "eyes nail lotion shampoo cosmetic spray salon shower beauty care",
    "electronics": "sound speaker speakers cable cables theater charger chargers signal wearable mac pc radio surveillance projection "
                   "projector boombox headphones subwoofer camera cameras computer electronics tv antenna",
    "fashion": "women's men's pants shorts shoes footwear mules clogs oxfords pumps sandals jeans dress shirt "
               "clothing boots sneakers jacket",
    "food": "snack snacks food cheese dairy eggs meat seafood beverages drinks popcorn pretzels cakes pastries "
            "fruit candy chocolate coffee tea sauce flour deli prepared gourmet cookies seaweed substitutes",
    "furniture": "pillows sofa sofas couches ottomans bedroom candles stands tables vanities pendants chandeliers "
                 "plants furniture chairs bed lighting kitchen",
}
_WORDS = {c: frozenset(w.split()) for c, w in _KEYWORDS.items()}
_ROOTS = {"beauty": "Beauty & Personal Care", "electronics": "Electronics", "fashion": "Clothing, Shoes & Jewelry",
          "food": "Grocery & Gourmet Food", "furniture": "Home & Kitchen"}
_PRICE = re.compile(r"price lower than ([\d.]+) dollars")
_SIZE = re.compile(r"\d|small|medium|large|size|inch|ounce|oz|pack|count|ft|cm|mm|queen|king|twin|full")


class RealGoalsError(InputError):
    """The goals file is missing or malformed; the message names the file and the field."""


def category_of(query: str, name: str = "") -> str:
    """WebShop category of a product from its search query (first) and title: the category with most
    keyword hits (ties in :data:`CATEGORIES` order); ``furniture`` (home goods) when none."""
    for text in (query, name):
        words = re.findall(r"[a-z']+", text.lower())
        hits = {c: sum(w in _WORDS[c] for w in words) for c in CATEGORIES}
        best = max(CATEGORIES, key=lambda c: hits[c])
        if hits[best]:
            return best
    return "furniture"


def goal_attributes(instruction: str) -> tuple[str, ...]:
    """Known attribute phrases found in an instruction (hyphens read as spaces), longest first, none
    inside another found one."""
    text = instruction.lower().replace("-", " ")
    found: list[str] = []
    for phrase in sorted(set(EXTRA_ATTRIBUTES) | set(all_attributes()), key=lambda a: (-len(a), a)):
        if re.search(rf"\b{re.escape(phrase)}\b", text) and not any(phrase in f for f in found):
            found.append(phrase)
    return tuple(found)


def _goal(row: dict, where: str) -> Goal:
    try:
        key, task = row["key"], row["task"]
        asin, name, query, options = key["asin"], key["name"], key["query"], key["goal_options"]
    except (KeyError, TypeError) as exc:
        raise RealGoalsError(f"{where}: missing field {exc}") from None
    instruction = str(task).split("[Search]")[0].strip()
    bound = _PRICE.search(instruction)
    category = category_of(query, name)
    return Goal(asin=str(asin).upper(), instruction=instruction, name=name, query=query.lower().strip(),
                product_category=f"{_ROOTS[category]} › {query.title()}", category=category,
                attributes=goal_attributes(instruction), options=tuple(str(o).lower() for o in options),
                price_upper=float(bound.group(1)) if bound else NO_BOUND)


def load_real_goals(path: Path) -> list[tuple[str, Goal]]:
    """``(session id, goal)`` of each entry of a goals file, or of ``GOALS_FILE`` in a folder.

    Raises
    ------
    RealGoalsError
        Naming the file, and the entry and field when one is malformed.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / GOALS_FILE
    if not path.is_file():
        raise RealGoalsError(f"data: no WebShop goals file {path}")
    try:
        rows = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RealGoalsError(f"data: {path} is not a JSON goals file ({exc})") from None
    if not isinstance(rows, list) or not rows:
        raise RealGoalsError(f"data: {path} must hold a non-empty JSON list of goals")
    return [(str(row.get("session_idx", f"fixed_{i}")) if isinstance(row, dict) else f"fixed_{i}",
             _goal(row, f"{path} entry {i}")) for i, row in enumerate(rows)]


def _groups(rng: np.random.Generator, options: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """One option group per goal option, named by what it looks like, with two generated alternatives."""
    pools = {name: values for t in TYPES for name, values in t.options}
    groups, used = [], set()
    for value in options:
        kind = "color" if normalize_color(value) != value else "size" if _SIZE.search(value) else "style"
        name = kind if kind not in used else next(f"{kind} {i}" for i in range(2, 99) if f"{kind} {i}" not in used)
        used.add(name)
        pool = [v for v in pools.get(kind, pools["style"]) if v != value]
        alts = [pool[i] for i in rng.choice(len(pool), size=min(2, len(pool)), replace=False)]
        groups.append((name, tuple(sorted(alts + [value]))))
    return tuple(groups)


def _target(rng: np.random.Generator, goal: Goal) -> Product:
    upper = goal.price_upper if goal.price_upper < NO_BOUND else 100.0
    price = round(float(rng.uniform(0.5, 0.95)) * upper, 2)
    attrs = goal.attributes
    return Product(asin=goal.asin, title=goal.name, category=goal.category, query=goal.query,
                   product_category=goal.product_category, price=price, attributes=attrs,
                   options=_groups(rng, goal.options), description=f"{goal.name}.",
                   bullets=tuple(a.capitalize() for a in attrs) or ("Quality you can count on",),
                   reviews=(("Works as described", 5, "Just as pictured."),))


def real_catalogue(goals: list[Goal], seed: int) -> tuple[Product, ...]:
    """The targets of ``goals``, three near misses and six generated products of the same category each;
    deterministic in ``seed``."""
    rng = np.random.default_rng([seed, 0x8EA1])
    taken = {g.asin for g in goals}
    products: list[Product] = []
    for goal in goals:
        target = _target(rng, goal)
        products.append(target)
        brand = BRANDS[int(rng.integers(len(BRANDS)))]
        near = dict(title=f"{brand} {goal.name}", description=f"{brand} {goal.name}.", reviews=())
        no_attr = Product(**{**target.__dict__, **near, "asin": new_asin(rng, taken), "attributes": (),
                             "bullets": ("Quality you can count on",)})
        dear = Product(**{**target.__dict__, **near, "asin": new_asin(rng, taken),
                          "price": round(target.price + (goal.price_upper if goal.price_upper < NO_BOUND
                                                         else 100.0) * float(rng.uniform(0.1, 0.6)), 2)})
        plain = Product(**{**target.__dict__, **near, "asin": new_asin(rng, taken),
                           "options": tuple((n, tuple(v for v in vs if v not in goal.options) or ("standard",))
                                            for n, vs in target.options)})
        kinds = [t for t in TYPES if t.category == goal.category]
        products += [no_attr, dear, plain] + [make_product(rng, kinds[int(rng.integers(len(kinds)))],
                                                           new_asin(rng, taken)) for _ in range(6)]
    return tuple(products)
