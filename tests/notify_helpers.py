"""Shared pieces of the notify tests: a programmable loopback receiver and a wired-up stage."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sentinel.config.notify import InhibitRuleConfig, RouteConfig
from sentinel.incidents.db import Database
from sentinel.incidents.tracker import IncidentTracker
from sentinel.respond.notify.base import Receiver
from sentinel.respond.notify.dispatcher import Dispatcher, DispatchSettings
from sentinel.respond.notify.mute import InhibitRule
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import build_route
from sentinel.respond.notify.sender import RetryPolicy, Sender


@dataclass
class Request:
    """One request a LoopbackReceiver saw, with the status it answered."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    def json(self) -> object:
        return json.loads(self.body)


@dataclass
class LoopbackReceiver:
    """An HTTP server on 127.0.0.1 answering POSTs with `status` (plus Retry-After if set)."""

    status: int = 200
    status_by_path: dict[str, int] = field(default_factory=dict)
    retry_after: str | None = None
    # While set, requests are held unanswered (recorded with status -1) until `release`.
    hold: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    requests: list[Request] = field(default_factory=list)
    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def accepted(self, path: str | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.requests
                    if 200 <= r.status < 300 and (path is None or r.path == path)]

    def accepted_per_key(self) -> Counter[str]:
        """How often each Idempotency-Key was accepted (2xx)."""
        return Counter(r.headers.get("Idempotency-Key", "") for r in self.accepted())


@pytest.fixture
def loopback() -> Iterator[LoopbackReceiver]:
    """A LoopbackReceiver, stopped after the test."""
    state = LoopbackReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with state.lock:
                held = state.hold
                status = -1 if held else state.status_by_path.get(self.path, state.status)
                state.requests.append(Request(self.path, dict(self.headers), body, status))
            if held:
                state.release.wait(30)
                return
            self.send_response(status)
            if state.retry_after and status != 200:
                self.send_header("Retry-After", state.retry_after)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True).start()
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


@dataclass
class Stage:
    """Tracker → outbox → dispatcher → sender on one database, as the daemon wires them."""

    tracker: IncidentTracker
    dispatcher: Dispatcher
    sender: Sender

    def tick(self, now_ms: int) -> None:
        """One round of the notify worker."""
        self.dispatcher.run(now_ms)
        self.sender.run(now_ms)


def make_stage(db: Database, receivers: dict[str, Receiver], route: RouteConfig | None = None,
               *, fallback: str | None = None, inhibit: tuple[InhibitRuleConfig, ...] = (),
               watchdog: bool = False, seed: int = 1) -> Stage:
    """A Stage with a route (default: every receiver, one group per incident, sent at once)."""
    import random

    outbox = Outbox(fallback)
    settings = DispatchSettings(build_route(route, list(receivers)),
                                tuple(InhibitRule.from_config(r) for r in inhibit),
                                {}, watchdog)
    policy = RetryPolicy(initial_ms=1_000, max_ms=60_000, give_up_after_ms=3 * 3600_000)
    return Stage(IncidentTracker(db, outbox=outbox), Dispatcher(db, outbox, settings),
                 Sender(db, receivers, outbox, policy, rng=random.Random(seed)))
