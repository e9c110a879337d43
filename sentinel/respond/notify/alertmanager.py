"""Push to an existing Alertmanager: `POST <url>/api/v2/alerts`, so its routing stays in charge.

The body is a list of postable alerts `{labels, annotations, startsAt,
endsAt, generatorURL}`. Firing alerts get no endsAt (Alertmanager then
resolves them after its resolve_timeout unless pushed again, which group
repeats do); resolved alerts carry their end, which resolves them at once.
Alertmanager de-duplicates by labels, so a resend is harmless. 200 is
success; 400 (an invalid alert) is permanent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import httpx

from sentinel.config.notify import AlertmanagerConfig
from sentinel.model import Notification, NotificationKind
from sentinel.respond.notify.base import DeliveryResult
from sentinel.respond.notify.httppost import JsonPoster
from sentinel.respond.notify.payload import alertmanager_payload
from sentinel.secrets import Redactor, url_secret_parts

log = logging.getLogger(__name__)


def postable_alerts(n: Notification, external_url: str) -> list[dict[str, Any]]:
    """Alertmanager's PostableAlerts for a notification."""
    body = alertmanager_payload(n, "", external_url, 0)
    out = []
    for a in body["alerts"]:
        alert = {k: a[k] for k in ("labels", "annotations", "startsAt", "generatorURL")}
        if a["status"] == "resolved":
            alert["endsAt"] = a["endsAt"]
        out.append(alert)
    return out


class AlertmanagerReceiver:
    """Pushes alerts to one Alertmanager. Thread-safe; never raises from `send`."""

    def __init__(self, name: str, url: str, timeout_s: float = 10.0,
                 headers: Mapping[str, str] | None = None, send_resolved: bool = True,
                 client: httpx.Client | None = None, *, external_url: str = "") -> None:
        self.name = name
        self.send_resolved = send_resolved
        self.external_url = external_url
        self.redactor = Redactor([*url_secret_parts(url), *(headers or {}).values()])
        self._poster = JsonPoster(url.rstrip("/") + "/api/v2/alerts", timeout_s, headers,
                                  self.redactor, client)

    @classmethod
    def from_config(cls, name: str, config: AlertmanagerConfig, external_url: str,
                    client: httpx.Client | None = None) -> AlertmanagerReceiver:
        """Build from a receiver's `alertmanager:` section."""
        return cls(name, config.url, config.timeout_ms / 1000, config.headers,
                   config.send_resolved, client, external_url=external_url)

    def __repr__(self) -> str:
        return f"AlertmanagerReceiver({self.name!r})"

    def send(self, notification: Notification, now_ms: int) -> DeliveryResult:
        """Post the alerts; never raises."""
        if notification.kind == NotificationKind.RESOLVED and not self.send_resolved:
            return DeliveryResult(True, False, None, "send_resolved is off")
        try:
            body = json.dumps(postable_alerts(notification, self.external_url)).encode()
            result = self._poster.post(body)
        except Exception as exc:
            result = DeliveryResult(False, False, None,
                                    self.redactor.redact(f"cannot build request: {exc}"))
        if not result.ok:
            log.debug("alertmanager %s: push failed: %s", self.name, result.detail)
        return result

    def close(self) -> None:
        """Close the HTTP client if this receiver created it."""
        self._poster.close()
