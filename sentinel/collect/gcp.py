"""What the Google Cloud sources share: backoff with jitter, and which errors to retry soon.

Cloud Logging's read quota is small (entries.list is rate-limited per
project), so a source that failed must not ask again at once: after a 429
or 5xx it waits an exponentially growing, jittered delay (at least what a
Retry-After header asks for), and `ready(now_ms)` stays False until then.
Permanent errors (400 bad filter, 403 permission, 404) wait the longest
delay at once: retrying sooner cannot help, and an operator fixes them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc

DEFAULT_BASE_MS = 2_000
DEFAULT_MAX_MS = 300_000


@dataclass(frozen=True, slots=True)
class ErrorKind:
    """How to treat an error: retry with growing backoff, or wait the longest delay."""

    retryable: bool
    detail: str
    retry_after_ms: int | None = None


def classify_error(exc: BaseException) -> ErrorKind:
    """Sort an exception from a google client call into retryable or permanent."""
    if isinstance(exc, gexc.TooManyRequests | gexc.ServerError | gexc.ServiceUnavailable):
        return ErrorKind(True, _describe(exc), _retry_after_ms(exc))
    if isinstance(exc, gexc.GoogleAPICallError):
        return ErrorKind(False, _describe(exc))
    if isinstance(exc, auth_exc.DefaultCredentialsError):
        return ErrorKind(False, f"no credentials: {exc}"[:500])
    if isinstance(exc, ValueError):
        # A 200 whose body is not JSON: a proxy or a broken response; transient.
        return ErrorKind(True, f"malformed response: {type(exc).__name__}: {exc}"[:500])
    if isinstance(exc, requests.ConnectionError | requests.Timeout | OSError):
        return ErrorKind(True, f"connection failed: {type(exc).__name__}: {exc}")
    return ErrorKind(True, f"{type(exc).__name__}: {exc}"[:500])


def _describe(exc: gexc.GoogleAPICallError) -> str:
    # The message is the server's error text; the URL carries no credentials
    # (they travel in headers), but keep the text bounded.
    return f"{exc.code} {exc.message}"[:500]


def _retry_after_ms(exc: gexc.GoogleAPICallError) -> int | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return int(float(value) * 1000) if value is not None else None
    except ValueError:
        return None  # an HTTP-date; the exponential delay stands


class Backoff:
    """Exponential backoff with jitter, driven by the caller's clock."""

    def __init__(self, base_ms: int = DEFAULT_BASE_MS, max_ms: int = DEFAULT_MAX_MS,
                 rng: random.Random | None = None) -> None:
        self.base_ms = base_ms
        self.max_ms = max_ms
        self.failures = 0
        self.next_at_ms = 0
        self._rng = rng or random.Random()

    def ready(self, now_ms: int) -> bool:
        """Whether a call may be made now."""
        return now_ms >= self.next_at_ms

    def failed(self, now_ms: int, kind: ErrorKind) -> int:
        """Record a failure; the delay (ms) before the next call may be made."""
        self.failures += 1
        if kind.retryable:
            ceiling = min(self.max_ms, self.base_ms * 2 ** min(self.failures - 1, 30))
            # "Equal jitter": at least half the ceiling, so retries never bunch
            # up near zero, yet clients that failed together spread apart.
            delay = ceiling // 2 + self._rng.randint(0, ceiling - ceiling // 2)
        else:
            delay = self.max_ms
        if kind.retry_after_ms is not None:
            delay = max(delay, min(kind.retry_after_ms, self.max_ms))
        self.next_at_ms = now_ms + delay
        return delay

    def succeeded(self) -> None:
        """Reset after a successful call."""
        self.failures = 0
        self.next_at_ms = 0
