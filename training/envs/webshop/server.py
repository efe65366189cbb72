"""A local WebShop server over a catalogue, speaking the routes of WebShop's Flask app (SDAR agent_system/
environments/env_package/webshop/webshop/web_agent_site/app.py:45-260), so that the HTTP adapter
(:mod:`training.envs.webshop.http`) runs against a real server without WebShop's data:

=========================================================================  ===================================
``GET|POST /<session>``                                                    search page; a posted
                                                                           ``search_query`` redirects to page 1
``/search_results/<session>/<keywords>/<page>``                            result page
``/item_page/<session>/<asin>/<keywords>/<page>/<options>``                item page
``/item_sub_page/<session>/<asin>/<keywords>/<page>/<sub_page>/<options>`` description, features or reviews
``/done/<session>/<asin>/<options>``                                       purchase and its score
=========================================================================  ===================================

``keywords`` is a Python list literal and ``options`` a dict literal, URL-quoted, as Flask's ``url_for``
writes them. Session ``fixed_<i>`` gets goal ``i`` and, past the last goal, HTTP 500 as from WebShop's app (its
goal list index fails, SDAR .../web_agent_site/app.py:69-71); another session gets a goal chosen by a hash of its
name.
Pages carry WebShop's ids and classes (``instruction-text``, ``search_input``, ``btn``, ``product-link``,
radio inputs with ``data-url``, ``reward``) and show the same texts as :func:`training.envs.webshop.site.render`.
"""

from __future__ import annotations

import ast
import html
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler
from typing import Sequence

from training.envs.http_server import BackgroundServer
from training.envs.webshop.catalog import Goal
from training.envs.webshop.reward import purchase_reward
from training.envs.webshop.site import PAGE_SIZE, Shop

__all__ = ["WebshopServer", "server_handler"]


def _q(value) -> str:
    return urllib.parse.quote(str(value), safe="")


def _e(text) -> str:
    return html.escape(str(text))


def _button(action: str, label: str) -> str:
    return f'<form method="post" action="{_e(action)}"><button type="submit" class="btn btn-primary">{_e(label)}</button></form>'


def _head(sid: str, instruction: str) -> str:
    return (f'<div id="instruction-text" class="text-center"><h4>Instruction:<br>{_e(instruction)}</h4></div>'
            + _button(f"/{_q(sid)}", "Back to Search"))


def _page(body: str) -> bytes:
    return (f"<!DOCTYPE html><html><head><title>WebShop</title></head><body>{body}</body></html>").encode()


class _Site:
    """The pages of one catalogue and goal list."""

    def __init__(self, shop: Shop, goals: Sequence[Goal]) -> None:
        self.shop, self.goals = shop, list(goals)
        if not self.goals:
            raise ValueError("WebshopServer needs at least one goal")

    def goal(self, sid: str) -> Goal:
        """The goal of session ``sid``; IndexError for ``fixed_<i>`` past the last goal."""
        if sid.startswith("fixed_") and sid[6:].isdigit():
            return self.goals[int(sid[6:])]
        return self.goals[zlib.crc32(sid.encode()) % len(self.goals)]

    def search_page(self, sid: str) -> bytes:
        goal = self.goal(sid)
        return _page(f'<div id="logo"><h2>WebShop</h2></div><div id="instruction-text"><h4>Instruction: <br>'
                     f'{_e(goal.instruction)}</h4></div><form method="post" action="/{_q(sid)}">'
                     f'<input id="search_input" type="text" name="search_query">'
                     f'<button class="btn btn-success" type="submit">Search</button></form>')

    def results(self, sid: str, keywords: list[str], page: int) -> bytes:
        hits = self.shop.search(keywords)
        kw = _q(keywords)
        body = _head(sid, self.goal(sid).instruction) + f"<h3>Page {page} (Total results: {len(hits)})</h3>"
        if page > 1:
            body += _button(f"/search_results/{_q(sid)}/{kw}/{page - 1}", "< Prev")
        body += _button(f"/search_results/{_q(sid)}/{kw}/{page + 1}", "Next >")
        for p in hits[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]:
            body += (f'<div><a class="product-link" href="/item_page/{_q(sid)}/{p.asin}/{kw}/{page}/{_q({})}">'
                     f'{p.asin}</a><h4>{_e(p.title)}</h4><h5>{_e(p.price_tag)}</h5></div>')
        return _page(body)

    def item(self, sid: str, asin: str, keywords: list[str], page: int, options: dict) -> bytes:
        p, kw = self.shop.by_asin[asin], _q(keywords)
        body = _head(sid, self.goal(sid).instruction) + _button(f"/search_results/{_q(sid)}/{kw}/{page}", "< Prev")
        for name, values in p.options:
            body += f"<h4>{_e(name)}</h4>"
            for i, value in enumerate(values):
                url = f"/item_page/{_q(sid)}/{asin}/{kw}/{page}/{_q({**options, name: value})}"
                body += (f'<input type="radio" id="radio_{_e(name)}{i}" name="{_e(name)}" value="{_e(value)}" '
                         f'data-url="{_e(url)}"><label for="radio_{_e(name)}{i}">{_e(value)}</label>')
        body += f"<h2>{_e(p.title)}</h2><h4>Price: {_e(p.price_tag)}</h4><h4>Rating: N.A.</h4>"
        for tab in ("Description", "Features", "Reviews"):
            body += _button(f"/item_sub_page/{_q(sid)}/{asin}/{kw}/{page}/{tab}/{_q(options)}", tab)
        body += _button(f"/done/{_q(sid)}/{asin}/{_q(options)}", "Buy Now")
        return _page(body)

    def tab(self, sid: str, asin: str, keywords: list[str], page: int, tab: str, options: dict) -> bytes:
        p = self.shop.by_asin[asin]
        body = _head(sid, self.goal(sid).instruction)
        body += _button(f"/item_page/{_q(sid)}/{asin}/{_q(keywords)}/{page}/{_q(options)}", "< Prev")
        if tab == "Description":
            body += f'<p class="product-info">{_e(p.description)}</p>'
        elif tab == "Features":
            body += "".join(f'<li><p class="product-info">{_e(b)}</p></li>' for b in p.bullets)
        else:
            body += "".join(f'<h4>"{_e(t)}"</h4><p><span>{s}</span></p><p class="content">{_e(b)}</p>'
                            for t, s, b in p.reviews)
        return _page(body)

    def done(self, sid: str, asin: str, options: dict) -> bytes:
        p = self.shop.by_asin[asin]
        reward = purchase_reward(p, p.price, list(options.values()), self.goal(sid)).total
        return _page(f'<div id="thankyou"><h1>Thank you for shopping with us!</h1></div>'
                     f'<h3 id="reward">Your score (min 0.0, max 1.0)<pre>{reward}</pre></h3>')


def _keywords(text: str) -> list[str]:
    return list(ast.literal_eval(text)) if text.startswith("[") else [text]


def server_handler(shop: Shop, goals: Sequence[Goal]) -> type[BaseHTTPRequestHandler]:
    """The request handler serving ``shop`` with goal ``i`` as session ``fixed_<i>``'s (for
    :func:`training.envs.http_server.serve_forever`)."""
    return _handler(_Site(shop, goals))


def _handler(site: _Site):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes = b"", location: str | None = None) -> None:
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _route(self, form: dict) -> None:
            parts = [urllib.parse.unquote(x) for x in urllib.parse.urlsplit(self.path).path.strip("/").split("/")]
            try:
                if len(parts) == 1 and parts[0]:
                    query = form.get("search_query", [""])[0]
                    if query:
                        kw = _q(query.lower().split(" "))
                        return self._send(302, location=f"/search_results/{_q(parts[0])}/{kw}/1")
                    return self._send(200, site.search_page(parts[0]))
                name, args = parts[0], parts[1:]
                if name == "search_results" and len(args) == 3:
                    return self._send(200, site.results(args[0], _keywords(args[1]), int(args[2])))
                if name == "item_page" and len(args) == 5:
                    return self._send(200, site.item(args[0], args[1], _keywords(args[2]), int(args[3]),
                                                     ast.literal_eval(args[4])))
                if name == "item_sub_page" and len(args) == 6:
                    return self._send(200, site.tab(args[0], args[1], _keywords(args[2]), int(args[3]), args[4],
                                                    ast.literal_eval(args[5])))
                if name == "done" and len(args) == 3:
                    return self._send(200, site.done(args[0], args[1], ast.literal_eval(args[2])))
            except IndexError:
                return self._send(500, _page("<p>no goal for this session</p>"))
            except (KeyError, ValueError, SyntaxError):
                return self._send(400, _page("<p>bad request</p>"))
            return self._send(404, _page("<p>not found</p>"))

        def do_GET(self) -> None:
            self._route({})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._route(urllib.parse.parse_qs(self.rfile.read(length).decode()))

    return Handler


class WebshopServer(BackgroundServer):
    """The local WebShop server, running in a background thread until :meth:`close`.

    Parameters
    ----------
    shop : Shop
    goals : sequence of Goal
        Goal ``i`` is session ``fixed_<i>``'s.
    host, port : str, int
        Where to listen (port 0: any free port; :attr:`url` says which).
    """

    def __init__(self, shop: Shop, goals: Sequence[Goal], *, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(server_handler(shop, goals), host=host, port=port, name="webshop-server")
        self.url = self.address
