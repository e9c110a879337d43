"""One incident per failure: a target's failure alerts join the incident open for it.

The tracker with time handed in, on SQLite and PostgreSQL: a crash, then the target down
and its health probe failing, make one incident and one notification; the timeline says
why each alert joined.
"""

from __future__ import annotations

from dataclasses import replace

from test_incidents_tracker import T0, S, alert, resolved

from sentinel.incidents import Database, IncidentTracker, get_incident, list_incidents
from sentinel.incidents.recovery import end_on_recovery
from sentinel.model import NotificationKind

MIN = 60 * S


def _crash_then_down(tracker: IncidentTracker):  # noqa: ANN202
    crash = alert(name="VLLMHBMOutOfMemory")
    (n,) = tracker.process([crash], T0)
    down = alert(name="VLLMTargetDown", active_at=T0 + 5 * S, fired_at=T0 + 35 * S)
    health = alert(name="VLLMHealthCheckFailing", active_at=T0 + 10 * S, fired_at=T0 + 70 * S)
    assert tracker.process([replace(crash, last_eval_ms=T0 + 35 * S), down], T0 + 35 * S) == []
    assert tracker.process([crash, down, health], T0 + 70 * S) == []
    return n.incident_id, crash, down, health


def test_down_and_health_alerts_of_a_crashed_target_join_its_incident(
        incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    incident_id, crash, down, health = _crash_then_down(tracker)
    (incident,) = list_incidents(incident_db)
    assert incident.id == incident_id and (incident.alerts, incident.firing) == (3, 3)
    detail = get_incident(incident_db, incident_id)
    notes = [e.message for e in detail.timeline if e.kind == "note"]
    assert notes == [
        "VLLMTargetDown on gemma-26b joined this incident: the same target, within 10 min "
        "of VLLMHBMOutOfMemory (one failure, one incident; it pages nothing where the "
        "incident's page goes; its own routes are told)",
        "VLLMHealthCheckFailing on gemma-26b joined this incident: the same target, within "
        "10 min of VLLMHBMOutOfMemory (one failure, one incident; it pages nothing where "
        "the incident's page goes; its own routes are told)"]
    # The joined alerts resolve quietly; the incident ends with its last alert.
    at = T0 + 2 * MIN
    assert tracker.process([crash, resolved(down, at), resolved(health, at)], at) == []
    (n,) = tracker.process([resolved(crash, at + MIN)], at + MIN)
    assert n.kind is NotificationKind.RESOLVED and n.incident_id == incident_id
    assert [a.name for a in n.alerts] == ["VLLMHBMOutOfMemory"]


def test_a_joined_alert_outliving_the_incidents_own_alert_keeps_its_page_open(
        incident_db: Database) -> None:
    """Issue 48: the crash counter's window ended while the server was down, and its
    resolution went out as the page's `resolved`. Now it waits for the incident's end."""
    tracker = IncidentTracker(incident_db)
    incident_id, crash, down, health = _crash_then_down(tracker)
    at = T0 + 2 * MIN
    assert tracker.process([resolved(crash, at), down, health], at) == []
    assert list_incidents(incident_db)[0].status == "open"
    notes = [e.message for e in get_incident(incident_db, incident_id).timeline
             if e.kind == "note"]
    assert "VLLMHBMOutOfMemory on gemma-26b resolved; the incident stays open" in notes[-1]
    (n,) = tracker.process([resolved(down, at + S), resolved(health, at + S)], at + S)
    assert n.kind is NotificationKind.RESOLVED and n.incident_id == incident_id
    assert [a.name for a in n.alerts] == ["VLLMHBMOutOfMemory"]  # its page's own alert, once
    assert list_incidents(incident_db)[0].status == "resolved"


def test_outside_the_window_or_not_a_failure_alert_opens_its_own_incident(
        incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    crash = alert(name="VLLMHBMOutOfMemory")
    tracker.process([crash], T0)
    queued = alert(name="VLLMRequestsQueued", active_at=T0 + S, fired_at=T0 + 31 * S)
    (n,) = tracker.process([crash, queued], T0 + 31 * S)
    assert n.kind is NotificationKind.FIRING and n.alerts[0].name == "VLLMRequestsQueued"
    late = T0 + 11 * MIN
    down = alert(name="VLLMTargetDown", active_at=late - 30 * S, fired_at=late)
    (n,) = tracker.process([crash, queued, down], late)
    assert n.alerts[0].name == "VLLMTargetDown"
    assert len(list_incidents(incident_db)) == 3


def test_no_joining_when_turned_off(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db, join_alerts=frozenset())
    crash = alert(name="VLLMHBMOutOfMemory")
    tracker.process([crash], T0)
    (n,) = tracker.process([crash, alert(name="VLLMTargetDown", fired_at=T0 + 30 * S)],
                           T0 + 30 * S)
    assert len(list_incidents(incident_db)) == 2


def test_a_restart_reconciles_joined_alerts_as_live(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    incident_id, crash, down, health = _crash_then_down(tracker)
    assert IncidentTracker(incident_db).reconcile([crash, down, health], T0 + 80 * S) == []
    assert list_incidents(incident_db)[0].firing == 3


def test_joined_alerts_still_firing_after_the_verified_recovery_do_not_reopen(
        incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    incident_id, crash, down, health = _crash_then_down(tracker)
    end_on_recovery(incident_db, None, incident_id, T0 + 80 * S, "verified", {})
    assert tracker.process([crash, down, health], T0 + 81 * S) == []
    assert [i.id for i in list_incidents(incident_db)] == [incident_id]


def test_each_joined_alert_is_written_under_its_own_name_and_time(
        incident_db: Database) -> None:
    """Issue 48: "firing VLLMHBMOutOfMemory … value 0" when TargetDown fired, and "resolved
    VLLMHBMOutOfMemory" three times, were the joined alerts written under the first's name."""
    tracker = IncidentTracker(incident_db)
    incident_id, crash, down, health = _crash_then_down(tracker)
    at = T0 + 2 * MIN
    tracker.process([crash, resolved(down, at), resolved(health, at + S)], at + S)
    lines = [(e.kind, e.message, e.at) for e in get_incident(incident_db, incident_id).timeline
             if e.kind in ("firing", "resolved")]
    names = [(kind, message.split(" on ")[0]) for kind, message, _ in lines]
    assert names == [("firing", "VLLMHBMOutOfMemory"), ("firing", "VLLMTargetDown"),
                     ("firing", "VLLMHealthCheckFailing"), ("resolved", "VLLMTargetDown"),
                     ("resolved", "VLLMHealthCheckFailing")]
    fired = {message.split(" on ")[0]: when for kind, message, when in lines
             if kind == "firing"}
    assert fired["VLLMTargetDown"].timestamp() * 1000 == T0 + 35 * S
    assert fired["VLLMHealthCheckFailing"].timestamp() * 1000 == T0 + 70 * S
