"""Off the evaluation thread: match firing alerts to policies, then decide and act in workers.

`offer` runs on the rule-evaluation thread and only matches labels against
the policies (microseconds) and queues what matched. One dispatcher thread
looks up the open incident, decides and claims, one at a time (claims must
be serial for the concurrency limit to hold); claimed attempts run in a
pool of `max_concurrent` workers, so a slow restart never blocks the next
evaluation or the next target's decision. A reaper thread fails, every third
of a lease period, the running attempts whose owner died (lease.py), so their
slots are free again while this daemon runs. The same thread records the remediations'
verdicts as they come due (verdict_job.py), every `VERDICT_PERIOD_S`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import select

from sentinel.config.remediation import RemediationConfig
from sentinel.incidents.fleet import FLEET_WIDE_WHY
from sentinel.incidents.joining import joined_incident
from sentinel.incidents.models import Incident, IncidentStatus
from sentinel.incidents.tracker import group_key
from sentinel.model import Alert, AlertState
from sentinel.quietlog import QuietFailure
from sentinel.respond.remediate import adopt, lease, state
from sentinel.respond.remediate.engine import Candidate, Engine, Prepared
from sentinel.respond.remediate.guards import Reason
from sentinel.respond.remediate.verdict_job import Recorded, VerdictJob

log = logging.getLogger(__name__)

_STOP = object()
VERDICT_PERIOD_S = 30.0  # how often due verdicts are looked for (they are due in hours)


def match(config: RemediationConfig, alerts: Sequence[Alert]) -> list[tuple[Alert, int]]:
    """(alert, policy index) for every firing alert a policy covers."""
    out = []
    for alert in alerts:
        if alert.state is not AlertState.FIRING:
            continue
        labels = dict(alert.labels)
        target = group_key(alert).target
        for i, policy in enumerate(config.policies):
            if policy.applies_to(alert.name, labels, target):
                out.append((alert, i))
    return out


class Remediator:
    """Queues matched alerts and runs the engine for them in the background."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._queue: queue.Queue[object] = queue.Queue()
        self._pending: set[tuple[str, int]] = set()
        # group key → {policy: active_at_ms} of the fleet-wide refusals audited (offer).
        self._audited: dict[str, dict[int, int]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=engine.config.max_concurrent,
                                        thread_name_prefix="sentinel-remediate")
        self._thread = threading.Thread(target=self._dispatch, name="sentinel-remediate-dispatch",
                                        daemon=True)
        self._stopping = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="sentinel-remediate-reaper",
                                        daemon=True)
        self._reap_failure = QuietFailure(log, "reaping abandoned remediation attempts")
        self.verdicts = VerdictJob(engine.db, engine.config, engine.pager,
                                   engine.metrics.verdicts if engine.metrics else None)
        self._verdict_failure = QuietFailure(log, "judging remediations")
        self._next_verdicts = 0.0
        self._dispatch_failure = QuietFailure(log, "deciding a remediation")

    def start(self, stale_after_ms: int | None = None) -> Remediator:
        """Fail attempts a previous run left running, then start the dispatcher."""
        longest = max((s.timeout_ms + s.verify_deadline_ms for p in self.engine.config.policies
                       for s in p.steps), default=0)
        n = state.abandon_stale(self.engine.db, self.engine.now_ms(),
                                stale_after_ms if stale_after_ms is not None else longest + 60_000)
        if n:
            log.warning("%d remediation attempts were left running by a previous run", n)
        self.reap()  # an owner on this host that is gone is freed at once
        self._thread.start()
        self._reaper.start()
        return self

    def reap(self) -> list[lease.Reaped]:
        """Fail the running attempts whose owner died; never raises."""
        try:
            reaped = lease.reap(self.engine.db, lease.owner_id(), self.engine.now_ms(),
                                self.engine.limits, adopt.adoptable(self.engine),
                                self.engine.config.lease_ms)
        except Exception:  # the database may be away: the next round tries again
            self._reap_failure.failed()
            return []
        self._reap_failure.ok()
        for r in reaped:
            if r.adopted:  # it acted: what it did is checked before anything is redone
                log.warning("remediation attempt #%d on %s was left running (%s): checking it",
                            r.attempt_id, r.target, r.why)
                self._check_adopted(r.attempt_id)
                continue
            if r.withdrawn:
                log.warning("remediation attempt #%d on %s withdrawn before acting: %s",
                            r.attempt_id, r.target, r.why)
                continue
            log.warning("remediation attempt #%d on %s abandoned: %s", r.attempt_id, r.target,
                        r.why)
            if self.engine.metrics is not None:
                self.engine.metrics.abandoned.inc()
        return reaped

    def _check_adopted(self, attempt_id: int) -> None:
        lease.RUNNING.add(attempt_id)  # ours from now: no reaper takes it back meanwhile
        try:
            self._pool.submit(self._adopted, attempt_id)
        except RuntimeError:  # the pool shut down (stop): its lease runs out, a reaper acts
            lease.RUNNING.discard(attempt_id)

    def _adopted(self, attempt_id: int) -> None:
        try:
            adopt.check(self.engine, attempt_id)
        except Exception:
            log.exception("checking adopted remediation attempt %d failed", attempt_id)
            lease.RUNNING.discard(attempt_id)

    def judge(self) -> list[Recorded]:
        """Record the verdicts that are due now (verdict_job.py); never raises."""
        self.verdicts.throughput = self.engine.throughput
        try:
            found = self.verdicts.run(self.engine.now_ms())
        except Exception:  # the database may be away: the next round tries again
            self._verdict_failure.failed()
            return []
        self._verdict_failure.ok()
        return found

    def _reap_loop(self) -> None:
        period_s = max(0.05, self.engine.config.lease_ms / 3000)
        while not self._stopping.wait(period_s):
            self.reap()
            if time.monotonic() >= self._next_verdicts:  # verdicts are due in hours
                self._next_verdicts = time.monotonic() + VERDICT_PERIOD_S
                self.judge()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop taking work; running actions finish in the background (within their timeouts)."""
        self._queue.put(_STOP)
        self._stopping.set()
        self._thread.join(timeout_s)
        self._reaper.join(timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def offer(self, alerts: Sequence[Alert], now_ms: int,
              withheld: Sequence[Alert] = ()) -> int:
        """Queue the firing alerts a policy covers; returns how many were queued.

        `withheld`: alerts the fleet guard keeps from remediation (members of an open
        fleet incident, incidents/fleet.py). Each one a policy covers is audited as a
        refusal (`fleet_wide`) once per alert episode, not once per evaluation: a storm
        of 5,000 members is 5,000 timeline lines, written once, off this thread.
        """
        queued = 0
        if self._audited:  # offered again, or recovered: a later refusal is news again
            with self._lock:
                for alert in alerts:
                    self._audited.pop(group_key(alert).text, None)
                for alert in withheld:
                    if alert.state is not AlertState.FIRING:
                        self._audited.pop(group_key(alert).text, None)
        for alert, policy in match(self.engine.config, alerts):
            queued += self._queue_one(alert, policy, refuse=False)
        for alert, policy in match(self.engine.config, withheld):
            audited = self._audited.get(group_key(alert).text, {})
            if audited.get(policy) != alert.active_at_ms:
                queued += self._queue_one(alert, policy, refuse=True)
        return queued

    def _queue_one(self, alert: Alert, policy: int, *, refuse: bool) -> int:
        key = (group_key(alert).text, policy)
        with self._lock:
            if key in self._pending:
                return 0
            self._pending.add(key)
        self._queue.put((alert, policy, key, refuse))
        return 1

    def _dispatch(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            assert isinstance(item, tuple)
            alert: Alert = item[0]
            policy: int = item[1]
            key: tuple[str, int] = item[2]
            refuse: bool = item[3]
            try:
                self._one(alert, policy, refuse)
            except Exception:  # database away or lease lost: every queued alert fails alike
                self._dispatch_failure.failed(detail=f"remediation of {key[0]}")
            else:
                self._dispatch_failure.ok()
            finally:
                with self._lock:
                    self._pending.discard(key)

    def _one(self, alert: Alert, policy_index: int, refuse: bool = False) -> None:
        key = group_key(alert)
        with self.engine.db.session() as s:
            incident_id = s.scalar(select(Incident.id).where(
                Incident.group_key == key.text, Incident.status == IncidentStatus.OPEN.value))
            if incident_id is None:  # it may have joined the target's incident (joining.py)
                joined = joined_incident(s, key.target, [alert.fingerprint])
                incident_id = joined.id if joined is not None else None
        if incident_id is None:
            return  # resolved meanwhile
        candidate = Candidate(incident_id, alert.name, key.target, dict(alert.labels),
                              self.engine.config.policies[policy_index], alert.active_at_ms)
        if refuse:
            self.engine.refuse(candidate, Reason.FLEET_WIDE, FLEET_WIDE_WHY)
            with self._lock:  # audited: not again in this episode
                self._audited.setdefault(key.text, {})[policy_index] = alert.active_at_ms
            return
        prepared = self.engine.prepare(candidate)
        if isinstance(prepared, Prepared):
            try:
                future = self._pool.submit(self._run, prepared)
            except RuntimeError:  # the pool shut down meanwhile (stop)
                Engine.drop(prepared)
                raise
            # Cancelled by stop() before it ran: not running here any more (lease.RUNNING).
            future.add_done_callback(lambda f: Engine.drop(prepared) if f.cancelled() else None)

    def _run(self, prepared: Prepared) -> None:
        try:
            self.engine.execute(prepared)
        except Exception:
            log.exception("remediation attempt %d failed", prepared.attempt_id)
