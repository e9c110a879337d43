"""Heartbeats of Sentinel's periodic workers, for /healthz, the systemd watchdog and /metrics.

Every periodic worker (each rule group, the notify worker, housekeeping, the
I/O loop, the log sources...) records when it last completed a run, on the
monotonic clock, with its interval. A worker that has not completed a run for
`STUCK_AFTER_INTERVALS` of its intervals is stuck: `/healthz` answers 503
naming it and since when, the systemd watchdog stops being fed, and
`sentinel_worker_last_run_timestamp_seconds{worker}` /
`sentinel_worker_interval_seconds{worker}` let a rule see it
(`SentinelWorkerStuck` in rules/sentinel.yaml).

A run that raised is still a completed run: failures are counted elsewhere;
this says only whether the worker is alive. Time is passed in (`now_s`,
monotonic seconds); only the scheduler adapter and the collector read clocks.

Busy is not dead (issue 49): a worker inside a run (`working`) whose thread
made progress within 3 of its intervals (a database statement, a rule
evaluated, or a wait for the SQLite writer or the pipeline's record lock:
`sentinel.progress`) is busy, not stuck, for up to BUSY_LIMIT_INTERVALS of
its intervals (and at least BUSY_LIMIT_MIN_S); an alert storm's first
evaluation may take minutes, and restarting the daemon into the same storm
helps no one. A run that shows no
progress (a deadlock, a call that never returns), or lasts longer than that,
is stuck as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from apscheduler.events import (
    EVENT_JOB_ADDED,
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_REMOVED,
    JobEvent,
    SchedulerEvent,
)
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sentinel import progress

STUCK_AFTER_INTERVALS = 3
# How long a run that keeps making progress may last before it counts as stuck anyway
# (a livelock looks like progress): 20 intervals, and at least 10 minutes. A storm's
# first evaluation at 5,000 targets held the other groups behind it for ~4.5 minutes
# on a loaded 2-core machine (bench/storm.py); 20 intervals of a 5 s group were not enough.
BUSY_LIMIT_INTERVALS = 20
BUSY_LIMIT_MIN_S = 600.0
HEARTBEAT_EVENTS = EVENT_JOB_ADDED | EVENT_JOB_REMOVED | EVENT_JOB_EXECUTED | EVENT_JOB_ERROR


@dataclass(frozen=True, slots=True)
class Beat:
    """One worker's heartbeat: its interval and the monotonic time of its last completed run.

    Before the first run, `last_s` is when the worker was due to start (so a
    worker that never runs is stuck too, 3 intervals after it should have).
    """

    worker: str
    interval_s: float
    last_s: float
    runs: int = 0
    running_since: float | None = None  # inside a run since then (monotonic)
    progress_s: float | None = None  # its thread's last unit of work, while running

    def busy(self, now_s: float, intervals: float = STUCK_AFTER_INTERVALS) -> bool:
        """Inside a run that makes progress, and not for too long."""
        if self.running_since is None or self.progress_s is None:
            return False
        limit = max(BUSY_LIMIT_INTERVALS * self.interval_s, BUSY_LIMIT_MIN_S)
        return (now_s - self.progress_s <= intervals * self.interval_s
                and now_s - self.running_since <= limit)


@dataclass(frozen=True, slots=True)
class Stuck:
    """A worker that has not completed a run for more than 3 of its intervals."""

    worker: str
    interval_s: float
    silent_s: float  # seconds since its last completed run (or since it was due to start)
    runs: int

    def describe(self, now_wall_s: float) -> str:
        """One line for /healthz: which worker, for how long, since when (UTC)."""
        since = datetime.fromtimestamp(now_wall_s - self.silent_s, tz=UTC)
        what = "completed a run" if self.runs else "completed its first run"
        return (f"{self.worker}: has not {what} for {self.silent_s:.1f}s "
                f"(interval {self.interval_s:g}s), since {since.isoformat(timespec='seconds')}")


def stuck(beats: Iterable[Beat], now_s: float,
          intervals: float = STUCK_AFTER_INTERVALS) -> list[Stuck]:
    """The workers silent for more than `intervals` of their intervals at `now_s`."""
    out = []
    for b in beats:
        silent = now_s - b.last_s
        if silent > intervals * b.interval_s and not b.busy(now_s, intervals):
            out.append(Stuck(b.worker, b.interval_s, silent, b.runs))
    return sorted(out, key=lambda s: s.worker)


class Heartbeats:
    """The registry: workers are expected, beat, and forgotten; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._beats: dict[str, Beat] = {}
        self._threads: dict[str, int] = {}  # worker → the thread of its run in progress

    def expect(self, worker: str, interval_s: float, since_s: float) -> None:
        """Start watching a worker due to run first at `since_s` (monotonic) every interval."""
        with self._lock:
            self._beats[worker] = Beat(worker, max(interval_s, 1e-3), since_s)

    def beat(self, worker: str, now_s: float) -> None:
        """A run of `worker` completed at `now_s`; unknown (forgotten) workers are ignored."""
        with self._lock:
            b = self._beats.get(worker)
            if b is not None:
                self._beats[worker] = replace(b, last_s=max(b.last_s, now_s), runs=b.runs + 1)

    @contextmanager
    def working(self, worker: str, now_s: float | None = None) -> Iterator[None]:
        """A run of `worker` on the calling thread: busy while its thread makes progress."""
        started = time.monotonic() if now_s is None else now_s
        with self._lock:
            b = self._beats.get(worker)
            if b is not None:
                self._beats[worker] = replace(b, running_since=started)
            self._threads[worker] = threading.get_ident()
        progress.mark(started)
        try:
            yield
        finally:
            ended = time.monotonic() if now_s is None else now_s
            with self._lock:
                self._threads.pop(worker, None)
                b = self._beats.get(worker)
                if b is not None:  # ended: its last run is now (the listener counts the run)
                    self._beats[worker] = replace(b, running_since=None,
                                                  last_s=max(b.last_s, ended))

    def forget(self, worker: str) -> None:
        """Stop watching a worker (a rule group removed by a reload, a job stopped)."""
        with self._lock:
            self._beats.pop(worker, None)

    def beats(self, now_s: float | None = None) -> list[Beat]:
        """A snapshot of every watched worker (with its thread's progress at `now_s`)."""
        now = time.monotonic() if now_s is None else now_s
        with self._lock:
            beats = list(self._beats.values())
            threads = dict(self._threads)
        return [replace(b, progress_s=progress.last(threads[b.worker], now))
                if b.worker in threads and b.running_since is not None else b
                for b in beats]

    def stuck(self, now_s: float) -> list[Stuck]:
        """The stuck workers at `now_s` (monotonic)."""
        return stuck(self.beats(now_s), now_s)

    def unhealthy(self, now_s: float, now_wall_s: float) -> str | None:
        """None when every worker is alive, else one line per stuck worker."""
        bad = self.stuck(now_s)
        return "\n".join(s.describe(now_wall_s) for s in bad) if bad else None

    def scheduler_listener(self, scheduler: BaseScheduler,
                           watch: Callable[[str], bool] = lambda job_id: True,
                           clock: Callable[[], float] = time.monotonic,
                           ) -> Callable[[SchedulerEvent], None]:
        """An APScheduler listener (for HEARTBEAT_EVENTS) that watches every interval job.

        A job added is expected from its first run time; each executed or
        failed run beats; a removed job is forgotten. Job ids are the worker
        names (`rules:<group>`, `housekeeping`...); only ids `watch` accepts are watched.
        """
        def listener(event: SchedulerEvent) -> None:
            if not isinstance(event, JobEvent) or not watch(event.job_id):
                return
            now = clock()
            if event.code == EVENT_JOB_REMOVED:
                self.forget(event.job_id)
            elif event.code == EVENT_JOB_ADDED:
                job = scheduler.get_job(event.job_id)
                if job is None or not isinstance(job.trigger, IntervalTrigger):
                    return
                delay = 0.0
                if job.next_run_time is not None:
                    delay = max(0.0, job.next_run_time.timestamp() - time.time())
                self.expect(event.job_id, job.trigger.interval.total_seconds(), now + delay)
            else:
                self.beat(event.job_id, now)
        return listener


class HeartbeatCollector(Collector):
    """`sentinel_worker_last_run_timestamp_seconds` and `sentinel_worker_interval_seconds`.

    The last run is kept on the monotonic clock and turned into Unix time when
    collected, so a wall clock step never makes a worker look stuck.
    """

    def __init__(self, heartbeats: Heartbeats,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._heartbeats = heartbeats
        self._clock = clock
        self._wall = wall

    def collect(self) -> Iterator[Metric]:
        """Two gauges, one series per watched worker."""
        last = GaugeMetricFamily(
            "sentinel_worker_last_run_timestamp_seconds",
            "When each periodic worker last completed a run (before its first: when it was "
            "due to start).", labels=["worker"])
        interval = GaugeMetricFamily(
            "sentinel_worker_interval_seconds",
            "Each periodic worker's interval; /healthz fails after 3 without a run.",
            labels=["worker"])
        offset = self._wall() - self._clock()
        for b in sorted(self._heartbeats.beats(), key=lambda b: b.worker):
            last.add_metric([b.worker], b.last_s + offset)
            interval.add_metric([b.worker], b.interval_s)
        yield last
        yield interval

    def describe(self) -> Iterator[Metric]:
        """Declared even when no worker is watched yet (the registry checks names)."""
        return self.collect()


def register(heartbeats: Heartbeats, registry: CollectorRegistry,
             wall: Callable[[], float] = time.time) -> HeartbeatCollector:
    """Expose the heartbeats on a registry (Unix time from `wall`); returns the collector."""
    collector = HeartbeatCollector(heartbeats, wall=wall)
    registry.register(collector)
    return collector
