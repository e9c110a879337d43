"""What a Sentinel does when it becomes the HA leader, and when it stops being one.

Leadership is a state a daemon enters many times: a database blip longer
than the lease, a partition, or a pair where both have led once each make it
lose and retake the lease. Everything `elected` starts, `demoted` stops, and
`elected` can start it again (issue 39: the remediation metrics were
registered again at each takeover, so a daemon led once and never again).

`elected` runs on the lease thread once the lease is held, before the first
evaluation as leader:

- a fresh rule manager, restored from the alert state the previous leader
  committed (`alert_states`, saved in the same transaction as its incidents):
  firing alerts come back firing and already paged, so nothing re-pages.
  Alerts this daemon's own store covers (it scraped since before their last
  evaluation: a hot standby) keep their `ActiveAt` as they are, so `for`
  does not restart; older ones go through Prometheus's restore rules
  (rules/restore.py), as after a restart;
- a fresh incident tracker (its memory of announced pages belongs to one term) and
  alert-state journal (each group is written whole at its first evaluation, then as
  deltas: the last leader wrote the rows);
- open incidents are reconciled against the restored alerts at the first evaluation;
- remediation and approvals start (their claims go through the fenced database).

`demoted` stops remediation and approvals; evaluation, notify and the log and
diagnosis jobs check the App's `acting()` themselves, and every write they
would still try is refused by the fence.

The daemon hands in what a takeover needs (`Takeover`); nothing here imports
the App.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sentinel.config import Config, TargetConfig
from sentinel.daemon.pipeline import Pipeline
from sentinel.daemon.remediation import DaemonRemediation
from sentinel.incidents import alert_states
from sentinel.incidents.alert_states import AlertStateJournal
from sentinel.incidents.outboxwriter import OutboxWriter
from sentinel.incidents.tracker import IncidentTracker
from sentinel.respond.remediate.actfirst_grace import act_first
from sentinel.rules.backend import QueryBackend
from sentinel.rules.loader import RuleGroup
from sentinel.rules.manager import RuleManager

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Takeover:
    """The daemon's parts a change of role touches, handed in by the App."""

    config: Config
    pipeline: Pipeline
    outbox: OutboxWriter
    # Held with the pipeline's record lock while the rule manager and tracker are swapped.
    lock: threading.Lock
    groups: Callable[[], list[RuleGroup]]  # the rule groups loaded now (reload swaps them)
    backend: QueryBackend  # what rules read
    started_ms: int  # when this daemon's store began (alerts evaluated since are warm)
    now_ms: Callable[[], int]
    remediation: DaemonRemediation
    discovered: Callable[[], Iterable[TargetConfig]]  # targets found by discovery so far
    set_leading: Callable[[bool], None]
    holder: str = "-"
    # Rebuilds the crash-signature counters from the log events on record: this store
    # never counted the lines the last leader read, and a crash alert must not resolve
    # because leadership moved.
    restore_signatures: Callable[[], None] = lambda: None

    def elected(self, epoch: int) -> None:
        """Take over: restore alert state from the database, then act."""
        pipeline, cfg = self.pipeline, self.config
        with self.lock, pipeline.record_lock:
            tracker = IncidentTracker(pipeline.tracker.db, outbox=self.outbox,
                                      join_window_ms=cfg.notify.join_window_ms,
                                      act_first=act_first(cfg),
                                      serving=pipeline.tracker.serving,
                                      fleet=(pipeline.tracker.fleet.fresh()
                                             if pipeline.tracker.fleet else None))
            saved = tracker.load_alert_states()
            rules = RuleManager(self.groups(), self.backend,
                                default_interval_ms=cfg.evaluation_interval_ms,
                                external_url=cfg.external_url, store=pipeline.store)
            # The same routing of recording rules as at start (query_backend:).
            rules.evaluates_recording = pipeline.rules.evaluates_recording
            warm = [a for a in saved if a.last_eval_ms >= self.started_ms]
            cold = [a for a in saved if a.last_eval_ms < self.started_ms]
            n = rules.restore(warm)  # this store saw the whole time: ActiveAt stands
            n += rules.restore(cold, self.now_ms(), cfg.alert_restore.settings())
            alert_states.forget_groups(tracker.db, rules.groups)  # groups since removed
            rules.ready = pipeline.rules.ready
            self.restore_signatures()
            # Remediation first: if it cannot start, the pipeline is left as it was.
            pipeline.remediator = self.remediation.start(tracker.db, self.discovered())
            pipeline.rules = rules
            pipeline.tracker = tracker
            # The last leader wrote alert_states: each group is written whole once more.
            pipeline.journal = AlertStateJournal()
            pipeline.reconcile_pending = True
            self.set_leading(True)
        log.info("took over as leader (epoch %d, holder %s): %d alerts restored",
                 epoch, self.holder, n)

    def demoted(self) -> None:
        """Stand by: stop starting actions; running ones cannot record anything any more."""
        self.set_leading(False)
        self.pipeline.remediator = None
        self.remediation.stop(1.0)
        log.info("standing by: another Sentinel leads")
