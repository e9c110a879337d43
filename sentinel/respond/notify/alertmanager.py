"""Push to an existing Alertmanager: `POST <url>/api/v2/alerts`, so its routing stays in charge.

The body is a list of postable alerts `{labels, annotations, startsAt,
endsAt, generatorURL}`, as Prometheus's notifier posts them: a firing alert's
endsAt is the send time + 4 x the receiver's resend interval, and the alert is
re-sent every resend interval while it fires (amresend.py), so Alertmanager
never lets it expire (its resolve_timeout only applies to alerts without
endsAt); a resolved alert carries its end, which resolves it at once.
Alertmanager de-duplicates by labels, so a resend is harmless. 200 is
success; 400 (an invalid alert) is permanent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import httpx

from sentinel.config.notify import DEFAULT_RESEND_INTERVAL_MS, AlertmanagerConfig
from sentinel.model import Notification, NotificationKind
from sentinel.respond.notify.base import DeliveryResult
from sentinel.respond.notify.httppost import JsonPoster
from sentinel.respond.notify.payload import alertmanager_payload, rfc3339
from sentinel.secrets import Redactor, url_secret_parts

log = logging.getLogger(__name__)

# Prometheus sets a firing alert's endsAt this many resend intervals ahead
# (notifier: `4 * resendDelay`), so three lost resends still do not expire it.
ENDS_AT_INTERVALS = 4


def postable_alerts(n: Notification, external_url: str, now_ms: int = 0,
                    resend_interval_ms: int = DEFAULT_RESEND_INTERVAL_MS) -> list[dict[str, Any]]:
    """Alertmanager's PostableAlerts for a notification sent at `now_ms`.

    Firing alerts end at now + 4 x the resend interval (they are re-sent before
    then while they fire); resolved ones at their resolution time.
    """
    body = alertmanager_payload(n, "", external_url, now_ms)
    ahead = rfc3339(now_ms + ENDS_AT_INTERVALS * resend_interval_ms)
    out = []
    for a in body["alerts"]:
        alert = {k: a[k] for k in ("labels", "annotations", "startsAt", "generatorURL")}
        alert["endsAt"] = a["endsAt"] if a["status"] == "resolved" else ahead
        out.append(alert)
    return out


class AlertmanagerReceiver:
    """Pushes alerts to one Alertmanager. Thread-safe; never raises from `send`."""

    def __init__(self, name: str, url: str, timeout_s: float = 10.0,
                 headers: Mapping[str, str] | None = None, send_resolved: bool = True,
                 client: httpx.Client | None = None, *, external_url: str = "",
                 resend_interval_ms: int = DEFAULT_RESEND_INTERVAL_MS) -> None:
        self.name = name
        self.send_resolved = send_resolved
        self.external_url = external_url
        self.resend_interval_ms = resend_interval_ms
        self.redactor = Redactor([*url_secret_parts(url), *(headers or {}).values()])
        self._poster = JsonPoster(url.rstrip("/") + "/api/v2/alerts", timeout_s, headers,
                                  self.redactor, client)

    @classmethod
    def from_config(cls, name: str, config: AlertmanagerConfig, external_url: str,
                    client: httpx.Client | None = None) -> AlertmanagerReceiver:
        """Build from a receiver's `alertmanager:` section."""
        return cls(name, config.url, config.timeout_ms / 1000, config.headers,
                   config.send_resolved, client, external_url=external_url,
                   resend_interval_ms=config.resend_interval_ms)

    def __repr__(self) -> str:
        return f"AlertmanagerReceiver({self.name!r})"

    def send(self, notification: Notification, now_ms: int) -> DeliveryResult:
        """Post the alerts; never raises."""
        if notification.kind == NotificationKind.RESOLVED and not self.send_resolved:
            return DeliveryResult(True, False, None, "send_resolved is off")
        try:
            body = json.dumps(postable_alerts(notification, self.external_url, now_ms,
                                              self.resend_interval_ms)).encode()
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
