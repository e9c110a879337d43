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
