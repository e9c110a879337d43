"""Matched log events and log-source cursors in the database.

`record_log_events` can save cursors in the same transaction as the events
they led to, which makes a restart exactly-once: either both the events and
the advanced cursor are on record, or neither is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.collect.logcursor import LogCursor
from sentinel.incidents.db import Database
from sentinel.incidents.evidence import attach_new
from sentinel.incidents.models import LogCursorRow, LogEventRow
from sentinel.model import LogEvent

_NO_CURSORS: Mapping[str, LogCursor] = {}


def _dt(t_ms: int) -> datetime:
    return datetime.fromtimestamp(t_ms / 1000, tz=UTC)


def _ms(at: datetime) -> int:
    return round(at.timestamp() * 1000)


def _now(now_ms: int | None) -> datetime:
    return _dt(now_ms) if now_ms is not None else datetime.now(UTC)


def record_log_events(
    db: Database,
    events: Sequence[LogEvent],
    *,
    cursors: Mapping[str, LogCursor] = _NO_CURSORS,
    now_ms: int | None = None,
) -> list[int]:
    """Insert the events (and save `cursors` in the same transaction); their new ids in order."""
    created = _now(now_ms)
    rows = [
        LogEventRow(
            target=e.target, source=e.source, signature=e.signature, category=e.category,
            severity=e.severity, at=_dt(e.t_ms), line_no=e.line_no, excerpt=list(e.excerpt),
            runbook=e.runbook, created_at=created,
        )
        for e in events
    ]
    with db.session() as session:
        session.add_all(rows)
        for key, cursor in cursors.items():
            _put_cursor(session, key, cursor, created)
        session.flush()
        attach_new(session, rows)
        return [row.id for row in rows]


def recent_log_events(db: Database, target: str, since_ms: int, limit: int = 20) -> list[LogEvent]:
    """The newest `limit` events of `target` at or after `since_ms`, oldest first."""
    query = (
        select(LogEventRow)
        .where(LogEventRow.target == target, LogEventRow.at >= _dt(since_ms))
        .order_by(LogEventRow.at.desc(), LogEventRow.id.desc())
        .limit(limit)
    )
    with db.session() as session:
        rows = session.scalars(query).all()
    return [
        LogEvent(
            target=r.target, source=r.source, signature=r.signature, category=r.category,
            severity=r.severity, t_ms=_ms(r.at), line_no=r.line_no,
            excerpt=tuple(str(line) for line in r.excerpt), runbook=r.runbook,
        )
        for r in reversed(rows)
    ]


def load_cursor(db: Database, key: str) -> LogCursor | None:
    """The saved cursor of a log source, or None."""
    with db.session() as session:
        row = session.get(LogCursorRow, key)
        if row is None:
            return None
        return LogCursor(at=row.at, insert_ids=frozenset(str(i) for i in row.insert_ids))


def save_cursor(db: Database, key: str, cursor: LogCursor, *, now_ms: int | None = None) -> None:
    """Insert or replace the cursor of a log source."""
    with db.session() as session:
        _put_cursor(session, key, cursor, _now(now_ms))


def _put_cursor(session: Session, key: str, cursor: LogCursor, now: datetime) -> None:
    # Sorted, so the stored JSON is stable and diffs of the row stay readable.
    ids = sorted(cursor.insert_ids)
    row = session.get(LogCursorRow, key)
    if row is None:
        session.add(LogCursorRow(key=key, at=cursor.at, insert_ids=ids, updated_at=now))
    else:
        row.at, row.insert_ids, row.updated_at = cursor.at, ids, now


class DbCursorStore:
    """A `CursorStore` over the database (`log_cursors`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def load(self, key: str) -> LogCursor | None:
        """The saved cursor, or None."""
        return load_cursor(self.db, key)

    def save(self, key: str, cursor: LogCursor) -> None:
        """Insert or replace the cursor."""
        save_cursor(self.db, key, cursor)
