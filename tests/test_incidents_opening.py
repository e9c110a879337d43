"""Incidents opened in batches (opening.py, issue 49) tell the same story as one at a time.

A storm on SQLite and PostgreSQL, with time handed in, run twice on one database
with disjoint target names: once as the tracker runs it (the plain new incidents
opened together), once with the batch turned off (every key through the per-key
path). Around the plain targets are the cases the batch must hand to the per-key
path: a failure alert that joins its target's crash incident, two failure alerts
of one target in one evaluation, a crash alert still firing after the verified
recovery that ended its incident. The plain ones carry what opening does: crash
lines attached on open (at most five) and the clock started at the first line,
but not at a line of the target's previous, resolved failure.
Incidents, their timelines and the notifications must be the same.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import event, select
from test_incidents_tracker import T0, S, alert, deliver, resolved

from sentinel.incidents import Database, IncidentTracker, get_incident, opening
from sentinel.incidents.log_events import record_log_events
from sentinel.incidents.models import Incident
from sentinel.incidents.recovery import end_on_recovery
from sentinel.model import Alert, LogEvent

CRASH, DOWN, HEALTH, QUEUED = ("VLLMHBMOutOfMemory", "VLLMTargetDown",
                               "VLLMHealthCheckFailing", "VLLMRequestsQueued")
T1 = T0 + 90 * S  # the storm
PLAIN = 12


def _line(target: str, at: int) -> LogEvent:
    return LogEvent(target=target, source="file:/var/log/vllm.log", signature="hbm_oom",
                    category="hbm_oom", severity="critical", t_ms=at, line_no=at // S % 1000,
                    excerpt=("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm",),
                    runbook="")


def _storm(db: Database, p: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """The story with targets named `p` + …; the notifications, named without `p`."""
    tracker = IncidentTracker(db)
    crash, rec = alert(f"{p}crash", CRASH), alert(f"{p}rec", CRASH)
    old = alert(f"{p}old", QUEUED)
    before = tracker.process([crash, rec, old], T0)
    deliver(tracker, before, T0)
    end_on_recovery(db, None, next(n.incident_id for n in before
                                   if n.alerts[0].fingerprint == rec.fingerprint),
                    T0 + 10 * S, "verified", {})
    tracker.process([resolved(old, T0 + 20 * S)], T0 + 20 * S)
    record_log_events(db, [_line(f"{p}old", T0 + 5 * S), _line(f"{p}old", T0 + 60 * S)]
                      + [_line(f"{p}log", T0 + k * S) for k in range(50, 57)])
    storm: list[Alert] = [alert(f"{p}t{i}", QUEUED, active_at=T1 - 30 * S, fired_at=T1)
                          for i in range(PLAIN)]
    storm += [alert(f"{p}{t}", QUEUED, active_at=T1 - 30 * S, fired_at=T1)
              for t in ("log", "old", "crash")]
    storm += [crash, alert(f"{p}crash", DOWN, active_at=T1 - 30 * S, fired_at=T1),  # joins
              rec,  # the occurrence its recovery ended
              alert(f"{p}pair", DOWN, active_at=T1 - 30 * S, fired_at=T1),
              alert(f"{p}pair", HEALTH, active_at=T1 - 30 * S, fired_at=T1)]
    sent = tracker.process(storm, T1)
    return sorted((str(n.kind), dict(n.group_labels)["target"].removeprefix(p),
                   tuple(sorted(a.name for a in n.alerts))) for n in sent)


def _incidents(db: Database, p: str) -> list[tuple[object, ...]]:
    with db.session() as s:
        rows = [(i.id, i.group_key.replace(p, ""), i.status, i.opened_at, i.evidence_at,
                 i.detect_ms) for i in s.scalars(select(Incident).where(
                     Incident.target.startswith(p)))]
    out = []
    for incident_id, *fields in rows:
        detail = get_incident(db, incident_id)
        assert detail is not None
        timeline = sorted((e.at, e.kind, e.message.replace(p, "")) for e in detail.timeline)
        out.append((*fields, tuple(timeline)))
    return sorted(out, key=lambda r: (r[0], r[2]))


def test_a_batch_opens_what_one_at_a_time_opens(incident_db: Database,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    batch_sent = _storm(incident_db, "a.")
    with monkeypatch.context() as m:
        m.setattr(opening, "plain_keys", lambda *args, **kw: [])
        single_sent = _storm(incident_db, "b.")
    assert batch_sent == single_sent
    batch, single = _incidents(incident_db, "a."), _incidents(incident_db, "b.")
    assert batch == single
    opened = {key: row for key, *row in batch}
    # What the comparison is about: each special case happened.
    crash_timeline = opened[f"{CRASH}/crash"][4]
    assert any("VLLMTargetDown on crash joined this incident" in m for *_, m in crash_timeline)
    # One of the pair opens (the first by name, as the tracker goes), the other joins it.
    assert f"{HEALTH}/pair" in opened and f"{DOWN}/pair" not in opened
    assert [k for k in opened if k == f"{CRASH}/rec"] == [f"{CRASH}/rec"]  # not re-opened
    log_lines = [m for *_, m in opened[f"{QUEUED}/log"][4] if m.startswith("hbm_oom")]
    assert len(log_lines) == 5
    assert opened[f"{QUEUED}/log"][2] < opened[f"{QUEUED}/log"][1]  # evidence before opening
    # The old target's clock starts at the line after its last incident resolved.
    assert opened[f"{QUEUED}/old"][2] is not None
    paged = sorted(t for k, t, names in batch_sent if k == "firing" and names == (QUEUED,))
    assert paged == sorted([f"t{i}" for i in range(PLAIN)] + ["crash", "log", "old"])


def _statements(db: Database, run: Callable[[], object]) -> list[str]:
    seen: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # noqa: ANN001
        seen.append(statement.lstrip().split(None, 1)[0].upper())

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        run()
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    return seen


def test_a_storm_of_new_incidents_is_a_few_statements(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    storm = [alert(f"t{i}", DOWN) for i in range(400)]
    seen = _statements(incident_db, lambda: tracker.process(storm, T0))
    # One at a time it was about ten per incident (4,000 here), five of them SELECTs.
    assert seen.count("SELECT") < 15, seen
    # SQLite inserts rows with their own ids one statement each (the incident and its
    # firing line: no ordered RETURNING there); PostgreSQL in batches.
    assert len(seen) < 2 * len(storm) + 30, len(seen)
    with incident_db.session() as s:
        assert len(s.scalars(select(Incident)).all()) == 400
