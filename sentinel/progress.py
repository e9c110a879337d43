"""Which threads are making progress: the evidence behind "busy, not dead" (issue 49).

A worker that has not completed a run for three of its intervals is either
busy (an alert storm: one evaluation records thousands of incidents) or
wedged (a deadlock, a call that never returns). The difference is progress:
a busy worker keeps finishing small units of work. The places that do such
units mark the thread they run on: each database statement, each rule
evaluated. A thread waiting its turn at the SQLite writer counts as
progressing while it waits (the writer it waits for is watched on its own).

`sentinel.daemon.heartbeat` reads the marks; nothing here reads a clock
other than the monotonic one, and marking costs a dict store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

# Thread ident → monotonic time of its last unit of work. Plain dict stores and reads:
# atomic under the interpreter lock, so no lock on the hot path.
_LAST: dict[int, float] = {}
_WAITING: set[int] = set()


def mark(now_s: float | None = None) -> None:
    """The calling thread finished a unit of work (at `now_s`, monotonic)."""
    _LAST[threading.get_ident()] = time.monotonic() if now_s is None else now_s


def last(ident: int, now_s: float) -> float | None:
    """When thread `ident` last made progress; `now_s` while it waits its turn."""
    if ident in _WAITING:
        return now_s
    return _LAST.get(ident)


class _Lock(Protocol):
    def acquire(self, blocking: bool = ...) -> bool: ...  # noqa: D102

    def release(self) -> None: ...  # noqa: D102


@contextmanager
def turn(lock: _Lock) -> Iterator[None]:
    """Hold `lock`; a wait for it counts as progress (its holder is watched itself)."""
    if not lock.acquire(blocking=False):
        with waiting():
            lock.acquire()
    try:
        yield
    finally:
        lock.release()


@contextmanager
def waiting() -> Iterator[None]:
    """The calling thread waits for a shared resource whose holder is watched itself."""
    ident = threading.get_ident()
    _WAITING.add(ident)
    try:
        yield
    finally:
        _WAITING.discard(ident)
        _LAST[ident] = time.monotonic()
