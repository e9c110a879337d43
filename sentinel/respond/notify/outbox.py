"""The transactional outbox: record the intent to notify in the incident's own transaction.

Two entry points write into it, both inside a caller's session so the intent
commits (or rolls back) with the change that caused it:

- `Outbox.enqueue(session, notification, now_ms)`: per-alert intents; the
  dispatcher routes, groups, silences and inhibits them. The incident tracker
  calls it; so can any stage with a synthetic alert on an incident (e.g.
  remediation's "page on-call").
- `Outbox.escalate(session, notification, reason, now_ms)`: a message straight
  to the fallback receiver, bypassing routing and grouping (a delivery that
  failed for good, remediation that gave up).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace

from sqlalchemy.orm import Session

from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.models import TimelineEvent, TimelineKind
from sentinel.incidents.models_notify import NotifyIntent, OutboxMessage, OutboxStatus
from sentinel.incidents.operator import acknowledged
from sentinel.model import AlertState, Notification, NotificationKind
from sentinel.respond.notify.codec import alert_to_json, notification_to_json

log = logging.getLogger(__name__)
# The row kinds that end an incident's story (the row's kind is firing or resolved).
_ENDINGS = (NotificationKind.RESOLVED, NotificationKind.FIXED)


class Outbox:
    """Writes notify intents and outbox messages; knows the fallback receiver, if any."""

    def __init__(self, fallback_receiver: str | None = None) -> None:
        self.fallback_receiver = fallback_receiver

    def enqueue(self, s: Session, notification: Notification, now_ms: int) -> None:
        """One intent per alert of the notification, in the caller's transaction."""
        now = ms_to_dt(now_ms)
        for alert in notification.alerts:
            kind = "firing" if alert.state is AlertState.FIRING else "resolved"
            s.add(NotifyIntent(incident_id=notification.incident_id,
                               fingerprint=alert.fingerprint, kind=kind,
                               alert=alert_to_json(alert), created_at=now, dispatched_at=None))

    def add_message(self, s: Session, receiver: str, notification: Notification, now_ms: int,
                    escalated_from: int | None = None) -> OutboxMessage:
        """One message for one receiver, due now; the idempotency key comes with `notification`."""
        now = ms_to_dt(now_ms)
        ids = sorted((set(notification.incident_ids) | {notification.incident_id}) - {0})
        row = OutboxMessage(
            receiver=receiver, group_key=notification.group_key,
            idempotency_key=notification.idempotency_key,
            # The row's kind is firing or resolved (an update is about firing alerts);
            # the message itself keeps its own kind.
            kind="resolved" if notification.kind in _ENDINGS else "firing",
            notification=notification_to_json(notification), incident_ids=ids,
            status=OutboxStatus.PENDING, attempts=0, next_attempt_at=now, lease_until=None,
            last_error="", escalated_from=escalated_from, created_at=now, finished_at=None)
        s.add(row)
        return row

    def escalate(self, s: Session, notification: Notification, reason: str, now_ms: int,
                 escalated_from: int | None = None) -> bool:
        """Page the fallback receiver with this notification; False when none is configured,
        or when every incident it is about is acknowledged (a person has it: said on the
        timeline instead)."""
        ids = sorted((set(notification.incident_ids) | {notification.incident_id}) - {0})
        if self.fallback_receiver is not None and acknowledged(s, ids):
            for incident_id in ids:
                s.add(TimelineEvent(
                    incident_id=incident_id, at=ms_to_dt(now_ms), kind=TimelineKind.NOTE,
                    message=f"not escalated (acknowledged): {reason}",
                    data={"escalation": False, "acknowledged": True, "reason": reason}))
            return False
        if self.fallback_receiver is None:
            log.warning("nothing to escalate to (no notify.fallback_receiver): %s", reason)
            return False
        base = notification.idempotency_key or notification.group_key or str(
            notification.incident_id)
        key = hashlib.sha256(f"escalation|{base}|{reason}".encode()).hexdigest()[:32]
        self.add_message(s, self.fallback_receiver, replace(notification, idempotency_key=key),
                         now_ms, escalated_from=escalated_from)
        for incident_id in sorted(set(notification.incident_ids) | {notification.incident_id}):
            if incident_id:
                s.add(TimelineEvent(
                    incident_id=incident_id, at=ms_to_dt(now_ms), kind=TimelineKind.NOTE,
                    message=f"escalated to {self.fallback_receiver}: {reason}",
                    data={"escalation": True, "receiver": self.fallback_receiver,
                          "reason": reason}))
        return True
