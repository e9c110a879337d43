"""What people are told about one incident: a pure function of its events.

`step(notice, event, policy)` applies one event and decides, in one place:

- **Never silent.** An open incident that is not held, acknowledged, silenced
  (every firing alert) or covered (a non-critical incident all of whose firing
  alerts another incident's alert inhibits) pages each of its receivers once that
  receiver's `group_wait` has passed since its first alert fired (a route in a mute
  time interval defers its page to the window's end, saying so). An inhibition by
  an alert of the same incident mutes nothing (the incident speaks as one), and a
  critical incident pages even when every alert of it is inhibited.
- **No false resolve.** The incident resolves when every alert of it resolved,
  and for a failure of the target (crash, down, stall, start-up) only when the
  target serves again; a crash counter (`event`) does not hold a target that
  serves again open. A resolve the rule engine reports before the target's first
  scrape since Sentinel started is deferred until that scrape is evaluated.
- **Joined alerts reach their own routes.** A receiver that only an alert which
  joined the incident routes to is told too: paged when such an alert is
  critical, else told once, as an update, that it joined (`first_kind`).
- **Exactly once.** One page per receiver; later facts are updates to it; one
  resolved per told receiver with `send_resolved`; one `fixed` notice when
  Sentinel fixed it before anyone was paged, whatever `send_resolved` says.

Each withheld message leaves a timeline line saying who was not told and why,
once per cause.
"""

from __future__ import annotations

from dataclasses import replace

from sentinel.incidents.notice.rules import (
    fixed_to,
    hold_begins,
    hold_ends,
    inhibition,
    joined_route,
    mute,
    muted,
    resolved_to,
    runbook_update,
)
from sentinel.incidents.notice.types import (
    Acknowledged,
    AlertEntry,
    AlertFired,
    AlertResolved,
    Event,
    Hold,
    HoldBegun,
    HoldEnded,
    Inhibited,
    Kind,
    Line,
    Message,
    Notice,
    Outcome,
    Policy,
    Reason,
    Restarted,
    RouteMuted,
    RunbookArrived,
    Seen,
    Serving,
    Silenced,
    Step,
    Tick,
    Uninhibited,
)

_Out = tuple[Notice, list[Message], list[Line]]


def step(n: Notice, ev: Event, policy: Policy) -> Step:
    """Apply one event to the incident; what to send and what to write."""
    msgs: list[Message] = []
    lines: list[Line] = []
    if n.open:
        n, msgs, lines = _apply(n, ev, policy)
    elif isinstance(ev, RouteMuted):  # a resolve deferred by a mute window goes after it
        n = _mute(n, ev)
    n, more, more_lines = _decide(n, ev.at_ms, policy)
    return Step(n, tuple(msgs + more), tuple(lines + more_lines))


def receivers(n: Notice, policy: Policy) -> tuple[str, ...]:
    """Where the incident is told: its alerts' receivers, else the fallback."""
    out: list[str] = []
    for a in n.alerts:
        out += [r for r in a.receivers if r not in out]
    return tuple(out) or (policy.fallback,)


def over(n: Notice) -> bool:
    """Whether the incident's failure is over (every rule of resolution in one place)."""
    if not n.alerts:
        return False
    if not n.failure:
        return not n.firing
    # A crash counter fires for its window after the server came back: not a condition.
    return n.serving is True and not any(a.firing and not a.event for a in n.alerts)


def covered(n: Notice) -> bool:
    """An incident whose firing alerts are all muted by another incident's inhibition."""
    firing = n.firing
    return bool(firing) and all(
        mute(False, a.inhibited_by is not None, a.inhibited_by_own, n.critical)
        is Reason.INHIBITED for a in firing)


def silenced(n: Notice) -> bool:
    """Every firing alert is silenced."""
    firing = n.firing
    return bool(firing) and all(
        muted(mute(a.silence is not None, False, False, n.critical)) for a in firing)


def first_kind(n: Notice, receiver: str) -> Kind:
    """How a receiver is first told of the incident: a page where its first alert routes
    (the incident's page) or where a critical alert of it routes; an update where only
    joined warnings route, so joining never leaves a route of a firing alert silent."""
    first = n.alerts[0].receivers if n.alerts else ()
    mine = [a for a in n.alerts if receiver in a.receivers]
    # The daemon's rule, per route (joined.py): the incident's page went where its first
    # alert routes; elsewhere the joined alerts' severity decides.
    why = joined_route(not first or receiver in first or not mine,
                       any(a.critical for a in mine))
    return Kind.UPDATE if why is Reason.JOINED_TOLD else Kind.PAGE


def page_due_ms(n: Notice, receiver: str, policy: Policy) -> int:
    """When the page to `receiver` is due: group_wait after its first alert fired, and no
    sooner than the incident became tellable (one evaluation later after a verified fix,
    so a down alert the verification outran can clear)."""
    fired = [a.fired_at_ms for a in n.alerts if receiver in a.receivers] or \
        [min((a.fired_at_ms for a in n.alerts), default=n.opened_at_ms)]
    due = min(fired) + policy.receiver(receiver).group_wait_ms
    settle = policy.eval_ms if n.hold is Hold.FIXED else 0
    return max(due, n.unblocked_at_ms + settle)


# -- applying events -------------------------------------------------------------------


def _apply(n: Notice, ev: Event, policy: Policy) -> _Out:
    msgs: list[Message] = []
    lines: list[Line] = []
    if isinstance(ev, AlertFired):
        n, msgs, lines = _fired(n, ev, policy)
    elif isinstance(ev, AlertResolved):
        n, lines = _resolved(n, ev)
    elif isinstance(ev, Inhibited):
        n = _set(n, ev.name, inhibited_by=ev.by, inhibited_by_own=ev.by_own)
        reason = Reason.INHIBITED_IN_INCIDENT if ev.by_own else Reason.INHIBITED
        n, lines = _once(n, f"inhibit:{ev.name}:{ev.by}", Line(
            ev.at_ms, reason, f"{ev.name}: {reason.value} ({ev.by})"))
    elif isinstance(ev, Uninhibited):
        n = replace(_set(n, ev.name, inhibited_by=None, inhibited_by_own=False),
                    unblocked_at_ms=max(n.unblocked_at_ms, ev.at_ms))
    elif isinstance(ev, Silenced):
        n = _set(n, ev.name, silence=ev.silence)
        if ev.silence is None:
            n = replace(n, unblocked_at_ms=ev.at_ms)
        else:
            n, lines = _once(n, f"silence:{ev.name}:{ev.silence}", Line(
                ev.at_ms, Reason.SILENCED, f"{ev.name}: silenced by {ev.silence}"))
    elif isinstance(ev, RouteMuted):
        n = _mute(n, ev)
    elif isinstance(ev, HoldBegun):
        n, lines = _hold(n, ev)
    elif isinstance(ev, HoldEnded):
        n, msgs, lines = _outcome(n, ev)
    elif isinstance(ev, RunbookArrived):
        n = replace(n, runbook=True)
    elif isinstance(ev, Serving):
        n = replace(n, serving=ev.serving)
    elif isinstance(ev, Seen):
        n = _seen(n)
    elif isinstance(ev, Acknowledged):
        n = replace(n, acked_by=ev.by)
    elif isinstance(ev, Restarted):
        # What was persisted stands (holds keep their deadline); what the target does now
        # is unknown until its first scrape is evaluated.
        n = replace(n, seen=False, serving=None)
    else:
        assert isinstance(ev, Tick)
    return n, msgs, lines


def _fired(n: Notice, ev: AlertFired, policy: Policy) -> _Out:
    known = n.entry(ev.name)
    lines: list[Line] = []
    msgs: list[Message] = []
    if known is not None:
        refired = not known.firing
        n = _set(n, ev.name, firing=True, resolve_deferred_at_ms=None,
                 fired_at_ms=ev.at_ms if refired else known.fired_at_ms)
    else:
        entry = AlertEntry(ev.name, True, ev.at_ms, ev.receivers, ev.critical, ev.failure,
                           ev.event, ev.inhibited_by, ev.inhibited_by_own, ev.silence)
        joined = bool(n.alerts)
        told = _told(n)
        n = replace(n, alerts=n.alerts + (entry,))
        if joined:  # a line under its own name and time, an update to whoever was told
            lines.append(Line(ev.at_ms, Reason.JOINED,
                              f"{ev.name} on {n.target} joined this incident"))
            # (a receiver told by an update whom this critical alert pages gets the page)
            msgs = [Message(ev.at_ms, r, Kind.UPDATE, (ev.name,), f"{ev.name} joined")
                    for r in told if (r, Kind.PAGE) in n.told or first_kind(n, r) is Kind.UPDATE]
    if ev.failure:
        n = replace(n, serving=False)
    return n, msgs, lines


def _resolved(n: Notice, ev: AlertResolved) -> tuple[Notice, list[Line]]:
    entry = n.entry(ev.name)
    if entry is None or not entry.firing:
        return n, []
    if not n.seen:
        n = _set(n, ev.name, resolve_deferred_at_ms=ev.at_ms)
        return _once(n, f"unseen:{ev.name}", Line(
            ev.at_ms, Reason.NOT_SEEN_YET, f"{ev.name}: {Reason.NOT_SEEN_YET.value}"))
    return _set(n, ev.name, firing=False), []


def _seen(n: Notice) -> Notice:
    alerts = tuple(replace(a, firing=False, resolve_deferred_at_ms=None)
                   if a.resolve_deferred_at_ms is not None else a for a in n.alerts)
    return replace(n, seen=True, alerts=alerts)


def _mute(n: Notice, ev: RouteMuted) -> Notice:
    muted = tuple(m for m in n.muted if m[0] != ev.receiver)
    if ev.interval is not None:
        return replace(n, muted=muted + ((ev.receiver, ev.interval),))
    return replace(n, muted=muted)


def _hold(n: Notice, ev: HoldBegun) -> tuple[Notice, list[Line]]:
    new_page = n.hold is Hold.NONE and not _paged(n)  # a page that went is not held again
    if hold_begins(new_page, ev.deadline_ms - ev.at_ms) is not Reason.HELD:
        return n, []
    n = replace(n, hold=Hold.WAITING, hold_deadline_ms=ev.deadline_ms)
    return n, [Line(ev.at_ms, Reason.HELD, f"page held up to "
                    f"{(ev.deadline_ms - ev.at_ms) / 1000:g}s while Sentinel acts: {ev.policy}")]


def _outcome(n: Notice, ev: HoldEnded) -> _Out:
    why = f"{ev.outcome.value}: {ev.detail}" if ev.detail else ev.outcome.value
    if ev.outcome is Outcome.VERIFIED:
        n = replace(n, serving=True)
    if n.hold is not Hold.WAITING:  # the page went already: the outcome is an update to it
        return n, [Message(ev.at_ms, r, Kind.UPDATE, _shown(n), why) for r in _paged(n)], []
    if hold_ends(ev.outcome, ev.at_ms, n.hold_deadline_ms) is Reason.FIXED:
        n = replace(n, hold=Hold.FIXED, hold_why=why, unblocked_at_ms=ev.at_ms)
        return n, [], [Line(ev.at_ms, Reason.FIXED, f"not paged: fixed by Sentinel ({why})")]
    n = replace(n, hold=Hold.RELEASED, hold_why=why, unblocked_at_ms=ev.at_ms)
    return n, [], [Line(ev.at_ms, Reason.RELEASED, f"paging now: {why}")]


# -- deciding --------------------------------------------------------------------------


def _decide(n: Notice, now: int, policy: Policy) -> _Out:
    lines: list[Line] = []
    msgs: list[Message] = []
    if n.open and n.hold is Hold.WAITING \
            and hold_ends(None, now, n.hold_deadline_ms) is Reason.RELEASED:
        n, msgs, lines = _outcome(n, HoldEnded(now, Outcome.TIMED_OUT,
                                               "not verified recovered by the deadline"))
    if n.open and over(n):
        n = replace(n, resolved_at_ms=now)
    elif n.open and n.alerts and not n.firing:
        n, more = _once(n, "still-failing", Line(now, Reason.STILL_FAILING,
                                                  Reason.STILL_FAILING.value))
        lines += more
    if n.open:
        n, more_msgs, more = _pages(n, now, policy)
    else:
        n, more_msgs, more = _endings(n, now, policy)
    return n, msgs + more_msgs, lines + more


def _pages(n: Notice, now: int, policy: Policy) -> _Out:
    blocked = _blocked(n)
    if blocked is not None:
        n, said = _once(n, f"blocked:{blocked.reason}:{blocked.text}", blocked)
        return n, [], said
    msgs: list[Message] = []
    lines: list[Line] = []
    if n.firing and all(a.inhibited_by and inhibition(n.critical, a.inhibited_by_own)
                        is Reason.INHIBITED_CRITICAL for a in n.firing):
        n, lines = _once(n, "inhibited-critical", Line(
            now, Reason.INHIBITED_CRITICAL, Reason.INHIBITED_CRITICAL.value))
    for r in receivers(n, policy):
        kind = first_kind(n, r)
        if (r, Kind.PAGE) in n.told or (r, kind) in n.told or now < page_due_ms(n, r, policy):
            continue
        if (interval := dict(n.muted).get(r)) is not None:
            n, more = _once(n, f"muted:{r}:{interval}", Line(
                now, Reason.MUTED_INTERVAL, f"{r}: not told yet, muted by time interval "
                f"{interval}", receiver=r))
            lines += more
            continue
        if kind is Kind.UPDATE:  # reached by joined warnings only: told, not paged
            joined = tuple(a.name for a in n.alerts if r in a.receivers)
            msgs.append(Message(now, r, Kind.UPDATE, joined, f"{', '.join(joined)} joined"))
            lines.append(Line(now, Reason.JOINED_TOLD, f"{r}: told {', '.join(joined)} "
                              f"joined ({Reason.JOINED_TOLD.value})", receiver=r, told=True))
            n = replace(n, told=n.told | {(r, Kind.UPDATE)})
            continue
        msgs.append(Message(now, r, Kind.PAGE, _shown(n), n.hold_why))
        lines.append(Line(now, Reason.PAGED, f"{r}: paged", receiver=r, told=True))
        n = replace(n, told=n.told | {(r, Kind.PAGE)})
        if n.runbook:
            n = replace(n, runbook_told=n.runbook_told | {r})
    for r in _paged(n):  # the model's runbook after the page: one update each
        if runbook_update(True, n.runbook, r in n.runbook_told) and r not in dict(n.muted):
            msgs.append(Message(now, r, Kind.UPDATE, _shown(n), "the model's runbook"))
            n = replace(n, runbook_told=n.runbook_told | {r})
    return n, msgs, lines


def _blocked(n: Notice) -> Line | None:
    """Why nothing pages now (a line to write once), or None."""
    at = n.unblocked_at_ms
    if n.hold is Hold.WAITING:
        return Line(at, Reason.HELD, "not paged yet: held while Sentinel acts")
    if n.acked_by is not None:
        return Line(at, Reason.ACKNOWLEDGED, f"not paged: acknowledged by {n.acked_by}")
    if silenced(n):
        return Line(at, Reason.SILENCED, "not paged: every firing alert is silenced")
    if covered(n):
        by = sorted({a.inhibited_by or "" for a in n.firing})
        return Line(at, Reason.INHIBITED, f"not paged: inhibited by {', '.join(by)}")
    return None


def _endings(n: Notice, now: int, policy: Policy) -> _Out:
    """A resolved incident: its resolveds (paged receivers) or its one fixed notice."""
    msgs: list[Message] = []
    lines: list[Line] = []
    paged = _told(n)
    for r in paged:
        if (r, Kind.RESOLVED) in n.told or r in dict(n.muted):
            continue
        if resolved_to(policy.receiver(r).send_resolved) is Reason.SEND_RESOLVED_OFF:
            n, more = _once(n, f"noresolve:{r}", Line(
                now, Reason.SEND_RESOLVED_OFF, f"{r}: not told it resolved "
                "(send_resolved is off)", receiver=r))
            lines += more
            continue
        msgs.append(Message(now, r, Kind.RESOLVED, tuple(a.name for a in n.alerts)))
        lines.append(Line(now, Reason.RESOLVED, f"{r}: resolved", receiver=r, told=True))
        n = replace(n, told=n.told | {(r, Kind.RESOLVED)})
    if n.hold is Hold.WAITING and not paged:
        n, more = _once(n, "ended-held", Line(now, Reason.HELD, "resolved while Sentinel "
                                              "acted, before the grace ended: nobody paged"))
        lines += more
    if n.hold is Hold.FIXED and not paged and not n.fixed_told:
        fixers = [r.name for r in policy.receivers if r.tells_fixes]
        ready = [r for r in fixers if r not in dict(n.muted)]
        if fixed_to(fixers[0] if fixers else None) is Reason.FIXED_TIMELINE_ONLY:
            n, more = _once(n, "fixed-untold", Line(
                now, Reason.FIXED_TIMELINE_ONLY, "fixed by Sentinel: no receiver tells "
                "fixes (notify.act_first.receiver), told on this timeline only"))
            return n, msgs, lines + more
        if len(ready) == len(fixers):
            msgs += [Message(now, r, Kind.FIXED, tuple(a.name for a in n.alerts), n.hold_why)
                     for r in ready]
            lines += [Line(now, Reason.FIXED, f"{r}: told it was fixed", receiver=r, told=True)
                      for r in ready]
            n = replace(n, fixed_told=True, told=n.told | {(r, Kind.FIXED) for r in ready})
    return n, msgs, lines


# -- helpers ---------------------------------------------------------------------------


def _paged(n: Notice) -> list[str]:
    return sorted(r for r, k in n.told if k is Kind.PAGE)


def _told(n: Notice) -> list[str]:
    """Receivers told it fires (paged, or told a warning joined): they hear its end."""
    return sorted({r for r, k in n.told if k in (Kind.PAGE, Kind.UPDATE)})


def _shown(n: Notice) -> tuple[str, ...]:
    """The alerts a page shows: firing ones muted by nothing outside the incident first
    (all firing ones when that leaves none), then the resolved ones."""
    free = tuple(a.name for a in n.firing if a.silence is None
                 and (a.inhibited_by is None or a.inhibited_by_own))
    firing = free or tuple(a.name for a in n.firing)
    return firing + tuple(a.name for a in n.alerts if not a.firing)


def _set(n: Notice, name: str, **changes: object) -> Notice:
    return replace(n, alerts=tuple(replace(a, **changes) if a.name == name else a  # type: ignore[arg-type]
                                   for a in n.alerts))


def _once(n: Notice, key: str, line: Line) -> tuple[Notice, list[Line]]:
    """The line, unless it was written already for this cause."""
    if key in n.noted:
        return n, []
    return replace(n, noted=n.noted | {key}), [line]
