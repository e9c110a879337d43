"""Scraper against real HTTP servers on 127.0.0.1: healthy, broken, slow and hostile targets."""

from __future__ import annotations

import gzip
import http.server
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import pytest

from sentinel.collect.ioloop import IOLoop
from sentinel.collect.scrape import Scraper, ScrapeTarget, with_target_labels
from sentinel.collect.workerpool import ProcessScraper
from sentinel.model import is_stale, labels_of
from sentinel.store.memory import Matcher, MemoryStore

pytestmark = pytest.mark.integration

VLLM_PAGE = (Path(__file__).parent / "data" / "vllm_metrics.txt").read_bytes()
Behavior = Callable[[http.server.BaseHTTPRequestHandler, threading.Event], None]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        requests = self.server.requests  # type: ignore[attr-defined]
        requests.append(dict(self.headers))
        index = len(requests) - 1
        try:
            self.server.behavior(self, self.server.stop)  # type: ignore[attr-defined]
            self.server.answered.add(index)  # type: ignore[attr-defined]  # ran to its end
        except (BrokenPipeError, ConnectionResetError):
            pass  # the scraper gave up first, as it should

    def log_message(self, *args: object) -> None:
        pass


class Target:
    """A loopback HTTP server whose answer a test sets with `behavior`."""

    def __init__(self) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.stop = threading.Event()  # type: ignore[attr-defined]
        self.server.requests = []  # type: ignore[attr-defined]
        # Which requests (by arrival) ran to their end: a count would also move when an
        # earlier, already-read answer's handler finishes late on a loaded machine.
        self.server.answered = set()  # type: ignore[attr-defined]
        self.serve(b"")
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    @property
    def requests(self) -> list[dict]:
        return self.server.requests  # type: ignore[attr-defined]

    def behave(self, behavior: Behavior) -> None:
        self.server.behavior = behavior  # type: ignore[attr-defined]

    def serve(self, body: bytes, status: int = 200, gzipped: bool = False,
              ctype: str = "text/plain; version=0.0.4; charset=utf-8") -> None:
        def answer(h: http.server.BaseHTTPRequestHandler, stop: threading.Event) -> None:
            data = gzip.compress(body) if gzipped else body
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(data)))
            if gzipped:
                h.send_header("Content-Encoding", "gzip")
            h.end_headers()
            h.wfile.write(data)

        self.behave(answer)

    def close(self) -> None:
        self.server.stop.set()  # type: ignore[attr-defined]
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.close()


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(retention_ms=3_600_000)


# What happens on the wire is the same code in a worker: those tests run in process only.
IN_PROCESS_ONLY = pytest.mark.parametrize("make_scraper", [1], ids=["in-process"],
                                          indirect=True)


@pytest.fixture(params=[1, 2], ids=["in-process", "2-workers"])
def make_scraper(request) -> Iterator[Callable[..., Scraper | ProcessScraper]]:
    """Scrapers as `collect_workers` makes them: in process (1), or through 2 worker processes."""
    made: list[Scraper | ProcessScraper] = []
    io = IOLoop("test-scraper") if request.param > 1 else None

    def make(store: MemoryStore, **kw) -> Scraper | ProcessScraper:
        if io is None:
            made.append(Scraper(store, **kw))
        else:
            made.append(ProcessScraper(store, io.start(), request.param, **kw).start())
        return made[-1]

    yield make
    for s in made:
        s.close()
    if io is not None:
        io.stop()


@pytest.fixture
def scraper(store: MemoryStore, make_scraper) -> Scraper | ProcessScraper:
    return make_scraper(store)


def _cut_at_its_deadline(target: Target, scraper: Scraper | ProcessScraper,
                         t: ScrapeTarget, ts_ms: int):
    """Scrape a target whose answer would take minutes (or forever): Sentinel must end the
    scrape itself at `t.timeout_ms`, while the server is still holding its answer.

    The only deadline here is for the scrape to come back at all (a wait for an event, as
    generous as a starved machine needs); how fast it came back is not asserted: what shows
    the cut is the causality (the server never finished) and what Sentinel recorded."""
    this_request = len(target.requests)  # earlier requests were all received already
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(scraper.scrape, t, ts_ms)
        done, _ = wait([running], timeout=120)
        still_holding = this_request not in target.server.answered  # type: ignore[attr-defined]
        if not done:
            target.server.stop.set()  # type: ignore[attr-defined]  # let the scrape end
        assert done, "the scrape was not cut at its deadline: it waited for the server"
    result = running.result()
    assert still_holding, "the server finished its answer before the scrape ended"
    assert not result.up
    assert result.error == f"scrape timed out after {t.timeout_ms / 1000:g}s", result.error
    assert result.duration_s >= t.timeout_ms / 1000  # it ran to the deadline, no sooner
    return result


def _target(t: Target, name: str = "vllm-0", timeout_ms: int = 2_000, **kw) -> ScrapeTarget:
    return ScrapeTarget(name=name, url=t.url, timeout_ms=timeout_ms, **kw)


def _series(store: MemoryStore, name: str, **labels: str):
    matchers = [Matcher("__name__", "=", name)]
    matchers += [Matcher(k, "=", v) for k, v in labels.items()]
    return store.select(matchers, 0, 2**62)


def _values(store: MemoryStore, name: str, **labels: str) -> list[tuple[int, float]]:
    [series] = _series(store, name, **labels)
    return list(zip(series.ts, series.vs, strict=True))


def _up(store: MemoryStore, target: str = "vllm-0") -> list[float]:
    return [v for _, v in _values(store, "up", target=target)]


def test_healthy_vllm_page(target, store, scraper):
    target.serve(VLLM_PAGE)
    t = _target(target, labels=(("env", "prod"),))
    result = scraper.scrape(t, 1_000)
    assert result.up and result.error is None
    assert result.samples == len([ln for ln in VLLM_PAGE.splitlines() if not ln.startswith(b"#")])
    [series] = _series(store, "vllm:num_requests_running")
    assert dict(series.labels) == {
        "__name__": "vllm:num_requests_running", "engine": "0", "model_name": "gemma-4",
        "env": "prod", "target": "vllm-0", "instance": f"127.0.0.1:{target.server.server_port}",
    }
    assert (series.ts, series.vs) == ([1_000], [12.0])
    assert len(_series(store, "vllm:time_to_first_token_seconds_bucket")) == 23
    assert _up(store) == [1.0]
    assert _values(store, "scrape_samples_scraped") == [(1_000, float(result.samples))]
    [(_, duration)] = _values(store, "scrape_duration_seconds")
    assert duration == result.duration_s > 0
    headers = target.requests[0]
    assert headers["Accept"].startswith("text/plain;version=0.0.4")
    assert "gzip" in headers["Accept-Encoding"]
    assert headers["X-Prometheus-Scrape-Timeout-Seconds"] == "2"


def test_repeated_scrapes_append_new_values(target, store, scraper):
    t = _target(target)
    for i, now in enumerate((1_000, 2_000, 3_000)):
        target.serve(f"requests_total {i}\n".encode())
        assert scraper.scrape(t, now).up
    assert _values(store, "requests_total") == [(1_000, 0.0), (2_000, 1.0), (3_000, 2.0)]


@IN_PROCESS_ONLY
def test_gzip_body(target, store, scraper):
    target.serve(VLLM_PAGE, gzipped=True)
    assert scraper.scrape(_target(target), 1_000).up
    assert _values(store, "vllm:num_requests_waiting") == [(1_000, 3.0)]


def test_http_500_is_down(target, store, scraper):
    target.serve(b"oops", status=500)
    result = scraper.scrape(_target(target), 1_000)
    assert not result.up
    assert "HTTP status 500" in result.error
    assert _up(store) == [0.0]
    assert _values(store, "scrape_samples_scraped") == [(1_000, 0.0)]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html><body>Bad gateway</body></html>\n", "invalid exposition: line 1"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"good 1\nbad{ 2\n", "invalid exposition: line 2"),
    ],
)
@IN_PROCESS_ONLY
def test_garbage_body_stores_nothing(target, store, scraper, body, message):
    target.serve(body)
    result = scraper.scrape(_target(target), 1_000)
    assert not result.up
    assert message in result.error
    assert _series(store, "good") == []
    assert _up(store) == [0.0]


@IN_PROCESS_ONLY
def test_connection_refused(store, scraper):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = scraper.scrape(ScrapeTarget("gone", f"http://127.0.0.1:{port}"), 1_000)
    assert not result.up
    assert "connection failed" in result.error
    assert _up(store, "gone") == [0.0]


def _hang(h: http.server.BaseHTTPRequestHandler, stop: threading.Event) -> None:
    stop.wait()
    h.close_connection = True  # answer nothing, then hang up


@IN_PROCESS_ONLY
def test_server_that_hangs_times_out(target, store, scraper):
    target.behave(_hang)
    _cut_at_its_deadline(target, scraper, _target(target, timeout_ms=300), 1_000)


def _trickle(h: http.server.BaseHTTPRequestHandler, stop: threading.Event) -> None:
    h.send_response(200)
    h.send_header("Content-Length", str(len(VLLM_PAGE)))
    h.end_headers()
    for byte in VLLM_PAGE:  # one byte every 20 ms: each read is quick, the whole is not
        h.wfile.write(bytes([byte]))
        h.wfile.flush()
        if stop.wait(0.02):
            return


@IN_PROCESS_ONLY
def test_trickling_server_hits_the_total_deadline(target, store, scraper):
    target.behave(_trickle)  # the whole page would take over 10 minutes
    _cut_at_its_deadline(target, scraper, _target(target, timeout_ms=300), 1_000)


def _stall_mid_body(h: http.server.BaseHTTPRequestHandler, stop: threading.Event) -> None:
    h.send_response(200)
    h.send_header("Content-Length", str(len(VLLM_PAGE)))
    h.end_headers()
    h.wfile.write(VLLM_PAGE[:1000])
    h.wfile.flush()
    stop.wait()


@IN_PROCESS_ONLY
def test_trickling_server_is_cut_on_a_reused_connection(target, store, scraper):
    """The deadline holds on a kept-alive connection too, and the next scrape reconnects."""
    target.serve(b"a 1\n")
    assert scraper.scrape(_target(target, timeout_ms=300), 1_000).up
    target.behave(_trickle)
    _cut_at_its_deadline(target, scraper, _target(target, timeout_ms=300), 2_000)
    target.serve(b"a 3\n")
    assert scraper.scrape(_target(target, timeout_ms=300), 3_000).up


@IN_PROCESS_ONLY
def test_server_that_stalls_mid_body_times_out(target, store, scraper):
    target.behave(_stall_mid_body)
    result = scraper.scrape(_target(target, timeout_ms=300), 1_000)
    assert not result.up
    assert "timed out" in result.error
    assert _series(store, "python_gc_objects_collected_total") == []


def _close_mid_body(h: http.server.BaseHTTPRequestHandler, stop: threading.Event) -> None:
    h.send_response(200)
    h.send_header("Content-Length", str(len(VLLM_PAGE)))
    h.end_headers()
    h.wfile.write(VLLM_PAGE[:1000])
    h.wfile.flush()
    h.connection.shutdown(socket.SHUT_RDWR)
    h.close_connection = True


@IN_PROCESS_ONLY
def test_server_that_closes_mid_body(target, store, scraper):
    target.behave(_close_mid_body)
    result = scraper.scrape(_target(target), 1_000)
    assert not result.up
    assert "closed the connection mid-response" in result.error
    assert _series(store, "python_gc_objects_collected_total") == []


@pytest.mark.parametrize("gzipped", [False, True])
def test_oversized_body(target, store, gzipped, make_scraper):
    scraper = make_scraper(store, max_body_bytes=10_000)
    target.serve(VLLM_PAGE, gzipped=gzipped)  # gzipped it is under the limit on the wire
    result = scraper.scrape(_target(target), 1_000)
    assert not result.up
    assert "body size limit exceeded" in result.error
    assert _series(store, "vllm:num_requests_running") == []


def test_vanished_series_get_stale_markers(target, store, scraper):
    t = _target(target)
    target.serve(b'a 1\nb{x="1"} 2\nb{x="2"} 3\n')
    assert scraper.scrape(t, 1_000).stale == 0
    target.serve(b'a 4\nb{x="2"} 5\n')
    result = scraper.scrape(t, 2_000)
    assert result.up and result.stale == 1
    [(t1, v1), (t2, v2)] = _values(store, "b", x="1")
    assert (t1, v1) == (1_000, 2.0) and t2 == 2_000 and is_stale(v2)
    assert _values(store, "b", x="2") == [(1_000, 3.0), (2_000, 5.0)]
    target.serve(b'a 4\nb{x="1"} 6\nb{x="2"} 5\n')  # it comes back
    assert scraper.scrape(t, 3_000).stale == 0
    assert _values(store, "b", x="1")[-1] == (3_000, 6.0)


def test_failed_scrape_marks_every_series_stale(target, store, scraper):
    t = _target(target)
    target.serve(b"a 1\nb 2\n")
    scraper.scrape(t, 1_000)
    target.serve(b"", status=503)
    result = scraper.scrape(t, 2_000)
    assert not result.up and result.stale == 2
    for name in ("a", "b"):
        [_, (ts, v)] = _values(store, name)
        assert ts == 2_000 and is_stale(v)
    assert scraper.scrape(t, 3_000).stale == 0  # no second round of markers
    assert _up(store) == [1.0, 0.0, 0.0]
    target.serve(b"a 7\n")
    assert scraper.scrape(t, 4_000).up
    assert _values(store, "a")[-1] == (4_000, 7.0)


@IN_PROCESS_ONLY
def test_scraped_labels_that_clash_are_exported(target, store, scraper):
    target.serve(b'm{instance="pod-1",target="t",exported_instance="z",env="dev"} 1\n')
    scraper.scrape(_target(target, labels=(("env", "prod"),)), 1_000)
    [series] = _series(store, "m")
    assert dict(series.labels) == {
        "__name__": "m", "target": "vllm-0", "instance": f"127.0.0.1:{target.server.server_port}",
        "env": "prod", "exported_target": "t", "exported_env": "dev",
        "exported_instance": "z", "exported_exported_instance": "pod-1",
    }


def test_with_target_labels_is_prometheus_like():
    scraped = labels_of({"__name__": "m", "job": "x", "a": "1"})
    assert with_target_labels(scraped, {"job": "j", "b": ""}) == labels_of(
        {"__name__": "m", "job": "j", "exported_job": "x", "a": "1"}
    )


def test_explicit_timestamps_are_honoured_and_not_staled(target, store, scraper):
    t = _target(target)
    target.serve(b"a 1 500\nb 2\n")
    scraper.scrape(t, 1_000)
    assert _values(store, "a") == [(500, 1.0)]
    target.serve(b"c 3\n")
    assert scraper.scrape(t, 2_000).stale == 1  # b only
    assert _values(store, "a") == [(500, 1.0)]


@IN_PROCESS_ONLY
def test_openmetrics_answer_reads_seconds(target, store, scraper):
    target.serve(b"a_total 1 1.5\n# EOF\n",
                 ctype="application/openmetrics-text; version=1.0.0; charset=utf-8")
    assert scraper.scrape(_target(target), 3_000).up
    assert _values(store, "a_total") == [(1_500, 1.0)]


def test_series_collected_by_the_store_are_re_referenced(target, make_scraper):
    store = MemoryStore(retention_ms=10_000)
    scraper = make_scraper(store)
    t = _target(target)
    target.serve(b"a 1\n")
    scraper.scrape(t, 1_000)
    assert store.gc(100_000) >= 1  # everything is older than the retention
    target.serve(b"a 2\n")
    assert scraper.scrape(t, 100_000).up
    assert _values(store, "a") == [(100_000, 2.0)]


def test_full_store_is_a_scrape_error(target, make_scraper):
    store = MemoryStore(max_series=5)
    scraper = make_scraper(store)
    t = _target(target)
    target.serve(b"a 1\n")
    assert scraper.scrape(t, 1_000).up  # a + up + duration + samples_scraped
    target.serve(b"a 1\nb 2\nc 3\n")
    result = scraper.scrape(t, 2_000)
    assert not result.up and "store full" in result.error
    assert _up(store) == [1.0, 0.0]
    [_, (ts, v)] = _values(store, "a")
    assert ts == 2_000 and is_stale(v)


def test_a_full_store_still_records_every_targets_health(target, make_scraper):
    """The series cap stops a page's series, not `up`: a target first scraped once
    the store is full still shows up (1) and down (0), so it cannot go down unseen."""
    store = MemoryStore(max_series=5)
    scraper = make_scraper(store)
    target.serve(b"a 1\nb 2\n")  # 2 series + 3 health series: the store is full
    assert scraper.scrape(_target(target), 1_000).up
    late = _target(target, name="late")
    result = scraper.scrape(late, 2_000)
    assert not result.up and "store full" in result.error
    assert _up(store, "late") == [0.0]
    assert [v for _, v in _values(store, "scrape_samples_scraped", target="late")] == [0.0]


def test_duplicate_series_keep_the_first_sample(target, store, scraper, caplog):
    target.serve(b'a 1\nb 2\na 3\nc{x="1",y="2"} 4\nc{y="2",x="1"} 5\n')
    result = scraper.scrape(_target(target), 1_000)
    assert result.up and result.samples == 3  # Prometheus drops the duplicates, stays up
    assert _values(store, "a") == [(1_000, 1.0)]
    assert _values(store, "c") == [(1_000, 4.0)]
    assert "2 duplicate samples" in caplog.text


def test_forget_marks_everything_stale(target, store, scraper):
    target.serve(b"a 1\n")
    scraper.scrape(_target(target), 1_000)
    assert scraper.forget("vllm-0", 2_000) == 4
    assert is_stale(_values(store, "a")[-1][1])
    assert is_stale(_values(store, "up")[-1][1])
    assert scraper.forget("vllm-0", 3_000) == 0


def test_a_scrape_in_flight_when_its_target_is_forgotten_stores_nothing(target, store,
                                                                         scraper):
    """A reload that removes a target while its scrape waits on the wire: the series end with
    the staleness markers `forget` wrote, the late page does not bring them back (on a
    starved machine the in-process scraper stored it after the markers)."""
    target.serve(b"a 1\n")
    scraper.scrape(_target(target, timeout_ms=5_000), 1_000)
    gate = threading.Event()

    def held(h: http.server.BaseHTTPRequestHandler, stop: threading.Event) -> None:
        gate.wait(60)
        h.send_response(200)
        h.send_header("Content-Length", "4")
        h.end_headers()
        h.wfile.write(b"a 2\n")

    target.behave(held)
    with ThreadPoolExecutor(1) as pool:
        # `forget` closes the connection under the in-flight read: that read may end only at
        # its timeout, kept short here; either way nothing of it may be stored.
        late = pool.submit(scraper.scrape, _target(target, timeout_ms=5_000), 3_000)
        deadline = time.monotonic() + 60
        while len(target.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(target.requests) == 2, "the second scrape never reached the target"
        assert scraper.forget("vllm-0", 2_000) == 4
        gate.set()
        result = late.result(60)
    assert not result.up and result.samples == 0
    assert [v for _, v in _values(store, "a")][:1] == [1.0]
    assert is_stale(_values(store, "a")[-1][1]), _values(store, "a")
    assert is_stale(_values(store, "up")[-1][1]), _values(store, "up")


def test_changed_target_definition_ends_old_series(target, store, scraper):
    target.serve(b"a 1\n")
    scraper.scrape(_target(target, labels=(("env", "a"),)), 1_000)
    scraper.scrape(_target(target, labels=(("env", "b"),)), 2_000)
    assert is_stale(_values(store, "a", env="a")[-1][1])
    assert _values(store, "a", env="b") == [(2_000, 1.0)]


def test_a_hanging_target_does_not_stall_the_others(store, scraper):
    healthy = [Target() for _ in range(4)]
    stuck = Target()
    try:
        for i, t in enumerate(healthy):
            t.serve(f"load {i}\n".encode())
        stuck.behave(_hang)
        with ThreadPoolExecutor(max_workers=5) as pool:
            hung = pool.submit(scraper.scrape, _target(stuck, "stuck", 60_000), 1_000)
            futures = [pool.submit(scraper.scrape, _target(t, f"t{i}"), 1_000)
                       for i, t in enumerate(healthy)]
            done, _ = wait(futures, timeout=30)
            assert len(done) == 4 and not hung.done()
            assert all(f.result().up for f in futures)
            stuck.close()  # releases the handler; the stuck scrape now ends
            assert not hung.result(timeout=30).up
        for i in range(4):
            assert _values(store, "load", target=f"t{i}") == [(1_000, float(i))]
    finally:
        for t in healthy:
            t.close()


@IN_PROCESS_ONLY
def test_scrape_never_raises_on_a_bad_url(store, scraper):
    result = scraper.scrape(ScrapeTarget("weird", "ftp://127.0.0.1:1"), 1_000)
    assert not result.up and result.error
    assert math.isfinite(result.duration_s)


def test_ingest_without_http(store):
    scraper = Scraper(store)
    t = ScrapeTarget("pushed", "http://10.0.0.7:8000")
    assert scraper.ingest(t, "a 1\n", 1_000).up
    bad = scraper.ingest(t, "a x\n", 2_000)
    scraper.close()
    assert not bad.up and "line 1" in bad.error
    [series] = _series(store, "a")
    assert dict(series.labels)["instance"] == "10.0.0.7:8000"
    assert series.ts == [1_000, 2_000] and is_stale(series.vs[-1])


@IN_PROCESS_ONLY
def test_scrape_the_vllm_simulator(store, scraper):
    from sentinel.sim.server import start_sim

    sim = start_sim()
    try:
        result = scraper.scrape(ScrapeTarget("sim", sim.url, timeout_ms=5_000), 1_000)
    finally:
        sim.stop()
    assert result.up, result.error
    assert result.samples > 100
    for name in ("vllm:kv_cache_usage_perc", "vllm:num_requests_waiting"):
        [series] = _series(store, name, target="sim")
        assert series.ts == [1_000]
