"""Crash excerpts from logs as evidence on incident timelines.

Two moments attach a matched log event to an incident of its target: when the
incident opens (the events of the last few minutes, which usually caused it),
and when an event is recorded while the target already has an open incident.
Both run inside the caller's transaction, so an event is attached once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sentinel.incidents.models import (
    Incident,
    IncidentStatus,
    LogEventRow,
    TimelineEvent,
    TimelineKind,
)

# How far before an incident's first alert went pending its evidence may lie:
# an HBM OOM is logged before the server stops answering and `up` turns 0.
EVIDENCE_WINDOW = timedelta(minutes=10)
MAX_EXCERPTS_ON_OPEN = 5


def attach_recent(s: Session, incident: Incident, target: str, since: datetime) -> int:
    """Attach the target's events since `since - EVIDENCE_WINDOW` to a new incident."""
    if not target:
        return 0
    rows = s.scalars(
        select(LogEventRow)
        .where(LogEventRow.target == target, LogEventRow.at >= since - EVIDENCE_WINDOW)
        .order_by(LogEventRow.at.desc(), LogEventRow.id.desc())
        .limit(MAX_EXCERPTS_ON_OPEN)
    ).all()
    for row in reversed(rows):
        s.add(excerpt_event(incident.id, row))
    return len(rows)


def first_evidence(s: Session, target: str, active_at: datetime, until: datetime
                   ) -> datetime | None:
    """The own time of the target's first crash line before a new incident, if any.

    Looked for in the evidence window before the alert went active, and only after the
    target's last resolved incident ended (that failure's lines are not this one's); a
    line timed after `until` (the incident's opening: another clock) does not count.
    """
    if not target:
        return None
    lo = active_at - EVIDENCE_WINDOW
    ended = s.scalar(select(func.max(Incident.resolved_at)).where(
        Incident.target == target, Incident.status == IncidentStatus.RESOLVED.value))
    if ended is not None and ended > lo:
        lo = ended
    return s.scalar(select(func.min(LogEventRow.at)).where(
        LogEventRow.target == target, LogEventRow.at > lo, LogEventRow.at <= until))


def attach_new(s: Session, rows: Sequence[LogEventRow]) -> int:
    """Attach freshly recorded events (flushed, with ids) to their targets' open incidents."""
    targets = {r.target for r in rows}
    if not targets:
        return 0
    open_incidents = s.scalars(select(Incident).where(
        Incident.status == IncidentStatus.OPEN, Incident.target.in_(targets))).all()
    attached = 0
    for incident in open_incidents:
        for row in rows:
            if row.target == incident.target:
                s.add(excerpt_event(incident.id, row))
                attached += 1
    return attached


def excerpt_event(incident_id: int, row: LogEventRow) -> TimelineEvent:
    """The timeline line that attaches a crash excerpt to an incident."""
    where = f"{row.source} line {row.line_no}" if row.line_no is not None else row.source
    data: dict[str, Any] = {
        "log_event_id": row.id, "signature": row.signature, "category": row.category,
        "severity": row.severity, "source": row.source, "line": row.line_no,
        "excerpt": list(row.excerpt), "runbook": row.runbook,
    }
    return TimelineEvent(incident_id=incident_id, at=row.at, kind=TimelineKind.LOG_EXCERPT,
                         message=f"{row.category} {row.signature} in {where}", data=data)
