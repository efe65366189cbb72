"""The WebShop site over a catalogue: search engine, pages, their text and clickables, and where each action
leads.

Pages and controls are WebShop's (SDAR agent_system/environments/env_package/webshop/webshop/web_agent_site/
templates/ and envs/web_agent_text_env.py): a search page (``Search`` button and a search bar); result pages
of ten products (:data:`PAGE_SIZE`) out of at most fifty hits (:data:`SEARCH_RETURN_N`), with ``Back to
Search``, ``< Prev`` after the first page and ``Next >`` on every page; an item page with the option groups,
title, price, rating, the ``Description``, ``Features`` and ``Reviews`` tabs and ``Buy Now``; the tab pages
with ``Back to Search`` and ``< Prev``; and the page after a purchase with its score.

A page is shown as WebShop's ``text`` observation mode renders it, its visible texts joined by ``[SEP]``
(:func:`page_text`); the agent is shown what SDAR's WebShop manager makes of it: the parts after the
instruction, each in single quotes (:func:`agent_observation`), and the admissible actions
``search[<your query>]`` when the page has a search bar and ``click[<clickable>]`` for each lower-cased
clickable (:func:`admissible_actions`). As in WebShop's text environment, ``click[search]`` is listed (the
search button is a button) but has no effect.

Search ranks products by BM25 over the text WebShop indexes for each product (:func:`product_document`: the
title, the description, the first bullet point and the options) with Lucene's default parameters (k1 = 0.9,
b = 0.4), as WebShop's Pyserini index does. The product type (search query), the other bullet points and the
hidden attribute list are not searched, as in WebShop. The tokens are lower-case runs of letters and digits,
without the stemming and stop words of Lucene's English analyzer.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from training.envs.webshop.catalog import Goal, Product
from training.envs.webshop.reward import RewardParts, purchase_reward

__all__ = ["PAGE_SIZE", "PageState", "PageView", "SEARCH_RETURN_N", "Shop", "admissible_actions",
           "agent_observation", "page_text", "parse_action", "product_document", "render", "transition"]

SEARCH_RETURN_N = 50
"""Hits a search returns (SDAR .../web_agent_site/engine/engine.py:28)."""
PAGE_SIZE = 10
"""Products per result page (SDAR .../web_agent_site/engine/engine.py:29)."""
SEARCH_ACTION = "search[<your query>]"
"""How SDAR lists the search action (SDAR agent_system/environments/env_manager.py:457)."""
TABS = ("description", "features", "reviews")
"""The item page's tabs (SDAR .../web_agent_site/templates/item_page.html; ``attributes`` is hidden there)."""
BUY, BACK, NEXT, PREV = "buy now", "back to search", "next >", "< prev"
"""The page controls, as clickables (lower case; SDAR .../web_agent_site/engine/engine.py:32-35)."""
BM25_K1, BM25_B = 0.9, 0.4
"""Lucene's BM25 defaults, which WebShop's Pyserini searcher uses."""

_TOKEN = re.compile(r"[a-z0-9]+")
_ACTION = re.compile(r"^(search|click)\[(.+)\]$", re.DOTALL)


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def product_document(product: Product) -> str:
    """The text search finds a product by, as WebShop indexes it: title, description, first bullet point and the
    options as ``name: value, value, and name: value``, joined by spaces, lower case (SDAR agent_system/
    environments/env_package/webshop/webshop/search_engine/convert_product_file_format.py:14-28)."""
    options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options)
    return " ".join((product.title, product.description, product.bullets[0] if product.bullets else "",
                     options)).lower()


class Shop:
    """A catalogue with its search index.

    Parameters
    ----------
    products : sequence of Product
        The catalogue (ASINs unique).
    """

    def __init__(self, products: Sequence[Product]) -> None:
        self.products = tuple(products)
        self.by_asin = {p.asin: p for p in self.products}
        if len(self.by_asin) != len(self.products):
            raise ValueError("Shop: product ASINs must be unique")
        docs = [Counter(_tokens(product_document(p))) for p in self.products]
        self._length = np.array([sum(d.values()) for d in docs], dtype=float)
        self._avg = float(self._length.mean()) if len(docs) else 1.0
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, doc in enumerate(docs):
            for term, tf in doc.items():
                ids, tfs = postings.setdefault(term, ([], []))
                ids.append(i)
                tfs.append(tf)
        n = len(docs)
        self._postings = {t: (np.array(ids), np.array(tfs, dtype=float),
                              math.log(1 + (n - len(ids) + 0.5) / (len(ids) + 0.5)))
                          for t, (ids, tfs) in postings.items()}

    def scores(self, keywords: Sequence[str]) -> np.ndarray:
        """BM25 score of every product for the keywords, in catalogue order (0 where no term matches)."""
        scores = np.zeros(len(self.products))
        for term in _tokens(" ".join(keywords)):
            if term not in self._postings:
                continue
            ids, tf, idf = self._postings[term]
            norm = BM25_K1 * (1 - BM25_B + BM25_B * self._length[ids] / self._avg)
            scores[ids] += idf * tf * (BM25_K1 + 1) / (tf + norm)
        return scores

    def search(self, keywords: Sequence[str]) -> list[Product]:
        """Up to :data:`SEARCH_RETURN_N` products matching any keyword, best BM25 score first (ties in
        catalogue order)."""
        scores = self.scores(keywords)
        hits = np.flatnonzero(scores > 0)
        order = hits[np.lexsort((hits, -scores[hits]))][:SEARCH_RETURN_N]
        return [self.products[i] for i in order]


@dataclass(frozen=True)
class PageState:
    """Where a session is: the page and what it shows (a WebShop URL's content).

    ``kind`` is ``search``, ``results``, ``item``, ``tab`` or ``done``; ``keywords`` and ``page`` the last
    search; ``asin`` the product; ``options`` the chosen ``(name, value)`` pairs; ``tab`` the open tab;
    ``reward`` the purchase's reward on the ``done`` page.
    """

    kind: str = "search"
    keywords: tuple[str, ...] = ()
    page: int = 1
    asin: str = ""
    options: tuple[tuple[str, str], ...] = ()
    tab: str = ""
    reward: RewardParts | None = None


@dataclass(frozen=True)
class PageView:
    """A rendered page: its visible texts, its clickables (lower case, page order) and whether it has a
    search bar."""

    texts: tuple[str, ...]
    clickables: tuple[str, ...]
    has_search_bar: bool = False


def _unique(items) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def render(shop: Shop, state: PageState, instruction: str) -> PageView:
    """The page of ``state`` for a session whose instruction is ``instruction``."""
    head = ("Instruction:", instruction, "Back to Search")
    if state.kind == "search":
        return PageView(("WebShop", "Instruction:", instruction, "Search"), ("search",), True)
    if state.kind == "results":
        hits = shop.search(state.keywords)
        shown = hits[(state.page - 1) * PAGE_SIZE: state.page * PAGE_SIZE]
        nav = ("< Prev", "Next >") if state.page > 1 else ("Next >",)
        texts = head + (f"Page {state.page} (Total results: {len(hits)})",) + nav
        texts += tuple(t for p in shown for t in (p.asin, p.title, p.price_tag))
        return PageView(texts, _unique((BACK,) + tuple(n.lower() for n in nav) + tuple(p.asin.lower() for p in shown)))
    product = shop.by_asin[state.asin]
    if state.kind == "item":
        groups = tuple(t for name, values in product.options for t in (name, *values))
        texts = head + ("< Prev",) + groups + (product.title, f"Price: {product.price_tag}", "Rating: N.A.",
                                               "Description", "Features", "Reviews", "Buy Now")
        values = tuple(v for _, vs in product.options for v in vs)
        return PageView(texts, _unique((BACK, PREV) + TABS + (BUY,) + values))
    if state.kind == "tab":
        if state.tab == "description":
            body = (product.description,)
        elif state.tab == "features":
            body = product.bullets
        else:
            body = tuple(t for title, stars, text in product.reviews for t in (f'"{title}"', str(stars), text))
        return PageView(head + ("< Prev",) + body, (BACK, PREV))
    score = state.reward.total if state.reward is not None else 0.0
    return PageView(("Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{score}"), ())


def page_text(view: PageView) -> str:
    """WebShop's ``text`` observation: the visible texts joined by `` [SEP] ``
    (SDAR .../web_agent_site/envs/web_agent_text_env.py:229)."""
    return " [SEP] ".join(view.texts)


def agent_observation(view: PageView, instruction: str) -> str:
    """What the agent is shown: the texts after the instruction, each quoted, joined by `` [SEP] ``; the
    whole page text when it has no instruction (SDAR agent_system/environments/env_manager.py:434-447)."""
    if instruction in view.texts:
        rest = view.texts[view.texts.index(instruction) + 1:]
        return " [SEP] ".join(f"'{t}'" for t in rest)
    return page_text(view)


def admissible_actions(view: PageView) -> list[str]:
    """``search[<your query>]`` when the page has a search bar, then ``click[x]`` for each clickable
    (SDAR agent_system/environments/env_manager.py:449-462)."""
    return ([SEARCH_ACTION] if view.has_search_bar else []) + [f"click[{c}]" for c in view.clickables]


def parse_action(action: str) -> tuple[str, str] | None:
    """``(verb, argument)`` of a lower-cased, whitespace-normalised ``search[...]`` or ``click[...]``, else
    None (SDAR's projection lower-cases the action: .../env_package/webshop/projection.py:29)."""
    m = _ACTION.match(" ".join(str(action).lower().split()))
    if m is None or not m.group(2).strip():
        return None
    return m.group(1), m.group(2).strip()


def why_unavailable(view: PageView, verb: str, arg: str) -> str:
    """Why an action cannot be taken on ``view`` ("" when it can): WebShop's text environment searches
    any non-empty query and clicks any clickable but ``search`` (SDAR .../envs/web_agent_text_env.py:113-122);
    a search also needs a search bar here, as the admissible actions promise."""
    if verb == "search":
        return "" if view.has_search_bar else "there is no search bar on this page"
    if arg == "search":
        return "the search button needs a query: use search[...]"
    return "" if arg in view.clickables else f"'{arg}' is not a clickable on this page"


def transition(shop: Shop, state: PageState, verb: str, arg: str, goal: Goal) -> PageState:
    """The state after an available action (:func:`why_unavailable` is empty), WebShop's page logic
    (SDAR .../envs/web_agent_text_env.py:519-590): a search opens result page 1; ``back to search`` the
    search page; ``next >``/``< prev`` move between result pages, ``< prev`` leaves a tab for its item and
    an item for its result page; a tab opens it; a product opens its page with no option chosen; an option
    value chooses it in its group; ``buy now`` scores the purchase against ``goal``."""
    if verb == "search":
        return PageState("results", tuple(arg.split(" ")), 1)
    if arg == BACK:
        return PageState()
    if state.kind == "results":
        if arg == NEXT:
            return replace(state, page=state.page + 1)
        if arg == PREV:
            return replace(state, page=state.page - 1)
        return PageState("item", state.keywords, state.page, arg.upper())
    if state.kind == "tab":
        return replace(state, kind="item", tab="")
    if arg == PREV:
        return PageState("results", state.keywords, state.page)
    if arg in TABS:
        return replace(state, kind="tab", tab=arg)
    product = shop.by_asin[state.asin]
    if arg == BUY:
        chosen = [v for _, v in state.options]
        return replace(state, kind="done", reward=purchase_reward(product, product.price, chosen, goal))
    name = [n for n, values in product.options if arg in values][-1]
    options = tuple((n, v) for n, v in state.options if n != name) + ((name, arg),)
    return replace(state, options=options)
