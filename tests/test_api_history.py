"""History queries on SQLite and PostgreSQL: stats (counts, means, p90s, shares, pages) from
known durations, filters combined, and approval decisions as pure database transitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import insert, text

from sentinel.api import history, stats
from sentinel.api.errors import ApiError
from sentinel.incidents.convert import dt_to_ms
from sentinel.incidents.models import Incident, TimelineEvent
from sentinel.incidents.models_remediation import RemediationAttempt
from sentinel.respond.remediate import approvals

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _incident(i: int, alert: str, resolve_s: int | None, detect_ms: int, days_ago: float,
              category: str = "hbm_oom") -> dict:
    opened = NOW - timedelta(days=days_ago)
    return {"id": i, "group_key": f"{alert}/{i}", "alertname": alert, "target": f"t{i % 2}",
            "status": "open" if resolve_s is None else "resolved", "severity": "critical",
            "summary": "", "labels": {}, "opened_at": opened,
            "resolved_at": None if resolve_s is None else opened + timedelta(seconds=resolve_s),
            "updated_at": opened, "category": category, "detect_ms": detect_ms,
            "resolve_ms": None if resolve_s is None else resolve_s * 1000}


def _attempt(i: int, recovery_ms: int, days_ago: float, status: str = "succeeded") -> dict:
    at = NOW - timedelta(days=days_ago)
    return {"incident_id": i, "target": "t", "policy": "p", "step": 0,
            "action": "docker_restart", "manual": False, "status": status, "requested_at": at,
            "acted_at": at, "finished_at": at, "recovery_ms": recovery_ms, "detail": "",
            "data": None}


def test_stats_counts_means_p90_shares_and_pages(incident_db) -> None:  # noqa: ANN001
    # Ten OOMs in the window: resolve 10..100 s, detect 1..10 s; 1-4 remediated (verified),
    # 5 remediated but failed, 10 still open. One old OOM outside the 30-day window.
    incs = [_incident(i, "OOM", None if i == 10 else i * 10, i * 1000, i) for i in range(1, 11)]
    incs += [_incident(11, "Slow", 50, 500, 2, category="latency"),
             _incident(12, "OOM", 5, 100, 40)]
    attempts = [_attempt(i, i * 2000, i) for i in range(1, 5)]
    attempts += [_attempt(5, 0, 5, status="failed"), _attempt(12, 1, 40)]
    pages = [{"incident_id": i, "at": NOW - timedelta(days=40 if i == 12 else i),
              "kind": "notification_sent", "message": "", "data": None}
             for i in (1, 1, 2, 11, 12)]
    with incident_db.session() as s:
        s.execute(insert(Incident), incs)
        s.execute(insert(RemediationAttempt), attempts)
        s.execute(insert(TimelineEvent), pages)
    out = stats.stats(incident_db, {"since": "30d", "by": "alertname"}, dt_to_ms(NOW))
    oom, slow = out["groups"]
    assert oom["key"] == "OOM" and oom["count"] == 10 and oom["open"] == 1
    assert oom["resolved"] == 9
    assert oom["time_to_resolve_ms"] == {"n": 9, "mean": 50_000.0, "p50": 50_000.0,
                                         "p90": 90_000.0}
    assert oom["time_to_detect_ms"] == {"n": 10, "mean": 5500.0, "p50": 5000.0,
                                        "p90": 9000.0}
    assert oom["time_to_recovery_ms"] == {"n": 4, "mean": 5000.0, "p50": 4000.0,
                                          "p90": 8000.0}
    assert oom["resolved_by_remediation"] == round(4 / 9, 4)
    assert oom["resolved_by_itself"] == round(5 / 9, 4)
    assert oom["pages_sent"] == 3
    assert slow["key"] == "Slow" and slow["pages_sent"] == 1 and slow["count"] == 1
    assert out["total"]["count"] == 11 and out["total"]["pages_sent"] == 4
    by_cat = stats.stats(incident_db, {"since": "30d", "by": "category"}, dt_to_ms(NOW))
    assert [g["key"] for g in by_cat["groups"]] == ["hbm_oom", "latency"]
    with pytest.raises(ApiError) as bad:
        stats.stats(incident_db, {"since": "1d", "until": "2d"}, dt_to_ms(NOW))
    assert bad.value.param == "until"


def test_filters_combine(incident_db) -> None:  # noqa: ANN001
    with incident_db.session() as s:
        s.execute(insert(Incident), [_incident(i, "A" if i % 2 else "B", 10, 1, i / 10)
                                     for i in range(1, 21)])
    page = history.list_incidents(incident_db, {"alertname": "A", "target": "t1",
                                                "status": "resolved", "limit": "3"},
                                  dt_to_ms(NOW))
    assert [i["id"] for i in page["incidents"]] == [1, 3, 5]
    rest = history.list_incidents(incident_db, {"alertname": "A", "target": "t1",
                                                "cursor": page["next_cursor"]}, dt_to_ms(NOW))
    assert [i["id"] for i in rest["incidents"]] == [7, 9, 11, 13, 15, 17, 19]
    assert rest["next_cursor"] is None


def test_approval_transitions(incident_db) -> None:  # noqa: ANN001
    with incident_db.session() as s:
        s.execute(insert(Incident), [_incident(1, "OOM", None, 1, 0)])
    now = dt_to_ms(NOW)
    kw = {"incident_id": 1, "target": "t", "policy": "p", "action": "docker_restart",
          "plan": "restart", "alertname": "OOM", "labels": {}, "active_at_ms": now}
    first = approvals.park(incident_db, step=0, now_ms=now, expiry_ms=60_000, **kw)
    again = approvals.park(incident_db, step=0, now_ms=now + 1, expiry_ms=60_000, **kw)
    assert first.new and not again.new and again.approval_id == first.approval_id
    d = approvals.decide(incident_db, first.approval_id, True, "alice", now + 1000)
    assert d.changed and d.status == "approved"
    assert not approvals.decide(incident_db, first.approval_id, True, "bob", now + 2000).changed
    assert not approvals.decide(incident_db, first.approval_id, False, "bob", now + 2000).changed
    assert approvals.claim(incident_db, first.approval_id)
    assert not approvals.claim(incident_db, first.approval_id)  # one runner wins
    late = approvals.park(incident_db, step=1, now_ms=now, expiry_ms=60_000, **kw)
    d = approvals.decide(incident_db, late.approval_id, True, "alice", now + 60_000)
    assert not d.changed and d.status == "expired"
    (escalated,) = approvals.claim_escalations(incident_db, now + 61_000)
    assert escalated.id == late.approval_id
    assert approvals.claim_escalations(incident_db, now + 62_000) == []
    with pytest.raises(LookupError):
        approvals.decide(incident_db, 999, True, "alice", now)


def test_migration_fills_detect_and_resolve_times(db_url: str) -> None:
    from sentinel.incidents.db import Database

    db = Database(db_url)
    db.upgrade("0006")
    opened = NOW - timedelta(minutes=10)
    with db.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO incidents (id, group_key, alertname, target, status, severity, summary,"
            " labels, opened_at, resolved_at, updated_at) VALUES (1, 'k', 'A', 't', 'resolved',"
            " 's', '', '{}', :o, :r, :o)"), {"o": opened, "r": opened + timedelta(seconds=90)})
        conn.execute(text(
            "INSERT INTO incident_alerts (incident_id, fingerprint, labels, annotations, state,"
            " value, active_at, fired_at, resolved_at) VALUES (1, 'f', '{}', '{}', 'resolved',"
            " 1.0, :a, :o, :r)"), {"a": opened - timedelta(seconds=30), "o": opened,
                                    "r": opened + timedelta(seconds=90)})
    db.upgrade()
    with db.engine.connect() as conn:
        row = conn.execute(text("SELECT detect_ms, resolve_ms FROM incidents")).one()
    assert tuple(row) == (30_000, 90_000)
    db.dispose()
