"""A local fake of the Cloud TPU v2 REST API (nodes.get, queuedResources.get), on 127.0.0.1.

`GET /v2/projects/P/locations/L/nodes/N` answers a Node (`name`, `state`,
`health`, `healthDescription`, `acceleratorType`, ...), and
`GET /v2/projects/P/locations/L/queuedResources/Q` a QueuedResource whose
`state` is a QueuedResourceState (`{"state": ..., "stateInitiator": ...}`),
as in the v2 REST reference. The GAPIC REST transport asks with
`$alt=json;enum-encoding=int`, and then, like the real API, enums come back
as numbers. Unknown names get 404; `fail_next(n, status)` injects errors.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

# The numbers of google.cloud.tpu.v2's enums (cloud_tpu.proto).
NODE_STATES = {
    "STATE_UNSPECIFIED": 0, "CREATING": 1, "READY": 2, "RESTARTING": 3, "REIMAGING": 4,
    "DELETING": 5, "REPAIRING": 6, "STOPPED": 8, "STOPPING": 9, "STARTING": 10,
    "PREEMPTED": 11, "TERMINATED": 12, "HIDING": 13, "HIDDEN": 14, "UNHIDING": 15,
    "UNKNOWN": 16,
}
HEALTH = {"HEALTH_UNSPECIFIED": 0, "HEALTHY": 1, "TIMEOUT": 3, "UNHEALTHY_TENSORFLOW": 4,
          "UNHEALTHY_MAINTENANCE": 5}
QR_STATES = {
    "STATE_UNSPECIFIED": 0, "CREATING": 1, "ACCEPTED": 2, "PROVISIONING": 3, "FAILED": 4,
    "DELETING": 5, "ACTIVE": 6, "SUSPENDING": 7, "SUSPENDED": 8, "WAITING_FOR_RESOURCES": 9,
}
_NODE = re.compile(r"^/v2/(projects/[^/]+/locations/[^/]+/nodes/[^/:]+)$")
_QR = re.compile(r"^/v2/(projects/[^/]+/locations/[^/]+/queuedResources/[^/:]+)$")


@dataclass
class _Node:
    state: str
    health: str | None
    description: str = ""


class FakeTpu:
    """The fake server: set node and queued-resource states, inject faults, count requests."""

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.queued: dict[str, str] = {}
        self.requests: list[tuple[str, int]] = []  # (path with query, status)
        self._fail: list[int] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)

    @property
    def endpoint(self) -> str:
        """`http://127.0.0.1:PORT`, for `client_options={"api_endpoint": ...}`."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeTpu:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def set_node(self, name: str, state: str, health: str | None = None,
                 description: str = "") -> None:
        """Create or change a node (`projects/P/locations/L/nodes/N`)."""
        with self._lock:
            self.nodes[name] = _Node(state, health, description)

    def set_queued_resource(self, name: str, state: str) -> None:
        """Create or change a queued resource."""
        with self._lock:
            self.queued[name] = state

    def fail_next(self, n: int, status: int = 503) -> None:
        """Answer the next `n` requests with `status`."""
        with self._lock:
            self._fail.extend([status] * n)

    def handle(self, raw_path: str) -> tuple[int, dict[str, Any]]:
        """Status and JSON body for one GET."""
        url = urlsplit(raw_path)
        alt = parse_qs(url.query).get("$alt", [""])[0]
        as_int = "enum-encoding=int" in alt
        path = unquote(url.path)
        with self._lock:
            status, body = self._answer(path, as_int)
            self.requests.append((raw_path, status))
        return status, body

    def _answer(self, path: str, as_int: bool) -> tuple[int, dict[str, Any]]:
        if self._fail:
            status = self._fail.pop(0)
            return status, _error(status, "UNAVAILABLE" if status >= 500 else "RESOURCE_EXHAUSTED")
        if (m := _NODE.match(path)) and m.group(1) in self.nodes:
            node = self.nodes[m.group(1)]
            body: dict[str, Any] = {
                "name": m.group(1), "acceleratorType": "v5litepod-8", "runtimeVersion":
                "v2-alpha-tpuv5-lite", "state": _enum(NODE_STATES, node.state, as_int),
                "apiVersion": 4 if as_int else "V2",
            }
            if node.health is not None:
                body["health"] = _enum(HEALTH, node.health, as_int)
            if node.description:
                body["healthDescription"] = node.description
            return 200, body
        if (m := _QR.match(path)) and m.group(1) in self.queued:
            state = _enum(QR_STATES, self.queued[m.group(1)], as_int)
            return 200, {"name": m.group(1), "state": {"state": state}}
        return 404, _error(404, "NOT_FOUND", f"Resource '{path[4:]}' was not found")


def _enum(table: dict[str, int], name: str, as_int: bool) -> Any:
    return table[name] if as_int else name


def _error(code: int, status: str, message: str = "injected fault") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def _handler_for(fake: FakeTpu) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            status, body = fake.handle(self.path)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    return Handler


@contextmanager
def running_fake_tpu() -> Iterator[FakeTpu]:
    """A started fake, stopped on exit."""
    fake = FakeTpu().start()
    try:
        yield fake
    finally:
        fake.stop()
