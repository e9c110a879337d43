"""A verified recovery ends the incident; the crash alert's old window does not re-open it.

The tracker and `end_on_recovery` on SQLite and PostgreSQL, with time handed in.
"""

from __future__ import annotations

from dataclasses import replace

from test_incidents_tracker import T0, S, alert, deliver, resolved

from sentinel.incidents import Database, IncidentTracker, get_incident, list_incidents
from sentinel.incidents.log_events import record_log_events
from sentinel.incidents.recovery import STILL_FIRING_MS, end_on_recovery
from sentinel.incidents.render import detail_json, render_detail
from sentinel.model import LogEvent, NotificationKind

CRASH = "VLLMHBMOutOfMemory"


def _opened(db: Database) -> tuple[IncidentTracker, object, int]:
    tracker = IncidentTracker(db)
    crash = alert(name=CRASH)
    (n,) = tracker.process([crash], T0)
    deliver(tracker, [n], T0)
    return tracker, crash, n.incident_id


def test_recovery_resolves_the_incident_and_announces_the_paged_firing(
        incident_db: Database) -> None:
    tracker, crash, incident_id = _opened(incident_db)
    n = end_on_recovery(incident_db, None, incident_id, T0 + 10 * S,
                        "docker_restart on gemma-26b verified", {"attempt": 1})
    assert n is not None and n.kind is NotificationKind.RESOLVED
    assert [a.fingerprint for a in n.alerts] == [crash.fingerprint]
    detail = get_incident(incident_db, incident_id)
    assert detail.incident.status == "resolved"
    assert detail.incident.resolved_at is not None
    (ended,) = [e for e in detail.timeline if e.kind == "incident_resolved"]
    assert ended.message.startswith(
        "incident resolved at verification: docker_restart on gemma-26b verified; ")
    # A second call (another worker, a retry) changes nothing.
    assert end_on_recovery(incident_db, None, incident_id, T0 + 11 * S, "again", {}) is None


def test_the_same_occurrence_still_firing_neither_reopens_nor_pages(
        incident_db: Database) -> None:
    tracker, crash, incident_id = _opened(incident_db)
    end_on_recovery(incident_db, None, incident_id, T0 + 10 * S, "verified", {})
    for t in (T0 + 11 * S, T0 + 4 * 60 * S):
        assert tracker.process([replace(crash, last_eval_ms=t)], t) == []
    assert tracker.process([resolved(crash, T0 + 5 * 60 * S)], T0 + 5 * 60 * S) == []
    assert [i.id for i in list_incidents(incident_db)] == [incident_id]


def test_a_new_occurrence_after_the_recovery_opens_a_new_incident(
        incident_db: Database) -> None:
    tracker, crash, incident_id = _opened(incident_db)
    end_on_recovery(incident_db, None, incident_id, T0 + 10 * S, "verified", {})
    again = replace(crash, active_at_ms=T0 + 20 * S, fired_at_ms=T0 + 20 * S,
                    last_eval_ms=T0 + 20 * S)
    (n,) = tracker.process([again], T0 + 20 * S)
    assert n.incident_id != incident_id and n.kind is NotificationKind.FIRING


def test_new_log_evidence_after_the_recovery_is_a_new_failure(incident_db: Database) -> None:
    tracker, crash, incident_id = _opened(incident_db)
    end_on_recovery(incident_db, None, incident_id, T0 + 10 * S, "verified", {})
    record_log_events(incident_db, [LogEvent(
        target="gemma-26b", source="file:vllm.log", signature="xla_hbm_oom",
        category="hbm_oom", severity="critical", t_ms=T0 + 30 * S, line_no=9,
        excerpt=("RESOURCE_EXHAUSTED",), runbook="")], now_ms=T0 + 30 * S)
    (n,) = tracker.process([replace(crash, last_eval_ms=T0 + 31 * S)], T0 + 31 * S)
    assert n.incident_id != incident_id


def test_a_late_copy_of_the_crash_line_from_a_second_source_is_not_a_new_failure(
        incident_db: Database) -> None:
    """Issue 48 (tpu-v6e example: docker logs and Cloud Logging): the crash line's copy that
    Cloud Logging delivers after the verified restart carries the crash's own time; it is
    the same failure, so the alert still firing neither re-opens the incident nor pages."""
    tracker, crash, incident_id = _opened(incident_db)
    end_on_recovery(incident_db, None, incident_id, T0 + 10 * S, "verified", {})
    record_log_events(incident_db, [LogEvent(
        target="gemma-26b", source="cloud-logging:my-project", signature="xla_hbm_oom",
        category="hbm_oom", severity="critical", t_ms=T0 - 2 * S, line_no=None,
        excerpt=("RESOURCE_EXHAUSTED",), runbook="")], now_ms=T0 + 25 * S)
    assert tracker.process([replace(crash, last_eval_ms=T0 + 26 * S)], T0 + 26 * S) == []
    assert [i.id for i in list_incidents(incident_db)] == [incident_id]


def test_an_occurrence_that_outlives_the_recovery_by_far_opens_a_new_incident(
        incident_db: Database) -> None:
    tracker, crash, incident_id = _opened(incident_db)
    end_on_recovery(incident_db, None, incident_id, T0 + 10 * S, "verified", {})
    late = T0 + 10 * S + STILL_FIRING_MS + S
    (n,) = tracker.process([replace(crash, last_eval_ms=late)], late)
    assert n.incident_id != incident_id


def test_an_incident_resolved_by_its_alert_is_not_a_recovery(incident_db: Database) -> None:
    tracker, crash, incident_id = _opened(incident_db)
    tracker.process([resolved(crash, T0 + 10 * S)], T0 + 10 * S)
    # A restored alert that still claims the old occurrence (clock skew, a bad restore).
    (n,) = tracker.process([replace(crash, last_eval_ms=T0 + 11 * S)], T0 + 11 * S)
    assert n.incident_id != incident_id


def test_clocks_run_from_the_crash_line_to_open_and_to_verified_serving(
        incident_db: Database) -> None:
    # The crash line was written 4 s before the alert went active (a poll, a scrape later).
    record_log_events(incident_db, [LogEvent(
        target="gemma-26b", source="file:vllm.log", signature="xla_hbm_oom",
        category="hbm_oom", severity="critical", t_ms=T0 - 4 * S, line_no=3,
        excerpt=("RESOURCE_EXHAUSTED",), runbook="")], now_ms=T0 - 3 * S)
    tracker = IncidentTracker(incident_db)
    crash = alert(name=CRASH, active_at=T0, fired_at=T0 + 2 * S)
    (n,) = tracker.process([crash], T0 + 2 * S)
    detail = get_incident(incident_db, n.incident_id)
    assert detail.clocks.evidence_at is not None
    assert detail.clocks.detect_ms == 6 * S  # line → opened, not active → fired (2 s)
    end_on_recovery(incident_db, None, n.incident_id, T0 + 10 * S, "verified", {})
    detail = get_incident(incident_db, n.incident_id)
    assert detail.clocks.recovery_ms == 14 * S
    (ended,) = [e for e in detail.timeline if e.kind == "incident_resolved"]
    assert "serving again 14.0s after the first evidence" in ended.message
    # `sentinel incidents show`, text and JSON.
    text = render_detail(detail)
    assert "  detected:  after 6.0s" in text
    assert "  recovered: serving again 14.0s after the first evidence (verified)" in text
    shown = detail_json(detail)
    assert (shown["time_to_detect_ms"], shown["time_to_recovery_ms"]) == (6 * S, 14 * S)
    assert shown["evidence_at"] == "2026-11-21T10:00:01Z"


def test_without_a_crash_line_the_clock_starts_when_the_alert_went_active(
        incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    (n,) = tracker.process([alert(name="VLLMTargetDown", active_at=T0, fired_at=T0 + 30 * S)],
                           T0 + 30 * S)
    detail = get_incident(incident_db, n.incident_id)
    assert detail.clocks.detect_ms == 30 * S and detail.clocks.recovery_ms is None
