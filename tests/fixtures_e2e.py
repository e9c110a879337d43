"""Fixtures for end-to-end tests: the simulator, a webhook sink, misbehaving targets, configs."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sentinel.demo import WebhookSink
from sentinel.sim.server import start_sim


@pytest.fixture
def sim() -> Iterator:
    """A vLLM simulator on 127.0.0.1, a free port."""
    server = start_sim()
    yield server
    server.stop()


@pytest.fixture
def sink() -> Iterator[WebhookSink]:
    """A webhook receiver on 127.0.0.1 that records every body with its arrival time."""
    s = WebhookSink().start()
    yield s
    s.stop()


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str) -> object:
    """Poll until predicate() is truthy; fail with `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def log_sources_polled(app: object, n: int = 1) -> bool:
    """At least `n` log sources of a started App have polled (a file source has then joined
    its file at the end: lines written after this are new). Wait on it, not on a sleep."""
    registry = app.metrics.registry  # type: ignore[attr-defined]
    polled = [s for m in registry.collect() if m.name == "sentinel_log_source_up"
              for s in m.samples]
    return len(polled) >= n


def bodies_with_status(sink: WebhookSink, status: str) -> list[tuple[float, dict]]:
    """(arrival time, body) of every webhook with this status, in order."""
    return [(t, b) for t, b, _ in list(sink.received) if b.get("status") == status]


def write_config(folder: Path, targets: list[tuple[str, str]], hook_url: str | None,
                 rules_yaml: str, scrape_interval: str = "100ms",
                 evaluation_interval: str = "1s", listen: str = "127.0.0.1:0") -> Path:
    """A daemon config in `folder` with a rule file of its own and the given targets."""
    (folder / "rules.yaml").write_text(rules_yaml)
    lines = [
        f"database: sqlite:///{folder / 'sentinel.db'}",
        f"listen: {listen}",
        "rule_files: [rules.yaml]",
        f"evaluation_interval: {evaluation_interval}",
        "targets:",
    ]
    for name, url in targets:
        lines += [f"  - name: {name}", f"    url: {url}",
                  f"    scrape_interval: {scrape_interval}",
                  f"    scrape_timeout: {scrape_interval}"]
    if hook_url:
        lines += ["receivers:", "  - name: oncall",
                  f"    webhook: {{url: '{hook_url}', timeout: 2s}}"]
    path = folder / "sentinel.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


class _Misbehaving(BaseHTTPRequestHandler):
    mode = "garbage"

    def do_GET(self) -> None:  # noqa: N802
        if self.mode == "garbage":
            body = b"\x00\x01 this is { not a metrics page\nvllm:x{a=\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.mode == "hang":
            time.sleep(30)
        elif self.mode == "close":
            self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def bad_target() -> Iterator[Callable[[str], str]]:
    """Factory: a target on loopback that serves garbage, hangs, or closes the connection."""
    servers: list[ThreadingHTTPServer] = []

    def make(mode: str) -> str:
        handler = type(f"H_{mode}", (_Misbehaving,), {"mode": mode})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield make
    for s in servers:
        s.shutdown()
        s.server_close()
