"""End to end on loopback with a recording-rule pack: an alert on a recorded series pages,
and a rule reading ALERTS{alertstate="firing"} fires too (real daemon, simulator, webhook)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fixtures_e2e import wait_for, write_config

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.demo import WebhookSink

pytestmark = pytest.mark.integration

RULES = """\
groups:
  - name: record
    rules:
      - record: target:kv_cache_usage:max
        expr: max by (target) (vllm:kv_cache_usage_perc)
        labels: {source: recorded}
  - name: alert
    rules:
      - alert: KVCacheHighRecorded
        expr: target:kv_cache_usage:max > 0.85
        for: 1s
        labels: {severity: page}
        annotations:
          summary: >-
            {{ $labels.target }} at {{ $value | humanizePercentage }}
            ({{ with query "count(target:kv_cache_usage:max)" }}{{ . | first | value }}{{ end }}
            recorded series)
      - alert: PagesFiring
        expr: count(ALERTS{alertstate="firing", alertname="KVCacheHighRecorded"}) > 0
        labels: {severity: info}
"""


def _firing(sink: WebhookSink, alertname: str) -> list[tuple[float, dict]]:
    out = []
    for t, body, _ in list(sink.received):
        for a in body.get("alerts", []):
            if a["labels"].get("alertname") == alertname and a.get("status") == "firing":
                out.append((t, a))
    return out


def test_alert_on_recorded_series_pages_and_alerts_series_is_queryable(
        tmp_path: Path, sim, sink: WebhookSink) -> None:
    app = App(load_config(write_config(tmp_path, [("gemma", sim.url)], sink.url, RULES)))
    app.start()
    try:
        now = lambda: int(time.time() * 1000)  # noqa: E731
        wait_for(lambda: app.engine.query("target:kv_cache_usage:max", now()), 30,
                 "the recorded series")
        sim.set_state(kv_cache_usage=0.93)
        started = time.monotonic()
        [(arrived, alert)] = wait_for(lambda: _firing(sink, "KVCacheHighRecorded"), 40,
                                      "the page for the recorded series")[:1]
        # for (1s) + one evaluation (1s) for the alert, on Sentinel's clock (the wall-clock
        # latency, recording rule and delivery included, is printed: a bench's business).
        print(f"paged {arrived - started:.2f}s after the change")
        assert arrived - started >= 1, "paged before `for`"
        [fired] = [a for a in app.pipeline.rules.active_alerts()
                   if a.rule == "KVCacheHighRecorded"]
        assert fired.fired_at_ms is not None
        assert 1000 <= fired.fired_at_ms - fired.active_at_ms <= 2000, fired
        assert alert["labels"]["source"] == "recorded" and alert["labels"]["target"] == "gemma"
        assert alert["annotations"]["summary"] == "gemma at 93% (1 recorded series)"
        wait_for(lambda: _firing(sink, "PagesFiring"), 30, "the rule reading ALERTS")
        firing = app.engine.query('ALERTS{alertstate="firing"}', now())
        assert {dict(s.labels)["alertname"] for s in firing} >= {"KVCacheHighRecorded"}
        for_state = app.engine.query('ALERTS_FOR_STATE{alertname="KVCacheHighRecorded"}', now())
        assert len(for_state) == 1 and for_state[0].value <= time.time()
    finally:
        app.stop(2)
