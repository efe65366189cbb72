"""The offline WebShop catalogue: products and shopping goals generated with a seeded numpy Generator.

WebShop (Yao et al., 2022) scrapes 1.18 million Amazon products in five categories and pairs them with
12,087 crowd-written instructions. Its catalogue cannot be shipped or downloaded here, so the default
(``data=generated``) builds one:

* Products of WebShop's five categories (:data:`training.envs.webshop.vocab.CATEGORIES`), five product types
  each, with an invented brand, a title, a search query and breadcrumb, two to four attribute phrases,
  one or two option groups (size, colour, flavour, ...), a price, a description, bullet points and two short
  reviews, all from small word lists (:mod:`training.envs.webshop.vocab`).
* Goals in the form of WebShop's synthetic instructions: a target product, some of its attributes, one value
  of each of its option groups and a price bound drawn by WebShop's rule (:func:`price_bound`), written
  "i need a <type> that is <attributes> with <option>: <value>, and price lower than <bound> dollars".

How it differs from the real catalogue: about a thousand products instead of a million, titles and texts
from templates (so search is easier and language plainer), attributes taken from a fixed list, prices
without ranges, a rating of "N.A." as in WebShop's released pages but reviews that are generated rather
than empty, and instructions from one template family instead of crowd workers' wording.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from training.envs.webshop.vocab import BRANDS, TYPES, ProductType

__all__ = ["CATALOGUE_SIZE", "Goal", "Product", "generate_catalogue", "generate_goal", "instruction_text",
           "price_bound", "read_products", "write_products"]

CATALOGUE_SIZE = 1000
"""Products of the generated catalogue (WebShop's smallest released index holds 1,000, SDAR
agent_system/environments/env_manager.py:666-668 ``use_small``)."""

PRICE_STEPS = tuple(10.0 * i for i in range(1, 100))
"""Price bounds an instruction may name (SDAR .../web_agent_site/engine/goal.py:14)."""

NO_BOUND = 1_000_000.0
"""The bound of a goal whose instruction names no price (SDAR .../web_agent_site/engine/goal.py:42)."""

_ASIN_CHARS = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))


@dataclass(frozen=True)
class Product:
    """One product page.

    Attributes
    ----------
    asin : str
        Ten upper-case letters and digits (``B0...``), shown lower case as a clickable.
    title, category, query, product_category : str
        Title; one of WebShop's five categories; search query (leaf category); breadcrumb.
    price : float
        Price in dollars.
    attributes : tuple of str
        Attribute phrases (not shown on the page, used by the reward as WebShop does).
    options : tuple of (str, tuple of str)
        Option groups: name and values, in page order.
    description : str
    bullets : tuple of str
        The ``features`` tab.
    reviews : tuple of (str, int, str)
        ``(title, stars, text)`` of the ``reviews`` tab.
    """

    asin: str
    title: str
    category: str
    query: str
    product_category: str
    price: float
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    description: str
    bullets: tuple[str, ...]
    reviews: tuple[tuple[str, int, str], ...] = ()

    @property
    def price_tag(self) -> str:
        """The price as a page shows it (``$12.99``)."""
        return f"${self.price:.2f}"

    def to_json(self) -> dict:
        """A JSON-ready dict (:func:`product_from_json` reads it back)."""
        return asdict(self)


def product_from_json(row: dict) -> Product:
    """A :class:`Product` from :meth:`Product.to_json`."""
    return Product(asin=row["asin"], title=row["title"], category=row["category"], query=row["query"],
                   product_category=row["product_category"], price=float(row["price"]),
                   attributes=tuple(row["attributes"]),
                   options=tuple((name, tuple(values)) for name, values in row["options"]),
                   description=row["description"], bullets=tuple(row["bullets"]),
                   reviews=tuple((t, int(s), b) for t, s, b in row.get("reviews", ())))


@dataclass(frozen=True)
class Goal:
    """What an instruction asks for, and the reward's reference (WebShop's goal dict).

    Attributes
    ----------
    asin : str
        The target product.
    instruction : str
        The instruction shown to the agent.
    name, query, product_category, category : str
        The target's title, search query, breadcrumb and category (the task type).
    attributes : tuple of str
        Goal attributes.
    options : tuple of str
        Goal option values.
    price_upper : float
        Price bound (:data:`NO_BOUND` when the instruction names none).
    """

    asin: str
    instruction: str
    name: str
    query: str
    product_category: str
    category: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    price_upper: float
    option_names: tuple[str, ...] = field(default=())

    def to_json(self) -> dict:
        """A JSON-ready dict (:func:`goal_from_json` reads it back)."""
        return asdict(self)


def goal_from_json(row: dict) -> Goal:
    """A :class:`Goal` from :meth:`Goal.to_json`."""
    return Goal(asin=row["asin"], instruction=row["instruction"], name=row["name"], query=row["query"],
                product_category=row["product_category"], category=row["category"],
                attributes=tuple(row["attributes"]), options=tuple(row["options"]),
                price_upper=float(row["price_upper"]), option_names=tuple(row.get("option_names", ())))


def price_bound(rng: np.random.Generator, price: float) -> float:
    """WebShop's price bound of a target costing ``price``: of the first four multiples of ten above it, the
    larger of two drawn without replacement; :data:`NO_BOUND` when fewer than two exist
    (SDAR .../web_agent_site/engine/goal.py:36-44)."""
    above = [p for p in PRICE_STEPS if p > price][:4]
    if len(above) < 2:
        return NO_BOUND
    return float(max(rng.choice(above, size=2, replace=False)))


def instruction_text(opener: str, noun: str, attributes, option_names, options, price_upper: float) -> str:
    """An instruction in the form of WebShop's synthetic goals: what, which attributes, ``with name: value``
    options joined by ``, and``, then the price bound (SDAR .../web_agent_site/engine/goal.py:96-115)."""
    text = f"{opener} {noun}"
    if attributes:
        text += " that is " + " and ".join(attributes)
    if options:
        text += " with " + ", and ".join(f"{n}: {v}" for n, v in zip(option_names, options))
    if price_upper < NO_BOUND:
        text += f", and price lower than {price_upper:.2f} dollars"
    return text


_OPENERS = ("i need a", "i am looking for a", "i want a", "find me a", "i would like a")
_DESCRIPTORS = ("Premium", "Classic", "Modern", "Everyday", "Deluxe", "Essential", "Signature", "Original")
_REVIEW_TITLES = ("Great value", "Works as described", "Good quality", "Nice find", "Would buy again", "Decent")
_REVIEW_BODIES = ("Arrived quickly and looks just like the pictures.", "Good for the price, happy with it.",
                  "Does what it says, solid quality.", "My second order of this one, still happy with it.")


def new_asin(rng: np.random.Generator, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(_ASIN_CHARS, size=8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _pick(rng: np.random.Generator, items, low: int, high: int) -> tuple:
    """Between ``low`` and ``high`` distinct items, in their list order."""
    k = int(rng.integers(low, min(high, len(items)) + 1))
    return tuple(items[i] for i in sorted(rng.choice(len(items), size=k, replace=False)))


def make_product(rng: np.random.Generator, kind: ProductType, asin: str) -> Product:
    """One product of type ``kind``: brand, title, attributes, options, price and texts."""
    brand = BRANDS[int(rng.integers(len(BRANDS)))]
    attrs = _pick(rng, kind.attributes, 2, 4)
    groups = _pick(rng, kind.options, 1, 2)
    options = tuple((name, _pick(rng, values, 2, 5)) for name, values in groups)
    descriptor = _DESCRIPTORS[int(rng.integers(len(_DESCRIPTORS)))]
    title = f"{brand} {descriptor} {kind.noun.title()}, {attrs[0].title()}"
    if len(attrs) > 2:
        title += f", {attrs[2].title()}"
    low, high = kind.price
    price = round(float(np.exp(rng.uniform(np.log(low), np.log(high)))), 2)
    description = (f"The {brand} {kind.noun} is {attrs[0]} and {attrs[1]}. "
                   f"A {descriptor.lower()} choice in {kind.query}.")
    bullets = tuple(f"{a.capitalize()}: made for everyday use" for a in attrs[1:]) + (
        f"Satisfaction guaranteed from {brand}",)
    reviews = tuple((_REVIEW_TITLES[int(rng.integers(len(_REVIEW_TITLES)))], int(rng.integers(3, 6)),
                     _REVIEW_BODIES[int(rng.integers(len(_REVIEW_BODIES)))]) for _ in range(2))
    return Product(asin=asin, title=title, category=kind.category, query=kind.query,
                   product_category=kind.breadcrumb, price=price, attributes=attrs, options=options,
                   description=description, bullets=bullets, reviews=reviews)


def generate_catalogue(seed: int, n: int = CATALOGUE_SIZE) -> tuple[Product, ...]:
    """``n`` products, product types in turn (so every category has ``n / 5`` of them); deterministic in
    ``seed``."""
    rng = np.random.default_rng([seed, 0x5E0])
    taken: set[str] = set()
    return tuple(make_product(rng, TYPES[i % len(TYPES)], new_asin(rng, taken)) for i in range(n))


def _kind_of(product: Product) -> ProductType:
    return next(t for t in TYPES if t.query == product.query and t.category == product.category)


def generate_goal(rng: np.random.Generator, product: Product) -> Goal:
    """A goal for ``product``: one to three of its attributes, one value of each option group, a price bound."""
    attrs = _pick(rng, product.attributes, 1, 3)
    names = tuple(name for name, _ in product.options)
    values = tuple(values[int(rng.integers(len(values)))] for _, values in product.options)
    upper = price_bound(rng, product.price)
    opener = _OPENERS[int(rng.integers(len(_OPENERS)))]
    noun = _kind_of(product).noun
    text = instruction_text(opener, noun, attrs, names, values, upper)
    return Goal(asin=product.asin, instruction=text, name=product.title, query=product.query,
                product_category=product.product_category, category=product.category, attributes=attrs,
                options=values, price_upper=upper, option_names=names)


def write_products(path: Path, products) -> None:
    """Write products as one JSON list."""
    path.write_text(json.dumps([p.to_json() for p in products]) + "\n")


def read_products(path: Path) -> tuple[Product, ...]:
    """Products written by :func:`write_products`."""
    return tuple(product_from_json(row) for row in json.loads(Path(path).read_text()))

