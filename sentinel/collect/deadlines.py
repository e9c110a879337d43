"""Deadlines of many requests on one event loop, behind at most one timer.

The HTTP client's one deadline mechanism (`sentinel.collect.http1`): a
request carries its deadline in loop time, and fails with TimeoutError then,
as `asyncio.timeout` around it would, without the Timeout context and task
cancelling that costs at every request. A request that ends in time leaves
its entry behind instead of cancelling a timer of its own, so a request
costs a push onto a heap of plain tuples, not a `TimerHandle` armed,
cancelled and left in the loop's heap (~1,300 of them at 1,000 probed
targets, each compared in Python at every push and pop: ~6 % of a probe
round's instructions under callgrind).
"""

from __future__ import annotations

import asyncio
import heapq
import weakref
from typing import Protocol

# How late the loop may reach a deadline before the timeout is Sentinel's, not the
# target's: a loop that could not run for this long may have left the answer unread in
# its socket (issue 49: a starved daemon took 505 targets for down).
LATE_S = 1.0


class SentinelLate(TimeoutError):  # noqa: N818 (a TimeoutError, named for whose it is)
    """A request's deadline was reached late: Sentinel was behind, the target may be fine.

    A TimeoutError, so code that only knows timeouts still stops; a scrape that
    knows better counts it as late work, never as the target failing.
    """


class Expiring(Protocol):
    """What a deadline is set on: a numbered request at a time, which it can fail."""

    exchange: int  # moves on with each request: a deadline is for one of them

    def in_flight(self) -> bool:
        """Whether the current request is still waiting."""

    def expire(self, late: bool = False) -> None:
        """Fail the current request with TimeoutError (`SentinelLate` when `late`)."""


class Deadlines:
    """The deadlines of every request on one loop, behind at most one timer.

    An entry is (when, sequence, holder, exchange number); the holder's
    exchange number moves on with each request, so an entry whose request
    has ended is dead and is dropped when reached. The timer is armed for
    the first live entry: on firing it fails the requests that are due and
    drops the dead entries ahead of the next live one, so it fires about
    once a timeout while requests end in time, not once a request.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list[tuple[float, int, Expiring, int]] = []
        self.seq = 0
        self.timer: asyncio.TimerHandle | None = None
        self.armed_at = float("inf")

    def add(self, when: float, holder: Expiring, exchange: int) -> None:
        """Fail `holder`'s request number `exchange` at `when` (loop time) if it is still on."""
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, holder, exchange))
        if when < self.armed_at:
            self._arm(when)

    def _arm(self, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.armed_at = when
        self.timer = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self.timer, self.armed_at = None, float("inf")
        now, heap = self.loop.time(), self.heap
        while heap:
            when, _, holder, exchange = heap[0]
            live = holder.exchange == exchange and holder.in_flight()
            if live and when > now:
                self._arm(when)
                return
            heapq.heappop(heap)
            if live:
                holder.expire(now - when > LATE_S)


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Deadlines] = (
    weakref.WeakKeyDictionary())


def deadlines(loop: asyncio.AbstractEventLoop) -> Deadlines:
    """The loop's one `Deadlines` (made at first use, gone with the loop)."""
    found = _LOOPS.get(loop)
    if found is None:
        found = _LOOPS[loop] = Deadlines(loop)
    return found
