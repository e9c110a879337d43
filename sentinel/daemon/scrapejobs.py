"""Per-target jobs on the I/O loop: one timer per target, no scheduler in between.

Every target's scrape (and probe) is a coroutine on the daemon's one I/O
loop (`sentinel.collect.ioloop.IOLoop`), run every interval at an offset
within it taken from a hash of its name (as Prometheus offsets its scrape
loops), so 1,000 targets spread over the interval instead of firing on one
tick. Each job is one `loop.call_at` timer that re-arms itself: a run costs
a timer and a task.

Offsets are rounded down to a grid of SLOT_MS (250 ms), so the fleet's
scrapes go out in small batches (50 a slot at 1,000 targets every 5 s)
that share the I/O loop's wake-ups instead of one wake-up each. Probes use
the same grid, so a slot's scrapes and probes share them too.

Why not APScheduler's AsyncIOScheduler, which ran these jobs before: its
per-run machinery (a due-jobs scan, trigger and job bookkeeping, events, a
wake-up through the loop's self-pipe) cost ~330 µs CPU a run against ~90 µs
for a timer (1,000 jobs at 15 s alone on a loop, this machine), and at
1,000 targets there are ~270 runs a second (scrapes and probes).
APScheduler still runs the workers (rule groups, sources, outbox,
housekeeping): a few jobs, each far costlier than its scheduling.

A run that cannot happen on time is counted as missed, never skipped in
silence, with APScheduler's rules as before: a run time at which the
previous run is still going, and a run time the loop reached later than
half an interval (a blocked loop), are each one missed run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import zlib
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from sentinel.collect.ioloop import IOLoop
from sentinel.collect.scrape import ScrapeTarget
from sentinel.daemon.missed import MissedWork

log = logging.getLogger(__name__)

ScrapeFn = Callable[[ScrapeTarget], Coroutine[Any, Any, object]]
JobFn = Callable[..., Coroutine[Any, Any, object]]
# Told how many run times of a job did not happen (its name, the count).
MissedFn = Callable[[str, int], None]


# The grid scrapes and probes start on. At 1,000 targets, 5 s scrapes on it cost
# ~12 % less of Sentinel's CPU (probes off; 10-17 % over 3 pairs) than each at its
# own millisecond: a one-off A/B bench against the revision before it.
SLOT_MS = 250


def offset_ms(name: str, interval_ms: int) -> int:
    """A stable offset of a target within its interval, from a hash of its name."""
    return zlib.crc32(name.encode()) % interval_ms


def slot_offset_ms(name: str, interval_ms: int) -> int:
    """`offset_ms`, rounded down to a SLOT_MS slot: where a target's scrape runs."""
    off = offset_ms(name, interval_ms)
    return off - off % SLOT_MS


def first_run_ms(name: str, interval_ms: int, now_ms: int, offset: int | None = None) -> int:
    """The first time at or after `now_ms` that falls on the target's offset in the interval
    (`offset`, or one hashed from `name`)."""
    if offset is None:
        offset = offset_ms(name, interval_ms)
    first = now_ms - now_ms % interval_ms + offset % interval_ms
    return first if first >= now_ms else first + interval_ms


def miss_policy(interval_ms: int) -> dict[str, object]:
    """APScheduler job options under which every run time that did not happen is reported
    (the rule groups' jobs).

    The grace time (how late a run may start) is half the interval, so with
    `coalesce=False` each late run time is reported once as missed rather
    than run back to back. APScheduler takes whole seconds: below a 2 s
    interval, late runs are coalesced (only runs skipped because the
    previous one was still going are counted).
    """
    if interval_ms >= 2000:
        return {"coalesce": False, "misfire_grace_time": interval_ms // 2000}
    return {"coalesce": True, "misfire_grace_time": 1}


@dataclass(eq=False)
class Due:
    """What a job does at one run time: run now or not, and how many run times it missed."""

    run: bool
    missed: int
    next_ms: int


def due(due_ms: int, interval_ms: int, now_ms: int, running: bool) -> Due:
    """The decision at a timer that fired at `now_ms` for the run time `due_ms`.

    Run times the loop passed while it could not fire (a blocked loop) are
    missed; the newest passed run time runs if it is less than half an
    interval late and the previous run has finished, else it is missed too.
    """
    passed = max(0, now_ms - due_ms) // interval_ms  # whole run times behind the newest
    newest = due_ms + passed * interval_ms
    run = now_ms - newest <= interval_ms // 2 and not running
    return Due(run, passed + (0 if run else 1), newest + interval_ms)


@dataclass(eq=False)
class _Job:
    id: str
    fn: JobFn
    args: tuple[Any, ...]
    interval_ms: int
    due_ms: int
    on_missed: MissedFn | None
    handle: asyncio.TimerHandle | None = None
    task: asyncio.Task[object] | None = None
    removed: bool = field(default=False)


class ScrapeJobs:
    """Owns the per-target interval jobs (scrapes, probes) on the I/O loop.

    `add` and `remove` may be called from any thread (discovery adds pods
    from its own); the timers are armed on the loop. `get` answers at once.
    """

    def __init__(self, io: IOLoop, scrape: ScrapeFn, missed: MissedWork,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.io = io
        self._scrape = scrape
        self._missed = missed
        self._wall_ms = wall_ms
        self._jobs: dict[str, _Job] = {}
        self._stopped = False
        # Told when the scrapes in flight are all done, while set (daemon/follow.py sets it
        # only while a rule group follows the scrapes: else scrapes run as they did).
        self.on_idle: Callable[[], None] | None = None
        self._in_flight = 0  # scrapes started while on_idle was set, not yet done

    def start(self, targets: Iterable[ScrapeTarget], now_ms: int) -> int:
        """Add one interval job per target; returns how many."""
        n = 0
        for t in targets:
            self.add("scrape", t.name, self._scrape, t.interval_ms, now_ms, t)
            n += 1
        return n

    def add(self, kind: str, name: str, fn: JobFn,
            interval_ms: int, now_ms: int, *args: object,
            on_missed: MissedFn | None = None, offset: int | None = None) -> None:
        """Run coroutine function `fn(*args)` every interval on the I/O loop, offset by `name`.

        Job id `kind:name`, one run at a time, first run at the name's offset
        in the interval (its slot's, for scrapes: `slot_offset_ms`), or at
        `offset` ms into it when the caller chose one. An existing job of that
        id is replaced (a run in flight is let finish, and the new job waits
        for it). Missed runs go to `on_missed(name, n)`; kind "scrape" counts
        them by default in `sentinel_scrapes_missed_total`.
        """
        job_id = f"{kind}:{name}"
        if on_missed is None and kind == "scrape":
            on_missed = self._missed.scrape_missed
        if offset is None and kind == "scrape":
            offset = slot_offset_ms(name, interval_ms)
        start = first_run_ms(job_id, interval_ms, now_ms, offset)
        job = _Job(job_id, fn, args, interval_ms, start, on_missed)
        old = self._jobs.get(job_id)
        if old is not None:  # its timer may fire before _arm runs on the loop: not re-armed
            old.removed = True
        self._jobs[job_id] = job
        self._on_loop(self._arm, job, old)

    def remove(self, kind: str, name: str) -> bool:
        """Stop scheduling a job (a run in flight finishes); whether there was one."""
        job = self._jobs.pop(f"{kind}:{name}", None)
        if job is None:
            return False
        job.removed = True
        self._on_loop(self._disarm, job)
        return True

    def get(self, job_id: str) -> tuple[int, int] | None:
        """A job's (interval, next run time) in ms, or None when there is no such job."""
        job = self._jobs.get(job_id)
        return None if job is None else (job.interval_ms, job.due_ms)

    def stop(self) -> None:
        """Stop every timer (runs in flight are cancelled when the loop stops)."""
        self._stopped = True
        jobs, self._jobs = list(self._jobs.values()), {}
        for job in jobs:
            job.removed = True
        if self.io.running:
            try:
                self._on_loop(lambda: [self._disarm(j) for j in jobs])
            except RuntimeError:  # the loop is going away anyway
                log.debug("stopping the loop's jobs failed", exc_info=True)

    # -- on the loop -------------------------------------------------------

    def _on_loop(self, fn: Callable[..., object], *args: Any) -> None:
        if self.io.in_loop():
            fn(*args)
        else:
            if not self.io.running:
                self.io.start()
            self.io.call_soon(fn, *args)

    def _arm(self, job: _Job, old: _Job | None = None) -> None:
        if old is not None:
            self._disarm(old)
            job.task = old.task  # one run at a time across the replacement
        if job.removed or self._stopped:
            return
        loop = self.io.loop
        delay_s = max(0.0, (job.due_ms - self._wall_ms()) / 1000)
        job.handle = loop.call_at(loop.time() + delay_s, self._fire, job)

    @staticmethod
    def _disarm(job: _Job) -> None:
        if job.handle is not None:
            job.handle.cancel()
            job.handle = None

    def _fire(self, job: _Job) -> None:
        job.handle = None
        if job.removed:
            return
        running = job.task is not None and not job.task.done()
        d = due(job.due_ms, job.interval_ms, self._wall_ms(), running)
        if d.run:
            job.task = self.io.loop.create_task(job.fn(*job.args))
            job.task.add_done_callback(functools.partial(_log_failure, job.id))
            if self.on_idle is not None and job.id.startswith("scrape:"):
                self._in_flight += 1
                job.task.add_done_callback(self._scrape_done)
        if d.missed and job.on_missed is not None:
            job.on_missed(job.id.partition(":")[2], d.missed)
        job.due_ms = d.next_ms
        self._arm(job)

    def _scrape_done(self, _task: asyncio.Task[object]) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self.on_idle is not None:
            self.on_idle()


def _log_failure(job_id: str, task: asyncio.Task[object]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("job %s raised an exception", job_id, exc_info=exc)
