"""Silences in the database: add, list, expire, and the active ones for the dispatcher.

Each silence has an integer id (the table's key, what the CLI and the timeline
show) and a UUID (what Alertmanager API v2 shows); both find it.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.incidents.convert import dt_to_ms, ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models_notify import SilenceRow
from sentinel.respond.notify.matchers import Matcher, from_lists
from sentinel.respond.notify.mute import Silence


class SilenceError(ValueError):
    """A silence cannot be created or expired as asked."""


@dataclass(frozen=True, slots=True)
class SilenceView:
    """A silence as `sentinel silence list` shows it."""

    id: int
    matchers: tuple[str, ...]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str
    state: str  # pending, active, expired
    uuid: str = ""


def add_silence(db: Database, matchers: Sequence[Matcher], starts_ms: int, ends_ms: int,
                created_by: str, comment: str, now_ms: int, uuid: str | None = None) -> int:
    """Store a silence; returns its id. Needs at least one matcher and an end after the start.

    `uuid` is its API v2 id, a new random one unless given.
    """
    if not matchers:
        raise SilenceError("a silence needs at least one matcher")
    if ends_ms <= starts_ms:
        raise SilenceError("a silence must end after it starts")
    with db.session() as s:
        row = SilenceRow(uuid=uuid or str(uuidlib.uuid4()),
                         matchers=[m.as_list() for m in matchers], starts_at=ms_to_dt(starts_ms),
                         ends_at=ms_to_dt(ends_ms), created_by=created_by, comment=comment,
                         created_at=ms_to_dt(now_ms))
        s.add(row)
        s.flush()
        return row.id


_MAX_ROW_ID = 2**63 - 1  # BIGINT


def find_silence(s: Session, silence_id: int | str) -> SilenceRow | None:
    """The silence with this integer id or UUID (as text either way)."""
    key = str(silence_id).strip()
    if key.isdigit():
        # '²'.isdigit() is true too, and an id past BIGINT overflows PostgreSQL's column:
        # neither can name a silence.
        if not key.isascii() or int(key) > _MAX_ROW_ID:
            return None
        return s.get(SilenceRow, int(key))
    return s.scalars(select(SilenceRow).where(SilenceRow.uuid == key.lower())).one_or_none()


def expire_silence(db: Database, silence_id: int | str, now_ms: int) -> None:
    """End a silence now (kept for the record). Expiring an expired one is an error.

    `silence_id` is its integer id or its UUID.
    """
    with db.session() as s:
        row = find_silence(s, silence_id)
        if row is None:
            raise SilenceError(f"no silence {silence_id}")
        now = ms_to_dt(now_ms)
        if row.ends_at <= now:
            raise SilenceError(f"silence {silence_id} already expired")
        row.ends_at = max(now, row.starts_at)


def list_silences(db: Database, now_ms: int, *, include_expired: bool = False) -> list[SilenceView]:
    """Silences, newest first; expired ones only when asked."""
    now = ms_to_dt(now_ms)
    with db.session() as s:
        q = select(SilenceRow).order_by(SilenceRow.id.desc())
        if not include_expired:
            q = q.where(SilenceRow.ends_at > now)
        return [SilenceView(r.id, tuple(str(m) for m in from_lists(r.matchers)), r.starts_at,
                            r.ends_at, r.created_by, r.comment, _state(r, now), r.uuid)
                for r in s.scalars(q)]


def active_silences(s: Session, now_ms: int) -> list[Silence]:
    """Silences in force at now_ms, for the dispatcher (in its session)."""
    now = ms_to_dt(now_ms)
    rows = s.scalars(select(SilenceRow).where(SilenceRow.starts_at <= now,
                                              SilenceRow.ends_at > now).order_by(SilenceRow.id))
    return [Silence(r.id, from_lists(r.matchers), dt_to_ms(r.starts_at), dt_to_ms(r.ends_at),
                    r.created_by, r.comment) for r in rows]


def _state(r: SilenceRow, now: datetime) -> str:
    if r.ends_at <= now:
        return "expired"
    return "active" if r.starts_at <= now else "pending"
