"""The sender: claim due outbox messages, deliver them, record the outcome.

A message is claimed with a conditional UPDATE (`status = 'pending' AND the
lease is free`, rowcount 1) that sets a lease; only the claimer sends it.
The send happens outside any transaction; then the outcome is written:

- accepted: `sent`, and NOTIFICATION_SENT on every incident in the message;
- retryable (no response, 429, 5xx): due again after exponential backoff with
  jitter, at least the receiver's Retry-After; the first failure goes on the
  timeline, later ones only into `last_error` and the metrics;
- permanent (other 4xx), or retried for longer than `give_up_after`:
  `failed`, NOTIFICATION_FAILED on the timeline, and escalated to the
  fallback receiver.

A daemon killed between claim and outcome leaves a lease that runs out; the
message is then sent again with the same idempotency key (at-least-once).
Messages of one group go out in order: a later one waits for an earlier one.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import or_, select, update

from sentinel.backoff import retry_delay_ms
from sentinel.incidents.convert import dt_to_ms, ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import TimelineEvent, TimelineKind
from sentinel.incidents.models_notify import OutboxMessage, OutboxStatus
from sentinel.model import Notification, label_value
from sentinel.quietlog import QuietFailure
from sentinel.respond.notify.base import DeliveryResult, Receiver
from sentinel.respond.notify.codec import notification_from_json
from sentinel.respond.notify.outbox import Outbox

log = logging.getLogger(__name__)

SCAN_LIMIT = 1_000
DEFAULT_LEASE_MS = 30_000
LEASE_SLACK_MS = 5_000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter, capped; give up after `give_up_after_ms`."""

    initial_ms: int = 1_000
    max_ms: int = 5 * 60_000
    give_up_after_ms: int = 24 * 3600_000

    def delay_ms(self, attempts: int, retry_after_ms: int | None, rng: random.Random) -> int:
        """Wait before attempt `attempts + 1`: half to all of the capped exponential, at least
        Retry-After (even above the cap: the receiver said so)."""
        return retry_delay_ms(max(1, attempts), self.initial_ms, self.max_ms, rng,
                              retry_after_ms)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One attempt, as reported to the metrics hook."""

    receiver: str
    outcome: str  # success, retry, failure


class Sender:
    """Delivers outbox messages through the receivers, one claim at a time."""

    def __init__(self, db: Database, receivers: Mapping[str, Receiver], outbox: Outbox,
                 policy: RetryPolicy | None = None, *, lease_ms: Mapping[str, int] | None = None,
                 rng: random.Random | None = None,
                 on_delivery: Callable[[Delivery], None] | None = None,
                 may_send: Callable[[], bool] | None = None) -> None:
        self.db = db
        # HA: asked just before each send; a leader that lost its lease sends nothing.
        self._may_send = may_send
        self.receivers = dict(receivers)
        self.outbox = outbox
        self.policy = policy or RetryPolicy()
        self._lease_ms = dict(lease_ms or {})
        self._rng = rng or random.Random()
        self._on_delivery = on_delivery
        self._quiet: dict[str, QuietFailure] = {}

    def run(self, now_ms: int | Callable[[], int]) -> int:
        """Send every due message (in order per group); returns how many were attempted.

        `now_ms` may be a clock: a long run then stamps each outcome with its own time.
        """
        clock = now_ms if callable(now_ms) else (lambda: now_ms)
        failing: set[str] = set()
        attempted = 0
        for row_id, receiver in self._due(clock()):
            if receiver in failing:
                continue  # one failure per receiver per run; the rest wait their turn
            if not self._claim(row_id, receiver, clock()):
                continue
            attempted += 1
            if not self._deliver(row_id, clock):
                failing.add(receiver)
        return attempted

    def _due(self, now_ms: int) -> list[tuple[int, str]]:
        now = ms_to_dt(now_ms)
        with self.db.session() as s:
            rows = s.execute(select(
                OutboxMessage.id, OutboxMessage.receiver, OutboxMessage.group_key,
                OutboxMessage.next_attempt_at, OutboxMessage.lease_until,
            ).where(OutboxMessage.status == OutboxStatus.PENDING).order_by(
                OutboxMessage.id).limit(SCAN_LIMIT)).all()
        seen: set[tuple[str, str]] = set()
        out: list[tuple[int, str]] = []
        for row_id, receiver, group_key, next_at, lease in rows:
            first_of_group = (receiver, group_key) not in seen
            seen.add((receiver, group_key))
            if first_of_group and next_at <= now and (lease is None or lease <= now):
                out.append((row_id, receiver))
        return out

    def _claim(self, row_id: int, receiver: str, now_ms: int) -> bool:
        now = ms_to_dt(now_ms)
        lease = now + timedelta(milliseconds=self._lease_ms.get(receiver, DEFAULT_LEASE_MS)
                                + LEASE_SLACK_MS)
        with self.db.session() as s:
            result = s.execute(update(OutboxMessage).where(
                OutboxMessage.id == row_id, OutboxMessage.status == OutboxStatus.PENDING,
                or_(OutboxMessage.lease_until.is_(None), OutboxMessage.lease_until <= now),
            ).values(lease_until=lease, attempts=OutboxMessage.attempts + 1))
            return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def _deliver(self, row_id: int, clock: Callable[[], int]) -> bool:
        """Send one claimed message and record the outcome; False when it failed."""
        with self.db.session() as s:
            row = s.get(OutboxMessage, row_id)
            assert row is not None
            receiver_name, data = row.receiver, row.notification
        notification = notification_from_json(data)
        if self._may_send is not None and not self._may_send():
            return False  # the claim's lease runs out; the new leader sends it
        receiver = self.receivers.get(receiver_name)
        if receiver is None:
            result = DeliveryResult(False, False, None, f"no receiver named {receiver_name!r} "
                                    "is configured")
        else:
            try:
                result = receiver.send(notification, clock())
            except Exception as exc:  # a receiver must never take the loop down
                log.exception("receiver %s raised", receiver_name)
                result = DeliveryResult(False, True, None, f"receiver raised {type(exc).__name__}")
        self._record(row_id, notification, result, clock())
        return result.ok

    def _record(self, row_id: int, n: Notification, result: DeliveryResult, now_ms: int) -> None:
        now = ms_to_dt(now_ms)
        with self.db.session() as s:
            row = s.get(OutboxMessage, row_id)
            assert row is not None
            row.lease_until = None
            row.last_error = "" if result.ok else result.detail
            age_ms = now_ms - dt_to_ms(row.created_at)
            if result.ok:
                row.status, row.finished_at, outcome = OutboxStatus.SENT, now, "success"
            elif result.retryable and age_ms < self.policy.give_up_after_ms:
                delay = self.policy.delay_ms(row.attempts, result.retry_after_ms, self._rng)
                row.next_attempt_at = now + timedelta(milliseconds=delay)
                outcome = "retry"
            else:
                row.status, row.finished_at, outcome = OutboxStatus.FAILED, now, "failure"
            if outcome != "retry" or row.attempts == 1:
                _timeline(s, row, n, result, outcome, now_ms)
            if outcome == "failure" and row.escalated_from is None and (
                    row.receiver != self.outbox.fallback_receiver):
                why = "gave up retrying" if result.retryable else "permanent failure"
                self.outbox.escalate(s, n, f"delivery to {row.receiver} failed ({why}): "
                                     f"{result.detail}", now_ms, escalated_from=row.id)
        log.debug("notification %s to %s: %s (%s)", n.idempotency_key[:12], row.receiver,
                  outcome, result.detail)
        if outcome != "retry":  # the story: one line per page sent or given up on
            alertname = label_value(n.alerts[0].labels, "alertname") if n.alerts else None
            log.log(logging.INFO if result.ok else logging.WARNING,
                    "%s page to %s %s (incidents %s)", n.kind, row.receiver,
                    "sent" if result.ok else "failed for good",
                    ", ".join(map(str, row.incident_ids)) or "none",
                    extra={"incident": row.incident_ids[0] if row.incident_ids else None,
                           "receiver": row.receiver, "alertname": alertname,
                           "outcome": "sent" if result.ok else "failed"})
        # A receiver that is down is logged once, then summarised each minute (quietlog).
        quiet = self._quiet.setdefault(row.receiver, QuietFailure(
            log, f"delivery to receiver {row.receiver}"))
        if result.ok:
            quiet.ok()
        else:
            quiet.failed(detail=f"{outcome}: {result.detail}")
        if self._on_delivery is not None:
            self._on_delivery(Delivery(row.receiver, outcome))


def _timeline(s, row: OutboxMessage, n: Notification, result: DeliveryResult,  # noqa: ANN001
              outcome: str, now_ms: int) -> None:
    kind = TimelineKind.NOTIFICATION_SENT if result.ok else TimelineKind.NOTIFICATION_FAILED
    verb = {"success": "sent", "retry": "failed, will retry", "failure": "failed"}[outcome]
    message = f"{n.kind} notification to {row.receiver} {verb}: {result.detail}"
    for incident_id in row.incident_ids:
        fps = [a.fingerprint for a, i in zip(n.alerts, n.incident_ids, strict=False)
               if i == incident_id] or [a.fingerprint for a in n.alerts]
        s.add(TimelineEvent(
            incident_id=incident_id, at=ms_to_dt(now_ms), kind=kind, message=message,
            data={"receiver": row.receiver, "kind": str(n.kind), "fingerprints": fps,
                  "detail": result.detail, "idempotency_key": row.idempotency_key,
                  "attempt": row.attempts, "outcome": outcome}))
