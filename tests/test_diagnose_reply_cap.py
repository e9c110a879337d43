"""The model's reply is capped: a 50 MiB answer is cut to the cap, read no further, noted.

A loopback server streams 50 MiB of reply, either as many normal chunks or
as one line without an end; the client keeps the cap's worth, closes the
stream, and its memory stays near the cap (traced with tracemalloc).
"""

from __future__ import annotations

import json
import threading
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from diagnose_helpers import T0, config, open_incident, runbooks, timeline

from sentinel.config.diagnosis import ModelEndpointConfig
from sentinel.respond.diagnose.client import DEFAULT_MAX_REPLY_BYTES, ModelClient, ServerError
from sentinel.respond.diagnose.worker import DiagnosisWorker

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
REPLY_BYTES = 50 * MIB
PIECE = "steps " * 10_000  # 60,000 bytes of content per chunk


class _HugeModel(BaseHTTPRequestHandler):
    """Answers every chat with REPLY_BYTES of text, in `mode`: "chunks" or "one_line"."""

    protocol_version = "HTTP/1.1"
    mode = "chunks"
    sent: list[int]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        body = json.dumps({"data": [{"id": "huge", "max_model_len": 8192}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/tokenize":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.mode == "error":
            self._error_body()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for piece in self._pieces():
                self.wfile.write(piece)
                self.sent[0] += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up at its cap, as it should

    def _error_body(self) -> None:
        """HTTP 500 whose body is REPLY_BYTES long (no Content-Length: read to the close)."""
        self.send_response(500)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for _ in range(REPLY_BYTES // len(PIECE)):
                self.wfile.write(PIECE.encode())
                self.sent[0] += len(PIECE)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _pieces(self) -> Iterator[bytes]:
        count = REPLY_BYTES // len(PIECE)
        if self.mode == "one_line":
            yield b'data: {"choices": [{"index": 0, "delta": {"content": "'
            for _ in range(count):
                yield PIECE.encode()
            yield b'"}}]}\n\ndata: [DONE]\n\n'
            return
        chunk = {"choices": [{"index": 0, "delta": {"content": PIECE}, "finish_reason": None}]}
        line = f"data: {json.dumps(chunk)}\n\n".encode()
        for _ in range(count):
            yield line
        yield b"data: [DONE]\n\n"


@contextmanager
def huge_model(mode: str) -> Iterator[tuple[str, list[int]]]:
    """A loopback model answering 50 MiB; yields its URL and a counter of bytes sent."""
    sent = [0]
    handler = type("HugeModel", (_HugeModel,), {"mode": mode, "sent": sent})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", sent
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("mode", ["chunks", "one_line"])
def test_fifty_mib_reply_is_cut_at_the_cap_in_bounded_memory(mode):
    with huge_model(mode) as (url, sent):
        client = ModelClient(ModelEndpointConfig(name="m", url=url, timeout="30s"))
        try:
            tracemalloc.start()
            try:
                result = client.chat("huge", [{"role": "user", "content": "hi"}], 256,
                                     "none", 0.0)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        finally:
            client.close()
    assert result.truncated and result.finish_reason == "length"
    kept = len(result.text.encode())
    if mode == "chunks":
        assert kept == DEFAULT_MAX_REPLY_BYTES
        assert result.text == (PIECE * 2)[:DEFAULT_MAX_REPLY_BYTES]
    else:
        assert kept == 0  # one line too long to be a chunk: nothing usable in it
    # Memory: the cap's worth plus one stream line, never the 50 MiB.
    assert peak < 4 * MIB, peak
    assert sent[0] < REPLY_BYTES


def test_fifty_mib_error_body_is_read_only_in_part():
    with huge_model("error") as (url, sent):
        client = ModelClient(ModelEndpointConfig(name="m", url=url, timeout="30s"))
        try:
            tracemalloc.start()
            try:
                with pytest.raises(ServerError) as info:
                    client.chat("huge", [{"role": "user", "content": "hi"}], 256, "none", 0.0)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        finally:
            client.close()
    assert info.value.status == 500 and len(str(info.value)) < 400
    assert peak < 8 * MIB, peak
    assert sent[0] < REPLY_BYTES


def test_a_reply_under_the_cap_is_whole():
    with huge_model("chunks") as (url, _):
        endpoint = ModelEndpointConfig(name="m", url=url, timeout="30s")
        client = ModelClient(endpoint, max_reply_bytes=REPLY_BYTES + MIB)
        try:
            result = client.chat("huge", [{"role": "user", "content": "hi"}], 256, "none", 0.0)
        finally:
            client.close()
    assert not result.truncated
    assert len(result.text) == (REPLY_BYTES // len(PIECE)) * len(PIECE)


def test_cut_reply_is_stored_at_the_cap_and_noted_on_the_runbook_event(incident_db):
    incident = open_incident(incident_db)
    with huge_model("chunks") as (url, _):
        cfg = config([{"name": "m", "url": url, "timeout": "30s"}], max_reply=16384)
        worker = DiagnosisWorker(incident_db, cfg)
        try:
            worker.tick(T0)
        finally:
            worker.close()
    (data,) = runbooks(incident_db, incident)
    assert data["reply_truncated"] is True and data["reply_cap_bytes"] == 16384
    assert data["validated"] is False  # the head of a reply is not a runbook
    assert len(data["raw"].encode()) <= 16384
    (event,) = [e for e in timeline(incident_db, incident) if e.kind == "runbook"]
    assert "reply cut at 16384 bytes" in event.message


def test_the_cap_is_configured_under_diagnosis():
    cfg = config([{"name": "m", "url": "http://127.0.0.1:9"}])
    assert cfg.diagnosis is not None
    assert cfg.diagnosis.max_reply_bytes == 64 * 1024
    with pytest.raises(Exception, match="max_reply"):
        config([{"name": "m", "url": "http://127.0.0.1:9"}], max_reply=10)
