"""A lone HA daemon with a remediation policy leads again after a database outage longer
than its lease (issue 39, item 1), as a real `sentinel run` on a PostgreSQL the test stops.

Before the fix it stood by for ever: every takeover after the first failed on the
remediation metrics registered again (~25 failed takeovers a second, each with a
traceback), firing alerts got no incident and no page, and /healthz stayed 200.
"""

from __future__ import annotations

import time

import pytest
from ha_helpers import (
    LEASE_S,
    Daemon,
    PausableCluster,
    action_lines,
    page_report,
    wait,
    write_setup,
)
from sqlalchemy import text

from sentinel.incidents.db import Database
from sentinel.sim.server import start_sim

pytestmark = pytest.mark.integration

OUTAGE_S = 3 * LEASE_S


@pytest.fixture
def cluster():
    c = PausableCluster()
    c.start()
    yield c
    c.stop()


@pytest.fixture
def gemma():
    s = start_sim()
    yield s
    s.stop()


def _statuses(sink) -> set[str]:
    return {st for (_t, st, _s) in page_report(sink)["transitions"]}


def test_a_lone_daemon_leads_again_after_a_database_outage_and_pages_and_acts(
        tmp_path, cluster, gemma, sink):
    db = Database(cluster.url)
    db.upgrade()
    db.dispose()
    out = write_setup(tmp_path, cluster.url, {"gemma": gemma.url}, sink.url)
    a = Daemon(tmp_path, "a", port=0).start()
    try:
        wait(a.leads, 120, "the daemon to lead")
        cluster.pause()
        wait(lambda: "ha: standby" in a.readyz(), LEASE_S * 3, "the lease to be lost")
        time.sleep(OUTAGE_S)  # the outage itself: the database stays away this long
        cluster.resume()
        back = time.monotonic()
        wait(a.leads, LEASE_S * 2 + 5, "the daemon to lead again after the outage")
        took = time.monotonic() - back
        gemma.set_state(kv_cache_usage=0.93)
        wait(lambda: "firing" in _statuses(sink), 120, "the firing page")
        wait(lambda: action_lines(out)["gemma"] >= 1, 120, "the remediation to run")
        gemma.set_state(kv_cache_usage=0.10)
        wait(lambda: "resolved" in _statuses(sink), 120, "the resolved page")
        failures = a.metric("sentinel_ha_takeover_failures_total")
        elected = a.metric("sentinel_ha_leader_changes_total", '{change="elected"}')
        healthz = a.readyz()
    finally:
        a.stop()
    log = a.log_text()
    print(f"\noutage {OUTAGE_S:.0f}s: leading again {took:.2f}s after the database came back; "
          f"elected {elected} times, failed takeovers {failures}")
    assert "DuplicateTimeseries" not in log
    assert failures == 0 and elected is not None and elected >= 2
    assert "ha: leader" in healthz
    db = Database(cluster.url)
    try:
        with db.session() as s:
            incidents = s.execute(text("SELECT status, count(*) FROM incidents GROUP BY status")
                                  ).all()
    finally:
        db.dispose()
    assert dict(incidents) == {"resolved": 1}
