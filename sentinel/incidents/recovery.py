"""An incident ends when its failure ends: at a verified recovery (issue 33).

A crash is an event. Its alert (`increase(...[5m]) > 0`) keeps firing for the
rule's whole window after the server was restarted and verified serving; the
incident does not wait for it:

- `end_on_recovery` resolves the open incident at the verification, says so on
  its timeline, and announces the resolution of every alert whose firing was
  announced (the same outbox as the tracker's notifications);
- `ended_by_recovery` tells the tracker that an alert still firing is that same
  occurrence (it became active before the recovery ended it), so it neither
  re-opens the incident nor pages again. New evidence ends that: a log event on
  the target recorded after the recovery, and of a time after it, is a new failure
  (a lagging source's copy of the old line is not), and an occurrence still firing
  `STILL_FIRING_MS` after the recovery is one the restart did not fix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.incidents.convert import (
    dt_to_ms,
    labels_from_json,
    ms_to_dt,
    value_from_db,
)
from sentinel.incidents.db import Database
from sentinel.incidents.models import (
    Incident,
    IncidentAlert,
    IncidentAlertState,
    IncidentStatus,
    LogEventRow,
    TimelineEvent,
    TimelineKind,
)
from sentinel.incidents.outboxwriter import OutboxWriter
from sentinel.model import Alert, AlertState, Notification, NotificationKind, label_value

log = logging.getLogger(__name__)

# Longer than the shipped crash rules' 5 m window, so their alerts end on their own first.
STILL_FIRING_MS = 10 * 60_000
RECOVERED = "recovered"  # the INCIDENT_RESOLVED event's data key


def end_on_recovery(db: Database, outbox: OutboxWriter | None, incident_id: int, at_ms: int,
                    why: str, data: dict[str, Any],
                    quiet: Callable[[Session], bool] | None = None,
                    then: Callable[[Session], None] | None = None) -> Notification | None:
    """Resolve the open incident at `at_ms`; the resolved notification (also queued), if any.

    In the same transaction: `quiet` says the firing was never sent (its page was held
    while Sentinel acted, actfirst.py), so no resolution is queued either; `then` runs
    last (the "fixed by Sentinel" message, which reads the incident's recovery time).
    """
    at = ms_to_dt(at_ms)
    with db.session() as s:
        incident = s.get(Incident, incident_id)
        if incident is None or incident.status != IncidentStatus.OPEN:
            return None
        if quiet is not None and quiet(s):
            outbox = None
        rows = list(s.scalars(select(IncidentAlert).where(
            IncidentAlert.incident_id == incident_id)))
        told = []
        for row in rows:
            if row.state != IncidentAlertState.FIRING:
                continue
            row.state, row.resolved_at = IncidentAlertState.RESOLVED, at
            name = label_value(labels_from_json(row.labels), "alertname")
            subject = f"{name} on {incident.target}" if incident.target else name
            s.add(TimelineEvent(incident_id=incident_id, at=at, kind=TimelineKind.RESOLVED,
                                message=f"{subject}: resolved at verification",
                                data={"fingerprint": row.fingerprint, RECOVERED: True}))
            if row.notified_firing_at is not None:
                row.notified_resolved_at = at
                told.append(row_alert(row, at_ms))
            log.info("alert %s resolved at verification on %s (incident %d)", name,
                     incident.target, incident_id, extra={
                         "incident": incident_id, "alertname": name,
                         "target": incident.target, "state": "resolved"})
        incident.status, incident.resolved_at, incident.updated_at = IncidentStatus.RESOLVED, at, at
        incident.resolve_ms = max(0, at_ms - dt_to_ms(incident.opened_at))
        evidence_at = incident.evidence_at or incident.opened_at
        incident.recovery_ms = max(0, at_ms - dt_to_ms(evidence_at))
        s.add(TimelineEvent(
            incident_id=incident_id, at=at, kind=TimelineKind.INCIDENT_RESOLVED,
            message=f"incident resolved at verification: {why}; serving again "
                    f"{incident.recovery_ms / 1000:.1f}s after the first evidence",
            data={RECOVERED: True, **data, "time_to_recovery_ms": incident.recovery_ms}))
        log.info("incident %d resolved at verification: %s on %s", incident_id,
                 incident.alertname, incident.target, extra={
                     "incident": incident_id, "alertname": incident.alertname,
                     "target": incident.target, "state": "resolved"})
        if then is not None:
            s.flush()
            then(s)
        if not told:
            return None
        group = tuple(sorted((k, v) for k, v in (("alertname", incident.alertname),
                                                  ("target", incident.target)) if v))
        notification = Notification(incident_id, NotificationKind.RESOLVED, tuple(told), group)
        if outbox is not None:
            outbox.enqueue(s, notification, at_ms)
        return notification


def ended_by_recovery(s: Session, target: str, alert: Alert, now: datetime) -> str | None:
    """Why this firing alert is the occurrence a verified recovery already ended; else None."""
    # By the alert's own rows: it may have joined an incident of another key (joining.py).
    last = s.scalars(select(Incident).join(IncidentAlert).where(
        Incident.target == target, IncidentAlert.fingerprint == alert.fingerprint,
        Incident.status == IncidentStatus.RESOLVED.value)
        .order_by(Incident.id.desc()).limit(1)).one_or_none()
    if last is None or last.resolved_at is None:
        return None
    row = s.get(IncidentAlert, (last.id, alert.fingerprint))
    if row is None or row.resolved_at is None or alert.active_at_ms > dt_to_ms(row.resolved_at):
        return None  # a new occurrence: it became active after the incident ended
    if now - last.resolved_at > timedelta(milliseconds=STILL_FIRING_MS):
        return None
    if not _resolved_by_recovery(s, last.id):
        return None
    # New log evidence after the recovery is a new failure; a copy of the old line that a
    # lagging source (Cloud Logging beside docker logs) records late carries the crash's
    # own time, before the recovery: the same failure.
    if target and s.scalar(select(LogEventRow.id).where(
            LogEventRow.target == target, LogEventRow.created_at > last.resolved_at,
            LogEventRow.at > last.resolved_at).limit(1)) is not None:
        return None
    return f"still firing from before the verified recovery of incident {last.id}"


def _resolved_by_recovery(s: Session, incident_id: int) -> bool:
    for data in s.scalars(select(TimelineEvent.data).where(
            TimelineEvent.incident_id == incident_id,
            TimelineEvent.kind == TimelineKind.INCIDENT_RESOLVED)):
        if data and data.get(RECOVERED):
            return True
    return False


def row_alert(row: IncidentAlert, resolved_at_ms: int) -> Alert:
    """An incident row as a resolved alert, for its resolution and its notification."""
    labels = labels_from_json(row.labels)
    return Alert(group="", rule=label_value(labels, "alertname"), labels=labels,
                 annotations=labels_from_json(row.annotations), state=AlertState.INACTIVE,
                 value=value_from_db(row.value), active_at_ms=dt_to_ms(row.active_at),
                 last_eval_ms=resolved_at_ms, fired_at_ms=dt_to_ms(row.fired_at),
                 resolved_at_ms=resolved_at_ms)
