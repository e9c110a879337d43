"""Issue 39 item 4: an alert that fires and resolves while the database is down is kept.

The rule engine holds the resolution until it is committed, but the firing never reached
the database. When it returns, the tracker opens and resolves one incident with both
times, says why on the timeline, and the receiver gets the firing (timed when it fired,
saying it happened during an outage), then the resolution: through the real outbox,
dispatcher and sender, to a webhook on loopback, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from dataclasses import replace

from notify_helpers import LoopbackReceiver, make_stage
from test_notify_delivery import MIN, T0, S, alert, hook, resolved

from sentinel.incidents import Database, get_incident, list_incidents
from sentinel.incidents.convert import dt_to_ms
from sentinel.incidents.tracker import OUTAGE_ANNOTATION, IncidentTracker


def test_a_firing_and_resolution_inside_an_outage_make_one_incident_and_both_pages(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    stage = make_stage(incident_db, {"oncall": hook(loopback)})
    fired_at, resolved_at, back_at = T0, T0 + 40 * S, T0 + 60 * S
    gone = resolved(alert("a", at=fired_at), resolved_at)
    stage.tracker.process([gone], back_at)  # the first commit after the outage
    stage.tick(back_at)
    stage.tick(back_at + S)

    (incident,) = list_incidents(incident_db)
    assert incident.status == "resolved"
    assert dt_to_ms(incident.opened_at) == fired_at
    assert incident.resolved_at is not None and dt_to_ms(incident.resolved_at) == resolved_at
    detail = get_incident(incident_db, incident.id)
    assert detail is not None
    assert [e.kind for e in detail.timeline if e.kind != "notification_sent"] == [
        "firing", "resolved", "incident_resolved", "note"]
    assert "while Sentinel's database was unavailable" in detail.timeline[3].message

    bodies = [r.json() for r in loopback.accepted()]
    assert [b["status"] for b in bodies] == ["firing", "resolved"]  # type: ignore[index]
    for b in bodies:
        (a,) = b["alerts"]  # type: ignore[index]
        assert OUTAGE_ANNOTATION in a["annotations"]
        assert a["startsAt"].startswith("2026-")

    # The rule engine reports the resolution again until it was acknowledged: once only.
    stage.tracker.process([gone], back_at + 2 * S)
    stage.tick(back_at + 3 * MIN)
    assert len(list_incidents(incident_db)) == 1 and len(loopback.accepted()) == 2


def test_a_resolution_of_an_occurrence_on_record_adds_nothing(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    firing = alert("a")
    tracker.process([firing], T0)
    tracker.process([resolved(firing, T0 + 10 * S)], T0 + 10 * S)
    # Reported again (not yet acknowledged), or after a reconciliation closed it.
    assert tracker.process([resolved(firing, T0 + 10 * S)], T0 + 11 * S) == []
    assert len(list_incidents(incident_db)) == 1


def test_an_alert_that_never_fired_opens_nothing(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    pending_then_gone = resolved(alert("a"), T0 + 5 * S)
    assert tracker.process([replace(pending_then_gone, fired_at_ms=None)], T0 + 6 * S) == []
    assert list_incidents(incident_db) == []
