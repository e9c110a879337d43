"""Paging on-call about remediation: a synthetic alert through the notification receivers.

`NotifyPager` turns `page(incident_id, title, reason, labels)` into a
Notification with one firing alert named `title` (SentinelRemediationRefused,
SentinelRemediationGaveUp) labelled with the target, policy and reason, and
hands it to whatever delivers notifications: in the daemon, the notify
stage's one-off page through the outbox (`Notifier.page`), escalated to the
fallback receiver when remediation gave up; for `sentinel remediate`, the
receivers directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import Alert, AlertState, Notification, NotificationKind, labels_of
from sentinel.respond.notify.base import Receiver
from sentinel.respond.remediate.engine import GAVE_UP


class NotifyPager:
    """A Pager that sends through `notify(notification, now_ms, escalate)`."""

    def __init__(self, notify: Callable[[Notification, int, bool], None],
                 clock_ms: Callable[[], int],
                 recovered: Callable[[int, int, str, dict[str, Any]], None] | None = None,
                 not_fixed: Callable[[int, int, str], None] | None = None) -> None:
        self.notify = notify
        self.clock_ms = clock_ms
        self._recovered = recovered
        self._not_fixed = not_fixed

    def not_fixed(self, incident_id: int, why: str) -> None:
        """Refused, parked, failed or not verified: a page held while Sentinel acts goes now."""
        if self._not_fixed is not None:
            self._not_fixed(incident_id, self.clock_ms(), why)

    def recovered(self, incident_id: int, why: str, data: dict[str, Any]) -> None:
        """A verified recovery: end the incident now (the daemon's `Notifier.recovered`)."""
        if self._recovered is not None:
            self._recovered(incident_id, self.clock_ms(), why, data)

    def page(self, incident_id: int, title: str, reason: str, labels: Mapping[str, str]) -> None:
        """Send one firing synthetic alert for the incident (critical unless `labels` says:
        a demotion notice is a warning)."""
        now = self.clock_ms()
        alert_labels = labels_of({**labels, "alertname": title,
                                  "severity": labels.get("severity", "critical"),
                                  "incident": str(incident_id)})
        alert = Alert(group="sentinel-remediation", rule=title, labels=alert_labels,
                      annotations=labels_of({"summary": reason}), state=AlertState.FIRING,
                      value=1.0, active_at_ms=now, last_eval_ms=now, fired_at_ms=now)
        group = labels_of({"alertname": title, "target": labels.get("target", "")})
        self.notify(Notification(incident_id, NotificationKind.FIRING, (alert,), group), now,
                    title == GAVE_UP)


def receivers_notify(receivers: Sequence[Receiver], tracker: IncidentTracker
                     ) -> Callable[[Notification, int, bool], None]:
    """A notify callable for tools without the daemon: send to each receiver, record each."""
    def notify(notification: Notification, now_ms: int, escalate: bool) -> None:
        del escalate  # every receiver gets it already
        fingerprints = [a.fingerprint for a in notification.alerts]
        for receiver in receivers:
            result = receiver.send(notification, now_ms)
            tracker.record_notification(notification.incident_id, receiver.name,
                                        notification.kind, result.ok, result.detail, now_ms,
                                        fingerprints)
    return notify
