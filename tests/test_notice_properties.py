"""The notification core's invariants, over random interleavings (issue 48).

A hypothesis state machine plays a small fleet (two targets, the shipped alert
kinds: a crash counter, down, health, a capacity warning, a self-alert no route
takes) against `sentinel.incidents.notice`: alerts fire and resolve, join, are
inhibited by the GPU example's rule (`VLLMTargetDown` mutes its target's other
alerts), silenced, acknowledged; routes enter and leave mute windows; act-first
holds begin and end verified, refused, failed or timed out; model runbooks come
early and late; Sentinel restarts or fails over (and the rule engine reports a
spurious resolve before the first scrape is evaluated); receivers have
`send_resolved` on or off and group_wait 0 or 30 s.

The test keeps its own record of the world (what truly fires, whether each
target serves, holds, acks, mutes) and of every message sent, and after every
step checks:

- never silent: an open incident continuously tellable to a receiver (not
  held, acknowledged, all-silenced, covered by another incident's inhibition;
  the receiver not muted) for group_wait + one evaluation has told it, a
  joined alert's own routes included: paged where its first alert or a
  critical alert routes, told as an update where only joined warnings route
  (`VLLMHealthCheckFailing` routes to the pager only, `VLLMTargetDown` to chat
  as well, critical or a warning by the draw);
- no false resolve: an incident resolves only when every alert of it truly
  resolved and, for a failure of its target, the target serves (a crash
  counter does not hold a serving target open); nothing follows a resolve but
  its resolveds or its fixed notice; and, the other way, once that is so (and
  the target's first scrape since start was seen) it is resolved;
- exactly once: one page per receiver, resolveds only to told receivers with
  send_resolved, one fixed notice per fixed incident (send_resolved off or on)
  and never beside a page, updates only after a page (or the one that tells a
  receiver a warning joined).

CI runs EXAMPLES examples (default 1000) of up to STEPS steps (default 50):
about 20 s of CPU on an idle core. `SENTINEL_NOTICE_EXAMPLES=5000` runs more.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sentinel.incidents.notice import (
    Acknowledged,
    AlertFired,
    AlertResolved,
    Event,
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
    Receiver,
    Restarted,
    RouteMuted,
    RunbookArrived,
    Seen,
    Serving,
    Silenced,
    Tick,
    Uninhibited,
    place,
    step,
)

EXAMPLES = int(os.environ.get("SENTINEL_NOTICE_EXAMPLES", "1000"))
STEPS = int(os.environ.get("SENTINEL_NOTICE_STEPS", "50"))
EVAL_MS = 15_000
WINDOW_MS = 10 * 60_000
GRACE_MS = 120_000
TARGETS = ("a", "b")
DOWN = "VLLMTargetDown"
HEALTH = "VLLMHealthCheckFailing"
STALL = "VLLMEngineStalled"


@dataclass(frozen=True)
class Spec:
    """One alert kind of the shipped rules, as the core sees it."""

    critical: bool
    failure: bool
    event: bool
    receivers: tuple[str, ...]


ALERTS = {
    "VLLMHBMOutOfMemory": Spec(True, True, True, ("pager", "chat")),
    DOWN: Spec(True, True, False, ("pager", "chat")),
    HEALTH: Spec(True, True, False, ("pager",)),
    # A route of a user's: stalls go to the inference team ("ops"), as warnings or pages
    # (drawn); the crash incident's page never reaches ops, so a stall that joins it
    # must tell ops itself.
    STALL: Spec(False, True, False, ("ops",)),
    "VLLMKVCacheHigh": Spec(False, False, False, ("chat",)),
    "SentinelRuleFailing": Spec(False, False, False, ()),  # no route: the fallback
}
NAMES = sorted(ALERTS)


class NoticeMachine(RuleBasedStateMachine):
    """A small fleet told through the core; the invariants checked after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000_000
        self.notices: dict[int, Notice] = {}
        self.firing: set[tuple[str, str]] = set()  # (target, alert) truly firing
        self.serving = dict.fromkeys(TARGETS, True)
        self.seen = dict.fromkeys(TARGETS, True)
        self.held: dict[int, int] = {}  # incident -> deadline, while its page waits
        self.verified: set[int] = set()  # fixed while held, nobody paged
        self.acked: set[int] = set()
        self.silenced: set[tuple[str, str]] = set()
        self.muted: set[str] = set()
        self.sent: list[tuple[int, Message]] = []
        self.lines: list[tuple[int, Line]] = []
        self.since: dict[tuple[int, str], int] = {}
        self.policy = Policy((), "pager", EVAL_MS)
        self.specs = dict(ALERTS)

    # -- setup ----------------------------------------------------------------------

    @initialize(pager_resolved=st.booleans(), chat_resolved=st.booleans(),
                pager_wait=st.sampled_from([0, 30_000]), chat_wait=st.sampled_from([0, 30_000]),
                chat_fixes=st.booleans(), down_critical=st.booleans(),
                health_critical=st.booleans(), stall_critical=st.booleans())
    def configure(self, pager_resolved: bool, chat_resolved: bool, pager_wait: int,
                  chat_wait: int, chat_fixes: bool, down_critical: bool,
                  health_critical: bool, stall_critical: bool) -> None:
        """Receivers as users configure them: send_resolved on or off, a fix told or not;
        the inhibiting alert critical (as shipped) or a warning (a user's rules)."""
        self.specs[DOWN] = replace(self.specs[DOWN], critical=down_critical)
        self.specs[HEALTH] = replace(self.specs[HEALTH], critical=health_critical)
        self.specs[STALL] = replace(self.specs[STALL], critical=stall_critical)
        self.policy = Policy((Receiver("pager", pager_resolved, pager_wait),
                              Receiver("chat", chat_resolved, chat_wait, tells_fixes=chat_fixes),
                              Receiver("ops", pager_resolved, chat_wait)), "pager", EVAL_MS)

    # -- plumbing -------------------------------------------------------------------

    def send(self, incident: int, ev: Event) -> None:
        """One event into one incident; every message checked as it comes out."""
        before = self.notices[incident]
        out = step(before, ev, self.policy)
        self.notices[incident] = out.notice
        if before.open and not out.notice.open:
            self.check_resolution(out.notice)
        for m in out.messages:
            self.check_message(incident, m, before.open, out.notice)
            self.sent.append((incident, m))
        self.lines += [(incident, line) for line in out.lines]

    def open_on(self, target: str) -> list[Notice]:
        return [n for n in self.notices.values() if n.open and n.target == target]

    def holder(self, target: str, name: str) -> Notice | None:
        return next((n for n in self.open_on(target) if n.entry(name) is not None), None)

    def inhibitions(self, target: str) -> None:
        """deploy/examples/gpu-fleet.yaml's rule: a down target's other alerts are muted."""
        down = (target, DOWN) in self.firing
        for n in self.open_on(target):
            own = n.entry(DOWN) is not None and n.entry(DOWN).firing  # type: ignore[union-attr]
            for a in n.alerts:
                if a.name == DOWN or not a.firing:
                    continue
                if down and (a.inhibited_by is None or a.inhibited_by_own != own):
                    self.send(n.incident_id, Inhibited(self.now, a.name, DOWN, own))
                elif not down and a.inhibited_by is not None:
                    self.send(n.incident_id, Uninhibited(self.now, a.name))

    def paged(self, incident: int, receiver: str) -> bool:
        return any(i == incident and m.receiver == receiver and m.kind is Kind.PAGE
                   for i, m in self.sent)

    def told(self, incident: int, receiver: str) -> bool:
        """Paged, or told (an update) that an alert joined."""
        return any(i == incident and m.receiver == receiver
                   and m.kind in (Kind.PAGE, Kind.UPDATE) for i, m in self.sent)

    def pages(self, n: Notice, receiver: str) -> bool:
        """The spec's reading of a route's severity: a receiver is paged where the
        incident's first alert routes, or a critical alert of it; where only joined
        warnings route, it is told they joined, as an update."""
        first = self.specs[n.alerts[0].name].receivers or ("pager",)
        return receiver in first or any(
            self.specs[a.name].critical and receiver in self.specs[a.name].receivers
            for a in n.alerts)

    # -- the world ------------------------------------------------------------------

    @rule(host=st.sampled_from(TARGETS), name=st.sampled_from(NAMES), act=st.booleans())
    def fire(self, host: str, name: str, act: bool) -> None:
        """An alert fires (the rule engine reports it; again if it fired already); a new
        incident's page is held when a policy acts (`act`), as the tracker decides it."""
        target = host
        spec = self.specs[name]
        self.firing.add((target, name))
        if spec.failure:
            self.serving[target] = False
        n = place(list(self.notices.values()), target, name, spec.failure, self.now, WINDOW_MS)
        if n is None:
            n = Notice(len(self.notices) + 1, target, self.now, seen=self.seen[target])
            self.notices[n.incident_id] = n
            if act:
                self.send(n.incident_id, HoldBegun(self.now, self.now + GRACE_MS, "restart"))
                self.held[n.incident_id] = self.now + GRACE_MS
        # Muted as it fires: the evaluation's inhibitions and silences come with it.
        down = name != DOWN and (target, DOWN) in self.firing
        src = self.notices[n.incident_id].entry(DOWN)
        self.send(n.incident_id, AlertFired(
            self.now, name, spec.receivers, spec.critical, spec.failure, spec.event,
            inhibited_by=DOWN if down else None,
            inhibited_by_own=down and src is not None and src.firing,
            silence="s1" if (target, name) in self.silenced else None))
        for r in self.muted:
            self.send(n.incident_id, RouteMuted(self.now, r, "nights"))
        if spec.failure:  # the target fails: a fact of the target, told to its every incident
            for other in self.open_on(target):
                if other.incident_id != n.incident_id:
                    self.send(other.incident_id, Serving(self.now, False))
        self.inhibitions(target)

    @rule(data=st.data())
    def join(self, data: st.DataObject) -> None:
        """A failure alert the open failure incident of its target does not hold yet fires:
        it joins (drawn apart from `fire` so joins, with routes of their own, are common)."""
        live = [n for n in self.notices.values() if n.open and n.failure]
        if not live:
            return
        n = data.draw(st.sampled_from(live))
        new = [a for a in NAMES if self.specs[a].failure and n.entry(a) is None]
        if new:
            self.fire(n.target, data.draw(st.sampled_from(new)), act=False)

    @rule(host=st.sampled_from(TARGETS), name=st.sampled_from(NAMES))
    def resolve(self, host: str, name: str) -> None:
        """An alert stops firing."""
        target = host
        self.firing.discard((target, name))
        n = self.holder(target, name)
        if n is not None:
            self.send(n.incident_id, AlertResolved(self.now, name))
        self.inhibitions(target)

    @rule(host=st.sampled_from(TARGETS), up=st.booleans())
    def serve(self, host: str, up: bool) -> None:
        """The target's probe answers (or fails)."""
        target = host
        self.serving[target] = up
        for n in self.open_on(target):
            self.send(n.incident_id, Serving(self.now, up))

    @rule(dt=st.sampled_from([1_000, 5_000, 15_000, 30_000, 60_000, 150_000, 600_000]))
    def tick(self, dt: int) -> None:
        """An evaluation, dt later."""
        self.now += dt
        for i in list(self.notices):
            self.send(i, Tick(self.now))
        self.held = {i: d for i, d in self.held.items() if d > self.now}

    @rule()
    def restart(self) -> None:
        """Sentinel restarts or fails over: nothing is scraped yet."""
        for target in TARGETS:
            self.seen[target] = False
        for n in list(self.notices.values()):
            if n.open:
                self.send(n.incident_id, Restarted(self.now))

    @precondition(lambda self: not all(self.seen.values()))
    @rule(host=st.sampled_from(TARGETS), name=st.sampled_from(NAMES))
    def spurious_resolve(self, host: str, name: str) -> None:
        """The first evaluation after a start, before the first scrape: a firing alert
        looks resolved (its series is empty), though it still fires."""
        target = host
        n = self.holder(target, name)
        if not self.seen[target] and n is not None and (target, name) in self.firing:
            self.send(n.incident_id, AlertResolved(self.now, name))

    @rule(host=st.sampled_from(TARGETS))
    def first_scrape(self, host: str) -> None:
        """The first evaluation that saw the target's scrape: it reports what fires."""
        target = host
        if self.seen[target]:
            return
        self.seen[target] = True
        for n in self.open_on(target):
            for a in n.alerts:
                if (target, a.name) in self.firing:
                    self.send(n.incident_id, AlertFired(self.now, a.name, a.receivers,
                                                        a.critical, a.failure, a.event))
            self.send(n.incident_id, Seen(self.now))
            self.send(n.incident_id, Serving(self.now, self.serving[target]))

    # -- people and policies ------------------------------------------------------

    @rule(data=st.data())
    def begin_hold(self, data: st.DataObject) -> None:
        """A remediation policy acts on a new incident: its page waits."""
        fresh = [n for n in self.notices.values() if n.open and not n.told
                 and n.hold.value == "none"]
        if not fresh:
            return
        n = data.draw(st.sampled_from(fresh))
        self.send(n.incident_id, HoldBegun(self.now, self.now + GRACE_MS, "restart"))
        if self.notices[n.incident_id].hold.value == "waiting":
            self.held[n.incident_id] = self.now + GRACE_MS

    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)))
    def end_hold(self, data: st.DataObject, outcome: Outcome) -> None:
        """The action's outcome (verified, refused, failed, or timed out) is known."""
        live = [n for n in self.notices.values() if n.open]
        if not live:
            return
        n = data.draw(st.sampled_from(live))
        waiting = n.incident_id in self.held
        if outcome is Outcome.VERIFIED:
            self.serving[n.target] = True
            if waiting and not any(i == n.incident_id and m.kind is Kind.PAGE
                                   for i, m in self.sent):
                self.verified.add(n.incident_id)
        self.held.pop(n.incident_id, None)
        self.send(n.incident_id, HoldEnded(self.now, outcome, "restart on " + n.target))
        if outcome is Outcome.VERIFIED:  # the verification's probe: the target serves
            for other in self.open_on(n.target):
                self.send(other.incident_id, Serving(self.now, True))

    @rule(data=st.data())
    def runbook(self, data: st.DataObject) -> None:
        """The model's runbook is stored (before or after the page)."""
        live = [n for n in self.notices.values() if n.open]
        if live:
            self.send(data.draw(st.sampled_from(live)).incident_id, RunbookArrived(self.now))

    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        """A person acknowledges an open incident."""
        live = [n for n in self.notices.values() if n.open]
        if live:
            n = data.draw(st.sampled_from(live))
            self.acked.add(n.incident_id)
            self.send(n.incident_id, Acknowledged(self.now, "alice"))

    @rule(host=st.sampled_from(TARGETS), name=st.sampled_from(NAMES), on=st.booleans())
    def silence(self, host: str, name: str, on: bool) -> None:
        """A silence starts or ends for one alert of one target."""
        target = host
        (self.silenced.add if on else self.silenced.discard)((target, name))
        n = self.holder(target, name)
        if n is not None:
            self.send(n.incident_id, Silenced(self.now, name, "s1" if on else None))

    @rule(receiver=st.sampled_from(["pager", "chat"]), on=st.booleans())
    def mute(self, receiver: str, on: bool) -> None:
        """A receiver's route enters or leaves a mute time interval."""
        (self.muted.add if on else self.muted.discard)(receiver)
        for i in list(self.notices):
            self.send(i, RouteMuted(self.now, receiver, "nights" if on else None))

    # -- the invariants -----------------------------------------------------------

    def check_resolution(self, n: Notice) -> None:
        """No false resolve: every alert truly resolved; a failed target serves again."""
        failure = any(self.specs[a.name].failure for a in n.alerts)
        for a in n.alerts:
            if failure and self.specs[a.name].event:
                continue  # a crash counter's window does not hold a serving target open
            assert (n.target, a.name) not in self.firing, f"resolved while {a.name} fires"
        if failure:
            assert self.serving[n.target], "resolved while the target does not serve"

    def check_message(self, incident: int, m: Message, was_open: bool, n: Notice) -> None:
        """Exactly once, and nothing but endings after the end."""
        mine = [x for i, x in self.sent if i == incident]
        same = [x for x in mine if x.receiver == m.receiver and x.kind is m.kind]
        receiver = self.policy.receiver(m.receiver)
        if m.kind is Kind.PAGE:
            assert not same, f"second page to {m.receiver}"
            assert not any(x.kind is Kind.FIXED for x in mine), "a page after a fixed notice"
            assert was_open and n.open
        elif m.kind is Kind.UPDATE:
            assert self.told(incident, m.receiver) or (
                m.why.endswith("joined") and not self.pages(n, m.receiver)), \
                "an update with no page before it, and not a warning that joined"
            assert was_open, "an update after the end"
        elif m.kind is Kind.RESOLVED:
            assert not same, "second resolved"
            assert receiver.send_resolved
            assert self.told(incident, m.receiver), "resolved, never told it fired"
            assert not n.open
        else:
            assert m.kind is Kind.FIXED
            assert not same, "second fixed notice"
            assert receiver.tells_fixes
            assert not any(x.kind in (Kind.PAGE, Kind.UPDATE) for x in mine), \
                "fixed notice after a page"
            assert not n.open

    @invariant()
    def never_silent(self) -> None:
        """An open incident tellable to a receiver for group_wait + one evaluation told it:
        every route of its alerts, a joined alert's own routes too (joining may turn a page
        into an update, never into silence), and a route of a critical alert is paged."""
        for n in self.notices.values():
            for r in self.receivers_of(n):
                key = (n.incident_id, r)
                if not (n.open and self.tellable(n, r)):
                    self.since.pop(key, None)
                    continue
                start = self.since.setdefault(key, self.now)
                wait = self.policy.receiver(r).group_wait_ms
                if self.now >= start + wait + EVAL_MS:
                    assert self.told(n.incident_id, r), \
                        f"incident {n.incident_id} silent to {r} since {start}: {n}"
                    assert self.paged(n.incident_id, r) or not self.pages(n, r), \
                        f"incident {n.incident_id}: {r} routes a critical alert, not paged: {n}"

    @invariant()
    def ends_when_over(self) -> None:
        """The other half of "it ends when the failure ends": once every alert of it resolved
        (a crash counter aside) and its target serves, the incident is resolved."""
        for n in self.notices.values():
            if not n.open or not self.seen[n.target]:
                continue
            failure = any(self.specs[a.name].failure for a in n.alerts)
            lasting = [a for a in n.alerts if not (failure and self.specs[a.name].event)]
            if any((n.target, a.name) in self.firing for a in lasting):
                continue
            assert failure and not self.serving[n.target], f"over but open: {n}"

    @invariant()
    def fixed_once(self) -> None:
        """A fixed incident nobody was paged for is told once, where fixes are told."""
        for i in self.verified:
            n = self.notices[i]
            if n.open or any(j == i and m.kind in (Kind.PAGE, Kind.UPDATE)
                             for j, m in self.sent):
                continue
            fixed = [m for j, m in self.sent if j == i and m.kind is Kind.FIXED]
            if any(r.tells_fixes for r in self.policy.receivers):
                if "chat" not in self.muted:
                    assert len(fixed) == 1, f"fixed incident {i} told {len(fixed)} times"
            else:
                assert any(j == i and line.reason is Reason.FIXED_TIMELINE_ONLY
                           for j, line in self.lines)

    def receivers_of(self, n: Notice) -> list[str]:
        out = sorted({r for a in n.alerts for r in self.specs[a.name].receivers})
        return out or ["pager"]

    def tellable(self, n: Notice, receiver: str) -> bool:
        """The spec's own reading of "not held, acknowledged, silenced or covered"."""
        if n.incident_id in self.held or n.incident_id in self.acked or receiver in self.muted:
            return False
        firing = [a for a in n.alerts if a.firing]
        if firing and all(a.silence is not None for a in firing):
            return False
        critical = any(self.specs[a.name].critical for a in n.alerts)
        return not (firing and not critical
                    and all(a.inhibited_by and not a.inhibited_by_own for a in firing))


TestNotice = NoticeMachine.TestCase
TestNotice.settings = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                               suppress_health_check=[HealthCheck.too_slow])
