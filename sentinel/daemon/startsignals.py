"""A SIGHUP before the daemon can reload is queued, never fatal.

SIGHUP's default action ends the process. `sentinel run` spends its first seconds
importing, loading the file and running the pre-flight (a PostgreSQL check can
take seconds) before `run_daemon` installs its own handler; a reload sent then
(a config-management run, `systemctl reload` right after `start`) killed the
daemon. `hold_sighup()` runs first thing in `sentinel run` and remembers the
signal; `run_daemon` takes it once it can reload, logs it, and reloads after
the start, when a reload means something.
"""

from __future__ import annotations

import signal
import threading

_pending = threading.Event()


def hold_sighup() -> None:
    """Remember a SIGHUP from now on instead of dying of it (main thread only)."""
    if hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, lambda *_: _pending.set())


def take_pending() -> bool:
    """Whether a SIGHUP came while held (and forget it)."""
    was = _pending.is_set()
    _pending.clear()
    return was
