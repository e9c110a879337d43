"""Alerts and Notifications as JSON for the notify tables (intents, groups, outbox).

Round-trips exactly: NaN and infinities are stored as strings, labels sorted.
"""

from __future__ import annotations

import math
from typing import Any

from sentinel.model import Alert, AlertState, Notification, NotificationKind, labels_of


def alert_to_json(alert: Alert) -> dict[str, Any]:
    """An Alert as a JSON-safe dict."""
    return {
        "group": alert.group, "rule": alert.rule, "labels": dict(alert.labels),
        "annotations": dict(alert.annotations), "state": str(alert.state),
        "value": _value_out(alert.value), "active_at_ms": alert.active_at_ms,
        "last_eval_ms": alert.last_eval_ms, "fired_at_ms": alert.fired_at_ms,
        "resolved_at_ms": alert.resolved_at_ms,
    }


def alert_from_json(data: dict[str, Any]) -> Alert:
    """The Alert `alert_to_json` wrote."""
    return Alert(
        group=data["group"], rule=data["rule"], labels=labels_of(data["labels"]),
        annotations=labels_of(data["annotations"]), state=AlertState(data["state"]),
        value=_value_in(data["value"]), active_at_ms=data["active_at_ms"],
        last_eval_ms=data["last_eval_ms"], fired_at_ms=data.get("fired_at_ms"),
        resolved_at_ms=data.get("resolved_at_ms"),
    )


def notification_to_json(n: Notification) -> dict[str, Any]:
    """A Notification as a JSON-safe dict (the outbox row's body)."""
    return {
        "incident_id": n.incident_id, "kind": str(n.kind),
        "alerts": [alert_to_json(a) for a in n.alerts], "group_labels": dict(n.group_labels),
        "group_key": n.group_key, "idempotency_key": n.idempotency_key,
        "incident_ids": list(n.incident_ids),
    }


def notification_from_json(data: dict[str, Any]) -> Notification:
    """The Notification `notification_to_json` wrote."""
    return Notification(
        incident_id=data["incident_id"], kind=NotificationKind(data["kind"]),
        alerts=tuple(alert_from_json(a) for a in data["alerts"]),
        group_labels=labels_of(data["group_labels"]), group_key=data["group_key"],
        idempotency_key=data["idempotency_key"], incident_ids=tuple(data["incident_ids"]),
    )


def _value_out(v: float) -> float | str:
    return v if math.isfinite(v) else str(v)


def _value_in(v: float | str) -> float:
    return float(v)
