"""What every receiver is: a name and `send(notification, now_ms) -> DeliveryResult`.

A receiver never raises: it returns a result that says whether delivery
worked and, when it did not, whether trying again later can help. The outbox
retries only retryable failures (with backoff); a permanent failure (a 4xx:
wrong URL, rejected token) is recorded and not repeated. `detail` is always
redacted: it is stored on the incident timeline and logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sentinel.httpstatus import is_success, retryable
from sentinel.model import Notification


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """The outcome of one delivery attempt. `status` is the HTTP status, None if none came back."""

    ok: bool
    retryable: bool
    status: int | None
    detail: str
    # The receiver's Retry-After (429/503), when it sent one: wait at least this long.
    retry_after_ms: int | None = None


# The receivers' retry question, answered once for every outbound call (sentinel.httpstatus);
# `classify` is its name on this side of the pipeline.
classify = retryable


def result_for_status(status: int | None, detail: str,
                      retry_after_ms: int | None = None) -> DeliveryResult:
    """The DeliveryResult for a response status (or None for no response); detail as given."""
    ok = is_success(status)
    return DeliveryResult(ok=ok, retryable=not ok and classify(status), status=status,
                          detail=detail, retry_after_ms=None if ok else retry_after_ms)


def parse_retry_after(value: str | None, now_ms: int) -> int | None:
    """Retry-After as milliseconds to wait: delta-seconds or an HTTP date; None when absent/bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value) * 1000
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0, int(when.timestamp() * 1000) - now_ms)


@runtime_checkable
class Receiver(Protocol):
    """A notification destination. One file per kind implements it (webhook.py, …)."""

    @property
    def name(self) -> str:
        """The receiver's configured name (used in metrics and on the timeline)."""
        ...

    def send(self, notification: Notification, now_ms: int) -> DeliveryResult:
        """Deliver one notification; never raises."""
        ...
