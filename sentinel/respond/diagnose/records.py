"""Runbooks and diagnosis notes on incident timelines, and which incidents still need one.

A RUNBOOK event's data: {source: "model"|"static", endpoint, model, latency_ms,
prompt_tokens, completion_tokens, validated, runbook: {...} (validated) or
raw: "..." (not), proposed_action, prompt (the redacted user message)}. A
diagnosis that gives up leaves a NOTE with data {diagnosis: "gave_up", errors}.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from sentinel.incidents import prefetch
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentStatus, TimelineEvent, TimelineKind

GAVE_UP = "gave_up"


@dataclass(frozen=True, slots=True)
class Pending:
    """An open incident with crash evidence and no model runbook yet."""

    incident_id: int
    target: str
    opened_at: datetime
    has_static: bool


def pending(db: Database) -> list[Pending]:
    """Open incidents with a log excerpt, no model runbook and no given-up note."""
    has_excerpt = exists().where(TimelineEvent.incident_id == Incident.id,
                                 TimelineEvent.kind == TimelineKind.LOG_EXCERPT)
    with db.session() as s:
        incidents = s.scalars(select(Incident).where(
            Incident.status == IncidentStatus.OPEN, has_excerpt).order_by(Incident.id)).all()
        out = []
        for inc in incidents:
            sources = diagnosis_marks(s, inc.id)
            if "model" not in sources and GAVE_UP not in sources:
                out.append(Pending(inc.id, inc.target, inc.opened_at, "static" in sources))
        return out


def diagnosis_marks(s: Any, incident_id: int) -> set[str]:
    """The runbook sources ("model", "static") and "gave_up" notes an incident has."""
    rows = s.scalars(select(TimelineEvent.data).where(
        TimelineEvent.incident_id == incident_id,
        TimelineEvent.kind.in_([TimelineKind.RUNBOOK, TimelineKind.NOTE]))).all()
    marks = set()
    for data in rows:
        data = data or {}
        if data.get("source") in ("model", "static"):
            marks.add(str(data["source"]))
        if data.get("diagnosis") == GAVE_UP:
            marks.add(GAVE_UP)
    return marks


def add_event(db: Database, incident_id: int, at: datetime, kind: TimelineKind, message: str,
              data: dict[str, Any]) -> None:
    """Append one timeline event to an incident (which must exist)."""
    with db.session() as s:
        s.add(TimelineEvent(incident_id=incident_id, at=at, kind=kind, message=message,
                            data=data))


def runbook_events(db: Database, incident_id: int) -> list[dict[str, Any]]:
    """The data of an incident's RUNBOOK events and LOG_EXCERPT runbooks, oldest first."""
    with db.session() as s:
        return session_runbook_events(s, incident_id)


def session_runbook_events(s: Session, incident_id: int) -> list[dict[str, Any]]:
    """`runbook_events` inside the caller's transaction (from what the dispatcher
    prefetched for its messages, when it did: incidents/prefetch.py)."""
    rows = prefetch.timeline(s, incident_id)
    if rows is None:
        rows = [(kind, data) for kind, data in s.execute(
            select(TimelineEvent.kind, TimelineEvent.data).where(
                TimelineEvent.incident_id == incident_id, TimelineEvent.kind.in_(prefetch.KINDS),
            ).order_by(TimelineEvent.at, TimelineEvent.id))]
    out = []
    for kind, data in rows:
        data = data or {}
        if kind == TimelineKind.RUNBOOK:
            out.append(data)
        elif data.get("runbook"):
            out.append({"source": "static", "signature": data.get("signature"),
                        "text": data["runbook"]})
    return out
