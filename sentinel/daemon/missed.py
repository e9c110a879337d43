"""Work that could not start on time: counted per item, logged once a minute per item.

A run time at which the previous run is still going, or that started later
than its grace time (half the interval), is one missed run. The per-target
jobs on the I/O loop (`sentinel.daemon.scrapejobs`) report them directly
(`scrape_missed`). APScheduler, which runs the rule groups, reports them
as events: `EVENT_JOB_MAX_INSTANCES` (every skipped run time) and
`EVENT_JOB_MISSED`; its jobs are added with `coalesce=False` and that grace
time, so each run time that did not happen is exactly one event, and
`MissedWork.listener` counts it. The counters are
`sentinel_scrapes_missed_total{target}` and
`sentinel_rule_group_iterations_missed_total{group}`, the names Prometheus
uses for its own. The log says it once a minute per kind (scrapes, rule
groups) for every target or group together (`QuietTally`): at fleet size a
daemon that is behind is behind everywhere, and one line per target a minute
was ~2,000 lines (issue 49).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from apscheduler.events import (
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobExecutionEvent,
    JobSubmissionEvent,
    SchedulerEvent,
)
from prometheus_client import CollectorRegistry, Counter

from sentinel.quietlog import QuietTally

log = logging.getLogger(__name__)

MISSED_EVENTS = EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED
LOG_EVERY_S = 60.0


def quiet_apscheduler() -> None:
    """Silence APScheduler's own warning per missed or skipped run: MissedWork counts them
    and logs once a minute per target or group instead. Its errors still show, except a
    job cancelled at shutdown (APScheduler logs that as "Error running job")."""
    for name in ("apscheduler.scheduler", "apscheduler.executors"):
        logging.getLogger(name).setLevel(logging.ERROR)
    executor_log = logging.getLogger("apscheduler.executors.default")
    if not any(isinstance(f, _NotCancelled) for f in executor_log.filters):
        executor_log.addFilter(_NotCancelled())


class _NotCancelled(logging.Filter):
    """Drops log records about a job that was cancelled (the loop stopping), not failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, asyncio.CancelledError)


class MissedWork:
    """Counts missed scrapes and rule group iterations; logs each kind at most once a minute."""

    def __init__(self, registry: CollectorRegistry,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.scrapes = Counter(
            "sentinel_scrapes_missed_total",
            "Scrapes that could not start on time (the previous one still running, or "
            "started later than the grace time).", ["target"], registry=registry)
        self.iterations = Counter(
            "sentinel_rule_group_iterations_missed_total",
            "Rule group evaluations that could not start on time.", ["group"],
            registry=registry)
        self._tallies = {
            kind: QuietTally(log, kind, "could not start on time", noun,
                             every_s=LOG_EVERY_S, clock=clock)
            for kind, noun in (("scrape", "target"), ("rule group", "group"))}

    def track(self, targets: Iterable[str], groups: Iterable[str]) -> None:
        """Start every target's and group's counter at 0, so the first miss is an increase."""
        for t in targets:
            self.scrapes.labels(t)
        for g in groups:
            self.iterations.labels(g)

    def scrape_missed(self, target: str, n: int = 1) -> None:
        """Count `n` missed scrapes of a target."""
        self.scrapes.labels(target).inc(n)
        self._log("scrape", target, n)

    def iteration_missed(self, group: str, n: int = 1) -> None:
        """Count `n` missed evaluations of a rule group."""
        self.iterations.labels(group).inc(n)
        self._log("rule group", group, n)

    def listener(self, event: SchedulerEvent) -> None:
        """An APScheduler listener for MISSED_EVENTS on jobs named `rules:<g>`."""
        n = 1
        if isinstance(event, JobSubmissionEvent):
            n = len(event.scheduled_run_times)
        elif not isinstance(event, JobExecutionEvent):
            return
        kind, _, name = event.job_id.partition(":")
        if kind == "rules":
            self.iteration_missed(name, n)

    def _log(self, kind: str, name: str, n: int) -> None:
        self._tallies[kind].add(name, n)
