"""The App owns Sentinel's lifecycle: start, reload, stop.

It builds the pipeline from a Config, schedules one job per target (a timer
on the I/O loop) and one per rule group and worker (APScheduler), and
serves /metrics and /healthz. `main` (the CLI) only parses arguments and
calls `App.start()` / `App.stop()`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from sentinel import progress
from sentinel.collect.accelerators import Accelerators
from sentinel.collect.ioloop import IOLoop
from sentinel.collect.scrape import Scraper, ScrapeTarget
from sentinel.collect.workerpool import ProcessScraper, workers_for
from sentinel.config import Config
from sentinel.daemon import coldstartjob, fleetwiring, gcpolicy, heartbeat, systemd
from sentinel.daemon.fleetwiring import fleet_correlator
from sentinel.daemon.follow import ScrapeFollower, may_follow
from sentinel.daemon.http import StatusServer
from sentinel.daemon.metriccheckjob import MetricCheckJob
from sentinel.daemon.missed import MISSED_EVENTS, MissedWork, quiet_apscheduler
from sentinel.daemon.notifier import Notifier
from sentinel.daemon.pipeline import Pipeline
from sentinel.daemon.probejobs import HEARTBEAT_SERIES, SHOWN_SERIES, ProbeJobs, probes_on
from sentinel.daemon.querybackend import DaemonBackend
from sentinel.daemon.readiness import DataReadiness
from sentinel.daemon.reload import (
    Reloader,
    ReloadMetrics,
    ReloadResult,
    diff_targets,
    sources_changed,
)
from sentinel.daemon.remediation import DaemonRemediation
from sentinel.daemon.scrapejobs import ScrapeJobs, first_run_ms, miss_policy
from sentinel.daemon.scrapetarget import scrape_target
from sentinel.daemon.selfmetrics import SelfMetrics
from sentinel.daemon.selfstore import write_to_store
from sentinel.daemon.sourcejobs import SourceJobs
from sentinel.daemon.takeover import Takeover
from sentinel.incidents import alert_states
from sentinel.incidents.db import Database
from sentinel.incidents.series_recorder import SeriesRecorder
from sentinel.incidents.tracker import IncidentTracker
from sentinel.promql import Engine, max_lookback_ms
from sentinel.quietlog import QuietFailure
from sentinel.respond.diagnose.annotations import session_runbook_annotations
from sentinel.respond.diagnose.gather import (
    SERIES_AFTER_MS,
    SERIES_BEFORE_MS,
    SERIES_NAMES,
    store_series,
)
from sentinel.respond.diagnose.worker import DiagnosisWorker
from sentinel.respond.remediate import throughput
from sentinel.respond.remediate.actfirst_grace import act_first
from sentinel.respond.remediate.approval_runner import ApprovalRunner
from sentinel.respond.remediate.pager import NotifyPager
from sentinel.respond.remediate.throughput import THROUGHPUT_SERIES
from sentinel.rules.loader import RuleGroup, load_rule_files
from sentinel.rules.manager import RuleManager
from sentinel.rules.needs import needed_series
from sentinel.store import MemoryStore, SeriesFilter

log = logging.getLogger(__name__)

HOUSEKEEPING_INTERVAL_S = 30
# A no-op job on the I/O loop: its heartbeat says the loop (and so every scrape) still runs.
LOOP_HEARTBEAT_MS = 5_000
LOOP_HEARTBEAT_JOB = "io-loop:heartbeat"  # ScrapeJobs names it kind:name
# Jobs that write incidents or their timelines: with `ha:`, only the leader runs them.
LEADER_JOBS = frozenset({"logs", "diagnose", "evidence"})
# Evaluation reads samples written up to one scrape interval ago; keep some
# slack beyond the longest rule range so `rate(x[15m])` sees a full window.
RETENTION_SLACK_MS = 60_000


def rule_paths(config: Config) -> list[str]:
    """The rule files named by the config's globs, without the other files kept beside them.

    `rules/*.yaml` also matches the promtool unit tests (`*_test.yaml`) and the
    crash signatures (`signatures.yaml`), which are not alerting rule files.
    """
    return [str(p) for p in config.rule_paths()
            if not p.stem.endswith("_test") and p.stem != "signatures"]


class App:
    """Sentinel's daemon: the pipeline, its scheduler and its status server."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time,
                 loader: Callable[[], Config] | None = None, source: str | None = None,
                 on_reload: Callable[[Config], None] = lambda _config: None) -> None:
        """`loader` reads the config file again at a reload (`source`: its path, for the
        messages); without one a reload re-reads the rule files of `config`. `on_reload`
        hears of each config applied (the log redaction learns its secrets)."""
        self.config = config
        self.clock = clock
        self.metrics = SelfMetrics()
        self._on_reload = on_reload
        self.reloader = Reloader(loader or (lambda: self.config), source, lambda: self.config,
                                 self._apply_config,
                                 ReloadMetrics(self.metrics.registry, clock()), clock)
        self._db: Database | None = None
        self._service: Any = None  # the API's ApiService: its target list follows reloads
        self._auth: Any = None  # the API's Auth: its tokens follow reloads
        self.pipeline: Pipeline | None = None
        self.engine: Engine | None = None
        self.query: DaemonBackend | None = None  # what rules read (query_backend:, issue 16)
        self.sources: SourceJobs | None = None
        self.probes: ProbeJobs | None = None
        self.metric_check: MetricCheckJob | None = None
        self.diagnosis: DiagnosisWorker | None = None
        self.series: SeriesRecorder | None = None  # incidents' plotted series into the DB
        self.status: StatusServer | None = None
        self.notifier: Notifier | None = None
        self.discovered: Any = None  # sentinel.daemon.discovery.DiscoveredTargets
        # Remediation and approvals: started with the daemon, or at each HA takeover.
        self.remediation: DaemonRemediation | None = None
        self._takeover: Takeover | None = None  # with `ha:`, what a change of role touches
        self._scheduler: BackgroundScheduler | None = None
        self._stopping = threading.Event()  # long jobs end early (the evidence job)
        self._jobs_waiter: threading.Thread | None = None  # ends when the jobs have ended
        self._watchdog: systemd.WatchdogPinger | None = None  # feeds WatchdogSec while healthy
        # The one event loop for network I/O: scrapes now; other async sources submit here.
        self.io: IOLoop | None = None
        self.scrape_jobs: ScrapeJobs | None = None
        # Cheap rule groups evaluate again once a batch of scrapes is in (daemon/follow.py).
        self.follower = ScrapeFollower(self._follow_evaluate, self._now_ms, self._follow_wanted)
        self._group_locks: dict[str, threading.Lock] = {}
        self._last_eval_ms: dict[str, int] = {}
        self.missed = MissedWork(self.metrics.registry)
        # Periodic workers' last runs: /healthz, the systemd watchdog, sentinel_worker_*.
        self.heartbeats = heartbeat.Heartbeats()
        self._heartbeat_metrics = heartbeat.register(self.heartbeats, self.metrics.registry,
                                                     wall=clock)
        self._health_log = QuietFailure(log, "health (a periodic worker is stuck)")
        self._groups: list[RuleGroup] = []
        self._lock = threading.Lock()
        self._not_ready: str | None = "starting"
        # HA (issue 16): the leader lease, and whether this daemon took over as leader.
        self.lease: Any = None  # sentinel.daemon.leader.LeaderLease, with `ha:` configured
        self.leading = False
        self.started_ms = 0

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Migrate the database, load rules, restore alert state, start jobs and serving."""
        cfg = self.config
        host, port = _split_listen(cfg.listen)
        from sentinel.api.auth import check_bind

        check_bind(host, cfg.api.tokens)  # before anything: a clear refusal, nothing half-started
        db = Database(cfg.database)
        db.upgrade_in_child()
        self._db = db
        self.started_ms = self._now_ms()
        # With `ha:`, the leader's work goes through a database fenced by the lease.
        work_db = self._lease_for(db)
        # With diagnosis on, each message carries its incident's newest runbook.
        self.notifier = Notifier(cfg, work_db, self.metrics, self._now_ms,
                                 session_runbook_annotations if cfg.diagnosis else None,
                                 heartbeats=self.heartbeats,
                                 active=self.acting if self.lease is not None else None)
        # Act first, then tell once: a page waits while a policy acts (respond/notify/actfirst).
        # One alert on many targets at once: one fleet incident, one page (issue 49).
        tracker = IncidentTracker(work_db, outbox=self.notifier.outbox,
                                  join_window_ms=cfg.notify.join_window_ms,
                                  act_first=act_first(cfg), serving=self._serving,
                                  fleet=fleet_correlator(cfg, self.notifier.outbox))
        self.remediation = DaemonRemediation(cfg, self.metrics.registry,
                                             NotifyPager(self.notifier.page, self._now_ms,
                                                         self.notifier.recovered,
                                                         self.notifier.not_fixed),
                                             self.acting, self.clock)
        groups = load_rule_files(rule_paths(cfg), frozenset(cfg.promql_features))
        self.io = IOLoop().start()
        store = MemoryStore(retention_ms=self._retention_ms(groups), max_series=cfg.max_series)
        store.set_filter(self._series_filter(groups))
        self.engine = Engine(store, subquery_step_ms=cfg.evaluation_interval_ms,
                             semantics=cfg.promql_semantics,
                             features=frozenset(cfg.promql_features))
        self.query = DaemonBackend(cfg, self.engine, self.metrics.registry)
        self.query.learn(groups)
        rules = RuleManager(groups, self.query.backend,
                            default_interval_ms=cfg.evaluation_interval_ms,
                            external_url=cfg.external_url, store=store)
        self.query.attach(rules, groups)
        if self.remediation is not None:
            self.remediation.throughput = throughput.from_backend(self.query.backend)
        from sentinel.daemon.rulehealth import RuleHealthCollector

        # The pipeline's manager, not this one: an HA takeover replaces it (daemon/takeover.py).
        self.metrics.registry.register(RuleHealthCollector(
            lambda: self.pipeline.rules if self.pipeline is not None else rules))
        # Restored alerts are not evaluated as absent before their target answered,
        # and open incidents are checked against them (issue 10).
        if self.lease is None:  # with `ha:`, the leader restores when it takes over
            rules.restore(tracker.load_alert_states(), self._now_ms(),
                          cfg.alert_restore.settings())
            # Rows of groups no longer in the rule files: no evaluation will delete them.
            alert_states.forget_groups(tracker.db, rules.groups)
        readiness = DataReadiness((t.name for t in self.query.scraped_targets(cfg.targets)),
                                  self._now_ms)
        rules.ready = readiness.ready
        self._groups = groups
        self.pipeline = Pipeline(
            store=store, scraper=self._collector(cfg, store), rules=rules, tracker=tracker,
            receivers=(), metrics=self.metrics, on_queued=self.notifier.kick,
            readiness=readiness, reconcile_pending=True,
        )
        self.series = self._series_recorder(work_db)
        if cfg.diagnosis is not None:
            self.diagnosis = DiagnosisWorker(
                work_db, cfg, series=self.query.series_reader() or store_series(store))
        if self.lease is None:
            self.pipeline.reconcile(self._now_ms())
            self.pipeline.remediator = self.remediation.start(db)
        else:
            self._takeover = self._takeover_for(self.lease.holder)
        self.sources = SourceJobs(cfg, store, db, self.metrics, self._now_ms)
        self.pipeline.accelerators = Accelerators.from_targets(cfg.targets)
        self.sources.learn_accelerators(self.pipeline.accelerators)
        self._watch_cold_starts(cfg)
        self.probes = ProbeJobs(cfg, store, self.metrics.registry, self._now_ms,
                                self.io)
        self.metric_check = MetricCheckJob(lambda: self._groups, store, self.engine,
                                           self.metrics.registry, cfg.evaluation_interval_ms,
                                           self._now_ms)
        surfaces = self._surfaces(db, host)
        self._service = surfaces.service
        self._auth = surfaces.auth
        self.status = StatusServer(host, port, self.metrics.registry, self.ready,
                                   surfaces.routes, surfaces.lifespans, healthy=self.healthy,
                                   role=self.lease.describe if self.lease is not None else None,
                                   guard=surfaces.guard)
        self.status.start()
        self.missed.track((t.name for t in cfg.targets), rules.groups)
        quiet_apscheduler()
        self._scheduler = self._schedule()
        self._scheduler.start()
        self.scrape_jobs = ScrapeJobs(self.io, self._scrape_job, self.missed)
        self._follow_wanted(self.follower.wanted)
        self.follower.start()
        self._watch_loop(self.scrape_jobs)
        self.scrape_jobs.start((self._scrape_target(t)
                                for t in self.query.scraped_targets(cfg.targets)), self._now_ms())
        self.probes.schedule(self.scrape_jobs, self._now_ms())  # on the same loop, as timers
        self._start_discovery()
        if self.lease is not None:
            self.lease.start()  # one round now: a lone daemon leads from the first evaluation
        self.notifier.start()
        watchdog = systemd.watchdog_interval_s()
        if watchdog:  # a thread of its own: fed while healthy, a stuck worker gets a restart
            self._watchdog = systemd.WatchdogPinger(watchdog, self.healthy)
            self._watchdog.start()
        self._not_ready = None
        systemd.notify("READY=1")
        log.info(
            "sentinel started: %d targets, %d rule groups, listening on %s:%d",
            len(cfg.targets), len(groups), *self.status.address,
        )

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop scheduling, let running jobs finish (bounded), close the status server."""
        systemd.notify("STOPPING=1")
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None
        self._not_ready = "stopping"
        self._stopping.set()
        if self.lease is not None:  # hand the lease back: a standby takes over at once
            self.lease.stop(timeout_s)
        if self.discovered is not None:
            self.discovered.stop(timeout_s)
        # Scrapes first: stop scheduling them, then cancel those in flight and
        # close their connections on the loop, so none of them hits a closed client.
        if self.scrape_jobs is not None:
            self.scrape_jobs.stop()
            self.scrape_jobs = None
        self.follower.stop(timeout_s)
        if self.pipeline is not None:
            self.pipeline.scraper.close()  # idle connections are closed on the loop
        if self.probes is not None:
            self.probes.close()  # the same, for the probes' connections
        if self.io is not None:
            self.io.stop(min(timeout_s, 2.0))
        if self._scheduler is not None:
            # APScheduler's shutdown(wait=True) has no bound: wait in a helper
            # thread so a hung job cannot hold SIGTERM hostage.
            waiter = threading.Thread(target=self._scheduler.shutdown, kwargs={"wait": True},
                                      name="sentinel-shutdown", daemon=True)
            waiter.start()
            self._jobs_waiter = waiter
            waiter.join(timeout_s)
            if waiter.is_alive():
                log.warning("jobs still running after %.1fs; stopping anyway", timeout_s)
            self._scheduler = None
        if self.notifier is not None:
            # Its last round writes: not while jobs still do (SQLite's one writer).
            self.notifier.stop(timeout_s, drain=not self._jobs_running())
            self.notifier = None
        if self.status is not None:
            self.status.stop()
            self.status = None
        if self.remediation is not None:
            self.remediation.stop(timeout_s)
        if self.pipeline is not None:
            self.pipeline.remediator = None
        if self.sources is not None:
            self.sources.close()
        if self.diagnosis is not None:
            self.diagnosis.close()
        if self.query is not None:  # jobs query through it (rules, evidence)
            self._after_jobs(self.query.close)
        log.info("sentinel stopped")

    def _jobs_running(self) -> bool:
        """Whether scheduler jobs still run past stop's bounded wait for them."""
        return self._jobs_waiter is not None and self._jobs_waiter.is_alive()

    def jobs_running(self) -> bool:
        """After `stop`: whether a job still runs (the process may exit without it)."""
        return self._jobs_running()

    def _after_jobs(self, close: Callable[[], None]) -> None:
        """Run `close` once the scheduler's jobs have ended: now, or when the last one
        still running after stop's bounded wait ends (it would use a closed client)."""
        waiter = self._jobs_waiter
        if waiter is None or not self._jobs_running():
            close()
            return
        def later() -> None:
            waiter.join()
            close()
        threading.Thread(target=later, name="sentinel-close", daemon=True).start()

    def reload(self) -> ReloadResult:
        """Reload the whole configuration all-or-nothing (daemon/reload.py); truthy when
        applied. A refused file keeps the running configuration; the log says why."""
        return self.reloader.reload()

    def _apply_config(self, new: Config) -> None:
        """Swap in a checked config part by part; what did not change keeps its state."""
        assert self.notifier is not None and self.remediation is not None
        # Parsed by the pre-flight already; the features are a restart key: the old ones.
        groups = load_rule_files(rule_paths(new), frozenset(self.config.promql_features))
        old, self.config = self.config, new
        self._on_reload(new)  # secrets first: what follows may log the new URLs
        diff = diff_targets(old.targets, new.targets)
        for name in diff.removed:
            self._remove_target(name)
        for target in (*diff.added, *diff.changed):  # a changed one keeps its series
            self._add_target(target)
        if sources_changed(old, new):
            self._swap_sources(new)
        self.notifier.reconfigure(new)
        self._retune_tracker(new)
        # Remediation silences may name recurring windows: theirs follow the file too.
        if (old.remediation, old.time_intervals) != (new.remediation, new.time_intervals):
            self._swap_remediation(new)
        self._swap_rules(groups)
        if self._auth is not None and old.api.tokens != new.api.tokens:
            self._auth.replace_tokens(new.api.tokens)
            log.info("api tokens reloaded: %d (%s)", len(new.api.tokens),
                     ", ".join(f"{t.name}:{t.role}" for t in new.api.tokens) or "none")
        if self._service is not None:
            from sentinel.api.alerts_v2 import AlertRouting

            self._service.targets = [t.name for t in new.targets]
            self._service.alert_routing = AlertRouting.from_config(new)
        log.info("reloaded: %d targets (%d added, %d removed, %d changed), %d receivers, "
                 "%d rule groups", len(new.targets), len(diff.added), len(diff.removed),
                 len(diff.changed), len(new.receivers), len(groups))

    def _serving(self, target: str) -> bool | None:
        """Whether the target serves, from this daemon's scrapes (incidents/ending.py)."""
        pipeline = self.pipeline
        if pipeline is None or pipeline.readiness is None:
            return False  # not started: nothing is known to serve yet
        return pipeline.readiness.serving(target)

    def _retune_tracker(self, new: Config) -> None:
        """The incident stage's join window and act-first wait follow the file: which
        policies hold a page, and how long, come from `notify` and `remediation`; and
        `fleet:` (its open fleet incidents kept)."""
        assert self.pipeline is not None and self.notifier is not None
        discovered = self.discovered.targets() if self.discovered is not None else ()
        with self._lock:
            tracker = self.pipeline.tracker
            tracker.retune(new.notify.join_window_ms, act_first(new))
            tracker.fleet = fleetwiring.retune(tracker.fleet, new, self.notifier.outbox,
                                               discovered)

    def _swap_rules(self, groups: list[RuleGroup]) -> None:
        """New rule groups; unchanged rules keep their alert state (RuleManager.reload)."""
        assert self.pipeline is not None and self._scheduler is not None
        with self._lock:
            if self.query is not None:
                self.query.learn(groups)
            self.pipeline.rules.reload(groups)
            store = self.pipeline.store
            store.retention_ms = self._retention_ms(groups)
            store.set_filter(self._series_filter(groups))
            self._groups = groups
            for job in self._scheduler.get_jobs():
                if job.id.startswith("rules:"):
                    job.remove()
            self._schedule_rule_groups(self._scheduler)

    def _watch_cold_starts(self, cfg: Config) -> None:
        """Cold starts noticed from the logs and cache scans (daemon/coldstartjob.py)."""
        assert self.sources is not None and self.pipeline is not None and self._db is not None
        db = self._db
        pager = self.remediation.pager if self.remediation is not None else None
        self.sources.watch_cold_starts(
            coldstartjob.cold_starts(cfg, self.pipeline.accelerators),
            lambda notice: coldstartjob.noticed(db, cfg, pager, notice))

    def _swap_sources(self, new: Config) -> None:
        """Log, TPU and XLA-cache sources rebuilt from `new` (their counters restored)."""
        assert self.pipeline is not None and self._scheduler is not None
        assert self.sources is not None and self._db is not None
        self.sources.unschedule(self._scheduler)
        self.sources.close()
        self.pipeline.accelerators = Accelerators.from_targets(new.targets)
        self.sources = SourceJobs(new, self.pipeline.store, self._db, self.metrics,
                                  self._now_ms)
        self.sources.learn_accelerators(self.pipeline.accelerators)
        self._watch_cold_starts(new)
        self.sources.schedule(self._scheduler, self._guard, _now_dt())

    def _swap_remediation(self, new: Config) -> None:
        """A new remediator under the new policies; attempts in flight finish under the
        engine (and policy) they started with. With `ha:`, a standby's next takeover
        starts it."""
        assert self.remediation is not None and self.pipeline is not None
        self.remediation.reconfigure(new)
        if self.acting():
            discovered = self.discovered.targets() if self.discovered is not None else ()
            self.pipeline.remediator = self.remediation.start(self.pipeline.tracker.db,
                                                              discovered)

    def ready(self) -> str | None:
        """None when ready to serve, else why not."""
        return self._not_ready

    def healthy(self) -> str | None:
        """None when every periodic worker ran within 3 of its intervals, else which did not.

        Logged once when it turns unhealthy, summarised while it stays so, and once on recovery.
        """
        why = self.heartbeats.unhealthy(time.monotonic(), self.clock())
        trouble = self.lease.takeover_trouble() if self.lease is not None else None
        if trouble is not None:  # no leader anywhere, and this one cannot take over
            why = trouble if why is None else f"{why}\n{trouble}"
        if why is None:
            self._health_log.ok()
        else:
            self._health_log.failed(detail=why.replace("\n", "; "))
        return why

    @property
    def approvals(self) -> ApprovalRunner | None:
        """The approval runner while this daemon acts and remediation is configured."""
        return self.remediation.approvals if self.remediation is not None else None

    def acting(self) -> bool:
        """Whether this daemon evaluates, records and responds: always, or as the HA leader."""
        return self.lease is None or (self.leading and self.lease.is_leader())

    def _lease_for(self, db: Database) -> Database:
        """With `ha:`, the leader lease and a database fenced by it; else `db` itself."""
        if self.config.ha is None:
            return db
        from sentinel.daemon.leader import FencedDatabase, LeaderLease
        from sentinel.respond.remediate.lease import owner_id

        # The lease starts (and so calls these) only once start() built the Takeover.
        self.lease = LeaderLease(
            db, self.config.ha.lease_ms, self.config.ha.name, owner_id(),
            registry=self.metrics.registry, on_elected=self._elected,
            on_demoted=self._demoted)
        return FencedDatabase(db, self.lease.fence)

    def _takeover_for(self, holder: str) -> Takeover:
        """What a change of HA role touches, handed to daemon/takeover.py."""
        assert self.pipeline is not None and self.notifier is not None
        assert self.query is not None and self.remediation is not None
        return Takeover(
            config=self.config, pipeline=self.pipeline, outbox=self.notifier.outbox,
            lock=self._lock, groups=lambda: self._groups, backend=self.query.backend,
            started_ms=self.started_ms, now_ms=self._now_ms, remediation=self.remediation,
            discovered=lambda: self.discovered.targets() if self.discovered is not None else (),
            set_leading=self._set_leading, holder=holder,
            restore_signatures=self._restore_signatures)

    def _elected(self, epoch: int) -> None:
        assert self._takeover is not None
        self._takeover.elected(epoch)

    def _demoted(self) -> None:
        assert self._takeover is not None
        self._takeover.demoted()

    def _set_leading(self, leading: bool) -> None:
        self.leading = leading

    def _restore_signatures(self) -> None:
        if self.sources is not None:
            self.sources.restore_signatures()

    def _surfaces(self, db: Database, host: str) -> Any:
        """The API, page and MCP served beside /metrics (issue 15)."""
        from sentinel.api.alerts_v2 import AlertRouting
        from sentinel.api.server import build_surfaces, rule_expr_lookup
        from sentinel.api.service import ApiService

        assert self.engine is not None
        service = ApiService(
            db, query_fn=(self.query.backend.query if self.query is not None
                          else self.engine.query), targets=[t.name for t in self.config.targets],
            rule_exprs=rule_expr_lookup(lambda: self._groups),
            # Looked up at each approval: with `ha:` the runner starts when this daemon leads.
            on_approved=lambda: self.approvals.kick() if self.approvals is not None else None,
            # A diagnosis asked for from the page runs at the diagnosis job's next turn: now.
            on_diagnosis_requested=self._kick_diagnosis,
            diagnosis_enabled=self.config.diagnosis is not None, web=self.config.web,
            clock=self.clock, external_url=self.config.external_url,
            alert_routing=AlertRouting.from_config(self.config),  # API v2 alerts (issue 35)
            rule_manager=lambda: self.pipeline.rules if self.pipeline is not None else None,
            rule_groups=lambda: self._groups,
            discovered=lambda: self.discovered.targets() if self.discovered is not None else (),
            log_sources=self.metrics.log_sources,
            evidence_settings=self.config.evidence.settings(self.config.evaluation_interval_ms),
            earliest_ms=self._earliest_ms())
        return build_surfaces(service, self.config.api, host, reload=self.reload)

    # -- discovered targets (kubernetes_sd) --------------------------------

    def _start_discovery(self) -> None:
        """Targets from the Kubernetes API: scrape jobs follow the pods as they come and go."""
        if not self.config.kubernetes_sd:
            return
        from sentinel.daemon.discovery import DiscoveredTargets

        # Deaths since this daemon's start are news even at a pod's first sight: discovery's
        # first list may come after "ready" (issue 53).
        self.discovered = DiscoveredTargets(self.config, self._add_target, self._remove_target,
                                            self.metrics.registry, self._pod_death,
                                            since_ms=self.started_ms).start()

    def _pod_death(self, target: str, line: str) -> None:
        """A discovered pod's container died: a line for the target's log stream."""
        sources = self.sources  # a reload may swap them: the new ones take it
        if sources is not None:
            sources.pod_death(target, line)

    def _watch_loop(self, jobs: ScrapeJobs) -> None:
        """The I/O loop's heartbeat: a job on the loop beside the scrapes, watched as a worker."""
        now_ms = self._now_ms()
        first_ms = first_run_ms(LOOP_HEARTBEAT_JOB, LOOP_HEARTBEAT_MS, now_ms)
        self.heartbeats.expect(LOOP_HEARTBEAT_JOB, LOOP_HEARTBEAT_MS / 1000,
                               time.monotonic() + (first_ms - now_ms) / 1000)
        jobs.add("io-loop", "heartbeat", _alive, LOOP_HEARTBEAT_MS, now_ms, self.heartbeats)

    def _add_target(self, target: Any) -> None:  # config.TargetConfig
        """Schedule (or reschedule) a discovered target's scrape and probe; tell remediation
        its address."""
        from sentinel.respond.remediate.base import TargetInfo

        assert self.scrape_jobs is not None and self.pipeline is not None
        # The fleet's group sizes count it (issue 49: a pool's 20 % is of its targets now).
        fleetwiring.track(self.pipeline.tracker.fleet, added=target)
        st = self._scrape_target(target)
        if self.query is None or self.query.scrapes:  # a remote backend's Prometheus scrapes
            # On the I/O loop like the static targets (ScrapeJobs.add is thread-safe).
            self.scrape_jobs.add("scrape", st.name, self._scrape_job, st.interval_ms,
                                 self._now_ms(), st)
            self.missed.track([st.name], ())
        if self.probes is not None:  # a pod that answers /health may still serve nothing
            self.probes.add(target, self._now_ms())
        if self.pipeline.remediator is not None:
            engine = self.pipeline.remediator.engine  # copy-on-write: readers see a whole map
            engine.targets = {**engine.targets, target.name: TargetInfo(
                target.name, target.url, target.xla_cache_path, labels=dict(target.labels),
                accelerator=target.accelerator)}

    def _remove_target(self, name: str) -> None:
        """Stop scraping a target that went away; its series end with staleness markers."""
        assert self.scrape_jobs is not None and self.pipeline is not None
        fleetwiring.track(self.pipeline.tracker.fleet, removed=name)
        self.scrape_jobs.remove("scrape", name)
        self.pipeline.scraper.forget(name, self._now_ms())
        if self.probes is not None:
            self.probes.remove(name, self._now_ms())
        if self.pipeline.remediator is not None:
            engine = self.pipeline.remediator.engine
            engine.targets = {k: v for k, v in engine.targets.items() if k != name}

    # -- scheduling --------------------------------------------------------

    def _schedule(self) -> BackgroundScheduler:
        assert self.sources is not None
        # Scrapes and probes run on the I/O loop (ScrapeJobs), not here: this pool is for
        # rule groups and the blocking sources, so evaluation never queues behind scrapes.
        workers = min(64, len(self._groups) + self.sources.count() + 5)
        sched = BackgroundScheduler(
            # Named, so sentinel_thread_cpu_seconds_total{thread="sentinel-jobs"} is theirs.
            executors={"default": ThreadPoolExecutor(
                max_workers=workers, pool_kwargs={"thread_name_prefix": "sentinel-jobs"})},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
            timezone="UTC",
        )
        sched.add_listener(self.missed.listener, MISSED_EVENTS)
        sched.add_listener(self.heartbeats.scheduler_listener(sched, _is_worker),
                           heartbeat.HEARTBEAT_EVENTS)
        # Scrapes are spread over their interval: the first evaluation waits until
        # every target has been scraped once, or a restored firing alert would
        # resolve for lack of data and page again.
        scraped = (self.query.scraped_targets(self.config.targets) if self.query is not None
                   else self.config.targets)
        warmup_ms = max((t.scrape_interval_ms for t in scraped), default=0)
        self._schedule_rule_groups(sched, warmup_ms)
        assert self.sources is not None
        self.sources.schedule(sched, self._guard, _now_dt())
        if self.metric_check is not None:
            self.metric_check.schedule(sched, self._guard, _now_dt())
        if self.diagnosis is not None:
            sched.add_job(self._guard("diagnose", self._diagnose_job), "interval",
                          seconds=self.diagnosis.settings.interval_ms / 1000, id="diagnose",
                          next_run_time=_now_dt())
        if self.series is not None:  # incidents' plotted series, stored with them
            sched.add_job(self._guard("evidence", self._evidence_job), "interval",
                          seconds=self.config.evidence.interval_ms / 1000, id="evidence",
                          next_run_time=_now_dt())
        # Missed-work counters into the store, for the self-alert rules (rules/sentinel.yaml).
        sched.add_job(self._guard("self-metrics", self._self_metrics_job), "interval",
                      seconds=self.config.evaluation_interval_ms / 1000, id="self-metrics",
                      next_run_time=_now_dt())
        sched.add_job(self._guard("housekeeping", self._housekeeping_job), "interval",
                      seconds=HOUSEKEEPING_INTERVAL_S, id="housekeeping")
        return sched

    def _schedule_rule_groups(self, sched: BackgroundScheduler, warmup_ms: int = 0) -> None:
        assert self.pipeline is not None
        self.follower.eligible(self._may_follow())
        for name, interval_ms in self.pipeline.rules.groups.items():
            interval_ms = interval_ms or self.config.evaluation_interval_ms
            # Failure counters start at 0, so increase() sees the first failure (self-alerts).
            self.metrics.rule_failures.labels(name)
            self.metrics.evaluation_failures.labels(name)
            # Start on an interval boundary: evaluation timestamps are then
            # exact multiples of the interval, so `for: 30s` fires after
            # exactly 30 s of evaluations, whatever the scheduler's jitter.
            sched.add_job(
                self._guard("rules", self._evaluate_job), "interval", args=[name, interval_ms],
                seconds=interval_ms / 1000, id=f"rules:{name}",
                start_date=_next_boundary(self.clock() + warmup_ms / 1000, interval_ms),
                # Each run time that cannot start on time is counted as missed (MissedWork).
                **miss_policy(interval_ms),
            )

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _collector(self, cfg: Config, store: MemoryStore) -> Scraper | ProcessScraper:
        """Scrapes in this process, or through `collect_workers` worker processes."""
        assert self.io is not None
        rate = sum(1000 / t.scrape_interval_ms for t in self.query.scraped_targets(cfg.targets)) \
            if self.query is not None else 0.0
        n = workers_for(cfg.collect_workers, rate)
        if n <= 1:
            return Scraper(store, io=self.io)
        self.metrics.collect_workers.set(n)
        log.info("scraping through %d collect worker processes", n)
        return ProcessScraper(store, self.io, n, on_missed=self.missed.scrape_missed,
                              on_restart=self.metrics.collect_worker_restarts.inc).start()

    async def _scrape_job(self, target: ScrapeTarget) -> None:
        """One scrape, on the I/O loop; never raises into the scheduler."""
        assert self.pipeline is not None
        try:
            await self.pipeline.scrape_async(target, int(self.clock() * 1000))
        except asyncio.CancelledError:
            return  # stopping: the loop cancels scrapes in flight; nothing to report
        except Exception:
            self.metrics.job_failures.labels("scrape").inc()
            log.exception("scrape job of %s failed", target.name)

    def _evaluate_job(self, group: str, interval_ms: int) -> None:
        # Busy, not stuck, while the run makes progress (heartbeat.py): an alert storm's
        # evaluation may outlast three intervals without the daemon being dead.
        with self.heartbeats.working(f"rules:{group}"):
            self._evaluate_at(group, int(self.clock() * 1000) // interval_ms * interval_ms)

    def _follow_evaluate(self, group: str, now_ms: int) -> None:
        """A follow-up evaluation (daemon/follow.py): as the scheduled ones, nothing escapes."""
        try:
            self._evaluate_at(group, now_ms)
        except Exception:
            self.metrics.job_failures.labels("rules").inc()
            log.exception("follow-up evaluation of %s failed", group)

    def _evaluate_at(self, group: str, now_ms: int) -> None:
        """Evaluate `group` at `now_ms`, unless it already ran at that time or a later one.

        Scheduled and follow-up evaluations of one group take turns (its lock),
        and its evaluation times never go backwards.
        """
        assert self.pipeline is not None
        if not self.acting():
            return  # a standby: the leader evaluates (sentinel/daemon/leader.py)
        with progress.turn(self._group_locks.setdefault(group, threading.Lock())):
            if now_ms <= self._last_eval_ms.get(group, -1):
                return  # a follow-up at a later time ran already: nothing new to see
            self._last_eval_ms[group] = now_ms
            # No App lock here: a slow group must not hold the others back (the
            # pipeline serialises the database side; RuleManager guards reloads).
            # The collector waits for the evaluation's short-lived vectors to be freed.
            with gcpolicy.evaluation_hold():
                if self.lease is None:
                    self.pipeline.evaluate(group, now_ms)
                else:
                    with self.lease.term():  # its writes are refused in a later term
                        self.pipeline.evaluate(group, now_ms)
            # What its rules took (not the incident side: a page's commit is no reason to stop).
            took = [t.last_duration_s for t in self.pipeline.rules.group_timing()
                    if t.group == group]
            self.follower.cost(group, took[0] if took else float("inf"))

    def _may_follow(self) -> list[str]:
        """Groups that may follow the scrapes (daemon/follow.py's `may_follow`)."""
        if self.query is None or self.query.remote is not None:
            return []  # a remote backend's Prometheus scrapes; Sentinel's scrapes say nothing
        return may_follow(self._groups, [t.scrape_interval_ms for t in
                                         self.query.scraped_targets(self.config.targets)],
                          self.config.evaluation_interval_ms)

    def _follow_wanted(self, wanted: bool) -> None:
        """ScrapeJobs says when its scrapes are in only while some group follows them."""
        jobs = self.scrape_jobs
        if jobs is not None:
            jobs.on_idle = self.follower.scraped if wanted else None

    def _kick_diagnosis(self) -> None:
        job = self._scheduler.get_job("diagnose") if self._scheduler is not None else None
        if job is not None:
            job.modify(next_run_time=_now_dt())

    def _evidence_job(self) -> None:
        assert self.series is not None
        self.series.tick(self._now_ms())

    def _series_recorder(self, db: Database) -> SeriesRecorder:
        """The evidence job's recorder: the rules' backend, back as far as the store keeps."""
        from sentinel.api.server import rule_expr_lookup

        assert self.query is not None
        return SeriesRecorder(
            db, self.query.backend.query, rule_expr_lookup(lambda: self._groups),
            self.config.evidence.settings(self.config.evaluation_interval_ms),
            self.metrics.registry, earliest_ms=self._earliest_ms(),
            stopping=self._stopping.is_set)

    def _earliest_ms(self) -> Callable[[int], int | None]:
        """The oldest time rules' queries still reach at `now`: the store's retention back,
        or no limit with a remote backend (it holds the history)."""
        if self.query is not None and self.query.remote is not None:
            return lambda now: None
        store = self.pipeline.store if self.pipeline is not None else None
        return lambda now: now - store.retention_ms if store is not None else None

    def _diagnose_job(self) -> None:
        assert self.diagnosis is not None
        self.diagnosis.tick(self._now_ms())

    def _self_metrics_job(self) -> None:
        assert self.pipeline is not None
        m = self.metrics
        write_to_store((self.missed.scrapes, self.missed.iterations, m.scrapes, m.scrapes_late,
                        m.evaluation_failures, m.rule_failures, m.outbox_oldest_age,
                        self._heartbeat_metrics), self.pipeline.store, self._now_ms())
        if self.query is not None:
            self.query.write_metrics(self.pipeline.store, self._now_ms())

    def _housekeeping_job(self) -> None:
        assert self.pipeline is not None
        gcpolicy.release_overdue()  # a group stuck evaluating must not hold the collector off
        self.pipeline.housekeeping(int(self.clock() * 1000))

    def _guard(self, name: str, job: Callable[..., None]) -> Callable[..., None]:
        """Wrap a job so nothing escapes into the scheduler unrecorded.

        Each failure is counted; the log gets the first traceback of a run of failures
        and then a summary a minute (a database down for a minute fails the evidence
        job every 30 s: one traceback, not one per run).
        """
        quiet = QuietFailure(log, f"{name} job")

        def run(*args: object) -> None:
            if name in LEADER_JOBS and not self.acting():
                return  # they write incidents: only the HA leader runs them
            try:
                job(*args)
            except Exception:
                self.metrics.job_failures.labels(name).inc()
                quiet.failed()
            else:
                quiet.ok()
        return run

    # -- helpers -----------------------------------------------------------

    @staticmethod
    def _scrape_target(target) -> ScrapeTarget:  # noqa: ANN001 (config.TargetConfig)
        return scrape_target(target)

    def _retention_ms(self, groups: list[RuleGroup]) -> int:
        """The longest range the rules (and diagnosis evidence) read, plus slack.

        A `retention` set in the config is a floor, not the default 15 m.
        """
        longest = max(
            (max_lookback_ms(rule.expr) for g in groups for rule in g.rules), default=0
        )
        if self.config.diagnosis is not None:
            longest = max(longest, SERIES_BEFORE_MS + SERIES_AFTER_MS)
        needed = longest + RETENTION_SLACK_MS
        if "retention_ms" in self.config.model_fields_set:
            return max(self.config.retention_ms, needed)
        return needed

    def _series_filter(self, groups: list[RuleGroup]) -> SeriesFilter:
        """Scraped series to keep: what the rules read, plus diagnosis evidence (or everything)."""
        extra = SERIES_NAMES if self.config.diagnosis is not None else ()
        if probes_on(self.config):  # the probes' heartbeat reads the token counter
            extra = (*extra, HEARTBEAT_SERIES, *SHOWN_SERIES)
        if self.config.remediation.policies:  # verdicts compare throughput before and after
            extra = (*extra, THROUGHPUT_SERIES)
        return needed_series(groups, extra, keep_all=self.config.keep_all_series)


# Jobs whose heartbeat decides /healthz: Sentinel-wide work. Per-target jobs (log sources,
# probes, TPU, XLA cache, scrapes) are not: one slow target must not get Sentinel restarted,
# and their trouble is counted per target. `diagnose` may wait minutes on the model.
WORKER_JOBS = ("rules:", "housekeeping", "self-metrics", "rule_metrics")


def _is_worker(job_id: str) -> bool:
    return job_id.startswith(WORKER_JOBS)


async def _alive(heartbeats: heartbeat.Heartbeats) -> None:
    """The I/O loop's heartbeat job: it beats when it runs, so a blocked loop shows as stuck."""
    heartbeats.beat(LOOP_HEARTBEAT_JOB, time.monotonic())


def _split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def _next_boundary(now_s: float, interval_ms: int) -> datetime:
    now_ms = int(now_s * 1000)
    nxt = (now_ms // interval_ms + 1) * interval_ms
    return datetime.fromtimestamp(nxt / 1000, tz=UTC)


def _now_dt() -> datetime:
    return datetime.now(tz=UTC)
