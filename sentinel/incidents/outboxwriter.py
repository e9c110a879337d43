"""What the incident stage writes notifications into: a seam, so notify is not imported here."""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.orm import Session

from sentinel.model import Notification


class OutboxWriter(Protocol):
    """Where notifications are recorded in the incident's own transaction (notify's Outbox)."""

    def enqueue(self, s: Session, notification: Notification, now_ms: int) -> None:
        """Record the intent to deliver `notification`, in session `s`."""
        ...
