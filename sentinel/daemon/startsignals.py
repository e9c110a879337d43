"""Signals the daemon acts on later: a SIGHUP before it can reload is queued, never fatal,
and no burst of signals can nest their handlers.

SIGHUP's default action ends the process. `sentinel run` spends its first seconds
importing, loading the file and running the pre-flight (a PostgreSQL check can
take seconds) before `run_daemon` installs its own handler; a reload sent then
(a config-management run, `systemctl reload` right after `start`) killed the
daemon. `hold_sighup()` runs first thing in `sentinel run` and remembers the
signal; `run_daemon` takes it once it can reload, logs it, and reloads after
the start, when a reload means something.

A handler only counts (`Flag`). One that called `threading.Event.set()` took a lock,
and taking a lock runs pending signal handlers: under a burst of SIGHUPs each handler
was entered again inside the last one until RecursionError, which surfaced in whatever
the main thread was doing (a rules file "nested too deep") and stopped the start
(reproduced beside stress-ng: ~2,000 SIGHUPs in 20 s; the suite's test sent 318).
"""

from __future__ import annotations

import signal
import threading


class Flag:
    """Raised by a signal handler, taken by the main thread; no lock, no call, so a signal
    arriving inside the handler cannot nest it. Counts, so that taking it never loses a
    signal that came while it was being taken."""

    def __init__(self) -> None:
        self._raised = 0
        self._taken = 0

    def raise_(self, *_: object) -> None:
        """The handler: `signal.signal(sig, flag.raise_)`."""
        self._raised += 1

    def take(self) -> bool:
        """Whether it was raised since the last take (and forget it)."""
        raised = self._raised
        was, self._taken = raised != self._taken, raised
        return was

    def is_up(self) -> bool:
        """Whether it was raised since the last take (and keep it)."""
        return self._raised != self._taken


_pending = Flag()


def hold_sighup() -> None:
    """Remember a SIGHUP from now on instead of dying of it (main thread only)."""
    if hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, _pending.raise_)


def take_pending() -> bool:
    """Whether a SIGHUP came while held (and forget it)."""
    return _pending.take()
