"""rules/sentinel.yaml reads only what Sentinel has: every metric name its rules select is
declared on a running daemon's /metrics (for a Prometheus watching Sentinel) and lands in
the daemon's own store (so the same rules fire inside Sentinel)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for, write_config

from sentinel.model import METRIC_NAME
from sentinel.rules.loader import load_rule_files
from sentinel.rules.metriccheck import selected_names
from sentinel.store import Matcher

ROOT = Path(__file__).resolve().parent.parent
SELF_RULES = ROOT / "rules" / "sentinel.yaml"

pytestmark = pytest.mark.integration


def _selected() -> set[str]:
    names: set[str] = set()
    for group in load_rule_files([str(SELF_RULES)]):
        for rule in group.rules:
            for alternatives in selected_names(rule.query):
                names |= alternatives
    return names


def test_the_self_rules_select_the_new_health_metrics() -> None:
    assert {"sentinel_worker_last_run_timestamp_seconds", "sentinel_worker_interval_seconds",
            "sentinel_notify_outbox_oldest_age_seconds", "sentinel_scrapes_total",
            "sentinel_rule_evaluation_failures_total",
            "sentinel_rule_group_evaluation_failures_total"} <= _selected()


def test_every_metric_the_self_rules_read_is_exposed_and_stored(tmp_path: Path) -> None:
    from sentinel.config import load_config
    from sentinel.daemon.app import App

    cfg = write_config(tmp_path, [("idle", "http://127.0.0.1:9")], "http://127.0.0.1:9/hook",
                       SELF_RULES.read_text())
    app = App(load_config(cfg))
    app.start()
    try:
        assert app.status is not None and app.pipeline is not None
        store = app.pipeline.store
        # Only a daemon with a remote query_backend has a backend to be up or down; the
        # remote-backend tests (test_query_backend*.py) see this one on /metrics and firing.
        wanted = _selected() - {"sentinel_query_backend_up"}

        def unstored() -> set[str]:
            now = app._now_ms()
            return {n for n in wanted
                    if not store.select([Matcher(METRIC_NAME, "=", n)], now - 60_000, now)}
        # The self-metrics job writes them every evaluation interval (1 s here).
        wait_for(lambda: not unstored(), 15, "the self-rule series in the store")
        assert not unstored()
        host, port = app.status.address
        text = httpx.get(f"http://{host}:{port}/metrics", timeout=5).text
    finally:
        app.stop(2)
    declared = set(re.findall(r"^# TYPE (\S+) \S+$", text, re.M))
    # A counter is declared without `_total`.
    missing = sorted(n for n in wanted
                     if n not in declared and re.sub(r"_total$", "", n) not in declared)
    assert not missing, f"rules/sentinel.yaml reads metrics Sentinel does not expose: {missing}"
    workers = set(re.findall(r'^sentinel_worker_interval_seconds\{worker="([^"]+)"\}', text, re.M))
    assert {"notify", "housekeeping", "self-metrics", "io-loop:heartbeat",
            "rules:sentinel-self", "rules:sentinel-health"} <= workers, workers
    # Per-target jobs are not workers: one slow target must not fail /healthz.
    assert not [w for w in workers if w.startswith(("probe:", "scrape:", "logs:"))], workers
    # Counters keep their `_total` lines but carry no `_created` series (one more series
    # a child for whoever scrapes Sentinel).
    assert re.search(r"^sentinel_scrapes_total\{", text, re.M), text[:2000]
    assert not re.findall(r"^\w+_created[{ ]", text, re.M)


def test_the_exposition_drops_only_the_created_samples_of_counters_and_histograms() -> None:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    from sentinel.daemon.http import WithoutCreated

    reg = CollectorRegistry()
    Counter("jobs", "Jobs.", ["kind"], registry=reg).labels("a").inc(3)
    Histogram("took_seconds", "Took.", buckets=[1.0], registry=reg).observe(0.5)
    Gauge("batch_created", "A gauge whose own name ends in _created.", registry=reg).set(7)
    full = generate_latest(reg).decode()
    text = generate_latest(WithoutCreated(reg)).decode()
    assert "jobs_created" in full and "took_seconds_created" in full
    assert "jobs_created" not in text and "took_seconds_created" not in text
    assert 'jobs_total{kind="a"} 3.0' in text
    assert 'took_seconds_bucket{le="1.0"} 1.0' in text and "took_seconds_count 1.0" in text
    assert "batch_created 7.0" in text  # a gauge is kept whatever its name
