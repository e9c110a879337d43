"""Queries from outside (API, page, MCP) run where they cannot stall the daemon.

An expression sent by a client is evaluated in a forked child of the daemon:
the child sees the series store as it was at the fork (copy-on-write, no
copy made), evaluates, writes the result to a pipe and exits. The thread
that serves the request waits on the pipe with a deadline and kills the
child when it passes. Why a process and not a thread: Python's `re` holds the
GIL for the whole of a match, so one backtracking matcher
(`{__name__=~"(.*.*)*X"}`) in a thread freezes every thread, /healthz,
scrapes and rule evaluations with it; a parser stack overflow (SIGSEGV)
kills the whole process. A child can be killed, and its memory is capped.

At most `max_concurrent` children run at once; a query beyond that gets 503
at once rather than queueing on the threads /healthz also needs. Where fork
is unsafe (a remote query backend: an HTTP client's pooled connections must
not be shared with a child), the query runs in this process, bounded by the
engine's own point limit and deadline.
"""

from __future__ import annotations

import os
import pickle
import resource
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from sentinel.api.errors import ApiError
from sentinel.promql.errors import PromQLError
from sentinel.promql.limits import QUERY_TIMEOUT_S, QueryLimitError

MAX_CONCURRENT = 2
# Memory a child may allocate beyond what it inherits.
CHILD_MEMORY_BYTES = 1 << 30
CHILD_NICENESS = 10


class QueryPool:
    """Runs `fn()` (a query) in a killable child, at most `max_concurrent` at once."""

    def __init__(self, timeout_s: float = QUERY_TIMEOUT_S, max_concurrent: int = MAX_CONCURRENT,
                 isolate: bool = True, locks: tuple[Any, ...] = ()) -> None:
        # The child's engine stops itself at its own deadline; this one is the backstop.
        self.timeout_s = timeout_s + 2.0
        self.max_concurrent = max_concurrent
        self.isolate = isolate and hasattr(os, "fork")
        self._slots = threading.BoundedSemaphore(max_concurrent)
        # Locks the child needs free (the store's): held across the fork, so a child
        # never starts with one locked by a thread it does not have.
        self._locks = locks

    def run(self, fn: Callable[[], Any]) -> Any:
        """fn()'s result; PromQLError as fn raised it; ApiError 503 when busy or timed out."""
        if not self._slots.acquire(blocking=False):
            raise ApiError(503, f"too many queries running (max_concurrent_queries: "
                                f"{self.max_concurrent}): retry shortly")
        try:
            return self._in_child(fn) if self.isolate else fn()
        finally:
            self._slots.release()

    def _in_child(self, fn: Callable[[], Any]) -> Any:
        read_fd, write_fd = os.pipe()
        for lock in self._locks:
            lock.acquire()
        try:
            pid = os.fork()
        finally:
            for lock in self._locks:
                lock.release()
        if pid == 0:  # pragma: no cover - the child; its outcome is read by the parent
            os.close(read_fd)
            _child(fn, write_fd)
        os.close(write_fd)
        try:
            data = _read_until(read_fd, time.monotonic() + self.timeout_s)
        finally:
            os.close(read_fd)
            if data is None:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if data is None:
            raise ApiError(503, f"query ran longer than {self.timeout_s:g}s and was stopped "
                                "(query_timeout)")
        return _outcome(data)


def _child(fn: Callable[[], Any], write_fd: int) -> None:  # pragma: no cover - in the child
    """Evaluate, write the pickled outcome, exit without running the parent's exit hooks."""
    try:
        # Below the daemon's own threads: scrapes, rules and /healthz come first.
        os.nice(CHILD_NICENESS)
        soft = _vm_bytes() + CHILD_MEMORY_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (soft, soft))
        try:
            out: tuple[Any, ...] = ("ok", fn())
        except QueryLimitError as exc:
            out = ("limit", exc.message, exc.limit, exc.position)
        except PromQLError as exc:
            out = ("promql", exc.message, exc.position)
        except MemoryError:
            out = ("limit", f"query needed more than {CHILD_MEMORY_BYTES >> 20} MiB "
                            "(query memory limit)", "query_memory", None)
        except RecursionError:
            out = ("limit", "expression nests too deep to evaluate", "max_nesting", None)
        data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
    finally:
        os._exit(0)


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _read_until(fd: int, deadline: float) -> bytes | None:
    """Everything the child writes until it closes the pipe; None past the deadline."""
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _outcome(data: bytes) -> Any:
    if not data:  # the child died before writing (a crash in the parser, say)
        raise PromQLError("the query's evaluation crashed", None)
    out = pickle.loads(data)  # noqa: S301 - written by our own child
    if out[0] == "ok":
        return out[1]
    if out[0] == "limit":
        raise QueryLimitError(out[1], out[2], out[3])
    raise PromQLError(out[1], out[2])
