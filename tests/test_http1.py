"""The scrape's HTTP/1.1 client against loopback servers: keep-alive, framing, codings, bombs."""

from __future__ import annotations

import gzip
import http.server
import socketserver
import threading
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import pytest

from sentinel.collect.http1 import BodyTooLarge, Decoder, HTTPError
from sentinel.collect.scrape import Scraper, ScrapeTarget
from sentinel.store import Matcher, MemoryStore

pytestmark = pytest.mark.integration

PAGE = b"".join(b'm{i="%d"} %d\n' % (i, i) for i in range(2000))


def gzip_bomb(decoded_bytes: int, layers: int = 2) -> bytes:
    """`layers` nested gzip streams of `decoded_bytes` zeros, built without holding them."""
    enc = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (1 << 20)
    parts = [enc.compress(block) for _ in range(decoded_bytes // len(block))]
    data = b"".join(parts) + enc.flush()
    for _ in range(layers - 1):
        data = gzip.compress(data, 9)
    return data


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1  # type: ignore[attr-defined]

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.server.answer(self)  # type: ignore[attr-defined]

    def log_message(self, *args: object) -> None:
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections = 0
        self.answer: Callable[[http.server.BaseHTTPRequestHandler], None] = lambda h: None
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def reply(self, body: bytes, encoding: str = "", chunked: bool = False) -> None:
        def answer(h: http.server.BaseHTTPRequestHandler) -> None:
            h.send_response(200)
            h.send_header("Content-Type", "text/plain; version=0.0.4")
            if encoding:
                h.send_header("Content-Encoding", encoding)
            if chunked:
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
                for i in range(0, len(body), 1000):
                    piece = body[i:i + 1000]
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                h.wfile.write(b"0\r\n\r\n")
            else:
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)
        self.answer = answer


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.shutdown()
    s.server_close()


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(retention_ms=3_600_000)


@pytest.fixture
def scraper(store: MemoryStore) -> Iterator[Scraper]:
    s = Scraper(store, max_body_bytes=1_000_000)
    yield s
    s.close()


def _m(store: MemoryStore) -> int:
    return len(store.select([Matcher("__name__", "=", "m")], 0, 2**62))


def test_one_kept_alive_connection_serves_every_scrape(server, store, scraper):
    server.reply(gzip.compress(PAGE), "gzip")
    t = ScrapeTarget("a", server.url, timeout_ms=2_000)
    for i in range(5):
        assert scraper.scrape(t, 1_000 * (i + 1)).up
    assert server.connections == 1
    assert _m(store) == 2000


@pytest.mark.parametrize("encoding", ["gzip, gzip", "gzip,deflate", "identity, gzip", "x-gzip"])
def test_stacked_codings_are_undone_in_reverse_order(server, store, scraper, encoding):
    body = PAGE
    for coding in (c.strip() for c in encoding.split(",")):
        if coding in ("gzip", "x-gzip"):
            body = gzip.compress(body)
        elif coding == "deflate":
            body = zlib.compress(body)
    server.reply(body, encoding, chunked=True)
    result = scraper.scrape(ScrapeTarget("a", server.url, timeout_ms=2_000), 1_000)
    assert result.up, result.error
    assert _m(store) == 2000


def test_unknown_coding_is_a_failed_scrape(server, store, scraper):
    server.reply(PAGE, "br")
    result = scraper.scrape(ScrapeTarget("a", server.url, timeout_ms=2_000), 1_000)
    assert not result.up and "unsupported Content-Encoding 'br'" in result.error


def test_double_gzip_bomb_is_refused_at_the_limit_with_little_memory(server, store):
    bomb = gzip_bomb(1 << 30)  # 1 GiB of zeros, gzipped twice
    assert len(bomb) < 2_000   # the 1.8 KB bomb
    server.reply(bomb, "gzip, gzip")
    scraper = Scraper(store, max_body_bytes=10 * 1024 * 1024)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = scraper.scrape(ScrapeTarget("bomb", server.url, timeout_ms=10_000), 1_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        scraper.close()
    assert not result.up
    assert "body size limit exceeded" in result.error and "after decoding" in result.error
    assert peak < 50 * 1024 * 1024, f"peak allocation {peak / 2**20:.0f} MiB"


_RSS_PROBE = """
import resource, sys
from sentinel.collect.scrape import Scraper, ScrapeTarget
from sentinel.store import MemoryStore
scraper = Scraper(MemoryStore(), max_body_bytes=10 * 1024 * 1024)
ok = scraper.scrape(ScrapeTarget("warm", sys.argv[1] + "/ok", timeout_ms=10_000), 1_000)
assert ok.up, ok.error
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
bomb = scraper.scrape(ScrapeTarget("bomb", sys.argv[1], timeout_ms=10_000), 1_000)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(bomb.up, (after - before) * 1024, bomb.error)
"""


def test_double_gzip_bomb_peak_rss_growth_in_a_fresh_process(server):
    """The same bomb, scraped by a fresh process: its peak RSS grows by under 50 MB."""
    import subprocess
    import sys

    bomb = gzip_bomb(1 << 30)

    def answer(h: http.server.BaseHTTPRequestHandler) -> None:
        body, coding = (b"a 1\n", "identity") if h.path.startswith("/ok") else (bomb, "gzip, gzip")
        h.send_response(200)
        h.send_header("Content-Encoding", coding)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    server.answer = answer
    proc = subprocess.run([sys.executable, "-c", _RSS_PROBE, server.url], capture_output=True,
                         text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split(" ", 2)
    assert out[0] == "False" and "body size limit exceeded" in out[2]
    assert int(out[1]) < 50 * 1024 * 1024, f"peak RSS grew by {int(out[1]) / 2**20:.0f} MiB"


def test_decoder_counts_decoded_bytes_not_wire_bytes():
    d = Decoder(["gzip"], limit=100)
    with pytest.raises(BodyTooLarge):
        d.feed(gzip.compress(b"x" * 101))
    d = Decoder(["gzip"], limit=100)
    d.feed(gzip.compress(b"x" * 100))
    assert d.finish() == b"x" * 100


def test_decoder_reads_concatenated_gzip_members_and_rejects_truncation():
    d = Decoder(["gzip"], limit=1000)
    d.feed(gzip.compress(b"a 1\n") + gzip.compress(b"b 2\n"))
    assert d.finish() == b"a 1\nb 2\n"
    d = Decoder(["gzip"], limit=1000)
    d.feed(gzip.compress(b"a 1\n" * 100)[:-10])
    with pytest.raises(HTTPError, match="ends early"):
        d.finish()


def test_plain_body_over_the_limit_is_refused_from_content_length(server, store):
    server.reply(PAGE)
    scraper = Scraper(store, max_body_bytes=1_000)
    result = scraper.scrape(ScrapeTarget("a", server.url, timeout_ms=2_000), 1_000)
    scraper.close()
    assert not result.up and "body size limit exceeded" in result.error


def test_a_path_in_the_target_url_prefixes_the_metrics_path(server, store, scraper):
    paths = []

    def answer(h: http.server.BaseHTTPRequestHandler) -> None:
        paths.append(h.path)
        h.send_response(200)
        h.send_header("Content-Length", "4")
        h.end_headers()
        h.wfile.write(b"a 1\n")

    server.answer = answer
    assert scraper.scrape(ScrapeTarget("p", server.url + "/vllm/", timeout_ms=2_000), 1_000).up
    assert paths == ["/vllm/metrics"]
