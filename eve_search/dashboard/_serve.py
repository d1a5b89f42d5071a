"""``--serve``: the dashboard from a local HTTP server, redrawn from the store on every request.

The page polls ``/data.json`` and reloads itself when the document's fingerprint changes, so a
sweep that is still running shows each result shortly after it is recorded. The server binds to
127.0.0.1 only and reads the store; it never writes to it. It answers only requests whose ``Host``
header names that address (``127.0.0.1:PORT`` or ``localhost:PORT``): a page of another site that
reaches it through DNS rebinding sends its own name and gets 421 Misdirected Request, no data.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from eve_search.dashboard._data import dashboard_data
from eve_search.dashboard._render import render_page

__all__ = ["DashboardServer", "start_server"]


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer

    def do_GET(self) -> None:
        if not self.server.host_allowed(self.headers.get("Host")):
            # DNS rebinding: a page from another site whose name now points at 127.0.0.1 sends its own
            # name here; it gets no data.
            self._reply(421, b"misdirected request: this server answers only to the Host it binds\n",
                        "text/plain; charset=utf-8")
            return
        path = self.path.split("?", 1)[0]
        try:
            if path in ("/", "/index.html"):
                body = render_page(self.server.data(), live=True, interval=self.server.interval).encode()
                kind = "text/html; charset=utf-8"
            elif path == "/data.json":
                body = json.dumps(self.server.data(), allow_nan=False).encode()
                kind = "application/json"
            elif path == "/favicon.ico":  # browsers ask; an empty answer keeps their consoles clean
                self._reply(204, b"", "image/x-icon")
                return
            else:
                self._reply(404, b"not found\n", "text/plain; charset=utf-8")
                return
        except Exception as error:  # noqa: BLE001 the store may be briefly locked by a writer; say so and go on
            text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            self._reply(503, f"cannot read the results store: {text}\n".encode(), "text/plain; charset=utf-8")
            return
        self._reply(200, body, kind)

    def _reply(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per poll would bury the sweep's own output


class DashboardServer(ThreadingHTTPServer):
    """Serves one store's dashboard; the document is rebuilt at most once per ``cache_seconds``
    (default: the page's polling interval, so any number of open pages cost one read per interval).

    Args:
        storage: the store's URL.
        port: the port to bind on 127.0.0.1 (0: a free one).
        interval: the page's polling interval, in seconds.
        cache_seconds: how long a built document is reused (None: ``interval``).

    Example (binds a port: not run as a doctest; :func:`start_server` serves it in a thread):
        >>> server = DashboardServer("sqlite:///runs/results.db", 0)  # doctest: +SKIP
        >>> server.host_allowed(f"localhost:{server.server_address[1]}")  # doctest: +SKIP
        True
        >>> server.server_close()  # doctest: +SKIP
    """

    daemon_threads = True

    def __init__(self, storage: str, port: int, *, interval: float = 5.0, cache_seconds: float | None = None) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.storage = storage
        self.interval = interval
        self.cache_seconds = interval if cache_seconds is None else cache_seconds
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, Any]] | None = None

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a page that reloaded or closed while its poll was answered: nothing to report
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    @property
    def allowed_hosts(self) -> frozenset[str]:
        """The ``Host`` header values this server answers: the address it binds (127.0.0.1) and
        ``localhost``, with its port (without it too on port 80, where browsers leave it out)."""
        port = self.server_address[1]
        hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        if port == 80:
            hosts |= {"127.0.0.1", "localhost"}
        return frozenset(hosts)

    def host_allowed(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` header is answered (any other gets 421, no data)."""
        return host is not None and host.strip().lower() in self.allowed_hosts

    def data(self) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] > self.cache_seconds:
                self._cached = (now, dashboard_data(self.storage))
            return self._cached[1]


def start_server(storage: str, port: int = 0, *, interval: float = 5.0) -> tuple[DashboardServer, threading.Thread]:
    """Start serving in a background thread; ``port=0`` picks a free port (see ``server.url``).

    Stop it with ``server.shutdown(); server.server_close()``.

    Args:
        storage: the store's URL.
        port: the port to bind on 127.0.0.1 (0: a free one).
        interval: the page's polling interval, in seconds.

    Returns:
        ``(server, thread)``: the running :class:`DashboardServer` and its daemon thread.

    Example (starts a server: not run as a doctest):
        >>> server, thread = start_server("sqlite:///runs/results.db")  # doctest: +SKIP
        >>> server.url  # doctest: +SKIP
        'http://127.0.0.1:41235/'
        >>> server.shutdown(); server.server_close()  # doctest: +SKIP
    """
    server = DashboardServer(storage, port, interval=interval)
    thread = threading.Thread(target=server.serve_forever, name="eve-search-dashboard", daemon=True)
    thread.start()
    return server, thread
