"""The deadline of the query being made on this thread, set by the rule manager.

A rule group evaluated against a remote backend gives every query a deadline
inside the group's interval (rules/concurrent.py); the remote client
(rules/prometheus_api.py) ends its attempts and retries by then, whatever its
own `timeout` allows. A context variable, so the seam stays `query(expr, at_ms)`.
"""

from __future__ import annotations

from contextvars import ContextVar

# time.monotonic() by which the current query must have answered; None: no deadline.
query_deadline: ContextVar[float | None] = ContextVar("query_deadline", default=None)
