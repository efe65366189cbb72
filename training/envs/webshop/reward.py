"""WebShop's purchase reward (Yao et al., 2022, section 3 and its released ``engine/goal.py``).

A purchase of product ``p`` at price ``c`` with chosen options ``O`` for goal ``g`` scores

    r = r_type * (|attributes matched| + |goal options matched| + [c <= price bound]) / (|U_att| + |U_opt| + 1)

where a goal attribute matches when a product attribute is a fuzzy match (token-set ratio > 85) or the
attribute text occurs in the title, the bullet points or the description; a goal option matches when a
chosen option is a fuzzy match after colour normalisation; and ``r_type`` (1, 0.5, 0.1 or 0) checks that the
product is of the wanted type: same search query, at least two shared category breadcrumb levels, or enough
shared title nouns (SDAR agent_system/environments/env_package/webshop/webshop/web_agent_site/engine/
goal.py:130-269).

Differences from the released code, stated plainly:

* Fuzzy matching is a local implementation of the token-set ratio (the ``thefuzz``/``rapidfuzz`` definition:
  lower-case alphanumeric tokens, the normalised Indel similarity of the sorted intersection and
  differences), not the package itself.
* Title nouns come from a word filter (alphabetic words that are not function words, descriptors, units
  or colours, see :func:`title_nouns`), not from spaCy's ``en_core_web_sm`` part-of-speech tagger, which
  is not installed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, Sequence

__all__ = ["FUZZY_THRESHOLD", "RewardParts", "attribute_matches", "normalize_color", "option_matches",
           "purchase_reward", "ratio", "title_nouns", "token_set_ratio", "type_reward"]

FUZZY_THRESHOLD = 85
"""A fuzzy match needs a token-set ratio above this (SDAR .../web_agent_site/engine/goal.py:189,219)."""

COLORS = tuple(sorted("""
beige black blue bronze brown burgundy camel charcoal chocolate coral cream denim gold gray green grey ivory
khaki lavender lilac maroon mint navy nude olive orange peach pink plum purple red rose rust sand silver tan
taupe teal turquoise violet walnut white wine yellow
""".split()))
"""Colour names an option value is normalised to (the first one it contains, in this order)."""

_NOT_NOUNS = frozenset("""
a an and or the of for with in on to by at from as is are be it its this that these those you your our we
my me i not no nor but so than too very can will just per new best all any each every more most other
such only own same few both into over under up out off about after before between through during
men women womens mens kids girls boys unisex adult adults
long short large small medium big mini extra super ultra high low soft hard light dark heavy thin thick
natural organic premium classic modern vintage portable wireless waterproof durable stylish elegant
comfortable cute fashion casual slim loose fit fitted lightweight compact adjustable universal professional
pure fresh sweet hot cold warm cool easy quick fast free clear smart original real full half double single
pack count set piece pieces pcs inch inches oz ounce ounces fl lb lbs pound pounds ft feet cm mm ml kg g
""".split()) | frozenset(COLORS)
"""Words never counted as title nouns: function words, descriptors, units and colours."""

_TOKEN = re.compile(r"[a-z0-9]+")
_WORD = re.compile(r"[a-z]+")


class Purchasable(Protocol):
    """What the reward reads of a product (:class:`training.envs.webshop.catalog.Product`)."""

    title: str
    query: str
    product_category: str
    attributes: Sequence[str]
    bullets: Sequence[str]
    description: str


class Wanted(Protocol):
    """What the reward reads of a goal (:class:`training.envs.webshop.catalog.Goal`)."""

    name: str
    query: str
    product_category: str
    attributes: Sequence[str]
    options: Sequence[str]
    price_upper: float


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(str(text).lower())


def _lcs(a: str, b: str) -> int:
    """Length of the longest common subsequence of two strings."""
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def ratio(a: str, b: str) -> float:
    """Normalised Indel similarity in [0, 100]: 200 * LCS / (len(a) + len(b)); 100 for two empty strings."""
    total = len(a) + len(b)
    return 100.0 if total == 0 else 200.0 * _lcs(a, b) / total


def token_set_ratio(a: str, b: str) -> float:
    """Token-set ratio of two strings in [0, 100] (0 when either has no alphanumeric token).

    With ``I`` the sorted common tokens and ``A``, ``B`` the sorted tokens only in ``a`` or only in ``b``:
    100 when ``I`` is not empty and ``A`` or ``B`` is; otherwise the largest :func:`ratio` among
    ``(I, I+A)``, ``(I, I+B)`` and ``(I+A, I+B)`` (the first two only when ``I`` is not empty).
    """
    ta, tb = set(_tokens(a)), set(_tokens(b))
    if not ta or not tb:
        return 0.0
    common = " ".join(sorted(ta & tb))
    only_a, only_b = " ".join(sorted(ta - tb)), " ".join(sorted(tb - ta))
    if common and (not only_a or not only_b):
        return 100.0
    with_a = f"{common} {only_a}".strip()
    with_b = f"{common} {only_b}".strip()
    best = ratio(with_a, with_b)
    if common:
        best = max(best, ratio(common, with_a), ratio(common, with_b))
    return best


def normalize_color(value: str) -> str:
    """The first colour of :data:`COLORS` that ``value`` contains, else ``value`` itself
    (SDAR .../web_agent_site/engine/normalize.py:57-62)."""
    for color in COLORS:
        if color in value:
            return color
    return value


def title_nouns(title: str) -> list[str]:
    """The words of a product title counted as nouns for the type match: alphabetic words of two letters
    or more that are not in the function-word, descriptor, unit and colour list."""
    return [w for w in _WORD.findall(str(title).lower()) if len(w) > 1 and w not in _NOT_NOUNS]


def type_reward(product: Purchasable, goal: Wanted) -> dict:
    """r_type and what decided it (SDAR .../web_agent_site/engine/goal.py:130-175).

    1.0 when the query, two breadcrumb levels or more than 20% of the goal's title nouns match, 0.5 when
    none does; 0.1 when under 10% of the goal's title nouns occur in the product's title, 0 when none does
    (a goal title without nouns counts as 20%).
    """
    query_match = product.query == goal.query
    levels = lambda text: {x.strip() for x in str(text).split("›")}  # noqa: E731
    category_match = len(levels(product.product_category) & levels(goal.product_category)) >= 2
    wanted = title_nouns(goal.name)
    shared = set(title_nouns(product.title)) & set(wanted)
    title_score = 0.2 if not wanted else len(shared) / len(wanted)
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def attribute_matches(product: Purchasable, goal_attributes: Sequence[str]) -> int:
    """Goal attributes matched by a product attribute (fuzzy) or found in its title, bullets or description
    (SDAR .../web_agent_site/engine/goal.py:178-206)."""
    texts = (product.title.lower(), " ".join(product.bullets).lower(), product.description.lower())
    hits = 0
    for wanted in goal_attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in product.attributes):
            hits += 1
        elif any(wanted in text for text in texts):
            hits += 1
    return hits


def option_matches(chosen: Sequence[str], goal_options: Sequence[str]) -> int:
    """Goal options matched by a chosen option, both colour-normalised (SDAR .../engine/goal.py:209-225)."""
    have = [normalize_color(o) for o in chosen]
    return sum(any(token_set_ratio(h, normalize_color(w)) > FUZZY_THRESHOLD for h in have) for w in goal_options)


@dataclass(frozen=True)
class RewardParts:
    """One purchase's reward and its parts.

    Attributes
    ----------
    total : float
        The reward in [0, 1].
    r_type : float
        Type match factor.
    attributes, options : int
        Goal attributes and goal options matched.
    price_ok : bool
        Price within the goal's bound.
    n_attributes, n_options : int
        Goal attributes and goal options asked for.
    """

    total: float
    r_type: float
    attributes: int
    options: int
    price_ok: bool
    n_attributes: int
    n_options: int


def purchase_reward(product: Purchasable, price: float, chosen: Sequence[str], goal: Wanted) -> RewardParts:
    """The reward of buying ``product`` at ``price`` with the option values ``chosen`` for ``goal``
    (SDAR .../web_agent_site/engine/goal.py:228-250)."""
    r_type = type_reward(product, goal)["r_type"]
    attrs = attribute_matches(product, goal.attributes)
    opts = option_matches(list(chosen), goal.options)
    price_ok = bool(price <= goal.price_upper)
    total = (attrs + opts + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1) * r_type
    return RewardParts(total=float(total), r_type=r_type, attributes=attrs, options=opts, price_ok=price_ok,
                       n_attributes=len(goal.attributes), n_options=len(goal.options))
