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


class QuietTally:
    """A warning that repeats over many items: one line per interval for all of them.

    Issue 49: a starved daemon logged "N run(s) could not start on time" once a
    minute per target, ~2,000 lines a minute at fleet size, when the news is one
    fact: Sentinel is behind. The first occurrence is logged at once; later ones
    are counted per item and written as one line per `every_s`, with the total,
    the number of items and the items with the most:

        scrape: 1234 run(s) of 512 targets could not start on time in the last 60s
        (most: a ×12, b ×10, c ×9)

    Counts left when occurrences stop are written with the next one. Thread safe;
    the clock is passed in.
    """

    SHOWN = 3  # items named in a summary line

    def __init__(self, logger: logging.Logger, kind: str, what: str, noun: str, *,
                 unit: str = "run(s)", every_s: float = SUMMARY_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:  # noqa: D107
        self.logger = logger
        self.kind, self.what, self.noun, self.unit = kind, what, noun, unit
        self.every_s = every_s
        self.clock = clock
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._last_line: float | None = None

    def add(self, item: str, n: int = 1) -> None:
        """`n` more occurrences for `item`; may write the line that is due."""
        now = self.clock()
        with self._lock:
            self._counts[item] = self._counts.get(item, 0) + n
            last = self._last_line
            if last is not None and now - last < self.every_s:
                return
            counts, self._counts, self._last_line = self._counts, {}, now
        total = sum(counts.values())
        if last is None:
            self.logger.warning("%s %s: %d %s %s (repeats are summarised every %gs for all "
                                "%ss)", self.kind, item, total, self.unit, self.what,
                                self.every_s, self.noun)
            return
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:self.SHOWN]
        most = ", ".join(f"{name} ×{k}" for name, k in top)
        self.logger.warning("%s: %d %s of %d %s%s %s in the last %.0fs (most: %s)",
                            self.kind, total, self.unit, len(counts), self.noun,
                            "" if len(counts) == 1 else "s", self.what, now - last, most)
