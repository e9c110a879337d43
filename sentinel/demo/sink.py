"""A loopback webhook receiver: the demo's (and the tests') stand-in for a pager or a chat."""

from __future__ import annotations

import json
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookSink:
    """A loopback HTTP server that keeps every JSON body POSTed to it, in order.

    `bodies` is a queue for consumers; `received` keeps (monotonic time, body,
    headers) of every delivery for tests that measure when a page arrived.
    """

    def __init__(self, port: int = 0) -> None:
        self.bodies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.received: list[tuple[float, dict[str, Any], dict[str, str]]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                    sink.received.append((time.monotonic(), body, dict(self.headers)))
                    sink.bodies.put(body)
                    self.send_response(200)
                except ValueError:
                    self.send_response(400)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Where to POST."""
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/hook"

    def start(self) -> WebhookSink:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
