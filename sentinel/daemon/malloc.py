"""Keep glibc's allocator from holding memory the daemon has freed.

glibc gives each thread that allocates its own arena (up to 8 per core), and
a freed block stays in its arena. The daemon's threads (the I/O loop that
appends samples, the rule groups that build and drop large vectors, the
database writer) interleave long-lived store arrays with short-lived
temporaries, so at 1,000 targets the arenas held ~25 MB more than the live
data (`bench/fleet.py --seconds 200`, MALLOC_ARENA_MAX unset vs 2). Two
arenas, and a trim after each store clean-up, keep RSS near what is live.
Elsewhere (musl, macOS) both calls are skipped: they are tuning, not behaviour.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

_M_ARENA_MAX = -8  # from <malloc.h>
ARENAS = 2


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


_LIBC = _libc()


def limit_arenas() -> None:
    """Cap glibc's arenas (before the daemon starts its threads); MALLOC_ARENA_MAX wins if set."""
    if _LIBC is None or "MALLOC_ARENA_MAX" in os.environ:
        return
    if not _LIBC.mallopt(_M_ARENA_MAX, ARENAS):
        log.debug("mallopt(M_ARENA_MAX) refused")


def trim() -> None:
    """Return the free pages of every arena to the system (after dropping old samples)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
