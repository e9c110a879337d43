"""Webhook receiver against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from secret_check import assert_no_secret_leak

from sentinel import __version__
from sentinel.model import Alert, AlertState, Notification, NotificationKind, labels_of
from sentinel.respond.notify.base import DeliveryResult, Receiver
from sentinel.respond.notify.webhook import WebhookReceiver

T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z
TOKEN = "s3cr3t-T0KEN-abcdefghijklmnop"
HEADER_KEY = "hdr-key-0123456789"


@dataclass
class Received:
    """One request the server saw."""

    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HookServer:
    """A loopback HTTP server answering every POST with `status` (and `body`).

    With `hang` set, the handler blocks until released at teardown, so a
    client timeout is certain without any sleep.
    """

    status: int = 200
    body: bytes = b"ok"
    hang: bool = False
    requests: queue.Queue[Received] = field(default_factory=queue.Queue)
    release: threading.Event = field(default_factory=threading.Event)
    port: int = 0

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[HookServer]:
    state = HookServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            state.requests.put(Received(self.path, dict(self.headers), body))
            if state.hang:
                state.release.wait(10)
                return
            self.send_response(state.status)
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


def _alert(state: AlertState = AlertState.FIRING, resolved_at: int | None = None,
           target: str = "gemma-26b") -> Alert:
    return Alert(
        group="vllm", rule="VLLMDown",
        labels=labels_of({"alertname": "VLLMDown", "severity": "page", "target": target}),
        annotations=labels_of({"summary": f"{target} is down"}),
        state=state, value=0.0, active_at_ms=T0, last_eval_ms=T0 + 60_000,
        fired_at_ms=T0 + 30_000, resolved_at_ms=resolved_at,
    )


GROUP = labels_of({"alertname": "VLLMDown"})


def _firing() -> Notification:
    return Notification(7, NotificationKind.FIRING, (_alert(),), GROUP)


def _resolved() -> Notification:
    alert = _alert(AlertState.INACTIVE, resolved_at=T0 + 120_500)
    return Notification(7, NotificationKind.RESOLVED, (alert,), GROUP)


def _receiver(url: str, **kw: object) -> WebhookReceiver:
    kw.setdefault("timeout_s", 5.0)
    return WebhookReceiver("oncall", url, external_url="http://sentinel:9465", **kw)  # type: ignore[arg-type]


def test_posts_alertmanager_payload_with_headers(server: HookServer) -> None:
    rx = _receiver(server.url(), headers={"X-Token": "abc-123"})
    assert isinstance(rx, Receiver)
    result = rx.send(_firing(), T0 + 60_000)
    assert result == DeliveryResult(ok=True, retryable=False, status=200, detail="HTTP 200")
    req = server.requests.get(timeout=5)
    assert req.path == "/hook"
    assert req.headers["Content-Type"] == "application/json"
    assert req.headers["User-Agent"] == f"Sentinel/{__version__}"
    assert req.headers["X-Token"] == "abc-123"
    body = json.loads(req.body)
    assert body["version"] == "4"
    assert body["status"] == "firing"
    assert body["receiver"] == "oncall"
    assert body["externalURL"] == "http://sentinel:9465"
    assert body["groupLabels"] == {"alertname": "VLLMDown"}
    [alert] = body["alerts"]
    assert alert["startsAt"] == "2024-05-01T12:00:30Z"
    assert alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert alert["labels"]["target"] == "gemma-26b"


def test_resolved_is_sent_with_ends_at(server: HookServer) -> None:
    result = _receiver(server.url()).send(_resolved(), T0 + 121_000)
    assert result.ok
    body = json.loads(server.requests.get(timeout=5).body)
    assert body["status"] == "resolved"
    assert body["alerts"][0]["status"] == "resolved"
    assert body["alerts"][0]["endsAt"] == "2024-05-01T12:02:00.5Z"


def test_resolved_skipped_when_send_resolved_off(server: HookServer) -> None:
    result = _receiver(server.url(), send_resolved=False).send(_resolved(), T0)
    assert result == DeliveryResult(True, False, None, "send_resolved is off")
    assert server.requests.empty()


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(500, True), (503, True), (429, True), (404, False), (400, False), (301, False)],
)
def test_http_errors_are_classified(server: HookServer, status: int, retryable: bool) -> None:
    server.status, server.body = status, b"nope"
    result = _receiver(server.url()).send(_firing(), T0)
    assert not result.ok
    assert result.retryable is retryable
    assert result.status == status
    assert result.detail == f"HTTP {status}: nope"


def test_connection_refused_is_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on the port now.
    result = _receiver(f"http://127.0.0.1:{port}/hook").send(_firing(), T0)
    assert (result.ok, result.retryable, result.status) == (False, True, None)
    assert "ConnectError" in result.detail


def test_slow_server_times_out_retryable(server: HookServer) -> None:
    server.hang = True
    result = _receiver(server.url(), timeout_s=0.2).send(_firing(), T0)
    assert (result.ok, result.retryable, result.status) == (False, True, None)
    assert result.detail.startswith("timed out after 200ms")


def test_uses_the_given_client(server: HookServer) -> None:
    with httpx.Client(headers={"X-Client": "shared"}) as client:
        assert _receiver(server.url(), client=client).send(_firing(), T0).ok
    assert server.requests.get(timeout=5).headers["X-Client"] == "shared"


@pytest.mark.parametrize("status", [404, 500])
def test_secret_in_url_never_leaks(server: HookServer, status: int,
                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # A server that echoes the path, as many 404 pages do.
    server.status = status
    server.body = f"no route for /hooks/{TOKEN}?token={TOKEN}".encode()
    url = server.url(f"/hooks/{TOKEN}?token={TOKEN}")
    rx = _receiver(url, headers={"Authorization": f"Bearer {HEADER_KEY}"})
    result = rx.send(_firing(), T0)
    assert not result.ok
    assert "<redacted>" in result.detail
    assert caplog.records, "a failed delivery is logged"
    assert_no_secret_leak([TOKEN, HEADER_KEY, url], results=[result], caplog=caplog,
                          texts=[repr(rx)])


def test_secret_in_url_never_leaks_on_network_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"http://user:{TOKEN}@127.0.0.1:1/hooks/{TOKEN}"
    result = _receiver(url, timeout_s=1.0).send(_firing(), T0)
    assert not result.ok and result.retryable
    assert_no_secret_leak([TOKEN, url], results=[result], caplog=caplog)


def test_secret_check_catches_a_leak() -> None:
    leaky = DeliveryResult(False, True, None, f"POST /hooks/{TOKEN} failed")
    with pytest.raises(pytest.fail.Exception, match=r"\*\*\*SECRET\*\*\*"):
        assert_no_secret_leak([TOKEN], results=[leaky])
