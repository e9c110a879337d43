"""The fleet decisions (sentinel/incidents/fleet.py): one row per reason, and a property
test over random interleavings of per-target alerts firing and resolving."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel.incidents import fleet, fleet_page
from sentinel.incidents.fleet import (
    FleetPolicy,
    FleetState,
    Guard,
    Kind,
    Observation,
    Reason,
    step,
    threshold,
)

P = FleetPolicy(min_targets=10, min_fraction=0.2, window_ms=300_000)
T0 = 1_000_000_000


def names(n: int, start: int = 0) -> frozenset[str]:
    return frozenset(f"t{i}" for i in range(start, start + n))


def ob(at: int, fired: frozenset[str] = frozenset(), resolved: frozenset[str] = frozenset(),
       pending: frozenset[str] = frozenset(), size: int = 100, interval: int = 60_000,
       active_at: int | None = None) -> Observation:
    since = at if active_at is None else active_at
    return Observation(at, fired, resolved, dict.fromkeys(fired | pending, since), size,
                       interval)


@pytest.mark.parametrize(("size", "expected"), [
    (0, 10),  # unknown group size: the minimum alone
    (5, 3),  # 20 % of 5 is 1, but never fewer than FRACTION_FLOOR
    (20, 4),  # 20 % of 20
    (100, 10),  # 20 % would be 20: the minimum is smaller
])
def test_threshold_is_the_smaller_rule_in_a_label_group(size: int, expected: int) -> None:
    assert threshold(replace(P, group_by=("pool",)), size) == expected


def test_the_whole_fleet_counts_by_the_minimum_alone() -> None:
    assert threshold(P, 5) == threshold(P, 20) == 10


def test_each_reason() -> None:
    assert step(FleetState(), ob(T0), P).reason is Reason.QUIET
    few = step(FleetState(), ob(T0, names(3)), P)
    assert few.reason is Reason.BELOW and few.message is None
    # Old failures do not make a fleet with a new one: the window counts.
    stale = step(FleetState(), ob(T0, names(12), active_at=T0 - 600_000), P)
    assert stale.reason is Reason.BELOW
    opened = step(FleetState(), ob(T0, names(2), pending=names(10, 2)), P)
    assert opened.reason is Reason.OPENED and opened.message is not None
    assert (opened.message.kind, opened.message.count) == (Kind.PAGE, 2)
    joined = step(opened.state, ob(T0 + 5_000, names(10, 2)), P)
    assert joined.reason is Reason.JOINED and joined.message is None
    assert joined.joined == names(10, 2)
    waiting = step(joined.state, ob(T0 + 10_000, names(1, 12)), P)
    assert waiting.reason is Reason.JOINED  # the count moves; the interval has not passed
    steady = step(waiting.state, ob(T0 + 20_000), P)
    assert steady.reason is Reason.WAITING
    updated = step(steady.state, ob(T0 + 70_000), P)
    assert updated.reason is Reason.UPDATED and updated.message is not None
    assert (updated.message.kind, updated.message.count) == (Kind.UPDATE, 13)
    left = step(updated.state, ob(T0 + 80_000, resolved=names(3)), P)
    assert left.reason is Reason.LEFT
    holding = step(updated.state, ob(T0 + 80_000), P)
    assert holding.reason is Reason.HOLDING
    done = step(left.state, ob(T0 + 90_000, resolved=names(13)), P)
    assert done.reason is Reason.RESOLVED and done.message is not None
    assert done.message.kind is Kind.RESOLVED and not done.state.open
    off = step(FleetState(), ob(T0, names(50)), FleetPolicy(enabled=False))
    assert off.reason is Reason.BELOW


def test_the_remediation_guard() -> None:
    opened = step(FleetState(), ob(T0, names(12)), P).state
    assert fleet.remediation(opened, "t3") is Guard.FLEET_WIDE
    assert fleet.remediation(opened, "elsewhere") is Guard.ALLOWED
    assert fleet.remediation(None, "t3") is Guard.ALLOWED
    assert fleet.remediation(step(FleetState(), ob(T0, names(3)), P).state,
                             "t1") is Guard.ALLOWED


def test_the_page_says_what_and_how_many() -> None:
    assert fleet_page.headline("KV cache over 85 %", 4812, 5000, "") == \
        "KV cache over 85 % on 4,812 of 5,000 targets"
    members = {f"a{i}": {"pool": "a100"} for i in range(3)} | {"h": {"pool": "h100"}}
    assert fleet_page.breakdown(members, ("pool",)) == "pool=a100: 3, pool=h100: 1"
    assert fleet_page.listing({f"t{i}" for i in range(5)}, 2) == "t0, t1, and 3 more"


# -- the property ----------------------------------------------------------------------

TARGETS = [f"t{i}" for i in range(14)]
events = st.lists(st.tuples(st.sampled_from(["fire", "resolve", "pend", "tick"]),
                            st.lists(st.sampled_from(TARGETS), max_size=14, unique=True),
                            st.integers(1_000, 400_000)),
                  max_size=40)


@given(events, st.sampled_from([0, 14, 40]), st.sampled_from([0, 60_000, 300_000]))
@settings(max_examples=300, deadline=None)
def test_one_incident_never_silent_one_page_resolves_only_when_all_recovered(
        timeline: list[tuple[str, list[str], int]], size: int, interval: int) -> None:
    """Any interleaving of targets firing, resolving and going pending, evaluated as it
    goes: at most one open fleet incident (per alert and group: one state here), paged
    exactly once when it opens (never silent), updated only after the interval, and
    resolved exactly when its last member recovered, not before."""
    policy = FleetPolicy(min_targets=5, min_fraction=0.2, window_ms=120_000)
    state, now = FleetState(), T0
    firing: set[str] = set()
    active: dict[str, int] = {}
    pages = updates = resolves = 0
    last_told = None
    for kind, targets, gap in timeline:
        now += gap
        fired = resolved = frozenset[str]()
        if kind == "fire":
            fired = frozenset(targets)
            firing |= fired
            for t in fired:
                active.setdefault(t, now)
        elif kind == "resolve":
            resolved = frozenset(t for t in targets if t in firing)
            firing -= resolved
            for t in resolved:
                active.pop(t, None)
        elif kind == "pend":
            for t in targets:
                active.setdefault(t, now)
        was_open = state.open
        res = step(state, Observation(now, fired, resolved, dict(active), size, interval),
                   policy)
        state = res.state
        assert state.firing == firing  # the decisions see exactly what fires
        kinds = [res.message.kind] if res.message else []
        if not was_open and state.open:
            assert kinds == [Kind.PAGE]  # never silent: the opening pages, at once
            pages += 1
            last_told = now
        elif was_open and not state.open:
            assert kinds == [Kind.RESOLVED] and not firing  # only when every member recovered
            resolves += 1
        else:
            assert Kind.PAGE not in kinds and Kind.RESOLVED not in kinds
        if was_open and state.open:
            assert firing  # open means some member still fires
            if kinds == [Kind.UPDATE]:
                assert last_told is not None and now - last_told >= interval
                updates += 1
                last_told = now
        if state.open:
            assert firing <= state.members
        # One open incident at a time: pages and resolves alternate.
        assert pages - resolves == (1 if state.open else 0)
    assert state.opened == pages
