"""PagerDuty Events API v2: trigger while a group fires, resolve when it resolves.

Each group has one stable `dedup_key` (from its group key), so repeats and
new alerts in the group update the same PagerDuty alert and the resolve
closes it. The body is `{routing_key, event_action, dedup_key, payload:
{summary, source, severity, timestamp, component, group, class,
custom_details}, links, client, client_url}`; a resolve carries only
routing_key, event_action and dedup_key. Severity comes from the alerts'
`severity` label through `severity_map`. PagerDuty answers 202; 400 is a bad
event (permanent), 429 and 5xx are retried. The routing key is the secret.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import httpx

from sentinel.config.notify import PagerDutyConfig
from sentinel.model import Notification, NotificationKind, label_value
from sentinel.respond.notify.base import DeliveryResult
from sentinel.respond.notify.grouping import dedup_key
from sentinel.respond.notify.httppost import JsonPoster
from sentinel.respond.notify.payload import alert_status, generator_url, rfc3339
from sentinel.secrets import Redactor, url_secret_parts

log = logging.getLogger(__name__)

SUMMARY_MAX = 1024
SEVERITY_ORDER = ("info", "warning", "error", "critical")


def pagerduty_body(n: Notification, routing_key: str, severity_map: Mapping[str, str],
                   default_severity: str, external_url: str) -> dict[str, Any]:
    """The Events API v2 event for one notification."""
    key = dedup_key(n.group_key or f"incident/{n.incident_id}")
    if n.kind in (NotificationKind.RESOLVED, NotificationKind.FIXED):
        # A fix nobody was paged for triggers no page: at most it ends the same dedup_key.
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": key}
    firing = [a for a in n.alerts if alert_status(a) == "firing"] or list(n.alerts)
    first = firing[0]
    name = label_value(n.group_labels, "alertname") or first.name
    summary = dict(first.annotations).get("summary") or name
    if len(firing) > 1:
        summary = f"[{len(firing)} alerts] {summary}"
    sevs = [severity_map.get(label_value(a.labels, "severity"), default_severity) for a in firing]
    target = label_value(first.labels, "target") or label_value(first.labels, "instance")
    body: dict[str, Any] = {
        "routing_key": routing_key, "event_action": "trigger", "dedup_key": key,
        "payload": {
            "summary": summary[:SUMMARY_MAX], "source": target or "sentinel",
            "severity": max(sevs, key=SEVERITY_ORDER.index),
            "timestamp": rfc3339(first.fired_at_ms or first.active_at_ms),
            "component": target, "group": name, "class": name,
            "custom_details": {
                "firing": [dict(a.labels) for a in firing],
                "annotations": dict(first.annotations),
                "num_firing": len(firing),
            },
        },
        "client": "Sentinel",
    }
    if external_url and n.incident_id:
        link = generator_url(external_url, n.incident_id)
        body["client_url"] = link
        body["links"] = [{"href": link, "text": f"Sentinel incident {n.incident_id}"}]
    return body


class PagerDutyReceiver:
    """Sends events to PagerDuty's Events API v2. Thread-safe; never raises from `send`."""

    def __init__(self, name: str, routing_key: str, url: str, *, timeout_s: float = 10.0,
                 send_resolved: bool = True, severity_map: Mapping[str, str] | None = None,
                 default_severity: str = "error", external_url: str = "",
                 client: httpx.Client | None = None) -> None:
        self.name = name
        self.send_resolved = send_resolved
        self.external_url = external_url
        self._key = routing_key
        self._map = dict(severity_map or {})
        self._default = default_severity
        self.redactor = Redactor([routing_key, *url_secret_parts(url)[1:]])
        self._poster = JsonPoster(url, timeout_s, None, self.redactor, client)

    @classmethod
    def from_config(cls, name: str, config: PagerDutyConfig, external_url: str,
                    client: httpx.Client | None = None) -> PagerDutyReceiver:
        """Build from a receiver's `pagerduty:` section."""
        return cls(name, config.routing_key, config.url, timeout_s=config.timeout_ms / 1000,
                   send_resolved=config.send_resolved, severity_map=config.severity_map,
                   default_severity=config.default_severity, external_url=external_url,
                   client=client)

    def __repr__(self) -> str:
        return f"PagerDutyReceiver({self.name!r})"

    def send(self, notification: Notification, now_ms: int) -> DeliveryResult:
        """Trigger or resolve; never raises."""
        if notification.kind == NotificationKind.RESOLVED and not self.send_resolved:
            return DeliveryResult(True, False, None, "send_resolved is off")
        try:
            body = pagerduty_body(notification, self._key, self._map, self._default,
                                  self.external_url)
            result = self._poster.post(json.dumps(body).encode())
        except Exception as exc:
            result = DeliveryResult(False, False, None,
                                    self.redactor.redact(f"cannot build request: {exc}"))
        if not result.ok:
            log.debug("pagerduty %s: delivery failed: %s", self.name, result.detail)
        return result

    def close(self) -> None:
        """Close the HTTP client if this receiver created it."""
        self._poster.close()
