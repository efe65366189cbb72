"""A local HTTP server in a background thread: what the built-in Search-QA retrieval server and the local WebShop
server share (``http.server`` of the standard library; no web framework)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["BackgroundServer", "serve_foreground"]


class BackgroundServer:
    """Serves ``handler`` on ``host:port`` in a daemon thread until :meth:`close` (also a context manager).

    Parameters
    ----------
    handler : type of BaseHTTPRequestHandler
    host, port : str, int
        Where to listen (port 0: a free port; :attr:`address` says which).
    name : str
        The serving thread's name.
    """

    def __init__(self, handler: type[BaseHTTPRequestHandler], *, host: str = "127.0.0.1", port: int = 0,
                 name: str = "http-server") -> None:
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
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


def serve_foreground(handler: type[BaseHTTPRequestHandler], *, host: str, port: int) -> None:
    """Serve ``handler`` on ``host:port`` in this thread until interrupted (Ctrl-C), then release the port."""
    httpd = ThreadingHTTPServer((host, port), handler)
    httpd.daemon_threads = True
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
