"""Probes on the scrapes' HTTP/1.1 client and I/O loop: POST, headers, streamed SSE, deadline.

The probe's HTTP side is `sentinel.collect.http1` (as the scrape's), driven
by `ProbeClient`: these tests speak real HTTP to loopback servers that send
a streamed answer in timed pieces, so "TTFT is read when the first token
arrives" and "the deadline bounds the whole exchange" are measured, not
assumed. The daemon test shows the probe jobs among the scrape jobs
of the one I/O loop, with no probe thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fixtures_e2e import wait_for

from sentinel.collect.http1 import Connection, build_request
from sentinel.collect.probe import CANARY, HEALTH, ProbeClient, ProbeTarget, probe_target

pytestmark = pytest.mark.integration


def _event(content: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"delta": {"content": content}}]},
                                ensure_ascii=False).encode() + b"\n\n"


USAGE = b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\n'
DONE = b"data: [DONE]\n\n"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1  # type: ignore[attr-defined]

    def do_GET(self) -> None:  # noqa: N802
        self._record(b"")
        self.send_response(200)
        body = b'{"data":[{"id":"m","max_model_len":4096}]}' if "models" in self.path else b""
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._record(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in self.server.stream:  # type: ignore[attr-defined]
            if isinstance(piece, float):
                time.sleep(piece)
                continue
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.server.streamed += 1  # type: ignore[attr-defined]  # the whole answer went out

    def _record(self, body: bytes) -> None:
        self.server.seen.append((self.command, self.path,  # type: ignore[attr-defined]
                                 self.headers.get("Authorization"),
                                 self.headers.get("Content-Type"), body))

    def log_message(self, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections = 0
        self.streamed = 0
        self.seen: list[tuple] = []
        self.stream: list[bytes | float] = [_event("ok"), USAGE, DONE]
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    yield s
    s.shutdown()
    s.server_close()


def _run(fn: Callable[[ProbeClient], object]) -> object:
    async def go() -> object:
        async with ProbeClient() as client:
            return await fn(client)  # type: ignore[misc]
    return asyncio.run(go())


def test_post_sends_its_json_body_and_headers_on_a_kept_alive_connection(server):
    async def two(conn: Connection) -> list[int]:
        req = build_request(server.url, "/v1/chat/completions",
                            {"Authorization": "Bearer k", "Content-Type": "application/json"},
                            "POST", b'{"a": 1}')
        got = []
        for _ in range(2):
            chunks: list[bytes] = []
            resp = await conn.get(req, 1 << 20, chunks.append)
            got.append(resp.status)
            assert resp.body == b"" and b"".join(chunks).endswith(DONE)
        return got

    conn = Connection(server.url)
    assert asyncio.run(two(conn)) == [200, 200]
    assert server.connections == 1  # kept alive: the second POST reused it
    assert server.seen == [("POST", "/v1/chat/completions", "Bearer k", "application/json",
                            b'{"a": 1}')] * 2


def test_ttft_is_read_when_the_first_token_arrives_not_at_the_end(server):
    # The first token comes at once, the rest 1 s later: a reader that waits for
    # the whole body would report TTFT ≥ 1 s.
    server.stream = [b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n',
                     _event("o"), 1.0, _event("k"), USAGE, DONE]
    t = ProbeTarget("t", server.url, timeout_ms=5000, api_key="sk-1")
    _, results = _run(lambda c: probe_target(c, t, 0, model="m"))
    (health, canary) = results
    assert health.probe == HEALTH and health.success
    assert canary.probe == CANARY and canary.success, canary.error
    # Relative to the server's own 1 s pause, not an absolute bound a busy machine breaks:
    # TTFT read at the end would equal the duration.
    assert canary.ttft_s is not None and canary.duration_s - canary.ttft_s >= 0.5, (
        canary.ttft_s, canary.duration_s)
    assert canary.duration_s >= 1.0
    assert canary.completion_tokens == 2
    post = [s for s in server.seen if s[0] == "POST"][0]
    assert post[2] == "Bearer sk-1" and json.loads(post[4])["model"] == "m"


def test_events_split_across_chunks_and_inside_a_character_are_read_whole(server):
    data = _event("ünï") + USAGE + DONE
    cut = data.index("ï".encode()) + 1  # inside the two bytes of ï
    server.stream = [data[:7], 0.05, data[7:cut], 0.05, data[cut:]]
    t = ProbeTarget("t", server.url, timeout_ms=5000, expect="ünï")
    _, results = _run(lambda c: probe_target(c, t, 0, model="m"))
    assert results[-1].success, results[-1].error


def test_the_deadline_bounds_the_whole_stream_not_each_read(server):
    # A token every 0.1 s for a minute: no single read waits long, the whole answer does.
    server.stream = [_event("x"), 0.1] * 600 + [DONE]
    t = ProbeTarget("t", server.url, timeout_ms=600)
    _, results = _run(lambda c: probe_target(c, t, 0, model="m"))
    canary = results[-1]
    assert not canary.success and canary.error == "no answer within 0.6s"
    assert canary.ttft_s is not None  # tokens came; the answer did not end in time
    # Bounded per read it would have waited out the whole stream (and succeeded): it ended
    # while the server was still sending, at the deadline by its own record.
    assert server.streamed == 0
    assert canary.ttft_s < canary.duration_s and canary.duration_s >= 0.6, canary


def test_daemon_runs_probes_on_the_io_loop_with_no_thread_of_their_own(tmp_path, sim):
    from sentinel.config import load_config
    from sentinel.daemon.app import App

    (tmp_path / "sentinel.yaml").write_text(
        f"database: sqlite:///{tmp_path / 'sentinel.db'}\nlisten: 127.0.0.1:0\n"
        "rule_files: []\nevaluation_interval: 1s\n"
        f"targets:\n  - name: gemma\n    url: {sim.url}\n"
        "    probe: {interval: 300ms, timeout: 2s}\n")
    app = App(load_config(tmp_path / "sentinel.yaml"))
    app.start()
    try:
        assert app.scrape_jobs is not None and app._scheduler is not None
        assert app.scrape_jobs.get("probe:gemma") is not None
        assert app._scheduler.get_job("probe:gemma") is None  # not in the thread pool
        assert not [t for t in threading.enumerate() if t.name == "sentinel-probe"]
        wait_for(lambda: len(sim.chat_requests) >= 2, 10, "two canaries")
        assert app.probes is not None and app.probes.runner is not None
        assert app.probes.runner.io is app.io
        # No rule reads the token counter, yet the store keeps it: the heartbeat does.
        from sentinel.model import labels_of

        store = app.pipeline.store
        assert store.wants(labels_of({"__name__": "vllm:generation_tokens_total"}))
        assert not store.wants(labels_of({"__name__": "vllm:num_requests_running"}))
    finally:
        app.stop(2)


def test_the_heartbeat_reads_every_targets_counter_once_per_scrape_interval():
    # Per probe, a query for its own target scanned every target's series of the
    # name: at 1,000 targets that cost more than the probe's HTTP. One fleet-wide
    # reading per 5 s (the counters move only when scraped) serves them all.
    from sentinel.daemon.probejobs import generation_total_reader
    from sentinel.model import labels_of
    from sentinel.store import MemoryStore

    readings: list[int] = []

    class Counting(MemoryStore):
        def newest_sums(self, name, by, start_ms, end_ms):  # noqa: ANN001
            readings.append(end_ms)
            return super().newest_sums(name, by, start_ms, end_ms)

    store = Counting()
    for i in range(50):
        for engine_id, value in (("0", 100.0 * i), ("1", 1.0)):
            store.add(labels_of({"__name__": "vllm:generation_tokens_total",
                                 "target": f"t{i}", "engine": engine_id}), 10_000, value)
    read = generation_total_reader(store)
    assert [read(f"t{i}", 20_000 + i) for i in range(50)] == [
        (100.0 * i + 1, 20_000) for i in range(50)]
    assert readings == [20_000]  # one reading for the whole fleet within the 5 s
    assert read("nobody", 24_999) == (None, 20_000)
    store.add(labels_of({"__name__": "vllm:generation_tokens_total", "target": "t1",
                         "engine": "0"}), 25_000, 500.0)
    assert read("t1", 25_000) == (501.0, 25_000) and readings == [20_000, 25_000]
    assert read("t1", 5_000) == (None, 5_000)  # before any sample
    # A probe that had the reading of 25_000 gets a newer one, even within the 5 s.
    store.add(labels_of({"__name__": "vllm:generation_tokens_total", "target": "t1",
                         "engine": "0"}), 25_400, 600.0)
    assert read("t1", 25_500) == (501.0, 25_000)
    assert read("t1", 25_500, 25_000) == (601.0, 25_500)
    assert readings == [20_000, 25_000, 5_000, 25_500]
