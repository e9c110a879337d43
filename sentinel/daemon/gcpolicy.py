"""When Python's cyclic garbage collector runs in the daemon: far less often than its defaults.

With the defaults (700, 10, 10) a young collection ran every ~700 container
allocations: at 1,000 targets ~130 a second. Everything in flight at that
moment (a scrape's or probe's task, futures, buffers, parsed pages: most
live tens of milliseconds) survived two of them and was promoted to the
old generation, so a full collection came every ~2 s. Each walked the
whole heap (half a million objects: the store's series and arrays, the
connections) for ~200 ms and found almost nothing: 38 % of the daemon's
CPU (`bench/fleet.py`, gc.callbacks timing, stop 12). Almost all of the
daemon's garbage is freed by reference counting; the collector is only
for cycles.

With a young generation of 50,000 allocations, a collection comes every
few hundred milliseconds, after the transient objects are gone, so little
is promoted and full collections become rare (none in a 100 s window at
1,000 targets). The young collections still find cycles among new objects,
and a full one still runs once the old generation has grown by a quarter
(CPython's own rule), so memory stays bounded. Set before the daemon
starts; tests and tools keep Python's defaults.

While a rule group evaluates, the collector is held off altogether
(`evaluation_hold`). An evaluation builds tens of thousands of short-lived
containers (a series' labels and samples, the groups of `sum by`), enough
to cross even 50,000: the collections then walked them mid-evaluation and
promoted them, to be walked again by the middle ones, though reference
counting frees all of them when the evaluation ends. Those collections were
~5 % of the daemon's CPU at 1,000 targets (gc.callbacks timing), and they
grew with whatever else the process did between evaluations: with probes
on, each took 9 ms instead of 7, and the histogram rules, which read no
probe series, ran 5-15 % slower. Evaluated with the collector off, the
shipped rules cost ~7 % less a pass (`bench/ruleeval.py --gc daemon`
against `--gc held`), and the rule pool's share of what probes add at
1,000 targets falls to the probe rules' own cost (a one-off A/B bench).
At 1,000 targets no collection runs at all once the daemon is up; the
young generation's count is allocations less frees, so garbage that
reference counting cannot free still adds up to a collection.

The hold is shared: the last group to finish lets the collector run again,
and a hold longer than HOLD_MAX_S is let go whatever still evaluates, so a
slow group or groups that overlap without end cannot keep cycles from
being collected.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

YOUNG = 50_000  # container allocations between young collections (CPython: 700)
MIDDLE = 20  # young collections between middle ones (CPython: 10)
OLD = 10  # middle collections before a full one is considered (CPython: 10)


# Longest the collector stays held for evaluations, however many overlap: a group that
# takes longer than this (at 1,000 targets the largest takes ~1 s) runs its rest with it.
HOLD_MAX_S = 10.0


class EvaluationHold:
    """Holds the cyclic collector off while any holder is inside `held()`.

    Holders may overlap (rule groups evaluate on a thread pool): the first
    in disables the collector, the last out enables it again. It is never
    enabled by us if something else had disabled it, and it is enabled once
    a hold has lasted `max_s`, checked whenever a holder comes or goes and
    by `release_overdue`, after which overlapping holders no longer hold it.
    """

    def __init__(self, max_s: float = HOLD_MAX_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_s = max_s
        self.clock = clock
        self._lock = threading.Lock()
        self._holders = 0
        self._since: float | None = None  # when we disabled the collector; None: we did not

    @contextmanager
    def held(self) -> Iterator[None]:
        """The collector stays off inside (see the class docstring)."""
        with self._lock:
            self._holders += 1
            if self._holders == 1 and gc.isenabled():
                gc.disable()
                self._since = self.clock()
            else:
                self._release_if_overdue()
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0:
                    self._release()
                else:
                    self._release_if_overdue()

    def release_overdue(self) -> None:
        """Let the collector run again if the hold has lasted longer than `max_s`."""
        with self._lock:
            self._release_if_overdue()

    def _release_if_overdue(self) -> None:
        if self._since is not None and self.clock() - self._since > self.max_s:
            self._release()

    def _release(self) -> None:
        if self._since is not None:
            self._since = None
            gc.enable()


_hold: EvaluationHold | None = None


def tune() -> None:
    """Collect less often, and not during evaluations (see the module docstring); idempotent."""
    global _hold
    gc.set_threshold(YOUNG, MIDDLE, OLD)
    if _hold is None:
        _hold = EvaluationHold()


def evaluation_hold() -> AbstractContextManager[None]:
    """Hold the collector off for one evaluation: in the daemon once `tune` ran, else nothing."""
    return _hold.held() if _hold is not None else nullcontext()


def release_overdue() -> None:
    """Let the collector run again if an evaluation hold has lasted too long."""
    if _hold is not None:
        _hold.release_overdue()
