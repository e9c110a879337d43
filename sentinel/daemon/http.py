"""Sentinel's own HTTP endpoints: /metrics, /healthz, /readyz.

A stdlib threading server: it serves a handful of small responses to the
Prometheus and the orchestrator that watch Sentinel, so it needs no framework.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


class StatusServer:
    """Serves /metrics from a registry, /healthz (alive) and /readyz (`ready()` says why not)."""

    def __init__(
        self, host: str, port: int, registry: CollectorRegistry,
        ready: Callable[[], str | None],
    ) -> None:
        handler = _handler(registry, ready)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="sentinel-http", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) actually bound; the port is real even when 0 was asked for."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()


def _handler(
    registry: CollectorRegistry, ready: Callable[[], str | None]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "Sentinel"

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._reply(200, b"ok\n")
            elif path == "/readyz":
                why = ready()
                if why is None:
                    self._reply(200, b"ready\n")
                else:
                    self._reply(503, f"not ready: {why}\n".encode())
            else:
                self._reply(404, b"not found\n")

        def _reply(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            log.debug("http: " + format, *args)

    return Handler
