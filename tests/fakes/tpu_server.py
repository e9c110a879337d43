"""A local fake of the Cloud TPU v2 REST API (nodes.get, queuedResources.get), on 127.0.0.1.

`GET /v2/projects/P/locations/L/nodes/N` answers a Node (`name`, `state`,
`health`, `healthDescription`, `acceleratorType`, ...), and
`GET /v2/projects/P/locations/L/queuedResources/Q` a QueuedResource whose
`state` is a QueuedResourceState (`{"state": ..., "stateInitiator": ...}`),
as in the v2 REST reference. The GAPIC REST transport asks with
`$alt=json;enum-encoding=int`, and then, like the real API, enums come back
as numbers. Unknown names get 404; `fail_next(n, status)` injects errors.

`POST .../nodes/N:stop` and `:start` answer a long-running Operation
(`projects/P/locations/L/operations/operation-K`, done: false); each
`GET` of the operation advances it, and after `op_polls` GETs it is done
with the Node (state STOPPED or READY) as its response. `POST`s are kept
in `actions` so a test can prove nothing but stop and start was asked
(no delete).
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
_NODE_VERB = re.compile(r"^/v2/(projects/[^/]+/locations/[^/]+)/nodes/([^/:]+):(\w+)$")
_OP = re.compile(r"^/v2/(projects/[^/]+/locations/[^/]+/operations/[^/:]+)$")
_NODE_TYPE = "type.googleapis.com/google.cloud.tpu.v2.Node"
_META_TYPE = "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"


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
        self.actions: list[tuple[str, str]] = []  # (verb, node name) of every POST
        self.op_polls = 2
        self._ops: dict[str, dict[str, Any]] = {}  # name → {node, final state, polls left}
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

    def post(self, raw_path: str) -> tuple[int, dict[str, Any]]:
        """Status and JSON body for one POST (nodes.stop, nodes.start)."""
        path = unquote(urlsplit(raw_path).path)
        with self._lock:
            self.requests.append((raw_path, 0))
            m = _NODE_VERB.match(path)
            if not m:
                return 404, _error(404, "NOT_FOUND", f"no route for POST {path}")
            node_name = f"{m.group(1)}/nodes/{m.group(2)}"
            self.actions.append((m.group(3), node_name))
            if node_name not in self.nodes:
                return 404, _error(404, "NOT_FOUND", f"Resource '{node_name}' was not found")
            if m.group(3) not in ("stop", "start"):
                return 400, _error(400, "INVALID_ARGUMENT", f"unsupported verb {m.group(3)}")
            transit, final = ("STOPPING", "STOPPED") if m.group(3) == "stop" else (
                "STARTING", "READY")
            self.nodes[node_name].state = transit
            op = f"{m.group(1)}/operations/operation-{len(self._ops) + 1}"
            self._ops[op] = {"node": node_name, "final": final, "left": self.op_polls}
            return 200, {"name": op, "done": False, "metadata": {
                "@type": _META_TYPE, "target": node_name, "verb": m.group(3)}}

    def _operation(self, name: str, as_int: bool) -> tuple[int, dict[str, Any]]:
        op = self._ops[name]
        op["left"] -= 1
        if op["left"] > 0:
            return 200, {"name": name, "done": False}
        node = self.nodes[op["node"]]
        node.state = op["final"]
        return 200, {"name": name, "done": True, "response": {
            "@type": _NODE_TYPE, "name": op["node"],
            "state": _enum(NODE_STATES, node.state, as_int)}}

    def _answer(self, path: str, as_int: bool) -> tuple[int, dict[str, Any]]:
        if (m := _OP.match(path)) and m.group(1) in self._ops:
            return self._operation(m.group(1), as_int)
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

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            status, body = fake.post(self.path)
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
