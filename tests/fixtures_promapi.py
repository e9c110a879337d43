"""A fake Prometheus HTTP query API on loopback, for the remote query backend's tests.

One server for the three ways the tests need it: answers from a script
(status, body per request), answers computed from the request, and answers held
back (a slow or hung backend) until `release` is set or a delay has passed.
It records every request, signals the first (`arrived`) and counts those in
flight. The real Prometheus is in fixtures_prometheus.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import parse_qs

import pytest


class PromRequest(NamedTuple):
    """One request as received: path without the query string, form or URL parameters."""

    path: str
    form: dict[str, list[str]]
    headers: dict[str, str]


Answer = tuple[int, Any]  # (HTTP status, body: bytes as they are, anything else as JSON)


def vector(*samples: tuple[dict[str, str], object]) -> Answer:
    """A successful instant-vector answer of (labels, value) samples, at time 0."""
    return ok("vector", [{"metric": m, "value": [0, str(v)]} for m, v in samples])


def ok(kind: str, result: Any) -> Answer:
    """A successful answer of result type `kind`."""
    return 200, {"status": "success", "data": {"resultType": kind, "result": result}}


class FakePromAPI:
    """A Prometheus-compatible query API on 127.0.0.1, port 0 (`url`).

    `answer(request)` gives each reply; by default the next item of `script`
    (the last one repeats). `hold_s(request)` is how long a request waits for
    `release` before it is answered: the backend's latency, part of the
    scenario a test sets up, not a wait of the test. `stop()` releases every
    held request.
    """

    def __init__(self, answer: Callable[[PromRequest], Answer] | None = None,
                 hold_s: Callable[[PromRequest], float] | None = None) -> None:
        self.script: list[Answer] = []
        self.requests: list[PromRequest] = []
        self.release = threading.Event()
        self.arrived = threading.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self._answer = answer or self._scripted
        self._hold_s = hold_s
        self._lock = threading.Lock()
        self._arrivals = threading.Condition(self._lock)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def asked(self) -> list[tuple[str, str]]:
        """(query, time) of every request, in order of arrival."""
        return [(r.form.get("query", [""])[0], r.form.get("time", [""])[0])
                for r in list(self.requests)]

    def wait_in_flight(self, n: int, timeout_s: float) -> bool:
        """Until `n` requests have been in flight at once (False if not within timeout_s)."""
        with self._arrivals:
            return self._arrivals.wait_for(lambda: self.most_in_flight >= n, timeout_s)

    def stop(self) -> None:
        """Release held requests, then stop serving and close the socket."""
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def _scripted(self, request: PromRequest) -> Answer:
        with self._lock:
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def _serve(self, request: PromRequest) -> Answer:
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self._arrivals.notify_all()
        self.arrived.set()
        try:
            if self._hold_s is not None:
                self.release.wait(self._hold_s(request))
        finally:
            with self._lock:
                self.in_flight -= 1
        return self._answer(request)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                form = parse_qs(self.rfile.read(n).decode())
                self._reply(*fake._serve(PromRequest(self.path, form, dict(self.headers))))

            def do_GET(self) -> None:  # noqa: N802
                path, _, query = self.path.partition("?")
                self._reply(*fake._serve(PromRequest(path, parse_qs(query),
                                                     dict(self.headers))))

            def _reply(self, status: int, body: Any) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up at its deadline

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def prom_api() -> Iterator[Callable[..., FakePromAPI]]:
    """Factory: `prom_api(answer=..., hold_s=...)` starts a FakePromAPI, stopped after the test."""
    started: list[FakePromAPI] = []

    def make(answer: Callable[[PromRequest], Answer] | None = None,
             hold_s: Callable[[PromRequest], float] | None = None) -> FakePromAPI:
        started.append(FakePromAPI(answer, hold_s))
        return started[-1]

    yield make
    for fake in started:
        fake.stop()
