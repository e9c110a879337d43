"""One-off pages (remediation refused, remediation gave up): routed and silenced like
alerts, but sent once through the outbox instead of joining a group.

A synthetic alert about a decision has no "resolved" to wait for; in a group
it would stay firing and be repeated every `repeat_interval` forever. So a
page is one outbox message per routed receiver, with an idempotency key made
from the incident, the title and the reason (the same page twice is the same
message to a receiver that de-duplicates), and, when asked, an escalation to
the fallback receiver.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.models import TimelineEvent, TimelineKind
from sentinel.incidents.models_notify import OutboxMessage
from sentinel.model import Notification
from sentinel.respond.notify.mute import silenced_by
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import Route, match_routes
from sentinel.respond.notify.silences import active_silences


def page_once(s: Session, outbox: Outbox, route: Route | None, notification: Notification,
              now_ms: int, *, escalate: bool = False) -> list[str]:
    """Queue the page in the caller's transaction; the receivers newly queued for.

    None when silenced (said on the timeline) or when the same page is queued already.
    """
    alert = notification.alerts[0]
    title = dict(alert.labels).get("alertname", "")
    reason = dict(alert.annotations).get("summary", "")
    base = f"page|{notification.incident_id}|{title}|{reason}"
    muted = silenced_by(alert.labels, active_silences(s, now_ms), now_ms)
    if muted is not None:
        _note(s, notification.incident_id, f"page {title} not sent: {muted.text}", now_ms,
              {"muted": muted.text, "silence_id": muted.silence_id})
        return []
    receivers = [] if route is None else sorted({r.receiver for r in match_routes(route,
                                                                                  alert.labels)})
    sent = []
    for receiver in receivers:
        key = _key(f"{base}|{receiver}")
        if _queued(s, key):
            continue  # the same page was queued before (e.g. before a restart): once is enough
        outbox.add_message(s, receiver, replace(notification, idempotency_key=key,
                                                group_key=f"page:{key}"), now_ms)
        sent.append(receiver)
    if escalate and sent:
        outbox.escalate(s, replace(notification, idempotency_key=_key(base)), reason or title,
                        now_ms)
    return sent


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _queued(s: Session, key: str) -> bool:
    return s.scalar(select(OutboxMessage.id).where(OutboxMessage.idempotency_key == key)) \
        is not None


def _note(s: Session, incident_id: int, message: str, now_ms: int, data: dict[str, object]
          ) -> None:
    if incident_id:
        s.add(TimelineEvent(incident_id=incident_id, at=ms_to_dt(now_ms), kind=TimelineKind.NOTE,
                            message=message, data=data))
