"""A fleet-wide failure is one incident: the decisions, as pure functions (issue 49).

Fleets fail together: a bad image rolled to every server, a model config that
overflows the KV cache everywhere, a network partition. Opened per target, that
day is a thousand incidents and a thousand pages. Here, per alert name and
label group (`FleetPolicy.group_by`; none: the whole fleet is one group):

- **Opening.** When the alert is active (pending or firing) on at least
  `threshold(policy, size)` targets of the group (`min_targets`, or `min_fraction`
  of a label group's targets, whichever is smaller) that went active within
  `window_ms` of now, and fires on at least one of them, ONE fleet incident
  opens (`Reason.OPENED`): every target it fires on is a member, and one page
  says what and how many. Counting pending targets too matters: a fleet that
  flips at one instant fires over one or two evaluations (its scrapes are spread
  over an interval), and the first few firings must not page on their own.
- **Joining.** While it is open, every target the alert fires on in the group
  joins it (`JOINED`): each keeps its own per-target incident and rows (the
  history per target still answers), but those incidents page nothing of their own.
- **Updates, not pages.** A change in the count is told as an update, no sooner
  than `interval_ms` (the route's `group_interval`) after the last message
  (`UPDATED`; `WAITING` while the interval runs).
- **Resolving.** It resolves when the last member recovers (`RESOLVED`), never
  before; the count going down on the way is updates.

`step` is the whole rule: a `FleetState` and one evaluation's `Observation` in,
the new state, a `Reason` and at most one `Message` out; no clock, no database.
`remediation` is the guard the remediation stage asks: a target of an open fleet
incident is not acted on by itself (restarting every server is not a fix for a
bad rollout). `incidents/fleet_page.py` says it on the page, `incidents/fleet_hook.py`
does the I/O around it;
tests/test_fleet_properties.py checks the invariants over random interleavings.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

# The fraction rule alone never makes a handful of targets a fleet: 20 % of a group of 5
# is one target, and one target failing is that target's incident.
FRACTION_FLOOR = 3


@dataclass(frozen=True, slots=True)
class FleetPolicy:
    """The configuration the decisions use (config `fleet:`; defaults in docs)."""

    enabled: bool = True
    # Fleet-wide when at least this many targets of a group...
    min_targets: int = 10
    # ...or at least this fraction of the group's targets (and FRACTION_FLOOR of them)...
    min_fraction: float = 0.2
    # ...went active within this window.
    window_ms: int = 5 * 60_000
    group_by: tuple[str, ...] = ()
    # Targets named on the page (the rest are counted).
    list_limit: int = 20


def threshold(policy: FleetPolicy, size: int) -> int:
    """How many targets of a group of `size` make a fleet-wide failure (the smaller rule).

    The fraction is of a label group (`group_by`: a pool, a zone); for the whole fleet
    `min_targets` alone decides, so a small fleet's servers keep their own pages.
    """
    if not policy.group_by or size <= 0:  # the whole fleet, or a group of unknown size
        return policy.min_targets
    by_fraction = max(FRACTION_FLOOR, math.ceil(policy.min_fraction * size))
    return min(policy.min_targets, by_fraction)


class Reason(enum.StrEnum):
    """What one evaluation did to a fleet group (timeline data and metric label)."""

    QUIET = "quiet"  # nothing fires in the group
    BELOW = "below threshold"  # not fleet-wide: per-target incidents as usual
    OPENED = "opened"  # the threshold was crossed: one fleet incident, one page
    JOINED = "joined"  # targets joined the open fleet incident (nothing sent)
    LEFT = "left"  # members recovered, others still fire (nothing sent yet)
    WAITING = "waiting"  # the count changed; the route's group_interval has not passed
    UPDATED = "updated"  # the count changed: an update to the page
    HOLDING = "holding"  # open and unchanged
    RESOLVED = "resolved"  # the last member recovered


class Kind(enum.StrEnum):
    """What a fleet message to people is."""

    PAGE = "page"
    UPDATE = "update"
    RESOLVED = "resolved"


class Guard(enum.StrEnum):
    """Whether remediation may act on one target's alert (the remediation guard's reason)."""

    ALLOWED = "allowed"
    FLEET_WIDE = "fleet_wide"


FLEET_WIDE_WHY = ("fleet-wide failure: not remediated target by target (restarting every "
                  "server is not a fix for a bad rollout)")


@dataclass(frozen=True, slots=True)
class Observation:
    """One evaluation of one alert name in one group.

    `fired`/`resolved`: targets whose alert fired / resolved in this evaluation (a
    resolution is applied first: resolved and fired again is firing). `active`: every
    target the alert is pending or firing on now, with when it went active.
    `size`: how many targets the group has (0: unknown). `interval_ms`: the least time
    between two messages (the route's group_interval).
    """

    at_ms: int
    fired: frozenset[str] = frozenset()
    resolved: frozenset[str] = frozenset()
    active: Mapping[str, int] = field(default_factory=dict)
    size: int = 0
    interval_ms: int = 0


@dataclass(frozen=True, slots=True)
class FleetState:
    """One (alert name, group): what fires, and the fleet incident if one is open."""

    firing: frozenset[str] = frozenset()  # targets the alert fires on now
    open: bool = False
    opened: int = 0  # fleet incidents opened so far (the open one is the last)
    members: frozenset[str] = frozenset()  # every target that joined the open incident
    told_count: int = 0  # the count the last message said
    told_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class Message:
    """One message about the fleet incident: what fires, on how many of how many."""

    at_ms: int
    kind: Kind
    count: int
    size: int


@dataclass(frozen=True, slots=True)
class Step:
    """What one evaluation did."""

    state: FleetState
    reason: Reason
    message: Message | None = None
    joined: frozenset[str] = frozenset()  # targets that became members in this step


def step(st: FleetState, ob: Observation, policy: FleetPolicy) -> Step:
    """Apply one evaluation to the group; what to send (at most one message)."""
    firing = (st.firing - ob.resolved) | ob.fired
    if not st.open:
        return _closed(replace(st, firing=firing), ob, policy)
    st = replace(st, firing=firing)
    joined = firing - st.members
    st = replace(st, members=st.members | firing)
    if not firing:
        return Step(replace(st, open=False, members=frozenset(), told_count=0,
                            told_at_ms=ob.at_ms), Reason.RESOLVED,
                    Message(ob.at_ms, Kind.RESOLVED, 0, ob.size), joined)
    if len(firing) == st.told_count:
        return Step(st, Reason.JOINED if joined else Reason.HOLDING, None, joined)
    if ob.at_ms < st.told_at_ms + ob.interval_ms:
        reason = Reason.JOINED if joined else (
            Reason.LEFT if len(firing) < st.told_count else Reason.WAITING)
        return Step(st, reason, None, joined)
    st = replace(st, told_count=len(firing), told_at_ms=ob.at_ms)
    return Step(st, Reason.UPDATED, Message(ob.at_ms, Kind.UPDATE, len(firing), ob.size),
                joined)


def _closed(st: FleetState, ob: Observation, policy: FleetPolicy) -> Step:
    if not st.firing:
        return Step(st, Reason.QUIET)
    if not policy.enabled or not fleet_wide(ob, policy, st.firing):
        return Step(st, Reason.BELOW)
    st = replace(st, open=True, opened=st.opened + 1, members=st.firing,
                 told_count=len(st.firing), told_at_ms=ob.at_ms)
    return Step(st, Reason.OPENED, Message(ob.at_ms, Kind.PAGE, len(st.firing), ob.size),
                st.firing)


def fleet_wide(ob: Observation, policy: FleetPolicy, firing: frozenset[str]) -> bool:
    """Whether enough targets of the group went active within the window."""
    since = ob.at_ms - policy.window_ms
    recent = sum(1 for t, at in ob.active.items() if at >= since)
    # A target that fires but is not in `active` (reported only as it fired) counts too.
    recent += sum(1 for t in firing if t not in ob.active)
    return recent >= threshold(policy, ob.size)


def remediation(st: FleetState | None, target: str) -> Guard:
    """The remediation guard: a member of an open fleet incident is not acted on alone."""
    if st is not None and st.open and target in st.members:
        return Guard.FLEET_WIDE
    return Guard.ALLOWED
