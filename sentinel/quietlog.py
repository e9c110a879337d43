"""Quiet failure: a failure that repeats is logged once, then counted and summarised.

A database that is down for a minute fails every evaluation, every outbox
flush and every heartbeat; logging a traceback each time buries the one line
that matters (24,699 lines for a 60 s PostgreSQL outage, issue 10). A
`QuietFailure` per failing thing (one "what") logs the first failure with
its traceback, counts the repeats, writes one summary line per
`summary_every_s` while it keeps failing, and one line when it recovers:

    QuietFailure(log, "evaluation of rule group e2e").failed()   # in an except block
    ... .ok()                                                     # after a success

Thread safe; the clock is passed in (tests step it).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable

SUMMARY_EVERY_S = 60.0


class QuietFailure:
    """The log state of one repeating failure."""

    def __init__(self, logger: logging.Logger, what: str, *,
                 summary_every_s: float = SUMMARY_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.what = what
        self.summary_every_s = summary_every_s
        self.clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # when the current run of failures began
        self._total = 0  # failures in the current run
        self._unreported = 0  # failures since the last line written
        self._last_line = 0.0
        self._last_error = ""

    @property
    def failing(self) -> bool:
        """Whether the last outcome was a failure."""
        return self._since is not None

    def failed(self, exc: BaseException | None = None, detail: str = "") -> None:
        """Record a failure; call from an except block (or pass the exception, or a detail)."""
        exc = exc if exc is not None else sys.exc_info()[1]
        error = f"{type(exc).__name__}: {exc}" if exc is not None else detail or "failed"
        now = self.clock()
        with self._lock:
            first = self._since is None
            self._total += 1
            self._unreported += 1
            self._last_error = error
            if first:
                self._since, self._last_line, self._unreported = now, now, 0
            elif now - self._last_line >= self.summary_every_s:
                n, self._unreported, self._last_line = self._unreported, 0, now
                since = now - (self._since or now)
            else:
                return
        if first:
            self.logger.error("%s failed%s (repeats are counted and summarised every %gs)",
                              self.what, "" if exc else f": {error}", self.summary_every_s,
                              exc_info=(type(exc), exc, exc.__traceback__) if exc else None)
        else:
            self.logger.error("%s still failing: %d more failures in the last %.0fs "
                              "(failing for %.0fs): %s", self.what, n,
                              self.summary_every_s, since, error)

    def ok(self) -> None:
        """Record a success: ends a run of failures with one line."""
        if self._since is None:  # the common case, without the lock
            return
        now = self.clock()
        with self._lock:
            if self._since is None:
                return
            since, total = self._since, self._total
            self._since, self._total, self._unreported = None, 0, 0
        self.logger.warning("%s recovered after %d failures over %.0fs", self.what, total,
                            now - since)
