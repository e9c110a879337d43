"""Verification polls until its deadline through answers that are not JSON, never aborts.

A server coming back (or a proxy in front of it) can answer 200 with a page
that is not the JSON asked for; that is "not recovered yet", polled again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sentinel.respond.remediate.verify import verify


class _Server(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    garbage_left = 0  # answers of 200 + not JSON before the real ones
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _garbage(self) -> bool:
        with self.lock:
            cls = type(self)
            if cls.garbage_left:
                cls.garbage_left -= 1
                return True
            return False

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health":
            self._send(b"")
        elif self._garbage():
            self._send(b"<html>starting</html>" if self.garbage_left % 2 else b"\xff\xfe")
        else:
            self._send(b'{"data": [{"id": "m"}]}')

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(b"[1, 2]" if self._garbage() else b'{"choices": [{"index": 0}]}')


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Server]]]:
    handler = type("Server", (_Server,), {"garbage_left": 0})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    srv.shutdown()
    srv.server_close()


def test_non_json_200s_are_polled_through_until_the_server_answers(server) -> None:
    url, handler = server
    handler.garbage_left = 4
    result = verify(url, deadline_s=30, poll_s=0.01)
    assert result.ok, result.detail
    assert handler.garbage_left == 0


def test_only_non_json_until_the_deadline_is_a_failed_verification(server) -> None:
    url, handler = server
    handler.garbage_left = 10**9
    result = verify(url, deadline_s=0.5, poll_s=0.01)
    assert not result.ok and "not recovered within 0.5s" in result.detail
