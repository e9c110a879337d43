"""What a person does to an incident: acknowledge, own, annotate, silence, re-diagnose.

Each act is one transaction that changes the incident (when it has a column
for it) and writes the timeline event that tells it, so the page, the API and
the notifier read the same story. Who acted is the token's name, never its
value. Authorisation and the audit row are the caller's (api/service.py).

An acknowledged incident is not repeated by the dispatcher and not escalated
by the outbox (`acknowledged`): a person has it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, TimelineEvent, TimelineKind

MAX_NOTE = 4000  # characters of one note
MAX_OWNER = 128  # the column's width


@dataclass(frozen=True, slots=True)
class Done:
    """The outcome of one act: whether it changed anything, and what to tell the person."""

    changed: bool
    message: str


def acknowledge(db: Database, incident_id: int, who: str, now_ms: int) -> Done:
    """Mark the incident taken by `who`; a second acknowledgement changes nothing."""
    with db.session() as s:
        inc = _get(s, incident_id)
        # Conditional: two people clicking at once leave one acknowledgement, not two.
        claimed = s.execute(update(Incident).where(
            Incident.id == incident_id, Incident.acknowledged_at.is_(None)).values(
            acknowledged_at=ms_to_dt(now_ms), acknowledged_by=who)).rowcount == 1  # type: ignore[attr-defined]
        if not claimed:
            s.refresh(inc)
            return Done(False, f"already acknowledged by {inc.acknowledged_by}")
        _event(s, incident_id, now_ms, TimelineKind.ACKNOWLEDGED,
               f"acknowledged by {who}: no more repeats or escalations", {"by": who})
        return Done(True, f"incident #{incident_id} acknowledged")


def assign(db: Database, incident_id: int, owner: str, who: str, now_ms: int) -> Done:
    """Give the incident an owner ("" takes it away)."""
    owner = " ".join(owner.split())
    if len(owner) > MAX_OWNER:
        raise ValueError(f"owner: at most {MAX_OWNER} characters")
    with db.session() as s:
        inc = _get(s, incident_id)
        if (inc.owner or "") == owner:
            return Done(False, f"owner is already {owner or 'nobody'}")
        before, inc.owner = inc.owner, owner or None
        message = f"owner set to {owner} by {who}" if owner else f"owner removed by {who}"
        _event(s, incident_id, now_ms, TimelineKind.ASSIGNED, message,
               {"by": who, "owner": owner or None, "previous": before})
        return Done(True, message)


def add_note(db: Database, incident_id: int, text: str, who: str, now_ms: int) -> Done:
    """A person's note on the timeline (kept as written; every page escapes it)."""
    text = text.strip()
    if not text:
        raise ValueError("note: empty")
    if len(text) > MAX_NOTE:
        raise ValueError(f"note: at most {MAX_NOTE} characters")
    with db.session() as s:
        _get(s, incident_id)
        _event(s, incident_id, now_ms, TimelineKind.NOTE, f"{who}: {text}",
               {"by": who, "note": text})
    return Done(True, "note added")


def note_silence(db: Database, incident_id: int, silence_id: str, matchers: str, ends_at: str,
                 who: str, now_ms: int) -> None:
    """The timeline's record of a silence made from the incident, with its UUID."""
    with db.session() as s:
        _get(s, incident_id)
        _event(s, incident_id, now_ms, TimelineKind.SILENCED,
               f"silence {silence_id} by {who} until {ends_at}: {matchers}",
               {"by": who, "silence_id": silence_id, "matchers": matchers, "ends_at": ends_at})


def request_diagnosis(db: Database, incident_id: int, who: str, now_ms: int) -> Done:
    """Ask the diagnosis job for a new runbook of this incident (it claims the request)."""
    with db.session() as s:
        inc = _get(s, incident_id)
        if inc.diagnosis_requested_at is not None:
            return Done(False, "a diagnosis is already requested")
        inc.diagnosis_requested_at = ms_to_dt(now_ms)
        _event(s, incident_id, now_ms, TimelineKind.DIAGNOSIS_REQUESTED,
               f"diagnosis requested by {who}", {"by": who})
    return Done(True, "diagnosis requested")


def claim_diagnosis_requests(db: Database) -> list[int]:
    """The incidents whose diagnosis was asked for, each claimed once (two daemons on one
    PostgreSQL never both run it)."""
    with db.session() as s:
        ids = s.scalars(select(Incident.id).where(
            Incident.diagnosis_requested_at.is_not(None)).order_by(Incident.id)).all()
        return [i for i in ids if s.execute(update(Incident).where(
            Incident.id == i, Incident.diagnosis_requested_at.is_not(None)).values(
            diagnosis_requested_at=None)).rowcount == 1]  # type: ignore[attr-defined]


def acknowledged(s: Session, incident_ids: Collection[int]) -> bool:
    """Whether every one of these incidents is acknowledged (False for none)."""
    ids = {i for i in incident_ids if i}
    if not ids:
        return False
    acked = s.scalar(select(func.count()).where(Incident.id.in_(ids),
                                            Incident.acknowledged_at.is_not(None)))
    return int(acked or 0) == len(ids)


def _get(s: Session, incident_id: int) -> Incident:
    inc = s.get(Incident, incident_id)
    if inc is None:
        raise LookupError(f"no incident {incident_id}")
    return inc


def _event(s: Session, incident_id: int, now_ms: int, kind: TimelineKind, message: str,
           data: dict[str, Any]) -> None:
    s.add(TimelineEvent(incident_id=incident_id, at=ms_to_dt(now_ms), kind=kind,
                        message=message[:MAX_NOTE + 200], data=data))
