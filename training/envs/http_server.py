"""A local HTTP server in a background thread: what the built-in Search-QA retrieval server and the local WebShop
server share (``http.server`` of the standard library; no web framework).

:func:`listen` takes the address first, so a command refuses a port in use (or out of range) in one line before
it does any work, and :func:`serve_forever` then serves on it; :func:`serve_command` is the two around the work of
a ``serve`` command.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from ocsd.cli import InputError

__all__ = ["BackgroundServer", "ListenError", "listen", "serve_command", "serve_forever"]


class ListenError(InputError):
    """A server cannot listen where asked (port out of range or in use, unknown host); the message names the
    address and the flag or setting (a usage error: one line, exit status 2)."""


def listen(host: str, port: int, handler: type[BaseHTTPRequestHandler] = BaseHTTPRequestHandler, *,
           flag: str = "port") -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (port 0: a free port), not serving yet; ``handler`` may be set later through
    :func:`serve_forever`.

    Raises
    ------
    ListenError
        Naming ``flag`` and the address when the port is out of range, taken, or the host unknown.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ListenError(f"{flag} {port!r}: must be an integer from 0 to 65535")
    try:
        httpd = ThreadingHTTPServer((host, port), handler)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ListenError(f"{flag} {port}: cannot listen on {host}:{port}: {reason}") from None
    httpd.daemon_threads = True
    return httpd


def serve_forever(httpd: ThreadingHTTPServer, handler: type[BaseHTTPRequestHandler] | None = None) -> None:
    """Serve on ``httpd`` (with ``handler`` when given) in this thread until interrupted (Ctrl-C), then release
    the port."""
    if handler is not None:
        httpd.RequestHandlerClass = handler
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


class BackgroundServer:
    """Serves ``handler`` on ``host:port`` in a daemon thread until :meth:`close` (also a context manager).

    Parameters
    ----------
    handler : type of BaseHTTPRequestHandler
    host, port : str, int
        Where to listen (port 0: a free port; :attr:`address` says which).
    name : str
        The serving thread's name.

    Raises
    ------
    ListenError
        When it cannot listen there (:func:`listen`).
    """

    def __init__(self, handler: type[BaseHTTPRequestHandler], *, host: str = "127.0.0.1", port: int = 0,
                 name: str = "http-server") -> None:
        self.httpd = listen(host, port, handler)
        self.address = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name=name, daemon=True)
        self.thread.start()
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Stop serving and release the port; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def serve_command(host: str, port: int, build: Callable[[str], tuple[type[BaseHTTPRequestHandler], str]]) -> None:
    """What a ``serve`` command does: listen on ``host:port`` first (a port out of range or in use stops here, before
    any work), then ``build(address)`` the handler and the line that says what is served at ``address`` (the port
    0 asked for resolved), print that line on stderr and serve until interrupted (Ctrl-C).

    Raises
    ------
    ListenError
        When it cannot listen there (:func:`listen`, naming ``--port``); the port is released when ``build`` fails.
    """
    httpd = listen(host, port, flag="--port")
    try:
        handler, line = build(f"http://{host}:{httpd.server_address[1]}")
    except BaseException:
        httpd.server_close()
        raise
    print(line, file=sys.stderr)
    serve_forever(httpd, handler)
