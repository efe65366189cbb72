"""A client of Search-R1-style retrieval servers over HTTP, and how their results become an observation.

Request (one query per request): ``POST <url>`` with ``{"queries": [q], "query": q, "topk": k,
"return_scores": true}``. Search-R1's batched server reads ``queries`` (SDAR verl/tools/utils/
search_r1_like_utils.py:54); SDAR's own server reads ``query`` (SDAR examples/search/retriever/
retrieval_server.py:303-306, skyrl_gym/tools/search.py:48) and ignores the other key, so one body serves
both. The answer is ``{"result": [[{"document": {"contents": "\\"Title\\"\\ntext"}, "score": s}, ...]]}``.

Failures: connection errors, time-outs and server errors 500/502/503/504 are retried up to 10 times,
waiting 1, 2, 3, ... s (SDAR .../skyrl_gym/tools/search.py:16-17, 59-110); then, where SDAR shows the
error text as the observation, :class:`RetrievalError` is raised naming the URL, so a run never trains on
a dead server's answers. :func:`health_check` asks every server once, without retries, before a run.

Observation (SDAR agent_system/environments/env_package/search/third_party/skyrl_gym/tools/search.py:
132-137, 211-243 and envs/search/env.py:71-76): the passages as ``Doc i: <contents>`` lines, in a JSON
object ``{"result": ...}`` (``"No search results found."`` when there are none), wrapped in
``<information>...</information>``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Sequence

from ocsd.cli import InputError

__all__ = ["Hit", "NO_RESULTS", "RetrievalClient", "RetrievalError", "format_information", "health_check",
           "parse_urls"]

MAX_RETRIES = 10
"""Attempts per query (SDAR .../skyrl_gym/tools/search.py:16)."""
RETRY_DELAY = 1.0
"""Seconds before retry ``i`` are ``RETRY_DELAY * i`` (SDAR .../skyrl_gym/tools/search.py:17, 77)."""
RETRY_STATUS = (500, 502, 503, 504)
"""HTTP statuses that are retried (SDAR .../skyrl_gym/tools/search.py:73)."""
NO_RESULTS = "No search results found."
"""The result text of a search that found nothing (SDAR .../skyrl_gym/tools/search.py:239)."""
HEALTH_QUERY = "Wikipedia"
"""The query :func:`health_check` sends."""


class RetrievalError(InputError):
    """A retrieval server is unreachable or answers outside the protocol; the message names the URL."""


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: its ``document.contents`` (``"Title"\\ntext``), score and id ("" when the
    server gives none)."""

    contents: str
    score: float = 0.0
    id: str = ""


def parse_urls(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """The retrieval URLs of a ``retrieval_urls`` setting (comma separated), each ending in ``/retrieve``.

    ``http://host:8000`` becomes ``http://host:8000/retrieve``, as SDAR's ``search_url`` names the route.

    Raises
    ------
    RetrievalError
        Naming ``retrieval_urls`` when it names no URL or one that is not http(s).
    """
    items = text.split(",") if isinstance(text, str) else list(text or ())
    urls = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        if not item.startswith(("http://", "https://")):
            raise RetrievalError(f"retrieval_urls: {item!r} is not an http:// or https:// URL")
        item = item.rstrip("/")
        urls.append(item if item.endswith("/retrieve") else item + "/retrieve")
    if not urls:
        raise RetrievalError(f"retrieval_urls={text!r}: names no URL")
    return tuple(urls)


def _hits(url: str, payload: object) -> list[Hit]:
    """The first query's hits of a ``/retrieve`` answer."""
    if not isinstance(payload, dict) or not isinstance(payload.get("result"), list):
        raise RetrievalError(f"retrieval server {url}: answer has no list 'result' (Search-R1 protocol)")
    result = payload["result"]
    if not result:
        return []
    rows = result[0]
    if not isinstance(rows, list):
        raise RetrievalError(f"retrieval server {url}: 'result' must hold one list of passages per query")
    out = []
    for row in rows:
        doc = row.get("document", row) if isinstance(row, dict) else None
        contents = doc.get("contents") if isinstance(doc, dict) else None
        if not isinstance(contents, str):
            raise RetrievalError(f"retrieval server {url}: a passage has no string 'document.contents'")
        score = row.get("score", 0.0) if isinstance(row, dict) else 0.0
        out.append(Hit(contents, float(score) if isinstance(score, (int, float)) else 0.0, str(doc.get("id", ""))))
    return out


def _post(url: str, query: str, topk: int, timeout: float) -> list[Hit]:
    body = json.dumps({"queries": [query], "query": query, "topk": int(topk), "return_scores": True}).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        text = reply.read().decode("utf-8", errors="replace")
    try:
        payload = json.loads(text)
    except ValueError:
        raise RetrievalError(f"retrieval server {url}: answer is not JSON: {text[:200]!r}") from None
    return _hits(url, payload)


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}"


class RetrievalClient:
    """Searches one retrieval server.

    Parameters
    ----------
    url : str
        The server's ``/retrieve`` URL.
    topk : int
        Passages per search (``retrieval_topk``, 3 as SDAR .../skyrl_gym/tools/search.py:23).
    timeout : float
        Seconds to wait for an answer (``retrieval_timeout``, 30 as SDAR .../skyrl_gym/tools/search.py:15).
    retries : int
        Attempts per query (:data:`MAX_RETRIES`).
    """

    def __init__(self, url: str, *, topk: int = 3, timeout: float = 30.0, retries: int = MAX_RETRIES) -> None:
        self.url, self.topk, self.timeout, self.retries = url, int(topk), float(timeout), max(1, int(retries))

    def search(self, query: str) -> list[Hit]:
        """The passages of ``query``, best first.

        Raises
        ------
        RetrievalError
            Naming the URL, after the retries, or at once for an answer outside the protocol or a
            client error (4xx).
        """
        last = ""
        for attempt in range(self.retries):
            try:
                return _post(self.url, query.strip(), self.topk, self.timeout)
            except urllib.error.HTTPError as exc:
                if exc.code not in RETRY_STATUS:
                    raise RetrievalError(f"retrieval server {self.url}: {_why(exc)}") from None
                last = _why(exc)
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = _why(exc)
            if attempt + 1 < self.retries:
                time.sleep(RETRY_DELAY * (attempt + 1))
        raise RetrievalError(f"retrieval server {self.url}: {last} (after {self.retries} attempts)")


def health_check(urls: Sequence[str], *, timeout: float = 30.0) -> dict[str, float]:
    """Ask every server one query, once; the seconds each took.

    Raises
    ------
    RetrievalError
        Naming the first URL that failed and why (connection refused, time-out, HTTP status, an answer
        outside the protocol).
    """
    out = {}
    for url in urls:
        start = time.perf_counter()
        try:
            _post(url, HEALTH_QUERY, 1, timeout)
        except RetrievalError as exc:
            raise RetrievalError(f"retrieval_urls: health check failed: {exc}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            raise RetrievalError(f"retrieval_urls: health check failed: retrieval server {url}: {_why(exc)}") \
                from None
        out[url] = time.perf_counter() - start
    return out


def format_information(hits: Sequence[Hit]) -> str:
    """The observation of a search: its passages as SDAR shows them, inside ``<information>`` tags."""
    if hits:
        text = "".join(f"Doc {i + 1}: {h.contents.strip()}\n" for i, h in enumerate(hits))
    else:
        text = NO_RESULTS
    return "<information>" + json.dumps({"result": text}) + "</information>"
