"""Scheduled jobs for the non-scrape sources: logs, TPU node state, XLA cache.

Discovered pods' container deaths (`pod_death`) get a log source per target
on the first one, polled by a job of its own from then on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.base import BaseScheduler

from sentinel.collect.coldstart import ColdStart, ColdStarts
from sentinel.collect.pod_deaths import PodDeathSource
from sentinel.collect.xla_cache import xla_cache_samples
from sentinel.config import Config
from sentinel.daemon.logwatch import LogWatch
from sentinel.daemon.selfmetrics import SelfMetrics
from sentinel.daemon.sources import (
    PolledLogSource,
    XlaCacheWatch,
    build_log_sources,
    build_tpu_sources,
    build_xla_cache_watches,
    signatures_path,
)
from sentinel.incidents.db import Database
from sentinel.logs.signatures import load_signature_file
from sentinel.store import MemoryStore

log = logging.getLogger(__name__)
POD_DEATH_POLL_MS = 500

Clock = Callable[[], int]
Guard = Callable[[str, Callable[..., None]], Callable[..., None]]
JOB_PREFIXES = ("logs:", "tpu:", "xla_cache:")  # the ids `schedule` gives its jobs


class SourceJobs:
    """Owns the log, TPU and XLA-cache sources of a config and their scheduler jobs."""

    def __init__(self, config: Config, store: MemoryStore, db: Database,
                 metrics: SelfMetrics, now_ms: Clock) -> None:
        self.store = store
        self.metrics = metrics
        self.now_ms = now_ms
        self.log_sources = build_log_sources(config, db, now_ms())
        self.watch = LogWatch(store, db, load_signature_file(signatures_path(config))) \
            if self.log_sources or config.kubernetes_sd else None
        self._pod_deaths: dict[str, PolledLogSource] = {}
        self._scheduled: tuple[BaseScheduler, Guard] | None = None
        self._lock = threading.Lock()
        self.tpu_sources = build_tpu_sources(config)
        self.xla_watches = build_xla_cache_watches(config)
        self.coldstarts: ColdStarts | None = None  # watch_cold_starts
        self.on_cold_start: Callable[[ColdStart], object] | None = None
        self.restore_signatures()

    def learn_accelerators(self, accelerators: object) -> None:
        """Log polls tell `accelerators` (collect/accelerators.py) what vLLM says it runs on."""
        if self.watch is not None:
            self.watch.accelerators = accelerators

    def watch_cold_starts(self, coldstarts: ColdStarts,
                          noticed: Callable[[ColdStart], object]) -> None:
        """Log polls and cache scans feed `coldstarts`; each cold start noticed is handed to
        `noticed` (daemon/coldstartjob.py) once."""
        self.coldstarts, self.on_cold_start = coldstarts, noticed
        if self.watch is not None:
            self.watch.coldstarts = coldstarts

    def _cold_tick(self, target: str, now: int) -> None:
        if self.coldstarts is None:
            return
        for notice in self.coldstarts.tick(now):
            if self.on_cold_start is not None:
                self.on_cold_start(notice)
        for labels, value in self.coldstarts.samples([target]):
            self.store.add(labels, now, value)

    def restore_signatures(self) -> None:
        """Rebuild the signature counters from the events on record (start, HA takeover).

        Before the first evaluation: a crash alert must not resolve because
        this process never counted the line that raised it. Never raises: with
        the database away the counters start from what the logs say next.
        """
        if self.watch is None:
            return
        try:
            self.watch.restore(sorted({p.source.target for p in self.log_sources}),
                               self.now_ms())
        except Exception:
            log.warning("could not restore the log signature counters from the database",
                        exc_info=True)

    def count(self) -> int:
        """How many jobs `schedule` adds."""
        return len(self.log_sources) + len(self.tpu_sources) + len(self.xla_watches)

    def schedule(self, sched: BaseScheduler, guard: Guard, first_run: Any) -> None:
        """Add one interval job per source."""
        self._scheduled = (sched, guard)
        for p in self.log_sources:
            sched.add_job(guard("logs", self._poll_log), "interval", args=[p],
                          seconds=p.interval_ms / 1000, next_run_time=first_run,
                          id=f"logs:{p.source.target}:{p.source.name}")
        for source, interval_ms in self.tpu_sources:
            sched.add_job(guard("tpu", self._poll_tpu), "interval", args=[source],
                          seconds=interval_ms / 1000, next_run_time=first_run,
                          id=f"tpu:{source.target}")
        for w in self.xla_watches:
            sched.add_job(guard("xla_cache", self._scan_xla), "interval", args=[w],
                          seconds=w.interval_ms / 1000, next_run_time=first_run,
                          id=f"xla_cache:{w.target}")

    def pod_death(self, target: str, line: str) -> None:
        """A discovered pod's container died (discovery's thread): into its target's stream."""
        if self.watch is None:
            return
        with self._lock:
            polled = self._pod_deaths.get(target)
            if polled is None:
                polled = self._pod_deaths[target] = PolledLogSource(
                    PodDeathSource(target), POD_DEATH_POLL_MS)
                if self._scheduled is not None:
                    sched, guard = self._scheduled
                    sched.add_job(guard("logs", self._poll_log), "interval", args=[polled],
                                  seconds=POD_DEATH_POLL_MS / 1000, next_run_time=_now_dt(),
                                  id=f"logs:{target}:{polled.source.name}")
        assert isinstance(polled.source, PodDeathSource)
        polled.source.push(line, self.now_ms())

    def unschedule(self, sched: BaseScheduler) -> None:
        """Remove the jobs `schedule` added (a reload replaces these sources)."""
        for job in sched.get_jobs():
            if job.id.startswith(JOB_PREFIXES):
                job.remove()

    def _poll_log(self, p: PolledLogSource) -> None:
        assert self.watch is not None
        events = self.watch.poll(p.source, self.now_ms())
        self._cold_tick(p.source.target, self.now_ms())
        health = p.source.health
        self.metrics.log_source_up.labels(p.source.target, p.source.name).set(int(health.ok))
        for e in events:
            self.metrics.log_events.labels(e.target, e.category).inc()

    def _poll_tpu(self, source: Any) -> None:
        now = self.now_ms()
        for labels, value in source.poll(now):
            self.store.add(labels, now, value)

    def _scan_xla(self, w: XlaCacheWatch) -> None:
        now = self.now_ms()
        for labels, value in xla_cache_samples(w.target, w.path, now):
            self.store.add(labels, now, value)
            if self.coldstarts is not None and \
                    dict(labels).get("__name__") == "sentinel_xla_cache_files":
                self.coldstarts.cache_files(w.target, value)

    def close(self) -> None:
        """Close files, subprocesses and API clients."""
        if self.watch is not None:
            self.watch.close(p.source for p in self.log_sources)
            self.watch.close(p.source for p in self._pod_deaths.values())
        for source, _ in self.tpu_sources:
            source.close()


def _now_dt() -> datetime:
    return datetime.now(UTC)
