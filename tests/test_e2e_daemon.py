"""End to end on loopback: simulator → scrape → rules → incident → webhook, real daemon."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import bodies_with_status, wait_for, write_config
from ha_helpers import Daemon, evaluations

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.incidents.db import Database

pytestmark = pytest.mark.integration

# One client for the polls: httpx.get builds an SSL context per call (~30 ms of CPU each).
_HTTP = httpx.Client(timeout=2)

FOR_S = 2.0
EVAL_S = 1.0
KV_RULE = f"""\
groups:
  - name: e2e
    rules:
      - alert: KVCacheHigh
        expr: max by (target) (vllm:kv_cache_usage_perc) > 0.85
        for: {int(FOR_S)}s
        labels: {{severity: page}}
        annotations:
          summary: "KV cache {{{{ $value | humanizePercentage }}}} on {{{{ $labels.target }}}}"
"""


def _start_app(config_path: Path) -> App:
    app = App(load_config(config_path))
    app.start()
    return app


def test_condition_pages_within_for_plus_one_interval_and_resolves(tmp_path, sim, sink):
    cfg = write_config(tmp_path, [("gemma", sim.url)], sink.url, KV_RULE)
    app = _start_app(cfg)
    try:
        wait_for(lambda: _up(app, "gemma") == 1.0, 30, "first scrape")
        started = time.monotonic()
        sim.set_state(kv_cache_usage=0.93)
        firing = wait_for(lambda: bodies_with_status(sink, "firing"), FOR_S + EVAL_S + 30,
                          "the firing webhook")
        arrived, body = firing[0]
        assert arrived - started >= FOR_S, "fired before `for` elapsed"
        # Within `for` + one interval, on Sentinel's clock (evaluations on the interval grid):
        # the wall-clock latency to the webhook is bench/ territory, not a loaded CI's.
        alert = next(a for a in app.pipeline.rules.active_alerts() if a.rule == "KVCacheHigh")
        assert alert.fired_at_ms is not None
        took_ms = alert.fired_at_ms - alert.active_at_ms
        assert FOR_S * 1000 <= took_ms <= (FOR_S + EVAL_S) * 1000, took_ms
        _assert_alertmanager_body(body, "firing")
        assert body["alerts"][0]["annotations"]["summary"] == "KV cache 93% on gemma"

        sim.set_state(kv_cache_usage=0.20)
        resolved = wait_for(lambda: bodies_with_status(sink, "resolved"), EVAL_S + 30,
                            "the resolved webhook")
        _assert_alertmanager_body(resolved[0][1], "resolved")
        assert resolved[0][1]["alerts"][0]["endsAt"] != "0001-01-01T00:00:00Z"

        incidents = queries.list_incidents(app.pipeline.tracker.db)
        assert len(incidents) == 1 and incidents[0].status == "resolved"
        detail = queries.get_incident(app.pipeline.tracker.db, incidents[0].id)
        kinds = [e.kind for e in detail.timeline]
        for expected in ("pending", "firing", "resolved"):
            assert expected in kinds, kinds
        assert any(k.startswith("notification") for k in kinds), kinds
    finally:
        app.stop(2)


def _up(app: App, target: str) -> float | None:
    vec = app.engine.query(f'up{{target="{target}"}}', int(time.time() * 1000))
    return vec[0].value if vec else None


def _assert_alertmanager_body(body: dict, status: str) -> None:
    assert body["version"] == "4"
    assert body["status"] == status
    assert body["receiver"] == "oncall"
    for key in ("groupKey", "groupLabels", "commonLabels", "commonAnnotations", "externalURL",
                "truncatedAlerts"):
        assert key in body, key
    alert = body["alerts"][0]
    assert alert["status"] == status
    assert alert["labels"]["alertname"] == "KVCacheHigh"
    assert alert["labels"]["target"] == "gemma"
    assert alert["labels"]["severity"] == "page"
    assert len(alert["fingerprint"]) == 16
    assert alert["startsAt"].endswith("Z")


def _healthy(port: int) -> bool:
    if not port:  # the daemon has not logged the port it listens on yet
        return False
    try:
        return _HTTP.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# The daemons below listen on port 0 and the test reads the bound port back from their log
# (ha_helpers.Daemon): a port picked free here and handed over could be taken by another
# worker's process during a start that a loaded machine stretches to many seconds. Their
# output goes to that log file, not to a pipe nobody reads (a full pipe blocks the daemon).


def test_kill_9_while_firing_does_not_repage_or_duplicate(tmp_path, sim, sink):
    cfg = write_config(tmp_path, [("gemma", sim.url)], sink.url, KV_RULE)
    sim.set_state(kv_cache_usage=0.95)
    daemon = Daemon(tmp_path, "sentinel", config=cfg).start()
    try:
        wait_for(lambda: bodies_with_status(sink, "firing"), 60, "the first firing webhook")
        # Kill once the page is on record. (Killed in the milliseconds between the
        # receiver's 200 and that commit, Sentinel pages again on start: delivery
        # is at-least-once, and receivers de-duplicate on groupKey/fingerprint.)
        db = Database(f"sqlite:///{tmp_path / 'sentinel.db'}")
        wait_for(lambda: _notification_recorded(db), 30, "the notification on the timeline")
        daemon.kill9()
        # Delivered before the kill: more than one body only as a retry of the same message
        # (a delivery that timed out on a loaded machine and was sent again), one key.
        paged = len(bodies_with_status(sink, "firing"))
        daemon.start()
        # Several evaluations after the restart (past `for` again): the alert is still
        # firing (restored), but nobody is paged a second time.
        n = int(FOR_S / EVAL_S) + 3
        wait_for(lambda: evaluations(daemon, "e2e") >= n, 90,
                 f"{n} evaluations of the restarted daemon")
        assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log_text()
        assert len(bodies_with_status(sink, "firing")) == paged, "paged again after restart"
        assert len(_keys(sink, "firing")) == 1, _keys(sink, "firing")
        sim.set_state(kv_cache_usage=0.1)
        wait_for(lambda: bodies_with_status(sink, "resolved"), 30, "the resolved webhook")
        incidents = queries.list_incidents(db)
        assert len(incidents) == 1, incidents
        wait_for(lambda: queries.list_incidents(db)[0].status == "resolved", 30, "resolution")
    finally:
        daemon.stop()


def _keys(sink, status: str) -> set[str]:  # noqa: ANN001
    """The Idempotency-Keys of the bodies with this status (a retry keeps its key)."""
    return {{k.lower(): v for k, v in headers.items()}.get("idempotency-key", "")
            for _, body, headers in list(sink.received) if body.get("status") == status}


def _notification_recorded(db: Database) -> bool:
    incidents = queries.list_incidents(db)
    if not incidents:
        return False
    detail = queries.get_incident(db, incidents[0].id)
    return detail is not None and any(e.kind == "notification_sent" for e in detail.timeline)


def test_sigterm_stops_within_seconds(tmp_path, sim):
    cfg = write_config(tmp_path, [("gemma", sim.url)], None, KV_RULE)
    daemon = Daemon(tmp_path, "sentinel", config=cfg).start()
    try:
        wait_for(lambda: _healthy(daemon.port), 60, "the daemon to answer /healthz")
        assert daemon.proc is not None
        daemon.signal(signal.SIGTERM)
        # A clean exit after a bounded drain (each stage of App.stop waits at most 5 s).
        # How many seconds it takes is bench/fleet.py's figure ("SIGTERM: exited in"): a
        # 6 s bound here failed beside stress-ng (6.0 s and 6.4 s at a load of 20).
        code = daemon.proc.wait(60)
        assert code == 0, daemon.log_text()
        assert "sentinel stopped" in daemon.log_text()
    finally:
        daemon.stop()


def test_bad_targets_are_down_and_never_stall_the_good_one(tmp_path, sim, bad_target):
    targets = [("good", sim.url), ("garbage", bad_target("garbage")),
               ("hang", bad_target("hang")), ("close", bad_target("close")),
               ("refused", "http://127.0.0.1:9")]
    cfg = write_config(tmp_path, targets, None, KV_RULE, scrape_interval="200ms")
    app = _start_app(cfg)
    try:
        for name in ("garbage", "hang", "close", "refused"):
            wait_for(lambda n=name: _up(app, n) == 0.0, 30, f"up=0 for {name}")
        # The good target keeps being scraped at its interval while the hanging
        # one times out over and over.
        # (A stall behind the hanging target, 30 s a request, would run out this deadline.)
        first = _scrapes(app, "good")
        wait_for(lambda: _scrapes(app, "good") - first >= 6, 10, "six more good scrapes")
        assert _up(app, "good") == 1.0
        host, port = app.status.address
        metrics = httpx.get(f"http://{host}:{port}/metrics").text
        assert 'sentinel_scrapes_total{outcome="failure",target="garbage"}' in metrics
        assert httpx.get(f"http://{host}:{port}/healthz").status_code == 200
        assert httpx.get(f"http://{host}:{port}/readyz").status_code == 200
    finally:
        app.stop(2)


def _scrapes(app: App, target: str) -> float:
    return app.metrics.scrapes.labels(target, "success")._value.get()
