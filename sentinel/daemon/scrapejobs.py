"""Scrape jobs on the I/O loop: APScheduler's asyncio scheduler, one job per target.

The scheduler of record is still APScheduler, but its `AsyncIOScheduler`
runs on the daemon's one I/O loop (`sentinel.collect.ioloop.IOLoop`), so a
due scrape is a coroutine on that loop, not a thread. Each target's first
run is offset within its interval by a hash of its name (as Prometheus
offsets its scrape loops), so 1,000 targets spread over the interval
instead of firing on one tick. A scrape still running at its next tick,
or started later than half an interval, is counted as missed
(`sentinel.daemon.missed`), never silently skipped.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from sentinel.collect.ioloop import IOLoop
from sentinel.collect.scrape import ScrapeTarget
from sentinel.daemon.missed import MISSED_EVENTS, MissedWork

log = logging.getLogger(__name__)

ScrapeFn = Callable[[ScrapeTarget], Awaitable[object]]


def offset_ms(name: str, interval_ms: int) -> int:
    """A stable offset of a target within its interval, from a hash of its name."""
    return zlib.crc32(name.encode()) % interval_ms


def first_run_ms(name: str, interval_ms: int, now_ms: int) -> int:
    """The first time at or after `now_ms` that falls on the target's offset in the interval."""
    first = now_ms - now_ms % interval_ms + offset_ms(name, interval_ms)
    return first if first >= now_ms else first + interval_ms


def miss_policy(interval_ms: int) -> dict[str, object]:
    """APScheduler job options under which every run time that did not happen is reported.

    The grace time (how late a run may start) is half the interval, so with
    `coalesce=False` each late run time is reported once as missed rather
    than run back to back. APScheduler takes whole seconds: below a 2 s
    interval, late runs are coalesced (only runs skipped because the
    previous one was still going are counted).
    """
    if interval_ms >= 2000:
        return {"coalesce": False, "misfire_grace_time": interval_ms // 2000}
    return {"coalesce": True, "misfire_grace_time": 1}


class ScrapeJobs:
    """Owns the asyncio scheduler that runs every target's scrape on the I/O loop."""

    def __init__(self, io: IOLoop, scrape: ScrapeFn, missed: MissedWork) -> None:
        self.io = io
        self._scrape = scrape
        self.scheduler = AsyncIOScheduler(event_loop=io.loop, timezone="UTC")
        self.scheduler.add_listener(missed.listener, MISSED_EVENTS)

    def start(self, targets: Iterable[ScrapeTarget], now_ms: int) -> int:
        """Add one interval job per target and start the scheduler on the loop; returns jobs."""
        n = 0
        for t in targets:
            self.add("scrape", t.name, self._scrape, t.interval_ms, now_ms, t)
            n += 1
        self.io.run(_start(self.scheduler))
        return n

    def add(self, kind: str, name: str, fn: Callable[..., Awaitable[object]],
            interval_ms: int, now_ms: int, *args: object) -> None:
        """Run coroutine function `fn(*args)` every interval on the I/O loop, offset by `name`.

        The seam for other async sources (e.g. probes): job id `kind:name`,
        one run at a time, first run at the name's offset in the interval.
        Missed runs of kind "scrape" are counted; other kinds are free to
        add their own counters to `MissedWork.listener`.
        """
        start = first_run_ms(f"{kind}:{name}" if kind != "scrape" else name, interval_ms, now_ms)
        self.scheduler.add_job(
            fn, "interval", args=list(args), id=f"{kind}:{name}", seconds=interval_ms / 1000,
            start_date=datetime.fromtimestamp(start / 1000, tz=UTC),
            max_instances=1, replace_existing=True, **miss_policy(interval_ms),
        )

    def stop(self) -> None:
        """Stop scheduling scrapes (running ones are cancelled when the loop stops)."""
        if self.scheduler.running and self.io.running:
            try:
                self.io.run(_stop(self.scheduler), timeout=2.0)
            except Exception:  # the loop is going away anyway
                log.debug("stopping the scrape scheduler failed", exc_info=True)


async def _start(sched: AsyncIOScheduler) -> None:
    sched.start()


async def _stop(sched: AsyncIOScheduler) -> None:
    sched.shutdown(wait=False)
