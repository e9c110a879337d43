"""One remediation, start to end: decide → check → write intent → act → outcome → verify.

`prepare` runs the pure guards over the persisted state, the action's
read-only check, and the claim that writes the intent (a `running`
attempt) before any side effect; `execute` acts, records the outcome,
verifies recovery and finishes the attempt, updating the target's guard
state (failures, backoff, breaker). Every step is an ACTION event on the
incident timeline; refusals that need a human page on-call through a
`Pager`. A refusal is written when its reason changes, not once per
evaluation, so a long incident does not drown its timeline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sentinel.config.remediation import PolicyConfig, RemediationConfig
from sentinel.incidents.db import Database
from sentinel.respond.remediate import costguard, state, throughput
from sentinel.respond.remediate.actions import ACTIONS
from sentinel.respond.remediate.base import Action, ActionContext, TargetInfo
from sentinel.respond.remediate.guards import Decision, Limits, Reason, Request, decide
from sentinel.respond.remediate.lease import RUNNING, Heartbeat, owner_id
from sentinel.respond.remediate.metrics import RemediationMetrics
from sentinel.respond.remediate.verdict_job import demoted_step
from sentinel.respond.remediate.verify import Verification, verify
from sentinel.timeintervals import TimeInterval

log = logging.getLogger(__name__)

REFUSED = "SentinelRemediationRefused"
GAVE_UP = "SentinelRemediationGaveUp"
MANUAL_ATTEMPTS = 1_000_000  # a person asked: the step's own attempt count does not apply


class Pager(Protocol):
    """Calls a human: the daemon sends a synthetic alert through the receivers.

    A pager may also have `recovered(incident_id, why, data)`: called at a verified
    recovery, it ends the incident there (sentinel/incidents/recovery.py); and
    `not_fixed(incident_id, why)`: called when an action was refused, parked, failed
    or not verified, so a page held while Sentinel acts goes out at once
    (respond/notify/actfirst.py).
    """

    def page(self, incident_id: int, title: str, reason: str, labels: Mapping[str, str]) -> None:
        """Page on-call about an incident, with the reason."""
        ...


@dataclass(frozen=True, slots=True)
class Candidate:
    """A firing alert with an open incident that a policy covers."""

    incident_id: int
    alertname: str
    target: str
    labels: Mapping[str, str]
    policy: PolicyConfig
    active_at_ms: int


@dataclass(frozen=True, slots=True)
class Prepared:
    """A claimed attempt, ready to run."""

    candidate: Candidate
    decision: Decision
    attempt_id: int
    ctx: ActionContext
    action: Action


@dataclass(frozen=True, slots=True)
class Result:
    """What came of one request: the decision, and the attempt's outcome when one ran."""

    decision: Decision
    ok: bool | None = None
    detail: str = ""
    attempt_id: int | None = None


class Engine:
    """Runs remediations for candidates under one `RemediationConfig`."""

    def __init__(self, config: RemediationConfig, targets: Mapping[str, TargetInfo],
                 db: Database, pager: Pager, metrics: RemediationMetrics | None = None,
                 clock: Callable[[], float] = time.time,
                 verifier: Callable[[str, float], Verification] = verify,
                 actions: Mapping[str, Action] = ACTIONS,
                 intervals: Mapping[str, tuple[TimeInterval, ...]] | None = None) -> None:
        self.config = config
        self.targets = targets
        self.db = db
        self.pager = pager
        self.metrics = metrics
        self.clock = clock
        self.verifier = verifier
        self.actions = actions
        self.limits = Limits(config.dry_run, config.max_concurrent, config.max_concurrent_percent,
                             config.breaker_failures, config.backoff, config.silences,
                             dict(intervals or {}))
        self._last: dict[tuple[int, str], str] = {}  # (incident, policy) → last reason written
        self.external_url = ""  # approval pages link to the incident page under it
        # Whether this daemon may still act (HA: it holds the leader lease), asked just
        # before an action starts: a leader that lost its lease after the claim must not.
        self.may_act: Callable[[], bool] = lambda: True
        # Tokens/s of a target at a time (throughput.py): the verdicts' pre-incident level.
        self.throughput: throughput.Throughput | None = None
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        """The engine's clock in milliseconds."""
        return int(self.clock() * 1000)

    def request(self, c: Candidate, *, force_dry_run: bool = False,
                step: int | None = None, manual: bool = False) -> Request:
        """The guard request for a candidate; `step` pins one step (a manual run)."""
        p = c.policy
        attempts = tuple(s.attempts for s in p.steps) if step is None else tuple(
            MANUAL_ATTEMPTS if i == step else 0 for i in range(len(p.steps)))
        return Request(labels=c.labels, step_attempts=attempts, cooldown_ms=p.cooldown_ms,
                       max_per_hour=p.max_per_hour, policy_dry_run=p.dry_run, limits=self.limits,
                       force_dry_run=force_dry_run, manual=manual,
                       after_failure=tuple(s.kind == "tpu_node_restart" for s in p.steps))

    # -- decide, check, claim ------------------------------------------------

    def prepare(self, c: Candidate, *, manual: bool = False, force_dry_run: bool = False,
                step: int | None = None, approved: bool = False) -> Prepared | Result:
        """Guards, the action's check and the claim; a Result when nothing is to run.

        Under `approval: required` an allowed action is parked instead of claimed
        (`approvals.park`); the approval runner calls again with `approved=True`.
        """
        req = self.request(c, force_dry_run=force_dry_run, step=step, manual=manual)
        claim = state.Claim(c.incident_id, c.target, c.policy.name, len(self.targets),
                            c.active_at_ms, self.config.correlation_window_ms)

        def guards(t: state.TargetState, f: state.FleetState, e: state.Episode) -> Decision:
            return decide(req, t, f, e, self.now_ms())

        result = self._prepare(c, req, claim, guards, manual, force_dry_run, approved)
        if isinstance(result, Result) and result.decision.reason not in (
                Reason.DONE, Reason.IN_PROGRESS, Reason.STARTED_ELSEWHERE):
            self._not_fixed(c, result)
        return result

    def refuse(self, c: Candidate, reason: Reason, detail: str) -> Result:
        """Audit a refusal decided outside the guards (a fleet-wide failure's member).

        The same record as every refusal: an ACTION line on the incident's timeline
        (`phase: decision`), written when the reason changes, so once per incident, and
        counted in `sentinel_remediation_decisions_total{reason}`; a page held while
        Sentinel meant to act goes out at once (`not_fixed`).
        """
        result = Result(Decision(False, reason, 0, detail))
        self._refused(c, result.decision, manual=False)
        self._not_fixed(c, result)
        return result

    def _prepare(self, c: Candidate, req: Request, claim: state.Claim,
                 guards: Callable[[state.TargetState, state.FleetState, state.Episode],
                                  Decision],
                 manual: bool, force_dry_run: bool, approved: bool) -> Prepared | Result:
        decision = state.peek(self.db, claim, guards, self.now_ms())
        if not decision.allowed and decision.reason is not Reason.DRY_RUN:
            self._refused(c, decision, manual)
            return Result(decision)
        spec = c.policy.steps[decision.step]
        action = self.actions[spec.kind]
        ctx = ActionContext(self._target(c.target), c.labels, spec.params,
                            spec.timeout_ms / 1000, c.policy.allow_cold,
                            None if manual else state.not_ours_since(
                                self.db, c.incident_id, c.target, c.active_at_ms, self.now_ms()))
        check = action.check(ctx)
        if not check.ok:
            assert check.reason is not None
            refused = Decision(False, check.reason, decision.step, check.summary)
            self._refused(c, refused, manual, spec.kind, check.data)
            return Result(refused)
        check, too_slow = costguard.gate(self.db, self.config, c.policy, c.target, spec.kind,
                                         decision.step, check)
        if too_slow is not None:
            self._refused(c, too_slow, manual, spec.kind, check.data)
            return Result(too_slow)
        if decision.reason is Reason.DRY_RUN:
            self._note(c, decision, f"dry run: would {check.summary}", manual,
                       {"action": spec.kind, "plan": check.summary, **check.data})
            return Result(decision, detail=check.summary)
        if not manual and not approved and (c.policy.approval == "required" or demoted_step(
                self.db, c.policy.name, decision.step)):
            return self._park(c, decision, spec.kind, check.summary)
        before = throughput.before(self.throughput, c.target, c.active_at_ms)
        decision, attempt_id = state.claim(self.db, claim, guards, self.now_ms(), spec.kind,
                                           manual, {"plan": check.summary, **check.data,
                                                    **before}, owner_id(), self.config.lease_ms)
        if attempt_id is None:  # another worker took the slot between peek and claim
            self._refused(c, decision, manual)
            return Result(decision)
        RUNNING.add(attempt_id)  # until execute ends (or the caller calls `drop`)
        self._count_decision(c, decision)
        with self._lock:
            self._last[(c.incident_id, c.policy.name)] = Reason.ALLOWED
        return Prepared(c, decision, attempt_id, ctx, action)

    def _park(self, c: Candidate, d: Decision, kind: str, plan: str) -> Result:
        """Park the allowed action until a person decides; page once with the links."""
        from sentinel.respond.remediate import approvals

        parked = approvals.park(
            self.db, incident_id=c.incident_id, target=c.target, policy=c.policy.name,
            step=d.step, action=kind, plan=plan, alertname=c.alertname, labels=dict(c.labels),
            active_at_ms=c.active_at_ms, now_ms=self.now_ms(),
            expiry_ms=c.policy.approval_expiry_ms)
        if parked.new:
            link = f"{self.external_url.rstrip('/')}/incidents/{c.incident_id}"
            self._page(c, approvals.AWAITING, Reason.ALLOWED,
                       f"{kind} on {c.target} awaits approval #{parked.approval_id} "
                       f"({plan}): approve or deny at {link}#approval-{parked.approval_id} "
                       f"or POST {self.external_url.rstrip('/')}/api/v1/approvals/"
                       f"{parked.approval_id}/approve|deny")
        return Result(d, detail=f"approval #{parked.approval_id} {parked.status}")

    @staticmethod
    def drop(p: Prepared) -> None:
        """A claimed attempt that will not be executed (its worker pool stopped first)."""
        RUNNING.discard(p.attempt_id)

    # -- act, verify, finish -----------------------------------------------------

    def execute(self, p: Prepared) -> Result:
        """Run the claimed action, record the outcome, verify, finish the attempt."""
        c, spec = p.candidate, p.candidate.policy.steps[p.decision.step]
        if self.metrics:
            self.metrics.in_flight.inc()
        try:
            with Heartbeat(self.db, p.attempt_id, self.config.lease_ms, self.now_ms):
                ok, detail, recovery_ms, data = self._act_and_verify(
                    p, spec.verify, spec.verify_deadline_ms / 1000)
        except state.NotActing as exc:  # nothing ran: withdrawn, not failed
            log.warning("remediation attempt %d not run: %s", p.attempt_id, exc)
            RUNNING.discard(p.attempt_id)
            if not state.withdraw_unstarted(self.db, p.attempt_id, self.now_ms(), str(exc)):
                log.info("attempt %d is withdrawn by a reaper once its lease runs out",
                         p.attempt_id)
            return Result(p.decision, None, f"not run: {exc}", p.attempt_id)
        except Exception as exc:  # an action bug must still close its attempt
            log.exception("remediation attempt %d raised", p.attempt_id)
            ok, detail, recovery_ms, data = False, f"action raised {type(exc).__name__}", None, {}
        finally:
            if self.metrics:
                self.metrics.in_flight.dec()
        try:
            before, after = state.finish(self.db, p.attempt_id, ok, detail, self.now_ms(),
                                         self.limits, recovery_ms, data)
        except BaseException:  # unrecorded (not leader any more): the reaper fails it
            RUNNING.discard(p.attempt_id)  # once its lease ran out
            raise
        try:
            self._tell_outcome(c, p, ok, detail, recovery_ms, data)
        finally:  # until here the held page is this run's to decide (actfirst.outcomes)
            RUNNING.discard(p.attempt_id)
        if self.metrics:
            self.metrics.actions.labels(spec.kind, "success" if ok else "failure").inc()
        if after.breaker_opened_ms is not None and before.breaker_opened_ms is None:
            reason = (f"breaker open on {c.target} after {after.consecutive_failures} failed "
                      f"attempts in a row; no more automatic actions: {detail}")
            state.record(self.db, c.incident_id, self.now_ms(), reason,
                         {"phase": "breaker", "target": c.target,
                          "failures": after.consecutive_failures})
            with self._lock:  # the refusals that follow need not page again
                self._last[(c.incident_id, c.policy.name)] = Reason.BREAKER_OPEN
            self._page(c, GAVE_UP, Reason.BREAKER_OPEN, reason)
        return Result(p.decision, ok, detail, p.attempt_id)

    def _tell_outcome(self, c: Candidate, p: Prepared, ok: bool, detail: str,
                      recovery_ms: int | None, data: dict[str, object]) -> None:
        """End the incident at a verified recovery, or let its held page go now."""
        spec = c.policy.steps[p.decision.step]
        if ok and "recovered" in data:
            # A crash is an event: its incident ends here, once the attempt is on record
            # as succeeded, not when the alert's window lets go.
            self._recovered(c, p, str(data["recovered"]), recovery_ms)
        elif not ok:
            self._not_fixed(c, Result(p.decision, ok, f"{spec.kind} (step {p.decision.step + 1} "
                                      f"of {c.policy.name}) did not hold: {detail}"))
        else:  # it ran, but nothing says serving came back (verify: false): page now
            self._not_fixed(c, Result(p.decision, ok, f"{spec.kind} (step {p.decision.step + 1} "
                                      f"of {c.policy.name}) ran; its recovery is not verified "
                                      f"(verify: false): {detail}"))

    def _act_and_verify(self, p: Prepared, check_recovery: bool, deadline_s: float
                        ) -> tuple[bool, str, int | None, dict[str, object]]:
        c = p.candidate
        if not self.may_act():
            raise state.NotActing(f"not acting on attempt {p.attempt_id}: no longer the leader")
        state.mark_acting(self.db, p.attempt_id, self.now_ms())  # fenced: raises NotActing
        outcome = p.action.run(p.ctx)
        state.mark_acted(self.db, p.attempt_id, self.now_ms())
        state.record(self.db, c.incident_id, self.now_ms(),
                     f"outcome: {'ok' if outcome.ok else 'FAILED'}: {outcome.detail}",
                     {"phase": "outcome", "attempt": p.attempt_id, "ok": outcome.ok,
                      "action": p.action.kind, "target": c.target, **outcome.data})
        if not outcome.ok or not check_recovery:
            return outcome.ok, outcome.detail, None, outcome.data
        # A pod restart replaces the pod, and with it the address: the action says where.
        url = str(outcome.data.get("verify_url") or p.ctx.target.url)
        v = self.verifier(url, deadline_s)
        # From the failure's first evidence (the crash line), not from the alert: the
        # honest figure is crash to serving again. Clamped: another clock must not make
        # it negative.
        start_ms = self._evidence_ms(c)
        recovery_ms = min(max(0, self.now_ms() - start_ms), 2**31 - 1) if v.ok else None
        message = (f"verified: healthy after {v.healthy_after_s}s, serving after "
                   f"{v.served_after_s}s; time to recovery {(recovery_ms or 0) / 1000:.1f}s "
                   "from the first evidence"
                   if v.ok else f"verification FAILED: {v.detail}")
        state.record(self.db, c.incident_id, self.now_ms(), message, {
            "phase": "verify", "attempt": p.attempt_id, "ok": v.ok, "detail": v.detail,
            "action": p.action.kind, "target": c.target, "healthy_after_s": v.healthy_after_s,
            "served_after_s": v.served_after_s, "recovery_ms": recovery_ms})
        data = {**outcome.data, "verify": v.detail, "served_after_s": v.served_after_s}
        if v.ok:
            data["recovered"] = message
        return v.ok, outcome.detail if v.ok else v.detail, recovery_ms, data

    def _evidence_ms(self, c: Candidate) -> int:
        try:
            found = state.evidence_ms(self.db, c.incident_id)
        except Exception:  # the figure is worth less than the attempt's bookkeeping
            log.warning("no first evidence for incident %d", c.incident_id, exc_info=True)
            found = None
        return c.active_at_ms if found is None else min(found, c.active_at_ms)

    def _recovered(self, c: Candidate, p: Prepared, message: str, recovery_ms: int | None
                   ) -> None:
        recovered = getattr(self.pager, "recovered", None)
        if recovered is None:
            return
        try:
            recovered(c.incident_id, f"{p.action.kind} on {c.target} {message}",
                      {"attempt": p.attempt_id, "action": p.action.kind, "target": c.target,
                       "recovery_ms": recovery_ms, "step": p.decision.step,
                       "policy": c.policy.name})
        except Exception:  # the attempt's own bookkeeping must still finish
            log.exception("resolving incident %d at its verified recovery failed",
                          c.incident_id)

    def _not_fixed(self, c: Candidate, r: Result) -> None:
        """Tell the pager nothing will fix this incident now (a held page goes at once)."""
        not_fixed = getattr(self.pager, "not_fixed", None)
        if not_fixed is None:
            return
        d = r.decision
        kind = c.policy.steps[min(d.step, len(c.policy.steps) - 1)].kind
        why = r.detail if r.ok is not None else (  # it ran: its own words
            f"{kind} (step {d.step + 1} of {c.policy.name}) on {c.target} not run: "
            f"{d.reason}: {r.detail or d.detail}")
        try:
            not_fixed(c.incident_id, why)
        except Exception:  # the attempt's own bookkeeping must still finish
            log.exception("releasing the held page of incident %d failed", c.incident_id)

    # -- audit ---------------------------------------------------------------------

    def _refused(self, c: Candidate, d: Decision, manual: bool, action: str | None = None,
                 data: Mapping[str, object] | None = None) -> bool:
        """Write the refusal if its reason changed (and page if it must); whether written."""
        if d.reason in (Reason.DONE, Reason.IN_PROGRESS) and not manual:
            return False  # the attempt that runs or ran is on the timeline already
        kind = action or c.policy.steps[min(d.step, len(c.policy.steps) - 1)].kind
        written = self._note(c, d, f"refused {kind} on {c.target}: {d.reason}: {d.detail}",
                             manual, {"action": kind, **(data or {})})
        if written and d.pages:
            title = GAVE_UP if d.reason in (Reason.GAVE_UP, Reason.BREAKER_OPEN) else REFUSED
            self._page(c, title, d.reason, f"{kind} on {c.target} refused: {d.detail}")
        return written

    def _note(self, c: Candidate, d: Decision, message: str, manual: bool,
              data: dict[str, object]) -> bool:
        """Write the decision if its reason changed (always for a manual run)."""
        key = (c.incident_id, c.policy.name)
        if not manual and key not in self._last:  # a new leader: what the last one wrote
            last = state.last_reason(self.db, c.incident_id, c.policy.name)
            with self._lock:
                self._last.setdefault(key, last or "")
        with self._lock:
            if not manual and self._last.get(key) == d.reason:
                return False
            self._last[key] = d.reason
        self._count_decision(c, d)
        state.record(self.db, c.incident_id, self.now_ms(), message, {
            "phase": "decision", "allowed": d.allowed, "reason": str(d.reason),
            "detail": d.detail, "policy": c.policy.name, "target": c.target,
            "step": d.step, "manual": manual, **data})
        return True

    def _count_decision(self, c: Candidate, d: Decision) -> None:
        if self.metrics:
            self.metrics.decisions.labels(c.policy.name, str(d.reason)).inc()

    def _page(self, c: Candidate, title: str, reason: Reason, detail: str) -> None:
        try:
            self.pager.page(c.incident_id, title, detail, {
                "target": c.target, "policy": c.policy.name, "reason": str(reason),
                "alert": c.alertname})
        except Exception:  # paging must never stop remediation bookkeeping
            log.exception("paging on-call for incident %d failed", c.incident_id)

    def _target(self, name: str) -> TargetInfo:
        return self.targets.get(name) or TargetInfo(name=name, url="")
