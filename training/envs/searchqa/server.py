"""The built-in retrieval server: BM25 over a corpus, speaking the Search-R1 retrieval protocol over HTTP.

``POST /retrieve`` with a JSON body

* ``queries`` (list of str; Search-R1's batched server, as SDAR verl/tools/utils/search_r1_like_utils.py:54
  sends it) or ``query`` (one str; SDAR examples/search/retriever/retrieval_server.py:303-306 and
  agent_system/environments/env_package/search/third_party/skyrl_gym/tools/search.py:48),
* ``topk`` (int; default the server's, 3 as SDAR examples/search/retriever/retrieval_launch.sh),
* ``return_scores`` (bool, default false),

answers ``{"result": [hits of query 1, ...]}``, one list per query, each hit
``{"document": {"id": ..., "contents": "\\"Title\\"\\ntext"}, "score": s}`` with scores, else the bare
document (SDAR .../retrieval_server.py:333-345). ``GET /health`` answers the corpus name and size. A
malformed request is answered 400 with ``{"error": ...}``.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

from training.envs.http_server import BackgroundServer
from training.envs.searchqa.corpus import BM25Index

__all__ = ["DEFAULT_TOPK", "MAX_TOPK", "RetrievalServer", "parse_request", "retrieval_handler", "retrieve"]

DEFAULT_TOPK = 3
"""Passages per query when a request names none (SDAR examples/search/retriever/retrieval_launch.sh: --topk 3)."""
MAX_TOPK = 100
"""The most passages one query may ask for."""


def parse_request(body: bytes) -> tuple[list[str], int | None, bool]:
    """``(queries, topk or None, return_scores)`` of a ``/retrieve`` body.

    Raises
    ------
    ValueError
        Naming the field that is missing or has the wrong type.
    """
    try:
        payload = json.loads(body.decode("utf-8") or "null")
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ValueError("body must be a JSON object with 'queries' (or 'query'), 'topk', 'return_scores'")
    if "queries" in payload:
        queries = payload["queries"]
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise ValueError("'queries' must be a list of strings")
    elif isinstance(payload.get("query"), str):
        queries = [payload["query"]]
    else:
        raise ValueError("missing 'queries' (a list of strings) or 'query' (a string)")
    topk = payload.get("topk")
    if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK):
        raise ValueError(f"'topk' must be an integer from 1 to {MAX_TOPK}, got {topk!r}")
    scores = payload.get("return_scores", False)
    if not isinstance(scores, bool):
        raise ValueError(f"'return_scores' must be true or false, got {scores!r}")
    return queries, topk, scores


def retrieve(index: BM25Index, queries: list[str], topk: int, return_scores: bool) -> dict:
    """The ``/retrieve`` answer of ``queries`` over ``index``."""
    result = []
    for hits in index.search(queries, topk):
        docs = [{"id": p.id, "contents": p.contents} for p, _ in hits]
        result.append([{"document": d, "score": s} for d, (_, s) in zip(docs, hits)] if return_scores else docs)
    return {"result": result}


def retrieval_handler(index: BM25Index, default_topk: int) -> type[BaseHTTPRequestHandler]:
    """The request handler serving ``/retrieve`` over ``index`` (``default_topk`` passages when a request names
    none) and ``/health``."""
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def _send(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/health":
                return self._send(200, {"status": "ok", "corpus": index.name, "passages": len(index)})
            return self._send(404, {"error": f"no route GET {self.path}; use POST /retrieve"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if self.path.rstrip("/") != "/retrieve":
                return self._send(404, {"error": f"no route POST {self.path}; use POST /retrieve"})
            try:
                queries, topk, scores = parse_request(body)
            except ValueError as exc:
                return self._send(400, {"error": str(exc)})
            return self._send(200, retrieve(index, queries, topk or default_topk, scores))

    return Handler


class RetrievalServer(BackgroundServer):
    """The built-in retrieval server in a background thread until :meth:`close`.

    Parameters
    ----------
    index : BM25Index
    host, port : str, int
        Where to listen (port 0: a free port; :attr:`url` says which).
    topk : int
        Passages per query when a request names none.

    Attributes
    ----------
    url : str
        ``http://host:port/retrieve``.
    """

    def __init__(self, index: BM25Index, *, host: str = "127.0.0.1", port: int = 0,
                 topk: int = DEFAULT_TOPK) -> None:
        self.index = index
        super().__init__(retrieval_handler(index, topk), host=host, port=port, name="searchqa-retrieval")
        self.url = f"{self.address}/retrieve"
