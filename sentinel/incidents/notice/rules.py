"""The notification core's small decisions, each a pure function returning a reason.

The core (`core.step`) and the daemon (respond/notify: flush.py, joined.py,
actfirst.py, the notifier's act-first round) call the same functions, so the
property test (tests/test_notice_properties.py) drives the rules the daemon
applies, not a copy of them.
"""

from __future__ import annotations

from sentinel.incidents.notice.types import Outcome, Reason


def inhibition(critical: bool, by_own: bool) -> Reason:
    """What an inhibition does to an alert: INHIBITED mutes it; an alert of the same
    incident (INHIBITED_IN_INCIDENT) or of a critical incident (INHIBITED_CRITICAL) mutes
    nothing, so joining and inhibition never cut a critical incident's pages to zero."""
    if by_own:
        return Reason.INHIBITED_IN_INCIDENT
    return Reason.INHIBITED_CRITICAL if critical else Reason.INHIBITED


def mute(silenced: bool, inhibited: bool, by_own: bool, critical: bool) -> Reason | None:
    """Whether an alert is told, and why not: SILENCED or INHIBITED mute it; an inhibition
    that mutes nothing says so (`inhibition`); None: nothing matched."""
    if silenced:
        return Reason.SILENCED
    if inhibited:
        return inhibition(critical, by_own)
    return None


def muted(reason: Reason | None) -> bool:
    """Whether `mute`'s answer leaves the alert out."""
    return reason in (Reason.SILENCED, Reason.INHIBITED)


def joined_route(told: bool, critical: bool) -> Reason:
    """What a joined alert does on one of its routes: where the incident's page went
    (`told`), nothing of its own (JOINED: one page per incident); elsewhere a page if it
    is critical (PAGED), else one update that it joined (JOINED_TOLD). Never silence."""
    if told:
        return Reason.JOINED
    return Reason.PAGED if critical else Reason.JOINED_TOLD


def hold_begins(new_page: bool, grace_ms: int | None) -> Reason | None:
    """A first page about to be owed: HELD while a remediation policy acts (its grace is
    positive), else PAGED (it goes at once, and may be updated later); None when no new
    page is owed (the alert joined, the occurrence was missed, a page went already)."""
    if not new_page:
        return None
    return Reason.HELD if grace_ms is not None and grace_ms > 0 else Reason.PAGED


def hold_ends(outcome: Outcome | None, now_ms: int, deadline_ms: int) -> Reason:
    """A waiting act-first hold, now: FIXED (the action was verified: nobody is paged),
    RELEASED (any other outcome, or its deadline passed: the page goes), or HELD."""
    if outcome is Outcome.VERIFIED:
        return Reason.FIXED
    if outcome is not None or now_ms >= deadline_ms:
        return Reason.RELEASED
    return Reason.HELD


def group_flush(route_muted: bool, changed: bool, repeat_due: bool,
                acknowledged: bool) -> Reason:
    """Whether a due aggregation group sends (CHANGED, REPEATED) or not, and why: its route
    is in a mute time interval (MUTED_INTERVAL), only the repeat is due and a person
    acknowledged (ACKNOWLEDGED: they have it already), or there is nothing new."""
    if route_muted:
        return Reason.MUTED_INTERVAL
    if changed:
        return Reason.CHANGED
    if not repeat_due:
        return Reason.NOTHING_NEW
    return Reason.ACKNOWLEDGED if acknowledged else Reason.REPEATED


def resolved_to(send_resolved: bool) -> Reason:
    """Whether a receiver told of an incident hears it resolved: RESOLVED, or
    SEND_RESOLVED_OFF (the "fixed" notice is a kind of its own: `fixed_to`)."""
    return Reason.RESOLVED if send_resolved else Reason.SEND_RESOLVED_OFF


def fixed_to(receiver: str | None) -> Reason:
    """Where a fix nobody was paged for is told: FIXED (to `notify.act_first.receiver`,
    whatever its send_resolved), or FIXED_TIMELINE_ONLY when none is named."""
    return Reason.FIXED if receiver else Reason.FIXED_TIMELINE_ONLY


def runbook_update(paged: bool, runbook: bool, told: bool) -> Reason | None:
    """The model's runbook stored after a page went: one update (UPDATED) to the page's
    receiver; None while no page went (the page will carry it), no runbook is stored yet,
    or it was told already."""
    return Reason.UPDATED if paged and runbook and not told else None
