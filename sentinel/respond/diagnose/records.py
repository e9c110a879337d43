"""Runbooks and diagnosis notes on incident timelines, and which incidents still need one.

A RUNBOOK event's data: {source: "model"|"static", endpoint, model, latency_ms,
prompt_tokens, completion_tokens, validated, runbook: {...} (validated) or
raw: "..." (not), proposed_action, prompt (the redacted user message)}. A
diagnosis that gives up leaves a NOTE with data {diagnosis: "gave_up", errors}.

A fleet-wide failure (incidents/fleet.py) is asked about once: the fleet incident is
pending with one member's evidence (`fleet_evidence`), and the members that opened
as part of it (quiet ones) are not asked about at all: their runbook is the fleet's
(`session_runbook_events` shows it, marked with `fleet_incident`). In a storm of
5,000 targets that is one request to the model, not 5,000.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from sentinel.incidents import prefetch
from sentinel.incidents.db import Database
from sentinel.incidents.fleet_hook import KEY_PREFIX
from sentinel.incidents.models import Incident, IncidentStatus, TimelineEvent, TimelineKind
from sentinel.incidents.models_fleet import FleetMember

GAVE_UP = "gave_up"


@dataclass(frozen=True, slots=True)
class Pending:
    """An open incident with crash evidence and no model runbook yet."""

    incident_id: int
    target: str
    opened_at: datetime
    has_static: bool


def pending(db: Database) -> list[Pending]:
    """Open incidents with a log excerpt, no model runbook and no given-up note; open fleet
    incidents one of whose members has one; never a quiet member of an open fleet incident."""
    has_excerpt = exists().where(TimelineEvent.incident_id == Incident.id,
                                 TimelineEvent.kind == TimelineKind.LOG_EXCERPT)
    fleet = Incident.__table__.alias("fleet")
    in_fleet = exists().where(FleetMember.incident_id == Incident.id, FleetMember.quiet,
                              FleetMember.fleet_incident_id == fleet.c.id,
                              fleet.c.status == IncidentStatus.OPEN.value)
    with db.session() as s:
        incidents = list(s.scalars(select(Incident).where(
            Incident.status == IncidentStatus.OPEN, has_excerpt, ~in_fleet)).all())
        incidents += [i for i in s.scalars(select(Incident).where(
            Incident.status == IncidentStatus.OPEN, Incident.group_key.startswith(KEY_PREFIX),
            ~has_excerpt)).all() if _member_with_excerpt(s, i.id) is not None]
        out = []
        for inc in sorted(incidents, key=lambda i: i.id):
            sources = diagnosis_marks(s, inc.id)
            if "model" not in sources and GAVE_UP not in sources:
                out.append(Pending(inc.id, inc.target, inc.opened_at, "static" in sources))
        return out


def fleet_evidence(db: Database, incident_id: int) -> tuple[int, str] | None:
    """For a fleet incident: (the member incident whose evidence stands for the fleet, the
    fleet incident's summary); None for any other incident or when no member has any."""
    with db.session() as s:
        incident = s.get(Incident, incident_id)
        if incident is None or not incident.group_key.startswith(KEY_PREFIX):
            return None
        member = _member_with_excerpt(s, incident_id)
        return None if member is None else (member, incident.summary)


def _member_with_excerpt(s: Session, fleet_incident_id: int) -> int | None:
    """The first member (by joining, then name) whose own incident has a log excerpt."""
    return s.scalar(select(FleetMember.incident_id).where(
        FleetMember.fleet_incident_id == fleet_incident_id,
        FleetMember.incident_id.is_not(None),
        exists().where(TimelineEvent.incident_id == FleetMember.incident_id,
                       TimelineEvent.kind == TimelineKind.LOG_EXCERPT))
        .order_by(FleetMember.joined_at, FleetMember.target).limit(1))


def fleet_of(s: Session, incident_id: int) -> int | None:
    """The fleet incident a quiet member belongs to (the newest), or None."""
    return s.scalar(select(FleetMember.fleet_incident_id).where(
        FleetMember.incident_id == incident_id, FleetMember.quiet)
        .order_by(FleetMember.fleet_incident_id.desc()).limit(1))


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
    """`runbook_events` inside the caller's transaction; a quiet fleet member's end with its
    fleet incident's (each marked `fleet_incident`): it is not asked about on its own."""
    out = _own_runbook_events(s, incident_id)
    fleet_id = fleet_of(s, incident_id)
    if fleet_id is not None:
        out += [{**d, "fleet_incident": fleet_id} for d in _own_runbook_events(s, fleet_id)
                if d.get("source") == "model"]
    return out


def _own_runbook_events(s: Session, incident_id: int) -> list[dict[str, Any]]:
    # From what the dispatcher prefetched for its messages, when it did (incidents/prefetch.py).
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
