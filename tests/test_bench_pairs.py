"""bench/pairs.py reads what it needs from a Sentinel's /metrics to leave a pair out.

A pair where a Sentinel missed work, or where its probes failed, measures
something else than the cost asked about (a starved Sentinel, or a probe
that fails fast, reads cheap): `counts` must see both, served over HTTP.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pairs import counts  # noqa: E402

PAGE = """\
# HELP sentinel_probes_total Probes run, by target, probe and outcome.
# TYPE sentinel_probes_total counter
sentinel_probes_total{target="t0",probe="health",outcome="success"} 40.0
sentinel_probes_total{target="t0",probe="canary",outcome="failure"} 3.0
sentinel_probes_total{target="t1",probe="health",outcome="failure"} 2.0
sentinel_scrapes_missed_total{target="t0"} 1.0
sentinel_probes_missed_total{target="t1"} 4.0
sentinel_thread_cpu_seconds_total{thread="sentinel-io"} 12.5
"""


@pytest.fixture
def port() -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_counts_reads_missed_work_failed_probes_and_thread_cpu(port: int) -> None:
    got = counts(port)
    assert got.missed == 5.0
    assert got.failed_probes == 5.0
    assert got.threads == {"sentinel-io": 12.5}
