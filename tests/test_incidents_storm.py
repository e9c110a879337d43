"""An alert storm costs the incident stage a few queries per evaluation, not a few per alert.

With a fleet, `up == 0` can fire for hundreds of targets at once (the
5,000-target fleet bench: timed-out scrapes). Every evaluation hands the
tracker every firing alert again; the open incidents of all of them and
their rows are loaded with two queries, so an evaluation with nothing new
runs a handful of statements whatever the number of alerts.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import event

from sentinel.incidents import Database, IncidentTracker, list_incidents
from sentinel.incidents.models import IncidentAlert
from sentinel.model import Alert, AlertState, labels_of

T0 = 1_795_255_205_000


def _down(target: str) -> Alert:
    return Alert(group="vllm", rule="VLLMTargetDown",
                 labels=labels_of({"alertname": "VLLMTargetDown", "target": target,
                                   "severity": "critical"}),
                 annotations=(), state=AlertState.FIRING, value=0.0, active_at_ms=T0,
                 last_eval_ms=T0, fired_at_ms=T0)


def _statements(db: Database, run) -> int:  # noqa: ANN001
    seen: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # noqa: ANN001
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        run()
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    return len(seen)


def test_a_storm_of_firing_alerts_is_a_few_queries_an_evaluation(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    storm = [_down(f"t{i}") for i in range(600)]
    out = tracker.process(storm, T0)
    assert len(out) == 600  # one incident and one page each
    assert len(list_incidents(incident_db, limit=1000)) == 600
    again = _statements(incident_db, lambda: tracker.process(storm, T0 + 5000))
    assert again <= 10, again  # was 3 SELECTs per alert group: 1,800
    # One target recovers, one more goes down: still no per-alert lookups.
    changed = [*storm[1:], _down("t600")]
    gone = storm[0]

    changed.append(replace(gone, state=AlertState.INACTIVE, resolved_at_ms=T0 + 10_000,
                           last_eval_ms=T0 + 10_000))
    n = _statements(incident_db, lambda: tracker.process(changed, T0 + 10_000))
    assert n < 60, n
    open_ = [i for i in list_incidents(incident_db, limit=1000) if i.status == "open"]
    assert len(open_) == 600


def test_in_a_steady_storm_only_the_alert_that_changed_is_loaded(incident_db: Database) -> None:
    """Issue 49: the keys with nothing to record are found with one compact read
    (incidents/quiet.py); the one whose value moved past the threshold, once the value
    interval passed, still gets its value event, and nothing pages again."""
    tracker = IncidentTracker(incident_db)
    storm = [_down(f"t{i}") for i in range(300)]
    tracker.process(storm, T0)
    later = T0 + 61_000  # past VALUE_EVENT_MIN_INTERVAL_MS
    moved = [replace(a, value=5.0, last_eval_ms=later) if a.labels == storm[7].labels
             else a for a in storm]
    loaded: list[str] = []  # the incident rows loaded as objects, by fingerprint

    def count(target: IncidentAlert, context: object) -> None:
        loaded.append(target.fingerprint)

    event.listen(IncidentAlert, "load", count)
    try:
        assert tracker.process(moved, later) == []  # a value event, not a page
    finally:
        event.remove(IncidentAlert, "load", count)
    assert loaded == [storm[7].fingerprint]  # was all 300
    (incident,) = [i for i in list_incidents(incident_db, limit=1000) if i.target == "t7"]
    from sentinel.incidents import get_incident

    detail = get_incident(incident_db, incident.id)
    assert detail is not None
    assert [e.message for e in detail.timeline if e.kind == "value"] == [
        "VLLMTargetDown on t7: value 5"]
