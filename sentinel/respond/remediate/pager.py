"""Paging on-call about remediation: a synthetic alert through the notification receivers.

`NotifyPager` turns `page(incident_id, title, reason, labels)` into a
Notification with one firing alert named `title` (SentinelRemediationRefused,
SentinelRemediationGaveUp) labelled with the target, policy and reason, and
hands it to whatever delivers notifications (the daemon's Pipeline.notify).
Kept to this one seam so the notification stage can change underneath.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import Alert, AlertState, Notification, NotificationKind, labels_of
from sentinel.respond.notify.base import Receiver


class NotifyPager:
    """A Pager that sends through a notify callable `(Notification, now_ms) -> None`."""

    def __init__(self, notify: Callable[[Notification, int], None],
                 clock_ms: Callable[[], int]) -> None:
        self.notify = notify
        self.clock_ms = clock_ms

    def page(self, incident_id: int, title: str, reason: str, labels: Mapping[str, str]) -> None:
        """Send one firing synthetic alert for the incident."""
        now = self.clock_ms()
        alert_labels = labels_of({**labels, "alertname": title, "severity": "critical",
                                  "incident": str(incident_id)})
        alert = Alert(group="sentinel-remediation", rule=title, labels=alert_labels,
                      annotations=labels_of({"summary": reason}), state=AlertState.FIRING,
                      value=1.0, active_at_ms=now, last_eval_ms=now, fired_at_ms=now)
        group = labels_of({"alertname": title, "target": labels.get("target", "")})
        self.notify(Notification(incident_id, NotificationKind.FIRING, (alert,), group), now)


def receivers_notify(receivers: Sequence[Receiver], tracker: IncidentTracker
                     ) -> Callable[[Notification, int], None]:
    """A notify callable for tools without a Pipeline: send to each receiver, record each."""
    def notify(notification: Notification, now_ms: int) -> None:
        fingerprints = [a.fingerprint for a in notification.alerts]
        for receiver in receivers:
            result = receiver.send(notification, now_ms)
            tracker.record_notification(notification.incident_id, receiver.name,
                                        notification.kind, result.ok, result.detail, now_ms,
                                        fingerprints)
    return notify
