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
"""

from __future__ import annotations

import gc

YOUNG = 50_000  # container allocations between young collections (CPython: 700)
MIDDLE = 20  # young collections between middle ones (CPython: 10)
OLD = 10  # middle collections before a full one is considered (CPython: 10)


def tune() -> None:
    """Collect less often (see the module docstring); idempotent."""
    gc.set_threshold(YOUNG, MIDDLE, OLD)
