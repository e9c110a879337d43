"""Generic webhook receiver: POSTs Alertmanager's JSON payload to a URL.

Failures are classified (see base.classify) and described without the URL's
secret parts: the URL, its path and query values and the header values are
known to this receiver's Redactor, and any response text is redacted too,
since servers like to echo the request path in a 404 page.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

import httpx

from sentinel import __version__
from sentinel.config import WebhookConfig
from sentinel.durations import format_duration
from sentinel.model import Notification, NotificationKind
from sentinel.respond.notify.base import DeliveryResult, result_for_status
from sentinel.respond.notify.payload import alertmanager_payload
from sentinel.secrets import Redactor, hide_http_client_urls, url_secret_parts

log = logging.getLogger(__name__)

USER_AGENT = f"Sentinel/{__version__}"
# Enough of an error response to say why, small enough for the timeline.
MAX_DETAIL_BODY = 512


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
    ) -> None:
        self.name = name
        self.send_resolved = send_resolved
        self.external_url = external_url
        self._url = url
        self._timeout_s = timeout_s
        self._headers = {**dict(headers or {}), "Content-Type": "application/json"}
        self._headers.setdefault("User-Agent", USER_AGENT)
        self._own_client = client is None
        self._client = client if client is not None else httpx.Client(follow_redirects=False)
        self.redactor = Redactor([*url_secret_parts(url), *(headers or {}).values()])
        # httpx logs each request's full URL at INFO; the URL is the secret here.
        hide_http_client_urls()

    @classmethod
    def from_config(
        cls, name: str, config: WebhookConfig, external_url: str,
        client: httpx.Client | None = None,
    ) -> WebhookReceiver:
        """Build from a receiver's `webhook:` section."""
        return cls(name, config.url, config.timeout_ms / 1000, config.headers,
                   config.send_resolved, client, external_url=external_url)

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
            result = self._post(body)
        except Exception as exc:  # a receiver must never take the loop down
            result = DeliveryResult(ok=False, retryable=False, status=None,
                                    detail=self.redactor.redact(f"cannot build request: {exc}"))
        if result.ok:
            log.debug("webhook %s: delivered incident %d (%s)", self.name,
                      notification.incident_id, result.detail)
        else:
            log.warning("webhook %s: delivery of incident %d failed (%s): %s", self.name,
                        notification.incident_id, "will retry" if result.retryable else "permanent",
                        result.detail)
        return result

    def close(self) -> None:
        """Close the HTTP client if this receiver created it."""
        if self._own_client:
            self._client.close()

    def _post(self, body: bytes) -> DeliveryResult:
        try:
            with self._client.stream("POST", self._url, content=body, headers=self._headers,
                                     timeout=self._timeout_s) as resp:
                snippet = _read_snippet(resp)
                status = resp.status_code
        except httpx.TimeoutException as exc:
            timeout = format_duration(int(self._timeout_s * 1000))
            return result_for_status(None, f"timed out after {timeout} ({type(exc).__name__})")
        except httpx.HTTPError as exc:
            return result_for_status(None, self.redactor.redact(f"{type(exc).__name__}: {exc}"))
        detail = f"HTTP {status}" + (f": {snippet}" if snippet and not 200 <= status <= 299 else "")
        return result_for_status(status, self.redactor.redact(detail))


def _read_snippet(resp: httpx.Response) -> str:
    """The first bytes of the response body as one line of text (the rest is not read)."""
    data = b""
    for chunk in resp.iter_bytes():
        data += chunk
        if len(data) >= MAX_DETAIL_BODY:
            break
    text = data[:MAX_DETAIL_BODY].decode("utf-8", errors="replace")
    return " ".join(text.split())
