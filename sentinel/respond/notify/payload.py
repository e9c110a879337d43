"""The Alertmanager webhook body (version "4"), built from a Notification.

Same shape as prometheus/alertmanager's notify/webhook `Message`, which
embeds template.Data: version, groupKey, truncatedAlerts, status, receiver,
groupLabels, commonLabels, commonAnnotations, externalURL and alerts[] with
status, labels, annotations, startsAt, endsAt, generatorURL, fingerprint.
Receivers written for Alertmanager therefore accept Sentinel unchanged.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sentinel.model import (
    Alert,
    AlertState,
    Labels,
    Notification,
    NotificationKind,
    format_labels,
)

WEBHOOK_VERSION = "4"
# Go's zero time.Time, which Alertmanager sends as endsAt of a firing alert
# whose end is unknown.
ZERO_TIME = "0001-01-01T00:00:00Z"


def rfc3339(ms: int) -> str:
    """Milliseconds since the epoch as RFC 3339 in UTC with Z, trailing zero fractions dropped.

    Go's time.Time marshals the same way (RFC3339Nano), e.g.
    "2024-05-01T12:00:00Z" and "2024-05-01T12:00:00.25Z".
    """
    dt = datetime.fromtimestamp(ms // 1000, tz=UTC)
    frac = f"{ms % 1000:03d}".rstrip("0")
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def alert_status(alert: Alert) -> str:
    """"firing" or "resolved", as Alertmanager reports each alert."""
    firing = alert.state == AlertState.FIRING and alert.resolved_at_ms is None
    return "firing" if firing else "resolved"


def group_key(notification: Notification) -> str:
    """A stable key for the notification's group, in Alertmanager's `route:{labels}` form.

    It includes the incident id, so receivers that de-duplicate on groupKey
    (PagerDuty, Opsgenie bridges) keep one page per incident.
    """
    if notification.group_key:
        return notification.group_key  # the aggregation group's, set by routing
    labels = format_labels(notification.group_labels)
    return f'{{}}/{{incident="{notification.incident_id}"}}:{labels or "{}"}'


def alertmanager_payload(
    notification: Notification, receiver: str, external_url: str, now_ms: int
) -> dict[str, Any]:
    """Alertmanager's webhook JSON body for one notification (`now_ms` unused today, kept for
    receivers that stamp the send time)."""
    del now_ms  # the body carries alert times only, as Alertmanager's does
    ids = notification.incident_ids or (notification.incident_id,) * len(notification.alerts)
    alerts = [_alert(a, i, external_url) for a, i in zip(notification.alerts, ids, strict=False)]
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    if notification.kind is NotificationKind.UPDATE:
        # Not Alertmanager's: more about a page already sent (the same groupKey), e.g. the
        # model's runbook that came after it. Receivers that know only firing/resolved
        # can ignore it.
        status = "update"
    return {
        "version": WEBHOOK_VERSION,
        "groupKey": group_key(notification),
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": _kv(notification.group_labels),
        "commonLabels": _common([a.labels for a in notification.alerts]),
        "commonAnnotations": _common([a.annotations for a in notification.alerts]),
        "externalURL": external_url,
        "alerts": alerts,
    }


def generator_url(external_url: str, incident_id: int) -> str:
    """Where the alert can be looked at: the incident in Sentinel's API."""
    return f"{external_url.rstrip('/')}/incidents/{incident_id}"


def _alert(alert: Alert, incident_id: int, external_url: str) -> dict[str, Any]:
    status = alert_status(alert)
    # Prometheus sends the time the alert started firing (FiredAt) as startsAt.
    starts = alert.fired_at_ms if alert.fired_at_ms is not None else alert.active_at_ms
    ends = alert.resolved_at_ms if status == "resolved" else None
    if status == "resolved" and ends is None:
        ends = alert.last_eval_ms
    return {
        "status": status,
        "labels": _kv(alert.labels),
        "annotations": _kv(alert.annotations),
        "startsAt": rfc3339(starts),
        "endsAt": rfc3339(ends) if ends is not None else ZERO_TIME,
        "generatorURL": generator_url(external_url, incident_id),
        "fingerprint": alert.fingerprint,
    }


def _kv(labels: Labels) -> dict[str, str]:
    return {k: v for k, v in labels}


def _common(sets: list[Labels]) -> dict[str, str]:
    """The pairs every set shares (Alertmanager's commonLabels / commonAnnotations)."""
    if not sets:
        return {}
    common = set(sets[0])
    for s in sets[1:]:
        common &= set(s)
    return dict(sorted(common))
