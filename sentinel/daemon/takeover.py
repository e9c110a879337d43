"""What a Sentinel does when it becomes the HA leader, and when it stops being one.

`elected` runs on the lease thread once the lease is held, before the first
evaluation as leader:

- a fresh rule manager, restored from the alert state the previous leader
  committed (`alert_states`, saved in the same transaction as its incidents):
  firing alerts come back firing and already paged, so nothing re-pages.
  Alerts this daemon's own store covers (it scraped since before their last
  evaluation: a hot standby) keep their `ActiveAt` as they are, so `for`
  does not restart; older ones go through Prometheus's restore rules
  (rules/restore.py), as after a restart;
- a fresh incident tracker (its memory of announced pages belongs to one term);
- open incidents are reconciled against the restored alerts at the first evaluation;
- remediation and approvals start (their claims go through the fenced database).

`demoted` stops remediation and approvals; evaluation, notify and the log and
diagnosis jobs check `App.acting()` themselves, and every write they would
still try is refused by the fence.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sentinel.incidents.tracker import IncidentTracker
from sentinel.rules.manager import RuleManager

if TYPE_CHECKING:
    from sentinel.daemon.app import App

log = logging.getLogger(__name__)


def elected(app: App, epoch: int) -> None:
    """Take over: restore alert state from the database, then act."""
    pipeline, notifier, lease = app.pipeline, app.notifier, app.lease
    assert pipeline is not None and notifier is not None and app.engine is not None
    cfg = app.config
    with app._lock, pipeline.record_lock:
        tracker = IncidentTracker(pipeline.tracker.db, outbox=notifier.outbox)
        saved = tracker.load_alert_states()
        backend = app.query.backend if app.query is not None else app.engine
        rules = RuleManager(app._groups, backend, default_interval_ms=cfg.evaluation_interval_ms,
                            external_url=cfg.external_url, store=pipeline.store)
        if app.query is not None:  # the same routing of recording rules as at start
            rules.evaluates_recording = pipeline.rules.evaluates_recording
        warm = [a for a in saved if a.last_eval_ms >= app.started_ms]
        cold = [a for a in saved if a.last_eval_ms < app.started_ms]
        n = rules.restore(warm)  # this store saw the whole time: ActiveAt stands
        n += rules.restore(cold, app._now_ms(), cfg.alert_restore.settings())
        rules.ready = pipeline.rules.ready
        pipeline.rules = rules
        pipeline.tracker = tracker
        pipeline.reconcile_pending = True
        if app.sources is not None:  # this store never counted the last leader's log lines
            app.sources.restore_signatures()
        if pipeline.remediator is None and cfg.remediation.policies:
            app._start_remediation(pipeline.tracker.db)
            _add_discovered(app)
        app.leading = True
    log.info("took over as leader (epoch %d, holder %s): %d alerts restored",
             epoch, lease.holder if lease is not None else "-", n)


def demoted(app: App) -> None:
    """Stand by: stop starting actions; running ones cannot record anything any more."""
    app.leading = False
    pipeline = app.pipeline
    if pipeline is not None and pipeline.remediator is not None:
        remediator, pipeline.remediator = pipeline.remediator, None
        remediator.stop(1.0)
    if app.approvals is not None:
        approvals, app.approvals = app.approvals, None
        approvals.stop(1.0)
    log.info("standing by: another Sentinel leads")


def _add_discovered(app: App) -> None:
    """Targets discovered while standing by: the new remediation engine must know them too."""
    from sentinel.respond.remediate.base import TargetInfo

    pipeline = app.pipeline
    if app.discovered is None or pipeline is None or pipeline.remediator is None:
        return
    engine = pipeline.remediator.engine
    found = {t.name: TargetInfo(t.name, t.url, t.xla_cache_path, labels=dict(t.labels))
             for t in app.discovered.targets()}
    engine.targets = {**found, **engine.targets}  # copy-on-write, static names win
