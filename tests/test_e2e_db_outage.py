"""Issue 39 item 4 end to end: PostgreSQL down 60 s while an alert fires and resolves
inside the outage gives one incident with both times, paged per policy.

A real `sentinel run` on a PostgreSQL cluster of the test's own, a simulator target and a
webhook receiver, all on loopback. The database is stopped; while it is away the
simulator's state (through its control API) makes the alert fire, then resolve, which the
test sees in the daemon's own `ALERTS` series; the database comes back 60 s after it left.
Before the fix the tracker dropped a resolution with no open incident: no incident, no
page, no history.
"""

from __future__ import annotations

import time
import urllib.parse
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for
from ha_helpers import Daemon, PausableCluster

from sentinel.incidents import get_incident, list_incidents
from sentinel.incidents.convert import dt_to_ms
from sentinel.incidents.db import Database
from sentinel.incidents.tracker import OUTAGE_ANNOTATION

pytestmark = [pytest.mark.slow, pytest.mark.integration]

# One client for the polls: httpx.get builds an SSL context per call (~30 ms of CPU each).
_HTTP = httpx.Client(timeout=2)

OUTAGE_S = 60.0
ALERT = "KVCacheHigh"
RULES = f"""\
groups:
  - name: load
    rules:
      - alert: {ALERT}
        expr: max by (target) (vllm:kv_cache_usage_perc) > 0.85
        for: 1s
        labels: {{severity: page}}
"""


@pytest.fixture
def cluster():
    c = PausableCluster()
    c.start()
    yield c
    c.stop()


def _write_config(folder: Path, db_url: str, target: str, hook: str) -> None:
    """The daemon's config (ha_helpers.Daemon adds `listen`): 1 s scrapes and evaluations."""
    (folder / "rules.yaml").write_text(RULES)
    (folder / "base.yaml").write_text("\n".join([
        f"database: '{db_url}'", "rule_files: [rules.yaml]", "evaluation_interval: 1s",
        "probe_interval: 0s", "targets:",
        f"  - {{name: gemma, url: '{target}', scrape_interval: 1s, scrape_timeout: 1s}}",
        "receivers:", "  - name: oncall", f"    webhook: {{url: '{hook}', timeout: 2s}}",
        "notify: {interval: 200ms, retry_initial: 200ms, retry_max: 1s}",
    ]) + "\n")


def _get(d: Daemon, path: str) -> httpx.Response | None:
    try:
        return _HTTP.get(f"http://127.0.0.1:{d.port}{path}", timeout=2)
    except httpx.HTTPError:
        return None


def _firing(d: Daemon) -> bool | None:
    """Whether the daemon's own ALERTS series says the alert fires (None: no answer)."""
    q = urllib.parse.quote(f'ALERTS{{alertname="{ALERT}",alertstate="firing"}}')
    r = _get(d, f"/api/v1/query?query={q}")
    if r is None or r.status_code != 200:
        return None
    return bool(r.json()["data"]["result"])


def _committed(d: Daemon) -> float:
    """Evaluations of the group that reached the database."""
    done = d.metric("sentinel_rule_group_evaluations_total", '{group="load"}') or 0.0
    failed = d.metric("sentinel_rule_group_evaluation_failures_total", '{group="load"}') or 0.0
    return done - failed


def _pages(sink, status: str) -> list[tuple[dict, str]]:
    """(alert, Idempotency-Key) of every delivered alert of the rule with this status."""
    return [(a, h.get("Idempotency-Key", "")) for _, body, h in list(sink.received)
            for a in body.get("alerts", [])
            if a["labels"].get("alertname") == ALERT and a["status"] == status]


def _ms(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000


def _set_kv(sim, usage: float) -> None:
    _HTTP.post(f"{sim.url}/sim/state", json={"kv_cache_usage": usage}, timeout=5
               ).raise_for_status()


def test_postgresql_down_60s_while_an_alert_fires_and_resolves_gives_one_incident_and_both_pages(
        tmp_path: Path, cluster: PausableCluster, sim, sink) -> None:
    db = Database(cluster.url)
    db.upgrade()
    db.dispose()
    _write_config(tmp_path, cluster.url, sim.url, sink.url)
    daemon = Daemon(tmp_path, "d", port=0).start()
    try:
        # Healthy first: scraping, and evaluations committed to PostgreSQL.
        wait_for(lambda: _committed(daemon) >= 2 and _firing(daemon) is False, 60,
                 "committed evaluations before the outage")
        down_ms = time.time() * 1000
        down = time.monotonic()
        cluster.pause()
        wait_for(lambda: daemon.metric("sentinel_rule_group_evaluation_failures_total",
                                       '{group="load"}'), 20,
                 "the daemon to see the database gone")
        _set_kv(sim, 0.95)
        wait_for(lambda: _firing(daemon), 20, "the alert to fire inside the outage")
        fired = time.monotonic() - down
        _set_kv(sim, 0.10)
        wait_for(lambda: _firing(daemon) is False, 20, "the alert to resolve inside the outage")
        resolved = time.monotonic() - down
        # The outage itself lasts 60 s by design; the daemon answers throughout.
        health: list[int] = []
        while time.monotonic() - down < OUTAGE_S:
            r = _get(daemon, "/healthz")
            assert r is not None, "the daemon stopped answering /healthz inside the outage"
            assert daemon.proc is not None and daemon.proc.poll() is None
            health.append(r.status_code)
            time.sleep(0.5)  # a polling step, not a wait for a condition
        assert not _pages(sink, "firing") and not _pages(sink, "resolved"), \
            "paged before the database held the incident"
        cluster.resume()
        up_ms = time.time() * 1000
        back = time.monotonic()
        wait_for(lambda: _pages(sink, "firing") and _pages(sink, "resolved"), 60,
                 "the firing and resolved pages after the database came back")
        paged = time.monotonic() - back
        # No duplicate: several more committed evaluations, the outbox empty, nothing new.
        seen = _committed(daemon)
        wait_for(lambda: _committed(daemon) >= seen + 3
                 and daemon.metric("sentinel_notify_outbox_depth") == 0, 30,
                 "three more committed evaluations and an empty outbox")
        assert daemon.proc is not None and daemon.proc.poll() is None
    finally:
        daemon.stop()
    print(f"\noutage {OUTAGE_S:.0f}s: fired {fired:.1f}s and resolved {resolved:.1f}s into it; "
          f"both pages {paged:.1f}s after the database came back; /healthz "
          f"{len(health)} answers, statuses {sorted(set(health))}")

    firing, resolving = _pages(sink, "firing"), _pages(sink, "resolved")
    assert len(firing) == 1 and len(resolving) == 1, (firing, resolving)
    (fa, fkey), (ra, rkey) = firing[0], resolving[0]
    assert fkey != rkey
    order = [a["status"] for _, body, _ in list(sink.received) for a in body.get("alerts", [])
             if a["labels"].get("alertname") == ALERT]
    assert order == ["firing", "resolved"], order  # the firing first, then its resolution
    for a in (fa, ra):
        assert OUTAGE_ANNOTATION in a["annotations"], a  # the page says why it comes late
        assert down_ms <= _ms(a["startsAt"]) <= up_ms, a
    assert down_ms <= _ms(ra["endsAt"]) <= up_ms and ra["endsAt"] > ra["startsAt"], ra

    db = Database(cluster.url)
    try:
        incidents = list_incidents(db, alertname=ALERT)
        assert len(incidents) == 1, incidents
        (incident,) = incidents
        detail = get_incident(db, incident.id)
    finally:
        db.dispose()
    assert incident.status == "resolved" and incident.resolved_at is not None
    opened_ms, closed_ms = dt_to_ms(incident.opened_at), dt_to_ms(incident.resolved_at)
    assert down_ms <= opened_ms < closed_ms <= up_ms, (down_ms, opened_ms, closed_ms, up_ms)
    assert detail is not None
    kinds = [e.kind for e in detail.timeline]
    assert kinds.count("firing") == 1 and kinds.count("resolved") == 1, kinds
    assert any(e.kind == "note" and "database was unavailable" in e.message
               for e in detail.timeline), kinds
