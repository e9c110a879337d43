"""Leadership is a state a daemon enters many times (issue 39, item 1).

With a remediation policy, every takeover used to register the remediation
metrics on the process's registry again (`DuplicateTimeseries`), so a daemon
led once and never again: each re-election failed, 25 times a second.

- in process: one App on a real PostgreSQL loses and retakes its lease twice
  (elected → demoted → elected → demoted → elected), then a firing alert opens
  an incident, pages and is remediated;
- a takeover that fails is retried with backoff, logged once, counted, and
  shown in /healthz and /readyz while no one leads.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request

import pytest
from fixtures_e2e import bodies_with_status, wait_for
from ha_helpers import action_lines, write_setup

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents.db import Database

pytestmark = pytest.mark.integration


def _app(tmp_path, url: str, sim, sink) -> tuple[App, object]:
    out = write_setup(tmp_path, url, {"gemma": sim.url}, sink.url)
    cfg = tmp_path / "a.yaml"
    cfg.write_text((tmp_path / "base.yaml").read_text() + "listen: 127.0.0.1:0\n")
    app = App(load_config(cfg))
    app.start()
    return app, out


def _retake(app: App) -> None:
    """The lease moves on (handed back) and this daemon takes it again in one round;
    then the lease thread renews it again."""
    lease = app.lease
    lease.stop()  # the lease thread stops while the test drives the round
    lease._stop.clear()
    lease._round()
    _renew_in_background(app)


def _renew_in_background(app: App) -> None:
    lease = app.lease
    lease._thread = threading.Thread(target=lease._loop, name="sentinel-leader", daemon=True)
    lease._thread.start()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_elected_demoted_elected_twice_then_a_firing_alert_pages_and_is_remediated(
        tmp_path, fresh_postgres_url, sim, sink):
    app, out = _app(tmp_path, fresh_postgres_url, sim, sink)
    try:
        assert app.acting() and app.pipeline.remediator is not None
        first = app.pipeline.remediator
        for epoch in (2, 3):
            _retake(app)
            assert app.lease.epoch == epoch
            assert app.acting(), f"epoch {epoch}: the takeover failed"
            assert app.pipeline.remediator is not None and app.pipeline.remediator is not first
            assert app.approvals is not None
        host, port = app.status.address
        assert "ha: leader (epoch 3" in _get(f"http://{host}:{port}/readyz")[1]
        sim.set_state(kv_cache_usage=0.93)
        wait_for(lambda: bodies_with_status(sink, "firing"), 15, "the firing page")
        wait_for(lambda: action_lines(out)["gemma"] >= 1, 15, "the remediation to run")
        db = Database(fresh_postgres_url)
        try:
            with db.session() as s:
                from sqlalchemy import text
                assert s.execute(text("SELECT count(*) FROM incidents WHERE status = 'open'")
                                 ).scalar() == 1
        finally:
            db.dispose()
        assert app.metrics.registry.get_sample_value("sentinel_ha_takeover_failures_total") == 0
    finally:
        app.stop(2)


def test_a_failing_takeover_backs_off_logs_once_counts_and_is_unhealthy(
        tmp_path, fresh_postgres_url, sim, sink, caplog, monkeypatch):
    app, _ = _app(tmp_path, fresh_postgres_url, sim, sink)
    host, port = app.status.address
    try:
        app.lease.stop()
        app.lease._stop.clear()
        boom = RuntimeError("the rule state cannot be read")

        def fail(*_a: object, **_k: object) -> object:
            raise boom

        # Before the patch: the lease's own thread may still run one round after its stop
        # and fail first on a loaded machine; either way the failure comes after this.
        before = time.monotonic()
        monkeypatch.setattr("sentinel.incidents.tracker.IncidentTracker.load_alert_states", fail)
        caplog.set_level(logging.INFO, logger="sentinel.daemon.leader")
        for _ in range(5):
            app.lease._round()
        assert not app.acting()
        # Tried once: the four rounds after it only looked at the lease (backoff).
        assert app.metrics.registry.get_sample_value(
            "sentinel_ha_takeover_failures_total") == 1
        # One lease period from the failure (measured from before it: the rounds' own
        # time on a loaded machine does not count against it).
        assert app.lease._backoff_until - before >= app.lease.lease_s
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR
                  and r.name == "sentinel.daemon.leader"]
        assert len(errors) == 1 and errors[0].exc_info is not None, errors  # one traceback
        code, body = _get(f"http://{host}:{port}/healthz")
        assert code == 503 and "cannot take over as leader" in body, body
        assert "the rule state cannot be read" in body
        code, body = _get(f"http://{host}:{port}/readyz")
        assert "takeover failing" in body, body
        monkeypatch.undo()
        app.lease._backoff_until = 0.0  # the retry is due
        app.lease._round()
        assert app.acting()
        assert _get(f"http://{host}:{port}/healthz")[0] == 200
        assert "takeover failing" not in _get(f"http://{host}:{port}/readyz")[1]
    finally:
        app.stop(2)


def test_takeover_imports_nothing_of_the_app():
    """Issue 38: `daemon/takeover.py` ⇄ `daemon/app.py` was an import circle. The App hands
    a Takeover what it needs; takeover (and what it imports) never loads app.py."""
    import ast
    import subprocess
    import sys
    from pathlib import Path

    import sentinel.daemon.takeover as takeover

    tree = ast.parse(Path(takeover.__file__).read_text())
    named = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "sentinel.daemon.app" not in named  # not even under TYPE_CHECKING
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, sentinel.daemon.takeover, sentinel.daemon.remediation;"
         "print('sentinel.daemon.app' in sys.modules)"], capture_output=True, text=True,
        check=True).stdout.strip()
    assert loaded == "False"
