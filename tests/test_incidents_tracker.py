"""IncidentTracker: alerts → incidents → notifications, on SQLite and PostgreSQL."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace

import pytest
from sqlalchemy import select, text

from sentinel.incidents import Database, IncidentTracker, get_incident, list_incidents
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.models import IncidentAlert
from sentinel.incidents.tracker import _insert_incident, group_key
from sentinel.model import Alert, AlertState, NotificationKind, labels_of

T0 = 1_795_255_205_000  # 2026-11-21T10:00:05Z
S = 1000


def alert(
    target: str = "gemma-26b",
    name: str = "VLLMRequestsQueued",
    state: AlertState = AlertState.FIRING,
    value: float = 4.0,
    active_at: int = T0,
    fired_at: int | None = T0,
    resolved_at: int | None = None,
    **extra: str,
) -> Alert:
    labels = labels_of({"alertname": name, "target": target, "severity": "warning", **extra})
    return Alert(
        group="vllm", rule=name, labels=labels,
        annotations=labels_of({"summary": f"requests queued on {target}"}),
        state=state, value=value, active_at_ms=active_at, last_eval_ms=fired_at or active_at,
        fired_at_ms=fired_at if state is not AlertState.PENDING else None,
        resolved_at_ms=resolved_at,
    )


def resolved(a: Alert, at: int) -> Alert:
    return replace(a, state=AlertState.INACTIVE, resolved_at_ms=at, last_eval_ms=at)


def deliver(tracker: IncidentTracker, notifications: list, now: int, ok: bool = True) -> None:
    for n in notifications:
        tracker.record_notification(n.incident_id, "oncall", n.kind, ok, "200 OK" if ok else
                                    "503", now, [a.fingerprint for a in n.alerts])


def test_firing_alert_opens_incident_and_notifies(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert()
    out = tracker.process([a], T0)
    assert len(out) == 1
    n = out[0]
    assert n.kind is NotificationKind.FIRING
    assert n.alerts == (a,)
    assert n.group_labels == (("alertname", "VLLMRequestsQueued"), ("target", "gemma-26b"))
    [inc] = list_incidents(incident_db)
    assert (inc.id, inc.status, inc.alertname, inc.target) == (n.incident_id, "open",
                                                              "VLLMRequestsQueued", "gemma-26b")
    assert inc.severity == "warning" and inc.summary == "requests queued on gemma-26b"
    assert (inc.alerts, inc.firing) == (1, 1)


def test_same_firing_alerts_again_change_nothing(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert()
    first = tracker.process([a], T0)
    assert tracker.process([a], T0 + 15 * S) == []  # announced, not yet confirmed
    deliver(tracker, first, T0 + 16 * S)
    assert tracker.process([replace(a, last_eval_ms=T0 + 30 * S)], T0 + 30 * S) == []
    assert len(list_incidents(incident_db)) == 1


def test_restart_neither_renotifies_nor_reopens(incident_db: Database, db_url: str) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert()
    deliver(tracker, tracker.process([a], T0), T0 + S)
    # The daemon restarts: a new Database and tracker; the rule engine
    # restores the firing alert and reports it again.
    db2 = Database(db_url)
    try:
        again = IncidentTracker(db2).process([replace(a, last_eval_ms=T0 + 60 * S)], T0 + 60 * S)
        assert again == []
        assert len(list_incidents(db2)) == 1
    finally:
        db2.dispose()


def test_restart_reannounces_a_firing_never_delivered(incident_db: Database) -> None:
    a = alert()
    [n] = IncidentTracker(incident_db).process([a], T0)
    # Crash before delivery: nothing confirmed, so the next process announces once.
    fresh = IncidentTracker(incident_db)
    [again] = fresh.process([a], T0 + 15 * S)
    assert (again.incident_id, again.kind, again.alerts) == (n.incident_id, n.kind, (a,))
    assert fresh.process([a], T0 + 30 * S) == []


def test_resolve_notifies_and_resolves_incident(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert()
    deliver(tracker, tracker.process([a], T0), T0 + S)
    r = resolved(a, T0 + 300 * S)
    [n] = tracker.process([r], T0 + 300 * S)
    assert n.kind is NotificationKind.RESOLVED and n.alerts == (r,)
    deliver(tracker, [n], T0 + 301 * S)
    [inc] = list_incidents(incident_db)
    assert inc.status == "resolved" and inc.firing == 0
    assert inc.resolved_at is not None and inc.resolved_at.timestamp() == (T0 + 300 * S) / 1000
    detail = get_incident(incident_db, inc.id)
    assert detail is not None
    [row] = detail.alerts
    assert row.state == "resolved" and row.notified_resolved_at is not None
    assert [e.kind for e in detail.timeline] == [
        "firing", "notification_sent", "resolved", "incident_resolved", "notification_sent"]
    # Reported resolved again (e.g. kept for a while by the engine): nothing new.
    assert tracker.process([r], T0 + 315 * S) == []


def test_resolve_without_delivered_firing_sends_nothing(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert()
    deliver(tracker, tracker.process([a], T0), T0 + S, ok=False)
    # A fresh process never announced it, and no delivery succeeded: no resolve.
    assert IncidentTracker(incident_db).process([resolved(a, T0 + 60 * S)], T0 + 60 * S) == []
    assert list_incidents(incident_db)[0].status == "resolved"


def test_resolve_follows_an_announced_but_unconfirmed_firing(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert()
    tracker.process([a], T0)  # handed to the outbox, delivery still pending
    [n] = tracker.process([resolved(a, T0 + 60 * S)], T0 + 60 * S)
    assert n.kind is NotificationKind.RESOLVED


def test_two_alerts_same_key_share_one_incident(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert(model="gemma-4-26b")
    b = alert(model="gemma-4-9b", fired_at=T0 + 30 * S, active_at=T0 + 30 * S)
    [n1] = tracker.process([a], T0)
    [n2] = tracker.process([a, b], T0 + 30 * S)
    assert n2.incident_id == n1.incident_id and n2.alerts == (b,)
    [inc] = list_incidents(incident_db)
    assert (inc.alerts, inc.firing) == (2, 2)
    # One resolves: the incident stays open, the resolution rides a FIRING notification.
    deliver(tracker, [n1, n2], T0 + 31 * S)
    [n3] = tracker.process([resolved(a, T0 + 60 * S), b], T0 + 60 * S)
    assert n3.kind is NotificationKind.FIRING
    assert [x.state for x in n3.alerts] == [AlertState.INACTIVE]
    assert list_incidents(incident_db)[0].status == "open"
    [n4] = tracker.process([resolved(b, T0 + 90 * S)], T0 + 90 * S)
    assert n4.kind is NotificationKind.RESOLVED
    assert list_incidents(incident_db)[0].status == "resolved"


def test_different_targets_open_two_incidents(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    out = tracker.process([alert("gemma-26b"), alert("gemma-9b")], T0)
    assert len(out) == 2 and out[0].incident_id != out[1].incident_id
    assert sorted(i.target for i in list_incidents(incident_db)) == ["gemma-26b", "gemma-9b"]


def test_target_falls_back_to_instance(incident_db: Database) -> None:
    a = replace(alert(), labels=labels_of({"alertname": "Down", "instance": "10.0.0.1:8000"}))
    [n] = IncidentTracker(incident_db).process([a], T0)
    assert dict(n.group_labels) == {"alertname": "Down", "target": "10.0.0.1:8000"}


def test_pending_alone_opens_nothing_then_firing_backdates(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    pending = alert(state=AlertState.PENDING, active_at=T0, fired_at=None)
    assert tracker.process([pending], T0) == []
    assert list_incidents(incident_db) == []
    firing = alert(active_at=T0, fired_at=T0 + 60 * S, value=7)
    [n] = tracker.process([firing], T0 + 60 * S)
    detail = get_incident(incident_db, n.incident_id)
    assert detail is not None
    events = [(e.kind, int(e.at.timestamp() * 1000)) for e in detail.timeline]
    assert events == [("pending", T0), ("firing", T0 + 60 * S)]
    assert detail.timeline[1].message == "VLLMRequestsQueued on gemma-26b: value 7"
    assert detail.incident.opened_at.timestamp() * 1000 == T0 + 60 * S


def test_pending_that_goes_away_opens_nothing(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    gone = alert(state=AlertState.INACTIVE, fired_at=None, resolved_at=T0 + 15 * S)
    assert tracker.process([gone], T0 + 15 * S) == []
    assert list_incidents(incident_db) == []


def test_value_events_are_throttled(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert(value=4)
    [n] = tracker.process([a], T0)

    def at(t: int, v: float) -> None:
        tracker.process([replace(a, value=v, last_eval_ms=t)], t)

    at(T0 + 15 * S, 40)  # big change, but too soon after firing
    at(T0 + 60 * S, 4.2)  # due, but only 5 % from the recorded 4
    at(T0 + 75 * S, 40)  # due and significant → recorded
    at(T0 + 90 * S, 80)  # significant, too soon after the last one
    at(T0 + 135 * S, math.nan)  # to NaN counts
    detail = get_incident(incident_db, n.incident_id)
    assert detail is not None
    values = [(int(e.at.timestamp()) * 1000 - T0, e.message.rsplit(" ", 1)[1])
              for e in detail.timeline if e.kind == "value"]
    assert values == [(75 * S, "40"), (135 * S, "NaN")]


def test_refire_after_resolve_within_open_incident(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a, b = alert(model="x"), alert(model="y")
    deliver(tracker, tracker.process([a, b], T0), T0 + S)
    tracker.process([resolved(a, T0 + 60 * S), b], T0 + 60 * S)
    again = replace(a, active_at_ms=T0 + 120 * S, fired_at_ms=T0 + 120 * S)
    [n] = tracker.process([again, b], T0 + 120 * S)
    assert n.kind is NotificationKind.FIRING and n.alerts == (again,)
    with incident_db.session() as s:
        row = s.scalars(select(IncidentAlert).where(
            IncidentAlert.fingerprint == a.fingerprint)).one()
        assert row.state == "firing" and row.resolved_at is None
        assert row.notified_firing_at is None


def test_fires_again_after_resolution_opens_a_new_incident(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert()
    [n1] = tracker.process([a], T0)
    tracker.process([resolved(a, T0 + 60 * S)], T0 + 60 * S)
    [n2] = tracker.process([replace(a, fired_at_ms=T0 + 120 * S)], T0 + 120 * S)
    assert n2.incident_id != n1.incident_id
    assert [i.status for i in list_incidents(incident_db)] == ["open", "resolved"]


def test_record_notification(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert()
    [n] = tracker.process([a], T0)
    tracker.record_notification(n.incident_id, "slack", n.kind, False, "HTTP 503", T0 + S,
                                [a.fingerprint])
    detail = get_incident(incident_db, n.incident_id)
    assert detail is not None and detail.alerts[0].notified_firing_at is None
    tracker.record_notification(n.incident_id, "pagerduty", n.kind, True, "202 Accepted",
                                T0 + 2 * S, [a.fingerprint])
    detail = get_incident(incident_db, n.incident_id)
    assert detail is not None
    assert detail.alerts[0].notified_firing_at is not None
    assert int(detail.alerts[0].notified_firing_at.timestamp()) == (T0 + 2 * S) // 1000
    tail = [(e.kind, e.message) for e in detail.timeline[-2:]]
    assert tail == [("notification_failed", "firing notification to slack failed: HTTP 503"),
                    ("notification_sent", "firing notification to pagerduty sent: 202 Accepted")]
    assert detail.timeline[-1].data == {"receiver": "pagerduty", "kind": "firing",
                                        "fingerprints": [a.fingerprint],
                                        "detail": "202 Accepted"}


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_concurrent_open_falls_back_to_the_winner(incident_db: Database, db_url: str) -> None:
    # Two daemons on one PostgreSQL open the same key at once: the loser's
    # INSERT waits on the partial unique index, fails when the winner
    # commits, and joins the winner's incident instead of crashing.
    a = alert()
    other_db = Database(db_url)
    result: list[object] = []
    try:
        with incident_db.session() as winner:
            inc = _insert_incident(winner, group_key(a), a, ms_to_dt(T0))
            winner.flush()
            loser = threading.Thread(
                target=lambda: result.append(IncidentTracker(other_db).process([a], T0)))
            loser.start()
            _wait_for_lock_wait(incident_db, deadline_s=30)
        loser.join(timeout=30)
        assert not loser.is_alive()
        [[n]] = result
        assert n.incident_id == inc.id  # type: ignore[attr-defined]
        assert len(list_incidents(incident_db)) == 1
    finally:
        other_db.dispose()


def _wait_for_lock_wait(db: Database, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    with db.engine.connect() as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")).scalar()
            conn.rollback()
            if waiting:
                return
            time.sleep(0.01)
    raise AssertionError("the second writer never waited on the unique index")
