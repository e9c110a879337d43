"""The notification core's small decisions (notice/rules.py): one row per reason.

The daemon calls these same functions (flush.py, joined.py, actfirst.py, the
notifier's act-first round) and the core's `step` does too, so the property test
(test_notice_properties.py) drives the rules the daemon applies.
"""

from __future__ import annotations

import pytest

from sentinel.incidents.notice import (
    Outcome,
    Reason,
    fixed_to,
    group_flush,
    hold_begins,
    hold_ends,
    joined_route,
    mute,
    muted,
    resolved_to,
    runbook_update,
)


@pytest.mark.parametrize(("silenced", "inhibited", "by_own", "critical", "reason", "out"), [
    (True, True, False, False, Reason.SILENCED, True),
    (False, True, False, False, Reason.INHIBITED, True),
    (False, True, False, True, Reason.INHIBITED_CRITICAL, False),
    (False, True, True, False, Reason.INHIBITED_IN_INCIDENT, False),
    (False, False, False, True, None, False),
])
def test_mute(silenced: bool, inhibited: bool, by_own: bool, critical: bool,
              reason: Reason | None, out: bool) -> None:
    assert mute(silenced, inhibited, by_own, critical) is reason
    assert muted(reason) is out


@pytest.mark.parametrize(("told", "critical", "reason"), [
    (True, True, Reason.JOINED),
    (False, True, Reason.PAGED),
    (False, False, Reason.JOINED_TOLD),
])
def test_joined_route(told: bool, critical: bool, reason: Reason) -> None:
    assert joined_route(told, critical) is reason


@pytest.mark.parametrize(("outcome", "now", "reason"), [
    (Outcome.VERIFIED, 200, Reason.FIXED),
    (Outcome.REFUSED, 0, Reason.RELEASED),
    (Outcome.FAILED, 0, Reason.RELEASED),
    (None, 100, Reason.RELEASED),  # the deadline passed
    (None, 99, Reason.HELD),
])
def test_hold_ends(outcome: Outcome | None, now: int, reason: Reason) -> None:
    assert hold_ends(outcome, now, 100) is reason


@pytest.mark.parametrize(("route_muted", "changed", "repeat_due", "acked", "reason"), [
    (True, True, True, False, Reason.MUTED_INTERVAL),
    (False, True, False, True, Reason.CHANGED),  # news, acknowledged or not
    (False, False, True, False, Reason.REPEATED),
    (False, False, True, True, Reason.ACKNOWLEDGED),
    (False, False, False, False, Reason.NOTHING_NEW),
])
def test_group_flush(route_muted: bool, changed: bool, repeat_due: bool, acked: bool,
                     reason: Reason) -> None:
    assert group_flush(route_muted, changed, repeat_due, acked) is reason


def test_resolved_to_and_fixed_to() -> None:
    assert resolved_to(True) is Reason.RESOLVED
    assert resolved_to(False) is Reason.SEND_RESOLVED_OFF
    assert fixed_to("chat") is Reason.FIXED
    assert fixed_to(None) is Reason.FIXED_TIMELINE_ONLY


@pytest.mark.parametrize(("new_page", "grace", "reason"), [
    (True, 120_000, Reason.HELD),
    (True, 0, Reason.PAGED),
    (True, None, Reason.PAGED),  # no policy acts
    (False, 120_000, None),  # joined, missed, or paged already
])
def test_hold_begins(new_page: bool, grace: int | None, reason: Reason | None) -> None:
    assert hold_begins(new_page, grace) is reason


@pytest.mark.parametrize(("paged", "runbook", "told", "reason"), [
    (True, True, False, Reason.UPDATED),
    (False, True, False, None),  # the page will carry it
    (True, False, False, None),  # no runbook yet
    (True, True, True, None),  # told already
])
def test_runbook_update(paged: bool, runbook: bool, told: bool, reason: Reason | None) -> None:
    assert runbook_update(paged, runbook, told) is reason
