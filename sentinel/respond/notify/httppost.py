"""One JSON POST for a receiver: classified, Retry-After read, every message redacted.

Shared by the HTTP receivers (webhook, Slack, PagerDuty, Alertmanager), so
each of them is only its body and its headers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import httpx

from sentinel import __version__
from sentinel.config.durations import format_duration
from sentinel.respond.notify.base import DeliveryResult, parse_retry_after, result_for_status
from sentinel.secrets import Redactor, hide_http_client_urls

USER_AGENT = f"Sentinel/{__version__}"
# Enough of an error response to say why, small enough for the timeline.
MAX_DETAIL_BODY = 512


class JsonPoster:
    """POSTs bytes to one URL with fixed headers; thread-safe, never raises from `post`."""

    def __init__(self, url: str, timeout_s: float, headers: Mapping[str, str] | None,
                 redactor: Redactor, client: httpx.Client | None = None) -> None:
        self._url = url
        self.timeout_s = timeout_s
        self._headers = {**dict(headers or {}), "Content-Type": "application/json"}
        self._headers.setdefault("User-Agent", USER_AGENT)
        self._own_client = client is None
        self._client = client if client is not None else httpx.Client(follow_redirects=False)
        self.redactor = redactor
        # httpx logs each request's full URL at INFO; the URL may be the secret.
        hide_http_client_urls()

    def post(self, body: bytes, extra_headers: Mapping[str, str] | None = None) -> DeliveryResult:
        """Send; the result says whether to retry (and how long the receiver asked to wait)."""
        headers = {**self._headers, **dict(extra_headers or {})}
        try:
            with self._client.stream("POST", self._url, content=body, headers=headers,
                                     timeout=self.timeout_s) as resp:
                snippet = _read_snippet(resp)
                status = resp.status_code
                retry_after = parse_retry_after(resp.headers.get("Retry-After"),
                                                int(time.time() * 1000))
        except httpx.TimeoutException as exc:
            timeout = format_duration(int(self.timeout_s * 1000))
            return result_for_status(None, f"timed out after {timeout} ({type(exc).__name__})")
        except httpx.HTTPError as exc:
            return result_for_status(None, self.redactor.redact(f"{type(exc).__name__}: {exc}"))
        detail = f"HTTP {status}" + (f": {snippet}" if snippet and not 200 <= status <= 299 else "")
        return result_for_status(status, self.redactor.redact(detail), retry_after)

    def close(self) -> None:
        """Close the HTTP client if this poster created it."""
        if self._own_client:
            self._client.close()


def _read_snippet(resp: httpx.Response) -> str:
    """The first bytes of the response body as one line of text (the rest is not read)."""
    data = b""
    for chunk in resp.iter_bytes():
        data += chunk
        if len(data) >= MAX_DETAIL_BODY:
            break
    text = data[:MAX_DETAIL_BODY].decode("utf-8", errors="replace")
    return " ".join(text.split())
