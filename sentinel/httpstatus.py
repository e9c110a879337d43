"""Whether an HTTP failure is worth a retry: one answer for every outbound call.

The notifier's receivers, the remote query backend and the Kubernetes API
client all ask the same question of a status: will trying again later help?
It lives here, below all of them, so no stage borrows another's module for it.

    retryable(None)   no response at all (refused, reset, timeout): yes
    retryable(429)    the peer asked us to slow down: yes
    retryable(5xx)    the peer failed: yes
    retryable(other)  3xx and the other 4xx will not change by themselves: no
"""

from __future__ import annotations


def retryable(status: int | None) -> bool:
    """Whether a failed call that got this HTTP status (None: no response) may pass later."""
    if status is None:
        return True
    return status == 429 or 500 <= status <= 599


def is_success(status: int | None) -> bool:
    """2xx: the peer accepted the request."""
    return status is not None and 200 <= status <= 299
