"""Verdicts in the database: find finished attempts without one, judge (verdicts.py), record
once, count, and demote a step whose recent runs were mostly not fixed.

Run by the remediator's background loop on the leader (and directly by tests, with the time
they choose). A verdict is claimed with `UPDATE ... WHERE verdict IS NULL` (rowcount 1), so
two Sentinels on one PostgreSQL record, count and tell it once; so is a demotion
(`demoted_at IS NULL`), which gets a timeline note and one notice through the pager.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import select, update

from sentinel.config.remediation import RemediationConfig
from sentinel.incidents.convert import dt_to_ms, ms_to_dt, opt_dt_to_ms
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident
from sentinel.incidents.models_remediation import (
    AttemptStatus,
    RemediationAttempt,
    RemediationStep,
    Verdict,
)
from sentinel.respond.remediate.state import add_event
from sentinel.respond.remediate.throughput import Throughput
from sentinel.respond.remediate.verdicts import Facts, decide, demotion

log = logging.getLogger(__name__)

DEMOTED = "SentinelRemediationDemoted"
_BATCH = 500  # attempts judged per run; the rest wait for the next


class Notice(Protocol):
    """The pager's `page` (respond/remediate/pager.py), here for one warning-level notice."""

    def page(self, incident_id: int, title: str, reason: str, labels: Mapping[str, str]
             ) -> None:
        """Send one notice about the incident."""
        ...


@dataclass(frozen=True, slots=True)
class Recorded:
    """One verdict written now (and the demotion it caused, if any)."""

    attempt_id: int
    incident_id: int
    policy: str
    action: str
    verdict: Verdict
    detail: str
    demoted: str | None = None


def demoted_step(db: Database, policy: str, step: int) -> bool:
    """Whether a person must approve this policy step (it was demoted, not promoted since)."""
    with db.session() as s:
        row = s.get(RemediationStep, (policy, step))
        return row is not None and row.demoted_at is not None


def promote(db: Database, policy: str, step: int, who: str, now_ms: int) -> bool:
    """A person promotes a demoted step back to acting on its own; False when it was not."""
    with db.session() as s:
        done = s.execute(update(RemediationStep).where(
            RemediationStep.policy == policy, RemediationStep.step == step,
            RemediationStep.demoted_at.is_not(None)).values(
            demoted_at=None, promoted_at=ms_to_dt(now_ms), promoted_by=who,
            updated_at=ms_to_dt(now_ms)))
        return bool(getattr(done, "rowcount", 0) == 1)


def steps(db: Database) -> list[RemediationStep]:
    """Every step that was ever demoted (demoted now or promoted back), by policy and step."""
    with db.session() as s:
        return list(s.scalars(select(RemediationStep).order_by(
            RemediationStep.policy, RemediationStep.step)).all())


class VerdictJob:
    """Judges due attempts under one `RemediationConfig`."""

    def __init__(self, db: Database, config: RemediationConfig, notice: Notice | None = None,
                 counter: Any = None, throughput: Throughput | None = None) -> None:
        self.db = db
        self.config = config
        self.notice = notice
        self.counter = counter  # sentinel_remediation_verdicts_total{policy,action,verdict}
        self.throughput = throughput

    def run(self, now_ms: int) -> list[Recorded]:
        """Judge every finished attempt without a verdict; record those that are due."""
        with self.db.session() as s:
            ids = s.scalars(select(RemediationAttempt.id).where(
                RemediationAttempt.verdict.is_(None),
                RemediationAttempt.status != AttemptStatus.RUNNING.value,
            ).order_by(RemediationAttempt.id).limit(_BATCH)).all()
        out = []
        for attempt_id in ids:
            try:
                found = self._one(attempt_id, now_ms)
            except Exception:  # one bad row never stops the others
                log.exception("judging remediation attempt %d failed", attempt_id)
                continue
            if found is not None:
                out.append(found)
        return out

    def _one(self, attempt_id: int, now_ms: int) -> Recorded | None:
        cfg = self.config.verdicts
        with self.db.session() as s:
            a = s.get(RemediationAttempt, attempt_id)
            if a is None or a.verdict is not None or a.finished_at is None:
                return None
            incident = s.get(Incident, a.incident_id)
            failure = incident.alertname if incident is not None else "the failure"
            category = (incident.labels or {}).get("category") if incident else None
            finished = dt_to_ms(a.finished_at)
            end = finished + cfg.after_ms
            recurred = self._recurrence(s, a, failure, category, finished, end)
            overridden = s.scalar(select(RemediationAttempt.requested_at).where(
                RemediationAttempt.target == a.target, RemediationAttempt.manual.is_(True),
                RemediationAttempt.id != a.id, RemediationAttempt.requested_at > a.finished_at,
                RemediationAttempt.requested_at <= ms_to_dt(end),
            ).order_by(RemediationAttempt.requested_at).limit(1))
            before = (a.data or {}).get("throughput_before")
            target, policy, step, action = a.target, a.policy, a.step, a.action
            ok, incident_id, manual = a.status == AttemptStatus.SUCCEEDED, a.incident_id, a.manual
        now_tp = self.throughput(target, now_ms) if self.throughput and now_ms >= end else None
        facts = Facts(ok, finished, failure, recurred[0] if recurred else None,
                      recurred[1] if recurred else None, opt_dt_to_ms(overridden),
                      float(before) if isinstance(before, int | float) else None, now_tp)
        judged = decide(facts, now_ms, cfg)
        if judged is None:
            return None
        verdict, detail = judged
        if not self._record(attempt_id, incident_id, verdict, detail, now_ms,
                            {"target": target, "policy": policy, "step": step,
                             "action": action}):
            return None  # another Sentinel recorded it first
        if self.counter is not None:
            self.counter.labels(policy, action, str(verdict)).inc()
        demoted = None if manual else self._maybe_demote(policy, step, action, incident_id,
                                                         target, now_ms)
        return Recorded(attempt_id, incident_id, policy, action, verdict, detail, demoted)

    @staticmethod
    def _recurrence(s: Any, a: RemediationAttempt, failure: str, category: str | None,
                    finished_ms: int, end_ms: int) -> tuple[int, int] | None:
        """(when, incident) of the first incident of the same failure on the target after
        the fix and within the window: same alert name, or same crash category."""
        rows = s.execute(select(Incident.id, Incident.alertname, Incident.labels,
                                Incident.opened_at).where(
            Incident.target == a.target, Incident.id != a.incident_id,
            Incident.opened_at > ms_to_dt(finished_ms), Incident.opened_at <= ms_to_dt(end_ms),
        ).order_by(Incident.opened_at)).all()
        for incident_id, alertname, labels, opened_at in rows:
            if alertname == failure or (category and (labels or {}).get("category") == category):
                return dt_to_ms(opened_at), incident_id
        return None

    def _record(self, attempt_id: int, incident_id: int, verdict: Verdict, detail: str,
                now_ms: int, data: dict[str, Any]) -> bool:
        with self.db.session() as s:
            done = s.execute(update(RemediationAttempt).where(
                RemediationAttempt.id == attempt_id, RemediationAttempt.verdict.is_(None)
            ).values(verdict=str(verdict), verdict_at=ms_to_dt(now_ms),
                     verdict_detail=detail[:2000]))
            if getattr(done, "rowcount", 0) != 1:
                return False
            add_event(s, incident_id, now_ms,
                      f"verdict on attempt #{attempt_id} ({data['action']}): {verdict}: "
                      f"{detail}", {"phase": "verdict", "attempt": attempt_id,
                                    "verdict": str(verdict), "detail": detail, **data})
        return True

    def _maybe_demote(self, policy: str, step: int, action: str, incident_id: int,
                      target: str, now_ms: int) -> str | None:
        cfg = self.config.verdicts
        if not cfg.demote:
            return None
        with self.db.session() as s:
            row = s.get(RemediationStep, (policy, step))
            if row is not None and row.demoted_at is not None:
                return None  # demoted already: told once
            since = row.promoted_at if row is not None else None
            query = select(RemediationAttempt.verdict).where(
                RemediationAttempt.policy == policy, RemediationAttempt.step == step,
                RemediationAttempt.manual.is_(False), RemediationAttempt.verdict.is_not(None))
            if since is not None:  # a promotion starts the count again
                query = query.where(RemediationAttempt.verdict_at > since)
            recent = s.scalars(query.order_by(RemediationAttempt.verdict_at.desc(),
                                              RemediationAttempt.id.desc())
                               .limit(cfg.demote_runs)).all()
            why = demotion([str(v) for v in recent], cfg)
            if why is None:
                return None
            now = ms_to_dt(now_ms)
            if row is None:
                s.add(RemediationStep(policy=policy, step=step, demoted_at=now,
                                      demoted_reason=why, updated_at=now))
            else:
                done = s.execute(update(RemediationStep).where(
                    RemediationStep.policy == policy, RemediationStep.step == step,
                    RemediationStep.demoted_at.is_(None)).values(
                    demoted_at=now, demoted_reason=why, updated_at=now))
                if getattr(done, "rowcount", 0) != 1:
                    return None
            message = f"policy {policy} step {step + 1} ({action}) demoted: {why}"
            add_event(s, incident_id, now_ms, message, {
                "phase": "demoted", "policy": policy, "step": step, "action": action,
                "target": target, "reason": "demoted"})
        if self.notice is not None:
            try:
                self.notice.page(incident_id, DEMOTED, message, {
                    "target": target, "policy": policy, "reason": "demoted",
                    "severity": "warning"})
            except Exception:  # the demotion stands; the notice is best effort
                log.exception("telling of the demotion of %s step %d failed", policy, step)
        return why
