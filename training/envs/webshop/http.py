"""A WebShop session over HTTP: the adapter to a WebShop server (``web_agent_site``'s Flask app, or the
built-in one of :mod:`training.envs.webshop.server`, which speaks the same routes).

It reads pages as WebShop's text environment does (SDAR agent_system/environments/env_package/webshop/
webshop/web_agent_site/envs/web_agent_text_env.py:140-160, 220-230): the visible texts (outside ``head``,
``script``, ``style``, ``title`` and comments; whitespace-only texts are left out), the clickables (the
lower-cased text of each element of class ``btn`` and ``product-link``, then the value of each radio
input) and whether an element ``search_input`` is present. A click follows the clickable: a button posts
its form, a product link and a radio input (its ``data-url``) are fetched. A search posts ``search_query``
to the search form, whose answer redirects to the results (SDAR .../web_agent_site/app.py:49-104). A
purchase's reward is the number after "Your score (min 0.0, max 1.0)" on the page ``done`` answers.
The page state used for progress labels is the page's URL, which holds the whole state in WebShop.

Which goals a server holds is read from its fixed sessions (:func:`count_sessions`): ``fixed_<i>`` is goal ``i``
of the server's list, and WebShop's app answers HTTP 500 for an ``i`` past its last goal (the list index fails,
SDAR .../web_agent_site/app.py:69-71).
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser

from ocsd.cli import InputError

from training.envs.webshop.site import PageView

__all__ = ["HttpSession", "ParsedPage", "WebshopServerError", "count_sessions", "parse_page", "session_exists"]

TIMEOUT = 30.0
"""Seconds to wait for a page."""
SCORE_LABEL = "Your score (min 0.0, max 1.0)"
"""The text before a purchase's score on WebShop's done page (SDAR .../templates/done_page.html)."""
_HIDDEN = {"head", "script", "style", "title", "meta"}


class WebshopServerError(InputError):
    """The WebShop server could not be reached or answered something unexpected; names the URL."""


@dataclass
class ParsedPage:
    """A page read as WebShop's text environment reads it.

    Attributes
    ----------
    texts : list of str
    targets : dict
        Clickable text -> ``("post" or "get", url)``.
    search_form : str or None
        Where the search bar's form posts, None without a search bar.
    """

    texts: list[str] = field(default_factory=list)
    targets: dict = field(default_factory=dict)
    search_form: str | None = None

    def view(self) -> PageView:
        """The page as a :class:`PageView`."""
        return PageView(tuple(self.texts), tuple(self.targets), self.search_form is not None)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = ParsedPage()
        self.hidden = 0
        self.form: str | None = None
        self.clickable: tuple[str, str] | None = None  # (method, url) of the element whose text is collected
        self.text: list[str] = []
        self.links: list[tuple[str, str, str]] = []
        self.radios: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag in _HIDDEN:
            self.hidden += 1
        elif tag == "form":
            self.form = a.get("action") or ""
        elif tag == "input" and a.get("id") == "search_input":
            self.page.search_form = self.form or ""
        elif tag == "input" and a.get("type") == "radio":
            self.radios.append((a.get("value") or "", a.get("data-url") or ""))
        elif "btn" in classes:
            self.clickable, self.text = ("post", self.form or ""), []
        elif "product-link" in classes:
            self.clickable, self.text = ("get", a.get("href") or ""), []

    def handle_endtag(self, tag):
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag == "form":
            self.form = None
        elif tag in ("button", "a") and self.clickable is not None:
            self.links.append(("".join(self.text).strip().lower(), *self.clickable))
            self.clickable = None

    def handle_data(self, data):
        if self.hidden:
            return
        if self.clickable is not None:
            self.text.append(data)
        if data.strip():
            self.page.texts.append(data.strip())


def parse_page(html: str) -> ParsedPage:
    """Texts, clickables and search form of a WebShop page (buttons and product links in page order, then
    radio options, later duplicates replacing earlier ones' targets as WebShop's dict does)."""
    reader = _Reader()
    reader.feed(html)
    reader.close()
    page = reader.page
    for text, method, url in reader.links:
        page.targets[text] = (method, url)
    for value, url in reader.radios:
        page.targets[value] = ("get", url)
    return page


class HttpSession:
    """One WebShop session on a server (the :class:`training.envs.webshop.env.Session` interface).

    Parameters
    ----------
    base_url : str
        The server (``http://host:3000``).
    session_id : str
        The session; ``fixed_<i>`` is goal ``i`` of the server (SDAR .../web_agent_site/app.py:69-73).
    """

    def __init__(self, base_url: str, session_id: str, *, timeout: float = TIMEOUT) -> None:
        self.base = base_url.rstrip("/")
        self.session_id, self.timeout = session_id, timeout
        self.page, self.url, self.instruction = ParsedPage(), "", ""

    def _fetch(self, url: str, data: dict | None = None) -> None:
        url = urllib.parse.urljoin(self.base + "/", url)
        body = None if data is None else urllib.parse.urlencode(data).encode()
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=self.timeout) as reply:
                html = reply.read().decode("utf-8", errors="replace")
                self.url = reply.geturl()
        except (urllib.error.URLError, OSError) as exc:
            raise WebshopServerError(f"webshop_url: cannot fetch {url}: {exc}") from None
        self.page = parse_page(html)

    def _show(self):
        score = None
        if SCORE_LABEL in self.page.texts:
            at = self.page.texts.index(SCORE_LABEL) + 1
            try:
                score = float(self.page.texts[at])
            except (IndexError, ValueError):
                raise WebshopServerError(f"webshop_url: no score after {SCORE_LABEL!r} on {self.url}") from None
        key = urllib.parse.unquote(self.url.split("/", 3)[-1])
        return self.instruction, self.page.view(), key, score

    def start(self):
        """Open the session's search page and read its instruction."""
        self._fetch(f"/{urllib.parse.quote(self.session_id)}")
        texts = self.page.texts
        if "Instruction:" not in texts or texts.index("Instruction:") + 1 >= len(texts):
            raise WebshopServerError(f"webshop_url: no instruction on {self.url}")
        self.instruction = texts[texts.index("Instruction:") + 1]
        return self._show()

    def go(self, verb: str, arg: str):
        """Search or click (an available action of the current page)."""
        if verb == "search":
            self._fetch(self.page.search_form or f"/{self.session_id}", {"search_query": arg})
        else:
            method, url = self.page.targets[arg]
            self._fetch(url, {} if method == "post" else None)
        return self._show()


def session_exists(base_url: str, index: int, *, timeout: float = TIMEOUT) -> bool:
    """Whether the server at ``base_url`` has session ``fixed_<index>`` (a search page with an instruction).

    Raises
    ------
    WebshopServerError
        Naming ``webshop_url`` and the URL when the server cannot be reached or answers something that is
        neither such a page nor WebShop's HTTP 500 for a goal past its last.
    """
    url = f"{base_url.rstrip('/')}/fixed_{int(index)}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url), timeout=timeout) as reply:
            page = parse_page(reply.read().decode("utf-8", errors="replace"))
    except urllib.error.HTTPError as exc:
        if exc.code == 500:
            return False
        raise WebshopServerError(f"webshop_url: {url} answered HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise WebshopServerError(f"webshop_url: cannot reach {url}: {reason}") from None
    if "Instruction:" not in page.texts or page.search_form is None:
        raise WebshopServerError(f"webshop_url: {url} is not a WebShop search page (no instruction and search "
                                 f"bar); is {base_url} a WebShop server (web_agent_site)?")
    return True


def count_sessions(base_url: str, upper: int, *, timeout: float = TIMEOUT) -> int:
    """How many fixed sessions the server holds, counting up to ``upper``: sessions ``fixed_0`` ... ``fixed_<n-1>``
    exist (a binary search over :func:`session_exists`, about ``log2(upper)`` requests).

    Raises
    ------
    WebshopServerError
        As :func:`session_exists`, and naming ``webshop_url`` when the server has no session ``fixed_0``.
    """
    if not session_exists(base_url, 0, timeout=timeout):
        raise WebshopServerError(f"webshop_url: {base_url} has no session fixed_0 (HTTP 500): the server holds no "
                                 f"goals")
    if upper <= 1 or session_exists(base_url, upper - 1, timeout=timeout):
        return max(1, upper)
    low, high = 1, upper - 1  # fixed_<low - 1> exists, fixed_<high> does not
    while low < high:
        mid = (low + high) // 2
        if session_exists(base_url, mid, timeout=timeout):
            low = mid + 1
        else:
            high = mid
    return low
