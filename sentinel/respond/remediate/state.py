"""Guard state and attempts in the database: load, claim (intent first), finish, audit.

`claim` runs the pure guards and, when they allow it, writes the `running`
attempt in the same transaction, so the concurrency limit and budgets hold
even with several workers (or two daemons on one PostgreSQL: there an
advisory lock serialises claims; SQLite's BEGIN IMMEDIATE already does).
Every decision and step lands on the incident timeline as an ACTION event
with a `data` dict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from sentinel.incidents.convert import dt_to_ms, ms_to_dt, opt_dt_to_ms, opt_ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, TimelineEvent, TimelineKind
from sentinel.incidents.models_remediation import (
    AttemptStatus,
    RemediationAttempt,
    RemediationTarget,
)
from sentinel.respond.remediate.guards import (
    HOUR_MS,
    Decision,
    Episode,
    FleetState,
    Limits,
    TargetState,
    after_outcome,
)

_CLAIM_LOCK = 0x52454D44  # any constant; serialises claims on PostgreSQL

Decide = Callable[[TargetState, FleetState, Episode], Decision]


log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class Claim:
    """Who asks: incident, target, policy, and how many targets the fleet has."""

    incident_id: int
    target: str
    policy: str
    fleet_size: int
    # When the incident's alert became active, and the correlation window (one crash, one action).
    since_ms: int | None = None
    window_ms: int = 0


def add_event(s: Session, incident_id: int, now_ms: int, message: str,
              data: dict[str, Any]) -> None:
    """One ACTION event on the incident's timeline, and its line in Sentinel's own log."""
    log.info("incident %d: %s", incident_id, message, extra={
        "incident": incident_id, "target": data.get("target"), "action": data.get("action"),
        "outcome": data.get("phase"), "reason": data.get("reason")})
    s.add(TimelineEvent(incident_id=incident_id, at=ms_to_dt(now_ms), kind=TimelineKind.ACTION,
                        message=message, data=data))


def record(db: Database, incident_id: int, now_ms: int, message: str,
           data: dict[str, Any]) -> None:
    """`add_event` in a transaction of its own."""
    with db.session() as s:
        add_event(s, incident_id, now_ms, message, data)


def evidence_ms(db: Database, incident_id: int) -> int | None:
    """When the incident's failure first showed (its first evidence), if recorded."""
    with db.session() as s:
        return opt_dt_to_ms(s.scalar(select(Incident.evidence_at).where(
            Incident.id == incident_id)))


# How far back `last_reason` looks on a timeline (ACTION events, newest first).
_LAST_REASON_SCAN = 200


def last_reason(db: Database, incident_id: int, policy: str) -> str | None:
    """The reason of the newest automatic decision written for (incident, policy), or None.

    An intent counts as `allowed`. What a previous leader (or this daemon's previous
    term) wrote: a new engine starts from it, so it writes a refusal, and pages, only
    when the reason changed (issue 39: decisions written twice after a failover).
    """
    with db.session() as s:
        rows = s.scalars(select(TimelineEvent.data).where(
            TimelineEvent.incident_id == incident_id,
            TimelineEvent.kind == TimelineKind.ACTION.value,
        ).order_by(TimelineEvent.id.desc()).limit(_LAST_REASON_SCAN)).all()
    for data in rows:
        if not data or data.get("policy") != policy or data.get("manual"):
            continue
        if data.get("phase") == "intent":
            return "allowed"
        if data.get("phase") == "decision":
            return str(data.get("reason"))
    return None


def load(s: Session, c: Claim, now_ms: int) -> tuple[TargetState, FleetState, Episode]:
    """The guard inputs for one claim, read in the caller's transaction."""
    row = s.get(RemediationTarget, c.target)
    running = AttemptStatus.RUNNING.value
    in_flight_targets = s.scalars(select(RemediationAttempt.target).where(
        RemediationAttempt.status == running).distinct()).all()
    hour = s.scalar(select(func.count()).select_from(RemediationAttempt).where(
        RemediationAttempt.target == c.target,
        RemediationAttempt.requested_at > ms_to_dt(now_ms - HOUR_MS))) or 0
    target = TargetState(
        consecutive_failures=row.consecutive_failures if row else 0,
        last_attempt_ms=opt_dt_to_ms(row.last_attempt_at) if row else None,
        last_failure_ms=opt_dt_to_ms(row.last_failure_at) if row else None,
        last_success_ms=opt_dt_to_ms(row.last_success_at) if row else None,
        breaker_opened_ms=opt_dt_to_ms(row.breaker_opened_at) if row else None,
        attempts_last_hour=int(hour), in_flight=c.target in in_flight_targets)
    fleet = FleetState(in_flight=len(in_flight_targets), size=c.fleet_size)
    return target, fleet, _episode(s, c)


def _episode(s: Session, c: Claim) -> Episode:
    rows = s.execute(select(RemediationAttempt.step, RemediationAttempt.status).where(
        RemediationAttempt.incident_id == c.incident_id,
        RemediationAttempt.policy == c.policy)).all()
    failed: dict[int, int] = {}
    for step, status in rows:
        if status == AttemptStatus.FAILED:
            failed[step] = failed.get(step, 0) + 1
    width = max(failed, default=-1) + 1
    return Episode(tuple(failed.get(i, 0) for i in range(width)),
                   any(status == AttemptStatus.SUCCEEDED for _, status in rows),
                   _covered_by(s, c))


def _covered_by(s: Session, c: Claim) -> int | None:
    """A verified success on the target, for another incident, that covers this one.

    It covers when the target was verified healthy after this incident's alert
    became active (the incident describes the crash that action fixed) and the
    action started at most `window_ms` before that: a crash signature and the
    target-down it causes, or two signatures of one traceback, get one action.
    """
    if c.since_ms is None:
        return None
    return s.scalar(select(RemediationAttempt.id).where(
        RemediationAttempt.target == c.target,
        RemediationAttempt.status == AttemptStatus.SUCCEEDED.value,
        RemediationAttempt.incident_id != c.incident_id,
        RemediationAttempt.finished_at >= ms_to_dt(c.since_ms),
        RemediationAttempt.requested_at >= ms_to_dt(c.since_ms - c.window_ms),
    ).order_by(RemediationAttempt.id.desc()).limit(1))


def peek(db: Database, c: Claim, decide: Decide, now_ms: int) -> Decision:
    """The guards' decision now, writing nothing."""
    with db.session() as s:
        return decide(*load(s, c, now_ms))


def claim(db: Database, c: Claim, decide: Decide, now_ms: int, action: str,
          manual: bool, data: dict[str, Any], owner: str | None = None,
          lease_ms: int | None = None) -> tuple[Decision, int | None]:
    """Decide again and, when allowed, write the intent (a running attempt) in one transaction.

    With `owner` and `lease_ms` the attempt carries a lease its owner's
    heartbeat renews (lease.py); without, only the age rule frees it.
    """
    with db.session() as s:
        if db.dialect == "postgresql":
            s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _CLAIM_LOCK})
        decision = decide(*load(s, c, now_ms))
        if not decision.allowed:
            return decision, None
        now = ms_to_dt(now_ms)
        attempt = RemediationAttempt(
            incident_id=c.incident_id, target=c.target, policy=c.policy, step=decision.step,
            action=action, manual=manual, status=AttemptStatus.RUNNING, requested_at=now,
            detail="", data=data, owner=owner,
            lease_until=ms_to_dt(now_ms + lease_ms) if lease_ms is not None else None)
        s.add(attempt)
        row = _target_row(s, c.target, now)
        row.last_attempt_at = now
        s.flush()
        add_event(s, c.incident_id, now_ms, f"intent: {action} on {c.target} "
                  f"(policy {c.policy}, step {decision.step + 1}, attempt #{attempt.id})",
                  {"phase": "intent", "allowed": True, "reason": str(decision.reason),
                   "attempt": attempt.id, "action": action,
                   "target": c.target, "policy": c.policy, "step": decision.step,
                   "manual": manual, **data})
        return decision, attempt.id


class NotActing(Exception):
    """The attempt must not act: this Sentinel no longer leads, or the attempt was reaped."""


def mark_acting(db: Database, attempt_id: int, now_ms: int) -> None:
    """Record that the action starts now, or raise `NotActing`.

    The write is fenced like every other (HA: only the leader's lands), so an
    action runs only after its attempt says so on record; an attempt reaped
    without it never acted and is withdrawn, not counted as failed (`withdraw`).
    """
    try:
        with db.session() as s:
            attempt = s.get(RemediationAttempt, attempt_id)
            if attempt is None or attempt.status != AttemptStatus.RUNNING:
                raise NotActing(f"attempt {attempt_id} was reaped before it acted")
            attempt.acting_at = ms_to_dt(now_ms)
    except NotActing:
        raise
    except Exception as e:  # NotLeader from the fence, or the database away
        raise NotActing(f"attempt {attempt_id} not started: {e}") from e


def withdraw(s: Session, attempt: RemediationAttempt, now_ms: int, why: str) -> None:
    """Remove a running attempt that never acted, in the caller's transaction.

    Nothing ran, so nothing is counted: no failure in a row, no step of the
    ladder used, no hour budget spent; the target's last attempt goes back to
    the one before (cooldowns), and the guards decide again at the next
    offer. The intent stays on the incident's timeline, with this withdrawal.
    """
    s.delete(attempt)
    s.flush()
    row = _target_row(s, attempt.target, ms_to_dt(now_ms))
    row.last_attempt_at = s.scalar(select(func.max(RemediationAttempt.requested_at)).where(
        RemediationAttempt.target == attempt.target))
    add_event(s, attempt.incident_id, now_ms,
              f"attempt #{attempt.id} withdrawn before acting: {why}; the guards decide again",
              {"phase": "withdrawn", "attempt": attempt.id, "action": attempt.action,
               "target": attempt.target, "policy": attempt.policy, "step": attempt.step})


def withdraw_unstarted(db: Database, attempt_id: int, now_ms: int, why: str) -> bool:
    """`withdraw` the attempt if it is still running and never began to act; False when
    that cannot be written now (not the leader, the database away): a reaper will."""
    try:
        with db.session() as s:
            attempt = s.get(RemediationAttempt, attempt_id)
            if attempt is not None and attempt.status == AttemptStatus.RUNNING \
                    and attempt.acting_at is None:
                withdraw(s, attempt, now_ms, why)
        return True
    except Exception:  # noqa: BLE001 - NotLeader, or the database away
        return False


def mark_acted(db: Database, attempt_id: int, now_ms: int) -> None:
    """The side effect returned (before verification)."""
    with db.session() as s:
        attempt = s.get(RemediationAttempt, attempt_id)
        if attempt is not None:
            attempt.acted_at = ms_to_dt(now_ms)


def finish(db: Database, attempt_id: int, ok: bool, detail: str, now_ms: int, limits: Limits,
           recovery_ms: int | None = None, data: dict[str, Any] | None = None
           ) -> tuple[TargetState, TargetState]:
    """Close the attempt and update the target's guard state; (before, after)."""
    now = ms_to_dt(now_ms)
    with db.session() as s:
        attempt = s.get(RemediationAttempt, attempt_id)
        assert attempt is not None, f"attempt {attempt_id} vanished"
        if attempt.status != AttemptStatus.RUNNING:
            # Its lease ran out meanwhile (the database was away longer than a lease)
            # and it was failed and counted already: do not count it twice.
            row = _target_row(s, attempt.target, now)
            return _state_of(row), _state_of(row)
        attempt.status = AttemptStatus.SUCCEEDED if ok else AttemptStatus.FAILED
        attempt.lease_until = None
        attempt.finished_at = now
        attempt.detail = detail[:2000]
        attempt.recovery_ms = recovery_ms
        attempt.data = {**(attempt.data or {}), **(data or {})}
        row = _target_row(s, attempt.target, now)
        before = _state_of(row)
        after = after_outcome(before, ok, now_ms, limits)
        row.consecutive_failures = after.consecutive_failures
        row.last_failure_at = opt_ms_to_dt(after.last_failure_ms)
        row.last_success_at = opt_ms_to_dt(after.last_success_ms)
        row.breaker_opened_at = opt_ms_to_dt(after.breaker_opened_ms)
        row.updated_at = now
        return before, after


def reset_target(db: Database, target: str, now_ms: int) -> None:
    """Close the breaker and forget failures (an operator decided)."""
    with db.session() as s:
        row = _target_row(s, target, ms_to_dt(now_ms))
        row.consecutive_failures = 0
        row.breaker_opened_at = None
        row.last_failure_at = None


def abandon_stale(db: Database, now_ms: int, older_than_ms: int) -> int:
    """Fail running attempts older than any action could take (their daemon died mid-way)."""
    cutoff = ms_to_dt(now_ms - older_than_ms)
    with db.session() as s:
        rows = s.scalars(select(RemediationAttempt).where(
            RemediationAttempt.status == AttemptStatus.RUNNING.value,
            RemediationAttempt.requested_at < cutoff)).all()
        for r in rows:
            if r.acting_at is None:
                withdraw(s, r, now_ms, "Sentinel stopped before the action started")
                continue
            r.status, r.finished_at, r.lease_until = AttemptStatus.FAILED, ms_to_dt(now_ms), None
            r.detail = "abandoned: Sentinel stopped before the outcome was known"
            add_event(s, r.incident_id, now_ms, f"attempt #{r.id} abandoned: {r.detail}",
                      {"phase": "outcome", "attempt": r.id, "ok": False, "abandoned": True})
        return len(rows)


def target_state(db: Database, target: str) -> TargetState:
    """The persisted guard state of one target (zeroes when it has none)."""
    with db.session() as s:
        row = s.get(RemediationTarget, target)
        return _state_of(row) if row is not None else TargetState()


def attempts(db: Database, incident_id: int | None = None) -> list[RemediationAttempt]:
    """Attempts, oldest first; of one incident when given."""
    query = select(RemediationAttempt).order_by(RemediationAttempt.id)
    if incident_id is not None:
        query = query.where(RemediationAttempt.incident_id == incident_id)
    with db.session() as s:
        return list(s.scalars(query).all())


def not_ours_since(db: Database, incident_id: int, target: str, since_ms: int,
                   now_ms: int) -> int:
    """Since when a start of `target` is not Sentinel's: the failure's start (`since_ms`), or
    the end of Sentinel's last attempt on it for this incident (one still running: now)."""
    ends = [dt_to_ms(a.finished_at) if a.finished_at is not None else now_ms
            for a in attempts(db, incident_id) if a.target == target]
    return max([since_ms, *ends])


def _state_of(row: RemediationTarget) -> TargetState:
    return TargetState(
        consecutive_failures=row.consecutive_failures,
        last_attempt_ms=opt_dt_to_ms(row.last_attempt_at),
        last_failure_ms=opt_dt_to_ms(row.last_failure_at),
        last_success_ms=opt_dt_to_ms(row.last_success_at),
        breaker_opened_ms=opt_dt_to_ms(row.breaker_opened_at))


def _target_row(s: Session, target: str, now: datetime) -> RemediationTarget:
    row = s.get(RemediationTarget, target)
    if row is None:
        row = RemediationTarget(target=target, consecutive_failures=0, updated_at=now)
        s.add(row)
    row.updated_at = now
    return row
