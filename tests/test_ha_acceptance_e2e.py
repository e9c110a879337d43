"""Issue 39's acceptance for HA leadership: two daemons on one PostgreSQL with a remediation
policy, 10 leader kills and 3 database stops of 10-30 s while 10 alert keys fire and resolve.

Every transition is paged exactly once (one idempotency key), every claimed action runs
once, no incident is left open, no remediation decision is written twice, and a leader is
back within two leases of each recovery (a kill, or the database starting again).

The database stops while the alerts hold still (firing, paged and remediated): an alert
that fires and resolves inside an outage is issue 39's item 4, not tested here.
"""

from __future__ import annotations

import random
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
from ha_helpers import (
    EVAL_S,
    LEASE_S,
    AlertOnly,
    Daemon,
    PausableCluster,
    action_lines,
    db_report,
    page_report,
    settle,
    wait,
    write_setup,
)
from sqlalchemy import text

from sentinel.incidents.db import Database
from sentinel.sim.server import start_sim

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROUNDS = 10
TARGETS = 10
KILLS = 10
OUTAGES = {2: 10.0, 5: 20.0, 8: 30.0}  # round → seconds the database is stopped
NAMES = [f"t{i}" for i in range(TARGETS)]


@pytest.fixture
def cluster():
    c = PausableCluster()
    c.start()
    yield c
    c.stop()


@pytest.fixture
def sims():
    servers = {n: start_sim() for n in NAMES}
    yield servers
    for s in servers.values():
        s.stop()


def _distinct(sink, status: str) -> Counter[str]:
    seen = {(t, s) for (t, st, s) in page_report(AlertOnly(sink))["transitions"] if st == status}
    return Counter(t for t, _ in seen)


def _leader(*daemons: Daemon, timeout_s: float) -> Daemon:
    return wait(lambda: next((d for d in daemons if d.leads()), None), timeout_s, "a leader")


def _decided(db: Database, n: int) -> bool:
    try:
        with db.session() as s:
            rows = s.execute(text(
                "SELECT target, count(*), count(*) FILTER (WHERE status = 'running') "
                "FROM remediation_attempts GROUP BY target")).all()
    except Exception:
        return False
    return len(rows) == TARGETS and all(total >= n and run == 0 for _, total, run in rows)


def _decisions_twice(db: Database) -> list[tuple[int, str, str]]:
    """(incident, policy, reason) of refusals written more than once in a row."""
    with db.session() as s:
        rows = s.execute(text("SELECT incident_id, data FROM timeline_events "
                              "WHERE kind = 'action' ORDER BY id")).all()
    last: dict[tuple[int, str], str] = {}
    twice = []
    for incident, data in rows:
        if not data or data.get("phase") != "decision" or data.get("manual"):
            continue
        key = (incident, str(data.get("policy")))
        if last.get(key) == data.get("reason"):
            twice.append((incident, key[1], str(data.get("reason"))))
        last[key] = str(data.get("reason"))
    return twice


def _story(*daemons: Daemon) -> None:
    keep = Path("/tmp/sentinel-ha-acceptance-logs")  # pytest rotates its temp folders
    keep.mkdir(exist_ok=True)
    for d in daemons:
        shutil.copy(d.log, keep / d.log.name)
        lines = [ln for ln in d.log_text().splitlines()
                 if any(w in ln for w in ("lease", "took over", "standing by", "ERROR",
                                          "WARNING", "started:"))]
        print(f"--- {d.name} ({d.log}):\n" + "\n".join(ln[:240] for ln in lines[-60:]))


def test_two_daemons_ten_leader_kills_three_database_stops(tmp_path, cluster, sims, sink):
    rng = random.Random(39)
    url = cluster.url
    db = Database(url)
    db.upgrade()
    out = write_setup(tmp_path, url, {n: s.url for n, s in sims.items()}, sink.url)
    a = Daemon(tmp_path, "a", port=0).start()
    wait(a.leads, 120, "the first daemon to lead")
    b = Daemon(tmp_path, "b", port=0).start()
    wait(lambda: "ha: standby" in b.readyz(), 120, "the second daemon to stand by")
    kills = set(rng.sample([(r, p) for r in range(ROUNDS) for p in ("firing", "resolved")],
                           KILLS))
    recoveries: list[tuple[str, float]] = []
    started = time.monotonic()
    try:
        # Both stores warm: each daemon holds every target's series.
        wait(lambda: a.scraped(TARGETS) and b.scraped(TARGETS), 120, "both daemons' scrapes")
        for r in range(ROUNDS):
            for status, value in (("firing", 0.93), ("resolved", 0.10)):
                for s in sims.values():
                    s.set_state(kv_cache_usage=value)
                if (r, status) in kills:
                    time.sleep(rng.uniform(0.0, 2.5))  # anywhere in pending, firing, paging
                    leader = _leader(a, b, timeout_s=LEASE_S * 3)
                    other = b if leader is a else a
                    t0 = time.monotonic()
                    leader.kill9()
                    wait(other.leads, LEASE_S * 2 + 5, "the standby to take over")
                    recoveries.append(("kill", time.monotonic() - t0))
                    leader.start()  # back as the standby before anything else happens
                    wait(lambda d=leader: "ha: standby" in d.readyz(), 120,
                         "the killed daemon to stand by again")
                wait(lambda st=status, n=r + 1: min(_distinct(sink, st)[t] for t in sims) >= n,
                     120, f"round {r}: every {status} page")  # an event: no cost when on time
                if status == "firing":
                    wait(lambda n=r + 1: _decided(db, n), 120, f"round {r}: every remediation")
                    if r in OUTAGES:  # the alerts hold still, firing, while the database is away
                        cluster.pause()
                        time.sleep(OUTAGES[r])
                        cluster.resume()
                        t0 = time.monotonic()
                        _leader(a, b, timeout_s=LEASE_S * 2 + 5)
                        recoveries.append((f"database {OUTAGES[r]:.0f}s", time.monotonic() - t0))
        took = time.monotonic() - started
        settle(db, a, b)  # anything late (a duplicate) has had its chance to show up
        failed_takeovers = [d.metric("sentinel_ha_takeover_failures_total") for d in (a, b)]
    except AssertionError:
        _story(a, b)
        raise
    finally:
        a.stop()
        b.stop()

    try:
        _check(sink, db, out, kills, recoveries, took, failed_takeovers)
    except AssertionError:
        _story(a, b)
        _dump_pages(sink)
        raise


def _dump_pages(sink) -> None:
    """Every page as received (time, target, status, startsAt, key), for the CI log."""
    keep = Path("/tmp/sentinel-ha-acceptance-logs")
    with open(keep / "pages.txt", "w") as f:
        for at, body, headers in list(sink.received):
            for x in body.get("alerts", []):
                f.write(f"{at:.3f} {x['labels'].get('target')} {x['status']} {x['startsAt']} "
                        f"{headers.get('Idempotency-Key', '')} "
                        f"{x['labels'].get('alertname')}\n")


def _check(sink, db: Database, out: Path, kills: set, recoveries: list, took: float,
           failed_takeovers: list) -> None:
    report = page_report(AlertOnly(sink))
    firing, resolved = _distinct(sink, "firing"), _distinct(sink, "resolved")
    redelivered = {k: n for k, n in report["deliveries"].items() if n > 1}
    dbr = db_report(db)
    twice = _decisions_twice(db)
    lines = action_lines(out)
    db.dispose()
    print(f"\nHA acceptance: {ROUNDS} rounds x {TARGETS} targets in {took:.1f}s, "
          f"kills at {sorted(kills)}, database stops {OUTAGES}")
    for what, s in recoveries:
        print(f"  {what}: a leader after {s:.2f}s (bound {2 * LEASE_S:.1f}s)")
    print(f"  pages: {sum(report['deliveries'].values())} deliveries, "
          f"{len(report['deliveries'])} keys, redelivered {redelivered}")
    print(f"  incidents {dbr['incidents']}, attempts {dbr['attempts']}, "
          f"action runs {sum(lines.values())}, failed takeovers {failed_takeovers}, "
          f"decisions written twice {twice}")

    assert all(firing[t] >= ROUNDS and resolved[t] == firing[t] for t in NAMES), (firing, resolved)
    occurrences = sum(firing.values())
    # A flap (a failed scrape resolves the alert by absence, the next fires it again, as in
    # Prometheus) is a real occurrence, paged as such; a busy machine makes a few.
    assert occurrences <= ROUNDS * TARGETS * 1.1, f"{occurrences - ROUNDS * TARGETS} flaps"
    assert all(len(keys) == 1 for keys in report["transitions"].values())
    assert sum(n - 1 for n in redelivered.values()) <= KILLS, redelivered
    assert dbr["incidents"] == {"resolved": occurrences}, "an incident was left open"
    assert dbr["dup_events"] == [], dbr["dup_events"]
    assert dbr["multi_attempts"] == []
    assert twice == []
    by_target: dict[str, dict[str, int]] = {}
    for target, status, n in dbr["attempts"]:
        by_target.setdefault(target, {})[status] = n
    abandoned = sum(st.get("failed", 0) for st in by_target.values())
    for t in NAMES:
        done = by_target.get(t, {}).get("succeeded", 0)
        total = sum(by_target.get(t, {}).values())
        assert done <= lines[t] <= total, (t, lines[t], by_target.get(t))
    assert abandoned <= KILLS
    assert all(f == 0 for f in failed_takeovers), failed_takeovers
    assert all(s <= 2 * LEASE_S + EVAL_S for _, s in recoveries), recoveries
