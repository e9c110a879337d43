"""Generic webhook receiver: POSTs Alertmanager's JSON payload to a URL.

Each request carries `Idempotency-Key` (the same on every attempt of one
message) and, with a shared secret, `X-Sentinel-Signature: sha256=<hex>`:
the HMAC-SHA256 of the exact body, so the receiver can check who sent it.
Failures are classified (see base.classify) and described without the URL's
secret parts: the URL, its path and query values, header values and the
HMAC secret are known to this receiver's Redactor, and any response text is
redacted too, since servers like to echo the request path in a 404 page.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Mapping

import httpx

from sentinel.config.notify import DEFAULT_SIGNATURE_HEADER, WebhookConfig
from sentinel.model import Notification, NotificationKind
from sentinel.respond.notify.base import DeliveryResult
from sentinel.respond.notify.httppost import USER_AGENT, JsonPoster
from sentinel.respond.notify.payload import alertmanager_payload
from sentinel.secrets import Redactor, url_secret_parts

__all__ = ["USER_AGENT", "WebhookReceiver", "sign"]

log = logging.getLogger(__name__)


def sign(secret: str, body: bytes) -> str:
    """The signature header's value: `sha256=` and the hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookReceiver:
    """Delivers notifications to one webhook URL. Thread-safe; never raises from `send`."""

    def __init__(
        self,
        name: str,
        url: str,
        timeout_s: float = 10.0,
        headers: Mapping[str, str] | None = None,
        send_resolved: bool = True,
        client: httpx.Client | None = None,
        *,
        external_url: str = "",
        hmac_secret: str = "",
        signature_header: str = DEFAULT_SIGNATURE_HEADER,
    ) -> None:
        self.name = name
        self.send_resolved = send_resolved
        self.external_url = external_url
        self._secret = hmac_secret
        self._signature_header = signature_header
        self.redactor = Redactor([*url_secret_parts(url), *(headers or {}).values(), hmac_secret])
        self._poster = JsonPoster(url, timeout_s, headers, self.redactor, client)

    @classmethod
    def from_config(
        cls, name: str, config: WebhookConfig, external_url: str,
        client: httpx.Client | None = None,
    ) -> WebhookReceiver:
        """Build from a receiver's `webhook:` section."""
        return cls(name, config.url, config.timeout_ms / 1000, config.headers,
                   config.send_resolved, client, external_url=external_url,
                   hmac_secret=config.hmac_secret, signature_header=config.signature_header)

    def __repr__(self) -> str:
        return f"WebhookReceiver({self.name!r})"  # never the URL

    def send(self, notification: Notification, now_ms: int) -> DeliveryResult:
        """POST the notification; the result says whether to retry. Never raises."""
        if notification.kind == NotificationKind.RESOLVED and not self.send_resolved:
            return DeliveryResult(ok=True, retryable=False, status=None,
                                  detail="send_resolved is off")
        try:
            payload = alertmanager_payload(notification, self.name, self.external_url, now_ms)
            body = json.dumps(payload, separators=(",", ":")).encode()
            headers = {}
            if notification.idempotency_key:
                headers["Idempotency-Key"] = notification.idempotency_key
            if self._secret:
                headers[self._signature_header] = sign(self._secret, body)
            result = self._poster.post(body, headers)
        except Exception as exc:  # a receiver must never take the loop down
            result = DeliveryResult(ok=False, retryable=False, status=None,
                                    detail=self.redactor.redact(f"cannot build request: {exc}"))
        if result.ok:
            log.debug("webhook %s: delivered incident %d (%s)", self.name,
                      notification.incident_id, result.detail)
        else:
            log.debug("webhook %s: delivery of incident %d failed (%s): %s", self.name,
                      notification.incident_id, "will retry" if result.retryable else "permanent",
                      result.detail)
        return result

    def close(self) -> None:
        """Close the HTTP client if this receiver created it."""
        self._poster.close()
