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
from sentinel.collect.logfile import FilePosition
from sentinel.incidents.db import Database
from sentinel.incidents.evidence import attach_new
from sentinel.incidents.models import LogCursorRow, LogEventRow, LogFilePositionRow
from sentinel.model import LogEvent

_NO_CURSORS: Mapping[str, LogCursor] = {}
_NO_POSITIONS: Mapping[str, FilePosition] = {}
_U64 = 1 << 64  # dev and inode are unsigned 64-bit; BIGINT is signed


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
    positions: Mapping[str, FilePosition] = _NO_POSITIONS,
    now_ms: int | None = None,
) -> list[int]:
    """Insert the events (and save `cursors` and file `positions` in the same transaction).

    Returns the events' new ids in order.
    """
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
        for key, position in positions.items():
            _put_position(session, key, position, created)
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


def signature_counts_since(db: Database, target: str, since_ms: int
                           ) -> list[tuple[str, str, int]]:
    """(signature, category, recorded at ms) of `target`'s events recorded after `since_ms`.

    Oldest first, timed as they were counted (`created_at`, the poll that
    found them), not by the line's own time: what the signature counter series
    held, so a restarted or new leader can rebuild it (daemon/logwatch.py).
    """
    query = (
        select(LogEventRow.signature, LogEventRow.category, LogEventRow.created_at)
        .where(LogEventRow.target == target, LogEventRow.created_at > _dt(since_ms))
        .order_by(LogEventRow.created_at, LogEventRow.id)
    )
    with db.session() as session:
        return [(sig, cat, _ms(at)) for sig, cat, at in session.execute(query)]


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


def _signed(n: int) -> int:
    return n - _U64 if n >= _U64 // 2 else n


def _unsigned(n: int) -> int:
    return n + _U64 if n < 0 else n


def load_position(db: Database, key: str) -> FilePosition | None:
    """The saved position of a followed log file, or None."""
    with db.session() as session:
        row = session.get(LogFilePositionRow, key)
        if row is None:
            return None
        return FilePosition(_unsigned(row.dev), _unsigned(row.inode), row.offset, row.line_no)


def save_position(db: Database, key: str, position: FilePosition, *,
                  now_ms: int | None = None) -> None:
    """Insert or replace the position of a followed log file."""
    with db.session() as session:
        _put_position(session, key, position, _now(now_ms))


def _put_position(session: Session, key: str, p: FilePosition, now: datetime) -> None:
    row = session.get(LogFilePositionRow, key)
    if row is None:
        row = LogFilePositionRow(key=key)
        session.add(row)
    row.dev, row.inode, row.offset = _signed(p.dev), _signed(p.inode), p.offset
    row.line_no, row.updated_at = p.line_no, now


class DbPositionStore:
    """A `PositionStore` over the database (`log_file_positions`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def load(self, key: str) -> FilePosition | None:
        """The saved position, or None."""
        return load_position(self.db, key)

    def save(self, key: str, position: FilePosition) -> None:
        """Save the position in its own transaction."""
        save_position(self.db, key, position)
