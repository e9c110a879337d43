"""What the Google Cloud sources share: which errors to retry soon (backoff: sentinel.backoff).

Cloud Logging's read quota is small (entries.list is rate-limited per
project), so a source that failed must not ask again at once: after a 429
or 5xx it waits an exponentially growing, jittered delay (at least what a
Retry-After header asks for), and `ready(now_ms)` stays False until then.
Permanent errors (400 bad filter, 403 permission, 404) wait the longest
delay at once: retrying sooner cannot help, and an operator fixes them.
"""

from __future__ import annotations

from typing import Any

from sentinel.backoff import Backoff, ErrorKind

__all__ = ["DEFAULT_BASE_MS", "DEFAULT_MAX_MS", "Backoff", "ErrorKind", "classify_error"]

DEFAULT_BASE_MS = 2_000
DEFAULT_MAX_MS = 300_000


def classify_error(exc: BaseException) -> ErrorKind:
    """Sort an exception from a google client call into retryable or permanent."""
    # Imported here, not at the top: only a google client raises what this sorts,
    # and a daemon with no Cloud source should not carry grpc and protobuf
    # (~17 MB of RSS) for nothing.
    import requests
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

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


def _describe(exc: Any) -> str:
    # The message is the server's error text; the URL carries no credentials
    # (they travel in headers), but keep the text bounded.
    return f"{exc.code} {exc.message}"[:500]


def _retry_after_ms(exc: Any) -> int | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return int(float(value) * 1000) if value is not None else None
    except ValueError:
        return None  # an HTTP-date; the exponential delay stands
