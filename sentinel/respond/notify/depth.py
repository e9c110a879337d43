"""How full the outbox is, for the self-metrics (depth and age of the oldest waiting message)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from sentinel.incidents.convert import dt_to_ms
from sentinel.incidents.db import Database
from sentinel.incidents.models_notify import NotifyIntent, OutboxMessage, OutboxStatus


@dataclass(frozen=True, slots=True)
class OutboxDepth:
    """Waiting messages, the oldest one's age, and intents not yet dispatched."""

    pending: int
    oldest_age_s: float
    intents: int


def outbox_depth(db: Database, now_ms: int) -> OutboxDepth:
    """Count what waits; two small aggregate queries."""
    with db.session() as s:
        count, oldest = s.execute(select(func.count(), func.min(OutboxMessage.created_at)).where(
            OutboxMessage.status == OutboxStatus.PENDING)).one()
        intents = s.scalar(select(func.count()).where(NotifyIntent.dispatched_at.is_(None)))
    age = max(0.0, (now_ms - dt_to_ms(oldest)) / 1000) if oldest is not None else 0.0
    return OutboxDepth(int(count), age, int(intents or 0))
