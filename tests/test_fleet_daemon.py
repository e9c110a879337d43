"""The daemon at fleet shape, in process: what the store keeps, per-target limits, missed work."""

from __future__ import annotations

import http.server
import logging
import os
import signal
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_e2e import wait_for

from sentinel.collect.workerpool import ProcessScraper
from sentinel.config import load_config
from sentinel.config.model import DEFAULT_SAMPLE_LIMIT
from sentinel.daemon.app import App
from sentinel.model import METRIC_NAME, is_stale, label_value
from sentinel.paths import bundled_dir
from sentinel.rules.manager import RuleManager
from sentinel.store import Matcher

pytestmark = pytest.mark.integration

VLLM_PAGE = (Path(__file__).parent / "data" / "vllm_metrics.txt").read_bytes()
WIDE_PAGE = b'wide{a="1",b="2",c="3",d="4"} 1\nnarrow 1\n'
SMALL_PAGE = b"load 1\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/hang":
            self.server.release.wait()  # type: ignore[attr-defined]
            self.close_connection = True
            return
        body = self.server.pages[self.path]  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class Pages(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """One loopback server, a page per path (`/hang` never answers until closed)."""

    daemon_threads = True

    def __init__(self, pages: dict[str, bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pages = pages
        self.release = threading.Event()
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


@pytest.fixture
def pages() -> Iterator[Pages]:
    # The 200,000-series page is built here, not at import: every worker collects this module.
    big = b"".join(b'big_series{i="%d"} 1\n' % i for i in range(200_000))
    p = Pages({"/vllm": VLLM_PAGE, "/big": big, "/wide": WIDE_PAGE, "/small": SMALL_PAGE})
    yield p
    p.close()


def _config(folder: Path, url: str, targets: list[str], rule_files: list[str],
            evaluation_interval: str = "1s", workers: int = 1) -> Path:
    lines = [f"database: sqlite:///{folder / 'sentinel.db'}", "listen: 127.0.0.1:0",
             f"collect_workers: {workers}",
             f"rule_files: [{', '.join(repr(f) for f in rule_files)}]",
             f"evaluation_interval: {evaluation_interval}",
             "probe_interval: 0s",  # scrape series only (probes write their own via add)
             "targets:"]
    lines += [f"  - {{url: '{url}', {t}}}" for t in targets]
    path = folder / "sentinel.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _names(app: App, target: str) -> set[str]:
    assert app.pipeline is not None
    series = app.pipeline.store.select([Matcher("target", "=", target)], 0, 2**62)
    return {label_value(s.labels, METRIC_NAME) for s in series}


def _ups(app: App, target: str) -> list[float]:
    assert app.pipeline is not None
    series = app.pipeline.store.select(
        [Matcher(METRIC_NAME, "=", "up"), Matcher("target", "=", target)], 0, 2**62)
    return [v for s in series for v in s.vs]


def _metric(app: App, name: str, **labels: str) -> float:
    return app.metrics.registry.get_sample_value(name, labels or None) or 0.0


THREE_RULES = """\
groups:
  - name: g
    rules:
      - alert: Queue
        expr: vllm:num_requests_waiting > 100
      - alert: Prefill
        expr: rate(vllm:prompt_tokens_total[1m]) > 1e12
      - alert: KV
        expr: max by (target) (vllm:kv_cache_usage_perc) > 2
"""
FOURTH_RULE = """\
      - alert: Preempting
        expr: increase(vllm:num_preemptions_total[10m]) > 1e9
"""
META = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}


WORKERS = pytest.mark.parametrize("workers", [1, 2], ids=["in-process", "2-workers"])


@WORKERS
def test_store_keeps_only_what_the_rules_read_and_reload_adds_a_rules_series(
        tmp_path, pages, workers):
    (tmp_path / "rules.yaml").write_text(THREE_RULES)
    cfg = _config(tmp_path, pages.url,
                  ["name: v, metrics_path: /vllm, scrape_interval: 200ms, scrape_timeout: 200ms"],
                  ["rules.yaml"], workers=workers)
    app = App(load_config(cfg))
    app.start()
    try:
        wait_for(lambda: len(_ups(app, "v")) >= 2, 60, "two scrapes")
        assert _names(app, "v") == {"vllm:num_requests_waiting", "vllm:prompt_tokens_total",
                                    "vllm:kv_cache_usage_perc"} | META
        assert _metric(app, "sentinel_store_samples_dropped_total") > 100
        assert app.pipeline is not None
        # The longest read is an instant selector's 5m lookback, plus 1m slack: not a fixed 15m.
        assert app.pipeline.store.retention_ms == 6 * 60_000

        (tmp_path / "rules.yaml").write_text(THREE_RULES + FOURTH_RULE)
        assert app.reload()
        wait_for(lambda: "vllm:num_preemptions_total" in _names(app, "v"), 60,
                 "the new rule's series")
        assert app.pipeline.store.retention_ms == 11 * 60_000  # the new rule's 10m range
        app._housekeeping_job()
        # 4 names + 3 meta, one target; plus the rule-metric check's own series when it ran
        # between the reload and the first scrape that brought the new name (a delayed
        # scrape on a loaded machine: the new rule's metric was missing for a moment).
        checked = len(app.pipeline.store.select(
            [Matcher(METRIC_NAME, "=", "sentinel_rule_missing_metrics")], 0, 2**62))
        assert _metric(app, "sentinel_store_series") == 7 + checked
        # float32 or float64 values, plus int32 times held once per clock (the
        # target's four series share one): under the 12 bytes of unshared float64s
        samples = _metric(app, "sentinel_store_samples")
        assert 4 * samples <= _metric(app, "sentinel_store_bytes") < 12 * samples
    finally:
        app.stop(2)


@WORKERS
def test_limits_fail_only_their_targets_scrape(tmp_path, pages, caplog, workers):
    (tmp_path / "rules.yaml").write_text("groups:\n  - name: g\n    rules:\n"
                                         "      - alert: A\n        expr: load > 5\n")
    every = "scrape_interval: 500ms, scrape_timeout: 500ms"
    cfg = _config(tmp_path, pages.url, [
        f"name: big, metrics_path: /big, sample_limit: 50000, {every}",
        f"name: wide, metrics_path: /wide, label_limit: 6, {every}",
        f"name: s1, metrics_path: /small, {every}",
        f"name: s2, metrics_path: /small, sample_limit: 1, label_limit: 3, {every}",
    ], ["rules.yaml"], workers=workers)
    caplog.set_level(logging.WARNING)
    app = App(load_config(cfg))
    app.start()
    try:
        # A scrape's `up` is stored before the pipeline counts its outcome: wait for both.
        def counted() -> bool:
            return (all(len(_ups(app, t)) >= 3 for t in ("big", "wide", "s1", "s2"))
                    and _metric(app, "sentinel_scrapes_exceeded_sample_limit_total",
                                target="big") >= 3
                    and _metric(app, "sentinel_scrapes_exceeded_label_limit_total",
                                target="wide") >= 3)

        wait_for(counted, 15, "three scrapes of every target, each counted")
        assert set(_ups(app, "big")) == {0.0} and set(_ups(app, "wide")) == {0.0}
        for t in ("s1", "s2"):  # at their limits, not over: they keep scraping
            assert len(_ups(app, t)) >= 3 and set(_ups(app, t)) == {1.0}
        assert _metric(app, "sentinel_scrapes_exceeded_sample_limit_total", target="big") >= 3
        assert _metric(app, "sentinel_scrapes_exceeded_label_limit_total", target="wide") >= 3
        assert _metric(app, "sentinel_scrapes_exceeded_sample_limit_total", target="s1") == 0
        text = caplog.text
        assert "scrape of big failed: sample_limit exceeded: 200000 samples > limit 50000" in text
        assert ("scrape of wide failed: label_limit exceeded (metric: wide, number of labels: 7, "
                "limit: 6)") in text
        assert text.count("scrape of big failed") == 1  # logged when the reason changes
    finally:
        app.stop(2)


@WORKERS
def test_reload_ends_a_removed_targets_series_and_scrapes_an_added_one(
        tmp_path, pages, workers):
    (tmp_path / "rules.yaml").write_text("groups:\n  - name: g\n    rules:\n"
                                         "      - alert: A\n        expr: load > 5\n")
    every = "scrape_interval: 200ms, scrape_timeout: 200ms"
    targets = [f"name: {t}, metrics_path: /small, {every}" for t in ("a", "b")]
    cfg = _config(tmp_path, pages.url, targets, ["rules.yaml"], workers=workers)
    app = App(load_config(cfg), loader=lambda: load_config(cfg))
    app.start()
    try:
        wait_for(lambda: len(_ups(app, "a")) >= 2 and len(_ups(app, "b")) >= 2, 20,
                 "two scrapes of a and b")
        _config(tmp_path, pages.url, [targets[0], f"name: c, metrics_path: /small, {every}"],
                ["rules.yaml"], workers=workers)
        assert app.reload()
        wait_for(lambda: len(_ups(app, "c")) >= 2, 20, "two scrapes of the added target")
        assert app.pipeline is not None
        for name in ("load", "up"):  # b's series ended with a staleness marker
            [series] = app.pipeline.store.select(
                [Matcher(METRIC_NAME, "=", name), Matcher("target", "=", "b")], 0, 2**62)
            assert is_stale(series.vs[-1]), name
        n_b = len(_ups(app, "b"))
        wait_for(lambda: len(_ups(app, "c")) >= 4, 20, "more scrapes of c")
        assert len(_ups(app, "b")) == n_b  # b is no longer scraped
    finally:
        app.stop(2)


def test_a_collect_worker_that_dies_is_restarted_counted_and_its_scrape_missed(
        tmp_path, pages):
    """SIGKILL a worker while it holds a hung scrape: that scrape is a missed one (not a
    down target), the worker comes back, and every target is scraped again."""
    (tmp_path / "rules.yaml").write_text("groups:\n  - name: g\n    rules:\n"
                                         "      - alert: A\n        expr: load > 5\n")
    every = "scrape_interval: 300ms, scrape_timeout: 300ms"
    cfg = _config(tmp_path, pages.url, [
        "name: hung, metrics_path: /hang, scrape_interval: 4s, scrape_timeout: 4s",
        f"name: a, metrics_path: /small, {every}", f"name: b, metrics_path: /small, {every}",
    ], ["rules.yaml"], workers=2)
    app = App(load_config(cfg))
    app.start()
    try:
        assert app.pipeline is not None
        pool = app.pipeline.scraper
        assert isinstance(pool, ProcessScraper) and _metric(app, "sentinel_collect_workers") == 2
        wait_for(lambda: len(_ups(app, "a")) >= 2 and len(_ups(app, "b")) >= 2
                 and any(pool.holds("hung", pid) for pid in pool.pids()), 20,
                 "scrapes of a and b, and the hung scrape in flight")
        [victim] = [pid for pid in pool.pids() if pool.holds("hung", pid)]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: _metric(app, "sentinel_scrapes_missed_total", target="hung") >= 1
                 and _metric(app, "sentinel_collect_worker_restarts_total") >= 1
                 and len(pool.pids()) == 2 and victim not in pool.pids(), 20,
                 "the lost scrape counted and the worker back")
        # Neither up nor down: the scrape did not happen.
        assert _metric(app, "sentinel_scrapes_total", target="hung", outcome="failure") == 0
        before = {t: len(_ups(app, t)) for t in ("a", "b")}
        wait_for(lambda: all(len(_ups(app, t)) >= before[t] + 2 for t in ("a", "b")), 20,
                 "both targets scraped after the restart")
        assert set(_ups(app, "a")) == set(_ups(app, "b")) == {1.0}
    finally:
        app.stop(2)
    assert all(not _alive(pid) for pid in pool.pids() + [victim])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


SLOW_RULES = """\
groups:
  - name: slow
    interval: 2s
    rules:
      - alert: Never
        expr: load > 1e9
"""


def test_missed_scrapes_and_evaluations_are_counted_and_alerted(tmp_path, pages, monkeypatch):
    real = RuleManager.evaluate_group

    def slow(self: RuleManager, name: str, now_ms: int):  # noqa: ANN202
        if name == "slow":
            time.sleep(4.5)  # over two intervals: the next ticks find it still running
        return real(self, name, now_ms)

    monkeypatch.setattr(RuleManager, "evaluate_group", slow)
    (tmp_path / "rules.yaml").write_text(SLOW_RULES)
    self_rules = str(bundled_dir("rules") / "sentinel.yaml")
    cfg = _config(tmp_path, pages.url, [
        # timeout == interval (allowed): a hung scrape is still running at the next tick
        "name: hung, metrics_path: /hang, scrape_interval: 2s, scrape_timeout: 2s",
        "name: ok, metrics_path: /small, scrape_interval: 2s, scrape_timeout: 1s",
    ], ["rules.yaml", self_rules])
    app = App(load_config(cfg))
    app.start()
    try:
        def firing() -> set[tuple[str, str]]:
            assert app.pipeline is not None
            return {(dict(a.labels).get("alertname", ""),
                     dict(a.labels).get("target") or dict(a.labels).get("group", ""))
                    for a in app.pipeline.rules.active_alerts() if a.state.value == "firing"}

        wait_for(lambda: {("SentinelMissedScrapes", "hung"),
                          ("SentinelMissedRuleEvaluations", "slow")} <= firing(), 40,
                 "both self-alerts firing")
        assert _metric(app, "sentinel_scrapes_missed_total", target="hung") >= 1
        assert _metric(app, "sentinel_rule_group_iterations_missed_total", group="slow") >= 1
        # The others are not held up: no self-alert for them (a starved machine may miss
        # one of their runs now and then, so the counters are not required to stay 0:
        # beside stress-ng at a load of 35, sentinel-self missed 2).
        assert not {("SentinelMissedScrapes", "ok"),
                    ("SentinelMissedRuleEvaluations", "sentinel-self")} & firing()
        assert 1.0 in set(_ups(app, "ok")) and set(_ups(app, "hung")) == {0.0}
    finally:
        app.stop(2)


def test_default_sample_limit_fails_a_runaway_page_and_the_series_cap_is_configured(
        tmp_path, pages):
    """No sample_limit set: the default (50,000) fails the 200,000-sample page, as
    Prometheus would (up 0); 0 is no limit; the store's series cap comes from
    `max_series`."""
    pages.pages["/hundred"] = b"".join(b'h{i="%d"} 1\n' % i for i in range(100))
    (tmp_path / "rules.yaml").write_text("groups:\n  - name: g\n    rules:\n"
                                         "      - alert: A\n        expr: load > 5\n")
    every = "scrape_interval: 1s, scrape_timeout: 1s"
    # The big page gets 5 s: parsing 200,000 samples on a loaded machine can take longer
    # than 1 s, and a timed-out scrape is not a refused one.
    cfg = _config(tmp_path, pages.url, ["name: big, metrics_path: /big, scrape_interval: 5s, "
                                        "scrape_timeout: 5s",
                                        f"name: s1, metrics_path: /small, {every}",
                                        f"name: many, metrics_path: /hundred, sample_limit: 0, "
                                        f"{every}"], ["rules.yaml"])
    # Room for every page but the big one: which target a full store refuses depends on
    # who scrapes first (tests/test_scrape.py shows a full store and the health it keeps).
    cfg.write_text(cfg.read_text() + "max_series: 200\nkeep_all_series: true\n")
    config = load_config(cfg)
    assert config.targets[0].sample_limit == DEFAULT_SAMPLE_LIMIT == 50_000
    assert config.targets[2].sample_limit == 0  # 0: no limit, as in Prometheus
    app = App(config)
    app.start()
    try:
        wait_for(lambda: _metric(app, "sentinel_scrapes_exceeded_sample_limit_total",
                                 target="big") >= 2 and len(_ups(app, "s1")) >= 2, 120,
                 "two refused scrapes of the big page")
        assert set(_ups(app, "big")) == {0.0} and set(_ups(app, "s1")) == {1.0}
        assert app.pipeline is not None and app.pipeline.store.max_series == 200
        # `many` has no sample limit (0): its whole page is kept.
        wait_for(lambda: len(app.pipeline.store.select(  # type: ignore[union-attr]
            [Matcher(METRIC_NAME, "=", "h")], 0, 2**62)) == 100, 60, "the page of `many`")
    finally:
        app.stop(2)
