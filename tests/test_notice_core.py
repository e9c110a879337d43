"""The notification core, one scenario per reason it gives (issue 48).

Each row is a short story of events into `sentinel.incidents.notice.step`; the
test checks the messages that came out and that the timeline says why. The
property test (test_notice_properties.py) checks the invariants over random
stories; these rows pin the stories the issue's table tells.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sentinel.incidents.notice import (
    Acknowledged,
    AlertFired,
    AlertResolved,
    Event,
    HoldBegun,
    HoldEnded,
    Inhibited,
    Kind,
    Notice,
    Outcome,
    Policy,
    Reason,
    Receiver,
    Restarted,
    RouteMuted,
    RunbookArrived,
    Seen,
    Serving,
    Tick,
    place,
    step,
)

S = 1000
POLICY = Policy((Receiver("pager", send_resolved=False, group_wait_ms=30 * S),
                 Receiver("chat", send_resolved=False, tells_fixes=True)), "pager", 15 * S)
CRASH = AlertFired(0, "VLLMHBMOutOfMemory", ("pager", "chat"), critical=True, failure=True,
                   event=True)
DOWN = AlertFired(10 * S, "VLLMTargetDown", ("pager", "chat"), critical=True, failure=True)
KV = AlertFired(0, "VLLMKVCacheHigh", ("chat",))
# The health probe's alert routes to the pager only; the down alert joins it with routes
# of its own (a critical one pages, a warning is told it joined).
HEALTH = AlertFired(0, "VLLMHealthCheckFailing", ("pager",), critical=True, failure=True)
DOWN_WARNING = AlertFired(10 * S, "VLLMTargetDown", ("chat",), failure=True)
DOWN_PAGER = AlertFired(10 * S, "VLLMTargetDown", ("ops",), critical=True, failure=True)


@dataclass(frozen=True)
class Story:
    """Events into one incident; what must come out."""

    name: str
    events: tuple[Event, ...]
    told: tuple[tuple[str, Kind], ...]  # (receiver, kind) in order
    reason: Reason  # a line that must be on the timeline
    open: bool = True


STORIES = [
    Story("a critical incident pages every receiver once, after its group_wait",
          (CRASH, Tick(15 * S), Tick(30 * S), Tick(60 * S)),
          (("chat", Kind.PAGE), ("pager", Kind.PAGE)), Reason.PAGED),
    Story("the inhibiting alert joined: the incident still pages, once (gpu-fleet.yaml)",
          (CRASH, DOWN, Inhibited(10 * S, CRASH.name, DOWN.name, by_own=True), Tick(30 * S),
           Tick(45 * S)),
          (("chat", Kind.PAGE), ("chat", Kind.UPDATE), ("pager", Kind.PAGE)),
          Reason.INHIBITED_IN_INCIDENT),
    Story("another incident's alert inhibits a critical one: it still pages",
          (CRASH, Inhibited(0, CRASH.name, DOWN.name), Tick(30 * S)),
          (("chat", Kind.PAGE), ("pager", Kind.PAGE)), Reason.INHIBITED_CRITICAL),
    Story("another incident's alert inhibits a warning: nobody is told, and why",
          (AlertFired(0, KV.name, KV.receivers, inhibited_by=DOWN.name), Tick(60 * S)), (),
          Reason.INHIBITED),
    Story("held while a restart is tried; verified: one fixed notice, though "
          "send_resolved is off, and no page",
          (HoldBegun(0, 120 * S, "restart"), CRASH, Tick(30 * S),
           HoldEnded(9 * S, Outcome.VERIFIED, "restart, /health 200"), Tick(40 * S)),
          (("chat", Kind.FIXED),), Reason.FIXED, open=False),
    Story("a refused restart pages at once, with why",
          (HoldBegun(0, 120 * S, "restart"), CRASH,
           HoldEnded(6 * S, Outcome.REFUSED, "cold XLA cache")),
          (("chat", Kind.PAGE),), Reason.RELEASED),
    Story("a restart that never serves pages when the grace ends",
          (HoldBegun(0, 120 * S, "restart"), CRASH, Tick(60 * S), Tick(123 * S)),
          (("pager", Kind.PAGE), ("chat", Kind.PAGE)), Reason.RELEASED),
    Story("a page still waiting while the act-first hold stands says so",
          (HoldBegun(0, 120 * S, "restart"), CRASH, Tick(60 * S)), (), Reason.HELD),
    Story("acknowledged before its page: not paged",
          (CRASH, Acknowledged(S, "alice"), Tick(60 * S)),
          (("chat", Kind.PAGE),), Reason.ACKNOWLEDGED),
    Story("a route in a mute time interval: who was not told, then told after it",
          (RouteMuted(0, "pager", "nights"), CRASH, Tick(60 * S),
           RouteMuted(90 * S, "pager", None)),
          (("chat", Kind.PAGE), ("pager", Kind.PAGE)), Reason.MUTED_INTERVAL),
    Story("the crash counter's window ends while the target is down: nothing resolves",
          (CRASH, DOWN, Tick(30 * S), AlertResolved(300 * S, CRASH.name), Tick(305 * S)),
          (("chat", Kind.PAGE), ("chat", Kind.UPDATE), ("pager", Kind.PAGE)), Reason.PAGED),
    Story("every alert resolved but the target does not serve: still open, and why",
          (CRASH, Tick(30 * S), AlertResolved(300 * S, CRASH.name), Tick(305 * S)),
          (("chat", Kind.PAGE), ("pager", Kind.PAGE)), Reason.STILL_FAILING),
    Story("the server serves again at +150 s: resolved then, not on the counter's window",
          (CRASH, DOWN, Tick(30 * S), AlertResolved(150 * S, DOWN.name),
           Serving(150 * S, True)),
          (("chat", Kind.PAGE), ("chat", Kind.UPDATE), ("pager", Kind.PAGE)),
          Reason.SEND_RESOLVED_OFF, open=False),
    Story("a resolve before the first scrape since start is deferred, then undone",
          (KV, Restarted(10 * S), AlertResolved(15 * S, KV.name), AlertFired(20 * S, KV.name,
                                                                            ("chat",)),
           Seen(20 * S)),
          (("chat", Kind.PAGE),), Reason.NOT_SEEN_YET),
    Story("a warning joins with a route of its own: that receiver is told, as an update",
          (HEALTH, Tick(30 * S), DOWN_WARNING, Tick(45 * S)),
          (("pager", Kind.PAGE), ("pager", Kind.UPDATE), ("chat", Kind.UPDATE)),
          Reason.JOINED_TOLD),
    Story("a critical alert joins with a route of its own: that receiver is paged",
          (HEALTH, Tick(30 * S), DOWN_PAGER, Tick(45 * S)),
          (("pager", Kind.PAGE), ("pager", Kind.UPDATE), ("ops", Kind.PAGE)), Reason.PAGED),
    Story("told a warning joined, then a critical alert joins there: paged then, once",
          (HEALTH, Tick(30 * S), DOWN_WARNING, Tick(45 * S),
           AlertFired(50 * S, "VLLMHBMOutOfMemory", ("chat",), critical=True, failure=True,
                      event=True), Tick(65 * S)),
          (("pager", Kind.PAGE), ("pager", Kind.UPDATE), ("chat", Kind.UPDATE),
           ("pager", Kind.UPDATE), ("chat", Kind.PAGE)), Reason.JOINED_TOLD),
    Story("the model's runbook after the page: one update to each paged receiver",
          (KV, RunbookArrived(5 * S), RunbookArrived(6 * S), Tick(10 * S)),
          (("chat", Kind.PAGE), ("chat", Kind.UPDATE)), Reason.PAGED),
]


@pytest.mark.parametrize("story", STORIES, ids=[s.name for s in STORIES])
def test_the_core_tells_each_story_once_and_says_why(story: Story) -> None:
    n = Notice(1, "gpu-a", 0)
    told: list[tuple[str, Kind]] = []
    reasons: set[Reason] = set()
    for ev in story.events:
        out = step(n, ev, POLICY)
        n = out.notice
        told += [(m.receiver, m.kind) for m in out.messages]
        reasons |= {line.reason for line in out.lines}
    assert told == list(story.told)
    assert story.reason in reasons, reasons
    assert n.open is story.open


def test_a_released_page_says_what_was_tried_and_what_the_check_answered() -> None:
    n = Notice(1, "gpu-a", 0)
    for ev in (HoldBegun(0, 120 * S, "restart"), CRASH):
        n = step(n, ev, POLICY).notice
    out = step(n, HoldEnded(123 * S, Outcome.FAILED, "restart on gpu-a: /health 503 after "
                            "120 s"), POLICY)
    assert {m.why for m in out.messages} == {"failed: restart on gpu-a: /health 503 after 120 s"}


def test_joined_alerts_go_under_their_own_names_and_a_fleet_alert_opens_its_own() -> None:
    crash = step(Notice(1, "gpu-a", 0), CRASH, POLICY).notice
    assert place([crash], "gpu-a", DOWN.name, True, 10 * S, 600 * S) is crash
    assert place([crash], "gpu-a", KV.name, False, 10 * S, 600 * S) is None
    assert place([crash], "gpu-b", DOWN.name, True, 10 * S, 600 * S) is None
    assert place([crash], "gpu-a", DOWN.name, True, 700 * S, 600 * S) is None
    joined = step(crash, DOWN, POLICY)
    assert [a.name for a in joined.notice.alerts] == [CRASH.name, DOWN.name]
    assert [a.fired_at_ms for a in joined.notice.alerts] == [0, 10 * S]
    assert [line.text for line in joined.lines] == [
        "VLLMTargetDown on gpu-a joined this incident"]
