"""A local fake of Cloud Logging's REST `POST /v2/entries:list`, on 127.0.0.1.

Request body (as the real API and google-cloud-logging's `_http.py` send it):
`resourceNames` (required, `projects/P`), `filter`, `orderBy` ("timestamp
asc" or "timestamp desc"), `pageSize` (default 50, at most 1000),
`pageToken`; unknown fields are refused with 400 as the real API does.
Response: `{"entries": [LogEntry...], "nextPageToken": "..."}`, entries in
timestamp order (ties by insertId), each with logName, resource {type,
labels}, timestamp / receiveTimestamp (RFC 3339 with nanoseconds),
severity, insertId, textPayload or jsonPayload, labels.

Pagination is real: the token names the last entry returned (its timestamp
and insertId) plus the query it belongs to, so entries appended between
pages are neither skipped nor repeated, and a token used with another query
is refused. Faults for tests: `fail_next(n, status)`, `invalid_json_next(n)`,
and `add_raw(entry)` for entries the helpers would not build.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .logging_filter import FilterError, compile_filter, parse_rfc3339_ns

Entry = dict[str, Any]
_FIELDS = {"resourceNames", "projectIds", "filter", "orderBy", "pageSize", "pageToken"}
_STATUS_NAMES = {400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                 503: "UNAVAILABLE", 404: "NOT_FOUND"}


def rfc3339_ns(ns: int) -> str:
    """RFC 3339 in UTC with all nine fraction digits, as the API writes timestamps."""
    sec, frac = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(sec, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


@dataclass
class RequestRecord:
    """One request the fake received, and the status it answered."""

    body: Any
    status: int


@dataclass
class _State:
    entries: list[Entry] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    fail: list[tuple[int, str | None]] = field(default_factory=list)  # (status, Retry-After)
    bad_json: int = 0
    next_id: int = 0


class FakeCloudLogging:
    """The fake server: add entries, inject faults, count requests."""

    def __init__(self, project: str = "test-project") -> None:
        self.project = project
        self._state = _State()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits for it, once per test.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)

    @property
    def endpoint(self) -> str:
        """`http://127.0.0.1:PORT`, for `client_options={"api_endpoint": ...}`."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[RequestRecord]:
        """Every `entries:list` request so far."""
        with self._lock:
            return list(self._state.requests)

    def start(self) -> FakeCloudLogging:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def add(self, ts_ns: int, text: str | None = None, *, json_payload: Any = None,
            severity: str | None = "ERROR", resource_type: str = "tpu_worker",
            node_id: str = "node-1", log: str = "stderr", insert_id: str | None = None,
            labels: dict[str, str] | None = None) -> str:
        """Append one entry (textPayload unless `json_payload` is given); its insertId."""
        with self._lock:
            self._state.next_id += 1
            iid = insert_id or f"iid{self._state.next_id:08d}"
        entry: Entry = {
            "logName": f"projects/{self.project}/logs/{log}",
            "resource": {"type": resource_type, "labels": {
                "project_id": self.project, "zone": "us-east5-b", "node_id": node_id,
                "worker_id": "0"}},
            "timestamp": rfc3339_ns(ts_ns),
            "receiveTimestamp": rfc3339_ns(ts_ns + 1_500_000),
            "insertId": iid,
        }
        if severity is not None:
            entry["severity"] = severity
        if json_payload is not None:
            entry["jsonPayload"] = json_payload
        else:
            entry["textPayload"] = text if text is not None else ""
        if labels:
            entry["labels"] = labels
        self.add_raw(entry)
        return iid

    def add_raw(self, entry: Entry) -> None:
        """Append an entry exactly as given (for malformed entries)."""
        with self._lock:
            self._state.entries.append(entry)

    def fail_next(self, n: int, status: int = 429, retry_after: str | None = None) -> None:
        """Answer the next `n` requests with `status` (and a Retry-After header if given)."""
        with self._lock:
            self._state.fail.extend([(status, retry_after)] * n)

    def invalid_json_next(self, n: int = 1) -> None:
        """Answer the next `n` requests 200 with a body that is not JSON."""
        with self._lock:
            self._state.bad_json += n

    # -- request handling (runs on the server's threads) --

    def handle(self, body: Any) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body for one `entries:list` request."""
        with self._lock:
            if self._state.fail:
                status, retry_after = self._state.fail.pop(0)
                self._state.requests.append(RequestRecord(body, status))
                headers = {"Retry-After": retry_after} if retry_after else {}
                return status, headers, _error(status, "injected fault")
            if self._state.bad_json:
                self._state.bad_json -= 1
                self._state.requests.append(RequestRecord(body, 200))
                return 200, {}, b'{"entries": [{"logName": '
            entries = list(self._state.entries)
        try:
            page = self._page(body, entries)
            status, out = 200, json.dumps(page).encode()
        except FilterError as exc:
            status, out = 400, _error(400, str(exc))
        with self._lock:
            self._state.requests.append(RequestRecord(body, status))
        return status, {}, out

    def _page(self, body: Any, entries: list[Entry]) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise FilterError("request body must be a JSON object")
        unknown = set(body) - _FIELDS
        if unknown:
            raise FilterError(f"Invalid JSON payload received. Unknown name {sorted(unknown)[0]!r}")
        names = body.get("resourceNames") or [f"projects/{p}" for p in body.get("projectIds", [])]
        if not names:
            raise FilterError("resourceNames is required")
        order = body.get("orderBy", "timestamp asc")
        if order not in ("timestamp asc", "timestamp desc"):
            raise FilterError(f"invalid orderBy {order!r}")
        size = int(body.get("pageSize") or 50)
        if not 0 < size <= 1000:
            raise FilterError(f"pageSize must be in 1..1000, got {size}")
        query_hash = hashlib.sha256(json.dumps([names, body.get("filter", ""), order]).encode())
        qh = query_hash.hexdigest()[:16]
        pred = compile_filter(body.get("filter", ""))
        prefixes = tuple(f"{n}/logs/" for n in names)
        chosen = [e for e in entries
                  if str(e.get("logName", "")).startswith(prefixes) and pred(e)]
        chosen.sort(key=_order_key, reverse=(order == "timestamp desc"))
        if token := body.get("pageToken"):
            chosen = self._after_token(chosen, token, qh, descending=order == "timestamp desc")
        page, rest = chosen[:size], chosen[size:]
        out: dict[str, Any] = {"entries": page} if page else {}
        if rest:
            out["nextPageToken"] = _token(qh, _order_key(page[-1]))
        return out

    @staticmethod
    def _after_token(chosen: list[Entry], token: str, qh: str, *, descending: bool) -> list[Entry]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            last = (int(data["k"][0]), str(data["k"][1]))
        except (ValueError, KeyError, TypeError, IndexError):
            raise FilterError("invalid page token") from None
        if data.get("q") != qh:
            raise FilterError("page token does not belong to this query")
        if descending:
            return [e for e in chosen if _order_key(e) < last]
        return [e for e in chosen if _order_key(e) > last]


def _order_key(entry: Entry) -> tuple[int, str]:
    try:
        ns = parse_rfc3339_ns(str(entry.get("timestamp", "")))
    except FilterError:
        ns = 0
    return ns, str(entry.get("insertId", ""))


def _token(qh: str, key: tuple[int, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps({"q": qh, "k": list(key)}).encode()).decode()


def _error(status: int, message: str) -> bytes:
    name = _STATUS_NAMES.get(status, HTTPStatus(status).phrase.upper().replace(" ", "_"))
    return json.dumps({"error": {"code": status, "message": message, "status": name}}).encode()


def _handler_for(fake: FakeCloudLogging) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.split("?")[0] != "/v2/entries:list":
                self._send(404, {}, _error(404, f"no such method {self.path}"))
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {}, _error(400, "Invalid JSON payload received."))
                return
            self._send(*fake.handle(body))

        def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # keep test output clean

    return Handler


@contextmanager
def running_fake(project: str = "test-project") -> Iterator[FakeCloudLogging]:
    """A started fake, stopped on exit."""
    fake = FakeCloudLogging(project).start()
    try:
        yield fake
    finally:
        fake.stop()
