"""Action schemas g(a): future actions rewritten as coarse natural-language scaffolds.

The Full and Observation-Ablated replay evidence show the action a_{k+1} that follows the scored step
only through its schema g(a_{k+1}) (paper appendix "Construction of Replay Evidence"). A schema keeps
the coarse intent and the syntactic shape of the action and replaces high-information arguments
(objects, receptacles, queries, answers, products) by their semantic role::

    take soapbar 1 from countertop 1   ->  take an item from a receptacle
    search[Barack Obama birth year]    ->  search[a query]
    <answer>1961</answer>              ->  <answer>an answer</answer>

An action that does not parse as a command of its environment maps to the fixed fallback
:data:`FALLBACK_SCHEMA` (``"a future action"``). Schemas never raise: any input, including
``None`` and non-strings, yields a string.

Environments and their command families
---------------------------------------
``alfworld`` (commands of the ALFWorld grammar, in both the ``put {o} in/on {r}`` wording of the
released game files and the ``move {o} to {r}`` wording of alfworld 0.4):

=========================  ==========================================
command                    schema
=========================  ==========================================
go to {r}                  go to a receptacle
take {o} from {r}          take an item from a receptacle
put {o} in/on {r}          put an item in/on a receptacle
move {o} to {r}            move an item to a receptacle
put {o} into {outero}      put an item into a receptacle
put {outero} in {r}        put an item in a receptacle
open {r} / close {r}       open a receptacle / close a receptacle
use {o} / toggle {o}       use an item / toggle an item
heat/cool/clean {o} with   heat an item with a receptacle (cool, clean)
slice {co} with {ko}       slice an item with an item
examine {x}                examine a receptacle (stationary receptacle
                           types, :data:`ALFWORLD_RECEPTACLES`) or
                           examine an item (anything else)
look / inventory / help    unchanged (they carry no argument)
=========================  ==========================================

``webshop``: ``search[...]`` -> ``search[a query]``; ``click[...]`` by the kind of element clicked:
navigation buttons (``back to search``, ``next >``, ``< prev``), ``buy now`` and the item-page tabs
(``description``, ``features``, ``reviews``, ``attributes``) carry no entity and are kept verbatim; a
product id (ASIN, ten letters and digits such as ``b09kcmtnqp``) -> ``click[a product]``; any other
clickable is a product option (size, colour, count) -> ``click[an option]``. The verb keeps its
original case (``Search[...]`` -> ``Search[a query]``).

``searchqa``: ``<search>q</search>`` -> ``<search>a query</search>``, ``<answer>x</answer>`` ->
``<answer>an answer</answer>``; the bracket forms ``search[q]`` / ``answer[x]`` (any case of the
verb) -> ``search[a query]`` / ``answer[an answer]``.

Matching is case-insensitive and tolerant of surrounding and repeated whitespace; an empty argument
(``search[]``, ``take  from countertop 1``) does not parse and yields the fallback.
"""

from __future__ import annotations

import re
from typing import Callable

__all__ = [
    "ALFWORLD_RECEPTACLES",
    "ENVS",
    "FALLBACK_SCHEMA",
    "WEBSHOP_FIXED_CLICKS",
    "action_family",
    "action_schema",
    "canonical_env",
]

FALLBACK_SCHEMA = "a future action"
"""Schema of an action that cannot be parsed (paper appendix: "a future action")."""

ENVS = ("alfworld", "webshop", "searchqa")
"""Canonical environment names."""

_ENV_ALIASES = {
    "alfworld": "alfworld", "alfred": "alfworld",
    "webshop": "webshop",
    "searchqa": "searchqa", "search-qa": "searchqa", "search_qa": "searchqa", "search": "searchqa",
}

ALFWORLD_RECEPTACLES = frozenset({
    "armchair", "bathtubbasin", "bed", "cabinet", "cart", "coffeemachine", "coffeetable", "countertop",
    "desk", "diningtable", "drawer", "dresser", "fridge", "garbagecan", "handtowelholder",
    "laundryhamper", "microwave", "ottoman", "paintinghanger", "safe", "shelf", "sidetable",
    "sinkbasin", "sofa", "stoveburner", "toaster", "toilet", "toiletpaperhanger", "towelholder",
    "tvstand",
})
"""Shown names (lower case, without the instance number) of ALFRED's stationary receptacle types:
the places an agent can ``go to``. Portable receptacles (bowl, box, cup, mug, pan, plate, pot) are
items."""

WEBSHOP_FIXED_CLICKS = frozenset({
    "back to search", "next >", "< prev", "buy now", "description", "features", "reviews", "attributes",
})
"""WebShop clickables that name a page control rather than an entity; kept verbatim in schemas."""

_WS = re.compile(r"\s+")
_ARG = r"(\S(?:.*\S)?)"  # a non-empty argument without surrounding whitespace

# (family, compiled pattern on the normalised lower-case command, schema builder)
_ALFWORLD_RULES: list[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    ("go", re.compile(rf"^go to {_ARG}$"), lambda m: "go to a receptacle"),
    ("take", re.compile(rf"^take {_ARG} from {_ARG}$"), lambda m: "take an item from a receptacle"),
    ("put", re.compile(rf"^put {_ARG} in/on {_ARG}$"), lambda m: "put an item in/on a receptacle"),
    ("put", re.compile(rf"^put {_ARG} into {_ARG}$"), lambda m: "put an item into a receptacle"),
    ("put", re.compile(rf"^put {_ARG} in {_ARG}$"), lambda m: "put an item in a receptacle"),
    ("put", re.compile(rf"^put {_ARG} on {_ARG}$"), lambda m: "put an item on a receptacle"),
    ("move", re.compile(rf"^move {_ARG} to {_ARG}$"), lambda m: "move an item to a receptacle"),
    ("open", re.compile(rf"^open {_ARG}$"), lambda m: "open a receptacle"),
    ("close", re.compile(rf"^close {_ARG}$"), lambda m: "close a receptacle"),
    ("toggle", re.compile(rf"^toggle {_ARG}$"), lambda m: "toggle an item"),
    ("use", re.compile(rf"^use {_ARG}$"), lambda m: "use an item"),
    ("heat", re.compile(rf"^heat {_ARG} with {_ARG}$"), lambda m: "heat an item with a receptacle"),
    ("cool", re.compile(rf"^cool {_ARG} with {_ARG}$"), lambda m: "cool an item with a receptacle"),
    ("clean", re.compile(rf"^clean {_ARG} with {_ARG}$"), lambda m: "clean an item with a receptacle"),
    ("slice", re.compile(rf"^slice {_ARG} with {_ARG}$"), lambda m: "slice an item with an item"),
    ("examine", re.compile(rf"^examine {_ARG}$"),
     lambda m: "examine a receptacle" if _is_receptacle(m.group(1)) else "examine an item"),
    ("look", re.compile(r"^look$"), lambda m: "look"),
    ("inventory", re.compile(r"^inventory$"), lambda m: "inventory"),
    ("help", re.compile(r"^help$"), lambda m: "help"),
]

_ASIN = re.compile(r"^[a-z0-9]{10}$")
_BRACKET = re.compile(r"^([A-Za-z]+)\[(.*)\]$", re.DOTALL)
_TAGGED = re.compile(r"^<(search|answer)>(.*)</\1>$", re.DOTALL | re.IGNORECASE)


def canonical_env(env: str) -> str:
    """Canonical environment name (``alfworld``, ``webshop`` or ``searchqa``).

    Accepts the aliases ``search``, ``search-qa``, ``search_qa`` and any letter case.

    Raises
    ------
    ValueError
        If ``env`` names no known environment.
    """
    key = str(env).strip().lower()
    if key not in _ENV_ALIASES:
        raise ValueError(f"unknown environment {env!r}; use one of {list(ENVS)}")
    return _ENV_ALIASES[key]


def _normalise(action: object) -> str:
    if not isinstance(action, str):
        return ""
    return _WS.sub(" ", action).strip()


def _is_receptacle(name: str) -> bool:
    base = re.sub(r"\s+\d+$", "", name.strip())
    return base.replace(" ", "") in ALFWORLD_RECEPTACLES


def _alfworld(action: str) -> tuple[str, str] | None:
    cmd = action.lower()
    for family, pattern, build in _ALFWORLD_RULES:
        m = pattern.match(cmd)
        if m:
            return family, build(m)
    return None


def _bracket(action: str) -> tuple[str, str] | None:
    m = _BRACKET.match(action)
    if not m or not m.group(2).strip():
        return None
    return m.group(1), m.group(2).strip()


def _webshop(action: str) -> tuple[str, str] | None:
    parsed = _bracket(action)
    if parsed is None:
        return None
    verb, arg = parsed
    if verb.lower() == "search":
        return "search", f"{verb}[a query]"
    if verb.lower() == "click":
        target = _normalise(arg).lower()
        if target in WEBSHOP_FIXED_CLICKS:
            return "click", f"{verb}[{target}]"
        if _ASIN.match(target) and any(c.isdigit() for c in target):
            return "click", f"{verb}[a product]"
        return "click", f"{verb}[an option]"
    return None


def _searchqa(action: str) -> tuple[str, str] | None:
    m = _TAGGED.match(action)
    if m:
        tag = m.group(1).lower()
        if not m.group(2).strip() or "<" + tag + ">" in m.group(2).lower():
            return None
        return tag, f"<{tag}>a query</{tag}>" if tag == "search" else f"<{tag}>an answer</{tag}>"
    parsed = _bracket(action)
    if parsed is None:
        return None
    verb, _ = parsed
    if verb.lower() == "search":
        return "search", f"{verb}[a query]"
    if verb.lower() == "answer":
        return "answer", f"{verb}[an answer]"
    return None


_PARSERS: dict[str, Callable[[str], tuple[str, str] | None]] = {
    "alfworld": _alfworld, "webshop": _webshop, "searchqa": _searchqa,
}


def action_schema(env: str, action: object) -> str:
    """g(a): the natural-language schema of a future action.

    Parameters
    ----------
    env : str
        Environment name (see :func:`canonical_env`).
    action : str
        The executed action text, e.g. ``"take soapbar 1 from countertop 1"``,
        ``"click[b09kcmtnqp]"`` or ``"<search>Barack Obama birth year</search>"``.

    Returns
    -------
    str
        The schema, or :data:`FALLBACK_SCHEMA` when the action does not parse.
    """
    parsed = _PARSERS[canonical_env(env)](_normalise(action))
    return FALLBACK_SCHEMA if parsed is None else parsed[1]


def action_family(env: str, action: object) -> str:
    """Command family of an action: its verb (``go``, ``take``, ``put``, ``move``, ... for ALFWorld;
    ``search``/``click`` for WebShop; ``search``/``answer`` for Search-QA), or ``"other"`` when the
    action does not parse."""
    parsed = _PARSERS[canonical_env(env)](_normalise(action))
    return "other" if parsed is None else parsed[0].lower()
