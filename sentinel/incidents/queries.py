"""Read side of the incident store: listing and one incident in full, as frozen dataclasses.

Listing is newest first and filters by one indexed column at a time
(status, alertname, target, opened since), so it stays an index range scan
plus LIMIT however many incidents the table holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from sentinel.incidents.convert import labels_from_json, ms_to_dt, value_from_db
from sentinel.incidents.db import Database
from sentinel.incidents.models import (
    Incident,
    IncidentAlert,
    IncidentAlertState,
    IncidentStatus,
    TimelineEvent,
)
from sentinel.model import Labels

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class IncidentSummary:
    """One row of `incidents list`."""

    id: int
    alertname: str
    target: str
    status: str
    severity: str
    summary: str
    opened_at: datetime
    resolved_at: datetime | None
    updated_at: datetime
    alerts: int
    firing: int


@dataclass(frozen=True, slots=True)
class IncidentAlertView:
    """One alert of an incident."""

    fingerprint: str
    labels: Labels
    annotations: Labels
    state: str
    value: float
    active_at: datetime
    fired_at: datetime
    resolved_at: datetime | None
    notified_firing_at: datetime | None
    notified_resolved_at: datetime | None


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One timeline event."""

    id: int
    at: datetime
    kind: str
    message: str
    data: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class IncidentDetail:
    """`incidents show`: the summary, the group's labels, its alerts and ordered timeline."""

    incident: IncidentSummary
    labels: Labels
    alerts: tuple[IncidentAlertView, ...]
    timeline: tuple[TimelineEntry, ...]
    clocks: Clocks = field(default_factory=lambda: Clocks(None, None, None))


@dataclass(frozen=True, slots=True)
class Clocks:
    """The incident's honest clocks: first evidence, then to open and to verified serving."""

    evidence_at: datetime | None
    detect_ms: int | None
    recovery_ms: int | None


def list_incidents(
    db: Database,
    status: IncidentStatus | str | None = None,
    alertname: str | None = None,
    target: str | None = None,
    since: datetime | int | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[IncidentSummary]:
    """Incidents newest first (by opened_at, then id). `since` is a datetime or epoch ms."""
    if status is not None and status not in tuple(IncidentStatus):
        raise ValueError(f"unknown status {status!r} (open or resolved)")
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}")
    query = select(Incident)
    if status is not None:
        query = query.where(Incident.status == str(status))
    if alertname is not None:
        query = query.where(Incident.alertname == alertname)
    if target is not None:
        query = query.where(Incident.target == target)
    if since is not None:
        query = query.where(Incident.opened_at >= (
            ms_to_dt(since) if isinstance(since, int) else since))
    query = query.order_by(Incident.opened_at.desc(), Incident.id.desc()).limit(limit)
    with db.session() as s:
        incidents = s.scalars(query).all()
        counts = _alert_counts(s, [i.id for i in incidents])
    return [_summary(i, counts.get(i.id, (0, 0))) for i in incidents]


def get_incident(db: Database, incident_id: int) -> IncidentDetail | None:
    """One incident with its alerts and timeline (ordered by time, then insertion), or None."""
    with db.session() as s:
        incident = s.get(Incident, incident_id)
        if incident is None:
            return None
        alerts = s.scalars(select(IncidentAlert)
                           .where(IncidentAlert.incident_id == incident_id)
                           .order_by(IncidentAlert.fired_at, IncidentAlert.fingerprint)).all()
        events = s.scalars(select(TimelineEvent)
                           .where(TimelineEvent.incident_id == incident_id)
                           .order_by(TimelineEvent.at, TimelineEvent.id)).all()
    firing = sum(1 for a in alerts if a.state == IncidentAlertState.FIRING)
    return IncidentDetail(
        incident=_summary(incident, (len(alerts), firing)),
        labels=labels_from_json(incident.labels),
        alerts=tuple(_alert_view(a) for a in alerts),
        timeline=tuple(TimelineEntry(e.id, e.at, e.kind, e.message, e.data) for e in events),
        clocks=Clocks(incident.evidence_at, incident.detect_ms, incident.recovery_ms),
    )


def _alert_counts(s: Session, ids: list[int]) -> dict[int, tuple[int, int]]:
    if not ids:
        return {}
    firing = func.sum(case((IncidentAlert.state == IncidentAlertState.FIRING.value, 1), else_=0))
    rows = s.execute(select(IncidentAlert.incident_id, func.count(), firing)
                     .where(IncidentAlert.incident_id.in_(ids))
                     .group_by(IncidentAlert.incident_id))
    return {incident_id: (int(n), int(f or 0)) for incident_id, n, f in rows}


def _summary(i: Incident, counts: tuple[int, int]) -> IncidentSummary:
    return IncidentSummary(
        id=i.id, alertname=i.alertname, target=i.target, status=i.status,
        severity=i.severity, summary=i.summary, opened_at=i.opened_at,
        resolved_at=i.resolved_at, updated_at=i.updated_at, alerts=counts[0], firing=counts[1],
    )


def _alert_view(a: IncidentAlert) -> IncidentAlertView:
    return IncidentAlertView(
        fingerprint=a.fingerprint, labels=labels_from_json(a.labels),
        annotations=labels_from_json(a.annotations), state=a.state,
        value=value_from_db(a.value), active_at=a.active_at, fired_at=a.fired_at,
        resolved_at=a.resolved_at, notified_firing_at=a.notified_firing_at,
        notified_resolved_at=a.notified_resolved_at,
    )
