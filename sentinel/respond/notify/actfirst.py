"""Act first, then tell once (issue 33): the held first page of an incident.

When an incident opens and a remediation policy covers its alert, the tracker
writes a WAITING hold (`hold`) in the same transaction as the incident and its
notify intents. While it waits, the dispatcher leaves the incident's intents
undispatched (`held_incidents`). The hold ends one of three ways:

- `fix`: the remediation verified recovery within the grace. The held intents
  are dropped (nobody is paged) and the caller sends one "fixed by Sentinel"
  message to `notify.act_first.receiver` (`fixed_notification`).
- `release`: the remediation was refused, failed, parked for approval, or
  (`expire`) not verified by the deadline. The intents are dispatched as they
  would have been, at once, and the page carries why (`annotations`).
- An incident opened with no policy gets a PAGED row at once (`paged`): nothing
  waits, but its page can still be updated.

A page that went out without the model's runbook gets it as one update message
to the same group (`updates`), when the model's runbook is stored.

Everything is in the database, so a restart during the grace neither loses the
page (the intents wait, the deadline stands) nor sends it twice. So does a change
of HA leader: when the daemon that acted lost its lease between recording the
action's outcome and deciding the hold (its write refused by the fence), the next
leader decides it from the outcome on record (`outcomes`), at its next round.
Deciding locks the row, so a hold is released or fixed once, whoever gets there.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from sentinel.incidents import notice
from sentinel.incidents import prefetch as prefetched
from sentinel.incidents.convert import dt_to_ms, ms_to_dt
from sentinel.incidents.models import (
    Incident,
    IncidentAlert,
    IncidentStatus,
    TimelineEvent,
    TimelineKind,
)
from sentinel.incidents.models_notify import HoldStatus, NotifyGroup, NotifyHold, NotifyIntent
from sentinel.incidents.models_remediation import AttemptStatus, RemediationAttempt
from sentinel.incidents.recovery import row_alert
from sentinel.model import Alert, Notification, NotificationKind, labels_of
from sentinel.respond.notify.cause import cause_annotations
from sentinel.respond.notify.codec import alert_from_json

log = logging.getLogger(__name__)

# The page's annotation that says what Sentinel tried and why it did not hold.
REMEDIATION = "sentinel_remediation"
# The crash lines on a page (issue 48: no page carried them). Stored redacted (logwatch's
# PromptRedactor); bounded so a page stays readable on a phone and within receivers' limits.
EXCERPT = "sentinel_excerpt"
PAGE_EXCERPT_MAX = 2000
Annotations = Callable[[Session, int], dict[str, str]]
IN_CHUNK = 500  # ids per IN (...) list


def hold(s: Session, incident_id: int, now: datetime, grace_ms: int, why: str) -> None:
    """Hold the incident's first page for `grace_ms` while a policy acts (`why` names it)."""
    deadline = ms_to_dt(dt_to_ms(now) + grace_ms)
    s.add(NotifyHold(incident_id=incident_id, status=HoldStatus.WAITING, created_at=now,
                     deadline_at=deadline, decided_at=None, reason="", model_runbook=False,
                     update_sent_at=None))
    note(s, incident_id, now, f"page held up to {grace_ms / 1000:g}s while Sentinel acts: "
          f"{why} (act first, then tell once)", {"act_first": "waiting", "grace_ms": grace_ms})


def paged(s: Session, incident_id: int, now: datetime) -> None:
    """An incident that pages at once (no policy acts): its page may still get an update."""
    s.add(NotifyHold(incident_id=incident_id, status=HoldStatus.PAGED, created_at=now,
                     deadline_at=now, decided_at=now, reason="", model_runbook=False,
                     update_sent_at=None))


def held_incidents(s: Session) -> list[int]:
    """The incidents whose first page waits now (their intents are not dispatched yet)."""
    return list(s.scalars(held_query()))


def held_query() -> Select[int]:
    """`held_incidents` as a subquery (a storm's thousands of holds stay in the database)."""
    return select(NotifyHold.incident_id).where(NotifyHold.status == HoldStatus.WAITING.value)


def waiting(s: Session, incident_id: int) -> NotifyHold | None:
    """The incident's hold, locked until the transaction ends, if its page still waits.

    Locked (PostgreSQL) and read afresh: two deciders at once (the engine's thread and
    the act-first round, or two daemons) serialise here, and the second sees it decided.
    """
    row = s.scalars(select(NotifyHold).where(NotifyHold.incident_id == incident_id)
                    .with_for_update().execution_options(populate_existing=True)).one_or_none()
    return row if row is not None and row.status == HoldStatus.WAITING else None


def release(s: Session, incident_id: int, now: datetime, why: str) -> bool:
    """Let the held page go now, saying why; False when nothing waited."""
    row = waiting(s, incident_id)
    if row is None:
        return False
    row.status, row.decided_at, row.reason = HoldStatus.PAGED, now, why
    note(s, incident_id, now, f"paging now: {why}", {"act_first": "paged", "reason": why})
    log.info("incident %d: held page released: %s", incident_id, why,
             extra={"incident": incident_id})
    return True


def expire(s: Session, now: datetime) -> list[int]:
    """Release the holds whose grace ran out before a verified recovery (the core's
    `hold_ends`; the query reads only the holds it can release)."""
    rows = s.execute(select(NotifyHold.incident_id, NotifyHold.deadline_at).where(
        NotifyHold.status == HoldStatus.WAITING.value, NotifyHold.deadline_at <= now)).all()
    ids = [i for i, deadline in rows
           if notice.hold_ends(None, dt_to_ms(now), dt_to_ms(deadline)) is notice.Reason.RELEASED]
    for incident_id in ids:
        release(s, incident_id, now, "not verified recovered within the act-first grace")
    return ids


@dataclass(frozen=True, slots=True)
class Outcome:
    """A held page's remediation attempt that has finished: what decides the hold."""

    incident_id: int
    attempt_id: int
    verified: bool  # succeeded and verified recovered: fix; otherwise release
    why: str  # the page's `sentinel_remediation`, or the recovery's words
    at_ms: int  # when the attempt finished
    data: dict[str, Any]  # for a verified one: what `Pager.recovered` is handed


def ends(o: Outcome, now_ms: int) -> notice.Reason:
    """How the finished attempt ends its hold (the core's `hold_ends`): FIXED or RELEASED."""
    outcome = notice.Outcome.VERIFIED if o.verified else notice.Outcome.FAILED
    return notice.hold_ends(outcome, now_ms, now_ms)


def outcomes(s: Session, busy: Callable[[int], bool] = lambda _: False) -> list[Outcome]:
    """The waiting holds whose incident's last attempt has finished, with its outcome.

    The daemon that ran the attempt decides the hold itself right after recording it;
    `busy(attempt_id)` says it still may (its run is not over here), so it is left to
    it. Any other finished attempt was the last leader's, or a run that ended without
    deciding (its write refused by the fence, the daemon killed): its outcome decides.
    """
    out = []
    held = held_incidents(s)
    last: dict[int, RemediationAttempt] = {}
    # Their attempts in one query per IN_CHUNK incidents (a storm's policies hold
    # thousands of pages, and this runs every notify round: issue 49); the last wins.
    for n in range(0, len(held), IN_CHUNK):
        for a in s.scalars(select(RemediationAttempt).where(
                RemediationAttempt.incident_id.in_(held[n:n + IN_CHUNK]))
                .order_by(RemediationAttempt.id)):
            last[a.incident_id] = a
    for incident_id in held:
        got = last.get(incident_id)
        if got is None or got.status == AttemptStatus.RUNNING or got.finished_at is None \
                or busy(got.id):
            continue
        out.append(_outcome(got))
    return out


def _outcome(a: RemediationAttempt) -> Outcome:
    """The engine's own words for the attempt's end (remediate/engine.py `execute`)."""
    data = dict(a.data or {})
    did = f"{a.action} (step {a.step + 1} of {a.policy})"
    at_ms = dt_to_ms(a.finished_at) if a.finished_at is not None else 0
    if a.status == AttemptStatus.SUCCEEDED and "recovered" in data:
        return Outcome(a.incident_id, a.id, True,
                       f"{a.action} on {a.target} {data['recovered']}", at_ms,
                       {"attempt": a.id, "action": a.action, "target": a.target,
                        "recovery_ms": a.recovery_ms, "step": a.step, "policy": a.policy})
    if a.status == AttemptStatus.SUCCEEDED:
        why = f"{did} ran; its recovery is not verified (verify: false): {a.detail}"
    else:
        why = f"{did} did not hold: {a.detail}"
    return Outcome(a.incident_id, a.id, False, why, at_ms, {})


def fix(s: Session, incident_id: int, now: datetime, why: str) -> bool:
    """A verified recovery within the grace: drop the held page; False when nothing waited."""
    row = waiting(s, incident_id)
    if row is None:
        return False
    row.status, row.decided_at, row.reason = HoldStatus.FIXED, now, why
    for intent in s.scalars(select(NotifyIntent).where(
            NotifyIntent.incident_id == incident_id, NotifyIntent.dispatched_at.is_(None))):
        intent.dispatched_at = now  # dropped: the failure ended before anyone had to know
    note(s, incident_id, now, f"not paged: {why}", {"act_first": "fixed"})
    return True


def hold_annotations(s: Session, incident_id: int) -> dict[str, str]:
    """What a released page adds: what Sentinel tried and why it did not hold."""
    row = prefetched.hold(s, incident_id)
    if row is None or row.status != HoldStatus.PAGED or not row.reason:
        return {}
    return {REMEDIATION: row.reason}


def with_act_first(runbook: Annotations | None) -> Annotations:
    """The dispatcher's annotations: the runbook (when diagnosis is on) and the hold's reason."""
    def both(s: Session, incident_id: int) -> dict[str, str]:
        extra = dict(runbook(s, incident_id)) if runbook is not None else {}
        _carried(s, incident_id)
        data = _excerpt_data(s, incident_id)
        excerpt = _excerpt_of(data)
        if excerpt:
            extra[EXCERPT] = _bounded(excerpt, PAGE_EXCERPT_MAX)
        # A symptom's page names its cause (the dispatcher applies it per alert).
        return {**extra, **cause_annotations(data), **hold_annotations(s, incident_id)}
    return both


def _carried(s: Session, incident_id: int) -> None:
    """A message about the incident is being built now: if the model's runbook is on
    record, it carries it, and no update is owed for it."""
    row = prefetched.hold(s, incident_id)
    if row is not None and not row.model_runbook and _has_model_runbook(s, incident_id):
        row.model_runbook = True


def fixed_notification(s: Session, incident_id: int, runbook: dict[str, str],
                       data: dict[str, Any]) -> Notification | None:
    """The one "fixed by Sentinel" message: what broke, what was done, how long, the runbook."""
    incident = s.get(Incident, incident_id)
    if incident is None:
        return None
    rows = list(s.scalars(select(IncidentAlert).where(IncidentAlert.incident_id == incident_id)))
    if not rows:
        return None
    at_ms = dt_to_ms(incident.resolved_at or incident.updated_at)
    ttr_s = (incident.recovery_ms or 0) / 1000
    action = str(data.get("action", "remediation"))
    step = data.get("step")
    did = f"{action}" + (f" (step {int(step) + 1} of policy {data.get('policy')})"
                         if step is not None else "")
    extra = {
        "summary": f"Fixed by Sentinel: {incident.alertname} on {incident.target}; {did}, "
                   f"verified; serving again {ttr_s:.1f}s after the first evidence",
        "sentinel_outcome": "fixed",
        "sentinel_action": did,
        "sentinel_time_to_recovery": f"{ttr_s:.1f}s",
        "sentinel_excerpt": _excerpt(s, incident_id),
        **runbook,
    }
    alerts = tuple(replace(a, annotations=labels_of({**dict(a.annotations), **extra}))
                   for a in (row_alert(r, at_ms) for r in rows))
    group = tuple(sorted((k, v) for k, v in (("alertname", incident.alertname),
                                              ("target", incident.target)) if v))
    key = _key(f"fixed|{incident_id}")
    return Notification(incident_id, NotificationKind.FIXED, alerts, group,
                        group_key=f"actfirst:{incident_id}", idempotency_key=key)


def updates(s: Session, runbook: Annotations, now: datetime
            ) -> list[tuple[str, Notification]]:
    """(receiver, update) for each page that went out before the model's runbook was stored.

    Sent once per page, to the groups that hold the incident's alerts, with their group
    key: a receiver threads it under the page (webhook `status: update`, PagerDuty the
    same dedup_key). A page whose group has ended gets none: its resolution carried it.
    A message built while the model's runbook was on record carried it (`_carried`):
    no update is owed then.
    """
    out: list[tuple[str, Notification]] = []
    # Open incidents only: a resolved one's last message carried what there was, and the
    # rows of the past must not be looked at again on every run.
    rows = s.scalars(select(NotifyHold).join(Incident).where(
        Incident.status == IncidentStatus.OPEN.value,
        NotifyHold.status == HoldStatus.PAGED.value, NotifyHold.model_runbook.is_(False),
        NotifyHold.update_sent_at.is_(None))).all()
    # Which of them have the model's runbook: one read for all (a storm leaves thousands of
    # paged incidents, and this runs every notify round: issue 49). Only those can owe an
    # update; the groups are scanned once for them, not once per incident.
    prefetched.prefetch(s, [row.incident_id for row in rows])
    rows = [row for row in rows if _has_model_runbook(s, row.incident_id)]
    holding = _groups_by_incident(s) if rows else {}
    for row in rows:
        groups = holding.get(row.incident_id, [])
        # No page out yet (it will carry the runbook), or no runbook yet: nothing owed.
        if notice.runbook_update(bool(groups), bool(groups), told=False) is None:
            continue
        row.model_runbook, row.update_sent_at = True, now
        extra = {**runbook(s, row.incident_id), **hold_annotations(s, row.incident_id)}
        sent = []
        for group in groups:
            alerts = tuple(replace(a, annotations=labels_of({**dict(a.annotations), **extra}))
                           for a in _group_alerts(group, row.incident_id))
            if not alerts:
                continue
            sent.append(group.receiver)
            out.append((group.receiver, Notification(
                row.incident_id, NotificationKind.UPDATE, alerts,
                tuple(sorted(group.group_labels.items())), group_key=group.key,
                idempotency_key=_key(f"update|{row.incident_id}|{group.key}"))))
        to = ", ".join(sorted(set(sent)))
        note(s, row.incident_id, now, f"the model's runbook came after the page: sent as an "
              f"update to {to}", {"act_first": "update", "receivers": sorted(set(sent))})
    return out


def _has_model_runbook(s: Session, incident_id: int) -> bool:
    """Whether a validated model runbook is on record for the incident."""
    rows = prefetched.timeline(s, incident_id)
    found = (data for kind, data in rows if kind == TimelineKind.RUNBOOK) if rows is not None \
        else s.scalars(select(TimelineEvent.data).where(
            TimelineEvent.incident_id == incident_id, TimelineEvent.kind == TimelineKind.RUNBOOK))
    return any(data and data.get("source") == "model" and data.get("validated")
               for data in found)


def _groups_by_incident(s: Session) -> dict[int, list[NotifyGroup]]:
    """Per incident, the groups that sent its firing alerts (where its page went), in
    one scan of the groups (their alerts name their incident)."""
    out: dict[int, list[NotifyGroup]] = {}
    for g in s.scalars(select(NotifyGroup).order_by(NotifyGroup.id)):
        for i in dict.fromkeys(int(e.get("incident_id", 0)) for fp, e in g.alerts.items()
                               if fp in g.sent_firing):
            out.setdefault(i, []).append(g)
    return out


def _group_alerts(group: NotifyGroup, incident_id: int) -> list[Alert]:
    return [alert_from_json(e["alert"]) for e in group.alerts.values()
            if int(e.get("incident_id", 0)) == incident_id and not e.get("muted")]


def _excerpt(s: Session, incident_id: int) -> str:
    return _excerpt_of(_excerpt_data(s, incident_id))


def _excerpt_data(s: Session, incident_id: int) -> dict[str, Any] | None:
    """The data of the incident's first log excerpt (its first evidence), if any."""
    rows = prefetched.timeline(s, incident_id)
    if rows is not None:
        return next((data for kind, data in rows if kind == TimelineKind.LOG_EXCERPT), None)
    return s.scalar(select(TimelineEvent.data).where(
        TimelineEvent.incident_id == incident_id,
        TimelineEvent.kind == TimelineKind.LOG_EXCERPT).order_by(TimelineEvent.at).limit(1))


def _excerpt_of(data: dict[str, Any] | None) -> str:
    if not data:
        return ""
    return "\n".join(str(line) for line in data.get("excerpt", []))[:4000]


def _bounded(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a line and saying so."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit("\n", 1)[0]
    return f"{cut}\n[… {len(text) - len(cut)} more characters on the incident's timeline]"


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def note(s: Session, incident_id: int, now: datetime, message: str, data: dict[str, Any]
         ) -> None:
    """A NOTE on the incident's timeline."""
    s.add(TimelineEvent(incident_id=incident_id, at=now, kind=TimelineKind.NOTE,
                        message=message, data=data))
