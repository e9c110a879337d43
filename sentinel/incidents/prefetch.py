"""What a message carries per incident, read for many incidents at once (issue 49).

The notify dispatcher annotates each message with its incidents' runbook, crash
excerpt and act-first reason (respond/notify/actfirst.py,
respond/diagnose/annotations.py). Read per incident, a storm's thousands of
messages were three SELECTs and a savepoint each, inside the transaction that
holds SQLite's one writer. `prefetch(s, ids)` reads the rows they come from for
all the incidents in a few queries and keeps them on the session (`Session.info`,
gone with it); the readers ask `timeline` and `hold` first and query only for an
incident that was not prefetched. Nothing in the dispatcher's transaction writes
those rows, so what is kept is what the database holds.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.incidents.models import TimelineEvent, TimelineKind
from sentinel.incidents.models_notify import NotifyHold

KEY = "sentinel.incidents.prefetch"
IN_CHUNK = 500  # ids per IN (...) list
# The timeline rows messages read: runbooks (the model's and the static one) and excerpts.
KINDS = (TimelineKind.RUNBOOK, TimelineKind.LOG_EXCERPT)
TimelineRows = list[tuple[TimelineKind, dict[str, Any]]]


@dataclass
class _Prefetched:
    timeline: dict[int, TimelineRows] = field(default_factory=dict)
    holds: dict[int, NotifyHold | None] = field(default_factory=dict)


def prefetch(s: Session, incident_ids: Collection[int]) -> None:
    """Read the KINDS timeline rows and the act-first hold of these incidents, in a few
    queries, for `timeline` and `hold` to answer from for the rest of the session."""
    got: _Prefetched = s.info.setdefault(KEY, _Prefetched())
    ids = sorted({int(i) for i in incident_ids} - {0} - set(got.timeline))
    for n in range(0, len(ids), IN_CHUNK):
        part = ids[n:n + IN_CHUNK]
        for i in part:
            got.timeline[i] = []
            got.holds[i] = None
        for i, kind, data in s.execute(
                select(TimelineEvent.incident_id, TimelineEvent.kind, TimelineEvent.data)
                .where(TimelineEvent.incident_id.in_(part), TimelineEvent.kind.in_(KINDS))
                .order_by(TimelineEvent.incident_id, TimelineEvent.at, TimelineEvent.id)):
            got.timeline[int(i)].append((TimelineKind(kind), data or {}))
        for row in s.scalars(select(NotifyHold).where(NotifyHold.incident_id.in_(part))):
            got.holds[row.incident_id] = row


def timeline(s: Session, incident_id: int) -> TimelineRows | None:
    """The incident's RUNBOOK and LOG_EXCERPT rows (kind, data) by time, if prefetched."""
    got: _Prefetched | None = s.info.get(KEY)
    return None if got is None else got.timeline.get(incident_id)


def hold(s: Session, incident_id: int) -> NotifyHold | None:
    """The incident's act-first hold row (prefetched, or read now)."""
    got: _Prefetched | None = s.info.get(KEY)
    if got is not None and incident_id in got.holds:
        return got.holds[incident_id]
    return s.get(NotifyHold, incident_id)
