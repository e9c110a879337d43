"""The notification core's data: incident events in, messages and timeline lines out.

Every type is a frozen dataclass; the core (`core.py`) never reads a clock,
a database or a socket. Times are milliseconds handed in with each event.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Kind(enum.StrEnum):
    """What a message to a person is."""

    PAGE = "page"  # the incident's first message to a receiver: one per receiver
    UPDATE = "update"  # a later fact about a paged incident (joined alert, outcome, runbook)
    FIXED = "fixed"  # Sentinel fixed it before anyone was paged: a kind of its own
    RESOLVED = "resolved"  # a paged incident is over (only where send_resolved is on)


class Outcome(enum.StrEnum):
    """How an act-first hold ended."""

    VERIFIED = "verified"  # the action ran and the target was verified serving
    REFUSED = "refused"  # a guard refused the action (cold cache, cooldown, approval)
    FAILED = "failed"  # the action ran and did not hold
    TIMED_OUT = "timed out"  # no verified recovery by the hold's deadline


class Reason(enum.StrEnum):
    """Why a line says someone was or was not told (timeline data, metric label)."""

    PAGED = "paged"
    UPDATED = "updated"
    RESOLVED = "resolved"
    FIXED = "fixed"
    FIXED_TIMELINE_ONLY = "fixed, told on the timeline only"
    JOINED = "joined"
    JOINED_TOLD = "a warning joined: told as an update, not paged"
    HELD = "held while Sentinel acts"
    RELEASED = "hold released"
    SILENCED = "silenced"
    ACKNOWLEDGED = "acknowledged"
    INHIBITED = "inhibited"
    INHIBITED_CRITICAL = "inhibited, but critical: it still pages"
    INHIBITED_IN_INCIDENT = "inhibited by an alert of the same incident"
    MUTED_INTERVAL = "muted by a time interval"
    SEND_RESOLVED_OFF = "send_resolved is off"
    STILL_FAILING = "alerts resolved, but the target does not serve yet"
    NOT_SEEN_YET = "resolve deferred: the target's first scrape since start not yet seen"
    CHANGED = "something new to tell"
    REPEATED = "told again: the repeat interval passed"
    NOTHING_NEW = "nothing new to tell"


@dataclass(frozen=True, slots=True)
class Receiver:
    """A receiver as the core needs it (routing itself stays outside, Alertmanager-shaped)."""

    name: str
    send_resolved: bool = True
    group_wait_ms: int = 0
    tells_fixes: bool = False  # `notify.act_first.receiver`: where "fixed" notices go


@dataclass(frozen=True, slots=True)
class Policy:
    """The configuration the core decides with."""

    receivers: tuple[Receiver, ...]
    fallback: str  # an incident none of whose alerts routes anywhere is told here
    eval_ms: int  # one evaluation interval: the slack "never silent" allows

    def receiver(self, name: str) -> Receiver:
        """The named receiver (an unknown name: told at once, resolved sent)."""
        for r in self.receivers:
            if r.name == name:
                return r
        return Receiver(name)


# -- events ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlertFired:
    """An alert of the incident fires (its first alert opens it; later ones joined it)."""

    at_ms: int
    name: str
    receivers: tuple[str, ...]  # where its routes send it (empty: the fallback)
    critical: bool = False
    failure: bool = False  # a failure of the target: crash, down, stall, start-up
    event: bool = False  # a counter over a window (a crash line): not a condition that lasts
    # Muted as it fires (the same evaluation's inhibition and silences, decided together).
    inhibited_by: str | None = None
    inhibited_by_own: bool = False
    silence: str | None = None


@dataclass(frozen=True, slots=True)
class AlertResolved:
    """An alert of the incident stopped firing."""

    at_ms: int
    name: str


@dataclass(frozen=True, slots=True)
class Inhibited:
    """An inhibition rule mutes `name` because `by` fires (`by_own`: `by` is this incident's)."""

    at_ms: int
    name: str
    by: str
    by_own: bool = False


@dataclass(frozen=True, slots=True)
class Uninhibited:
    """The inhibition of `name` ended."""

    at_ms: int
    name: str


@dataclass(frozen=True, slots=True)
class Silenced:
    """A silence matches the alert (`silence` names it); `until_ms` None: it ended."""

    at_ms: int
    name: str
    silence: str | None


@dataclass(frozen=True, slots=True)
class RouteMuted:
    """A receiver's route is in a mute time interval (`interval`), or no longer (None)."""

    at_ms: int
    receiver: str
    interval: str | None


@dataclass(frozen=True, slots=True)
class HoldBegun:
    """A remediation policy acts: the first page waits up to `deadline_ms`."""

    at_ms: int
    deadline_ms: int
    policy: str


@dataclass(frozen=True, slots=True)
class HoldEnded:
    """The action's outcome is known (`detail`: what was tried and what the check said)."""

    at_ms: int
    outcome: Outcome
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RunbookArrived:
    """The model's runbook is stored on the incident."""

    at_ms: int


@dataclass(frozen=True, slots=True)
class Serving:
    """The target answered (or failed) its probe/scrape: is it serving? A fact of the
    target: the caller tells it to every open incident of the target (and a failure alert
    that fires on the target is Serving(False) to its other incidents)."""

    at_ms: int
    serving: bool


@dataclass(frozen=True, slots=True)
class Seen:
    """An evaluation has seen the target's first scrape since Sentinel started."""

    at_ms: int


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """A person acknowledged the incident."""

    at_ms: int
    by: str


@dataclass(frozen=True, slots=True)
class Restarted:
    """Sentinel restarted or failed over: state is what was persisted; nothing scraped yet."""

    at_ms: int


@dataclass(frozen=True, slots=True)
class Tick:
    """An evaluation at `at_ms`: deadlines (group_wait, hold) come due here."""

    at_ms: int


Event = (AlertFired | AlertResolved | Inhibited | Uninhibited | Silenced | RouteMuted
         | HoldBegun | HoldEnded | RunbookArrived | Serving | Seen | Acknowledged
         | Restarted | Tick)


# -- out --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """One message to one receiver about one incident."""

    at_ms: int
    receiver: str
    kind: Kind
    alerts: tuple[str, ...]  # the alerts shown (firing first), each under its own name
    why: str = ""  # for an update or a released page: the new fact


@dataclass(frozen=True, slots=True)
class Line:
    """A timeline line: who was told, who was not, and why."""

    at_ms: int
    reason: Reason
    text: str
    receiver: str | None = None
    told: bool = False


# -- state -------------------------------------------------------------------------------


class Hold(enum.StrEnum):
    """Where the act-first hold stands."""

    NONE = "none"
    WAITING = "waiting"
    FIXED = "fixed"
    RELEASED = "released"


@dataclass(frozen=True, slots=True)
class AlertEntry:
    """One alert of the incident, under its own name and times."""

    name: str
    firing: bool
    fired_at_ms: int
    receivers: tuple[str, ...]
    critical: bool = False
    failure: bool = False
    event: bool = False
    inhibited_by: str | None = None
    inhibited_by_own: bool = False
    silence: str | None = None
    resolve_deferred_at_ms: int | None = None  # resolved before the first scrape was seen


@dataclass(frozen=True, slots=True)
class Notice:
    """What the core knows of one incident and what it has told (persisted by the caller)."""

    incident_id: int
    target: str
    opened_at_ms: int
    alerts: tuple[AlertEntry, ...] = ()
    serving: bool | None = None  # None: not observed since the failure (or since start)
    # The target's first scrape since Sentinel started was evaluated: an incident opened
    # before that is created with seen=False (its resolves wait for the scrape too).
    seen: bool = True
    hold: Hold = Hold.NONE
    hold_deadline_ms: int = 0
    hold_why: str = ""
    unblocked_at_ms: int = 0  # when it last became tellable (hold, silence, ack, mute ended)
    acked_by: str | None = None
    runbook: bool = False
    muted: tuple[tuple[str, str], ...] = ()  # (receiver, interval) in a mute window now
    told: frozenset[tuple[str, Kind]] = field(default_factory=frozenset)
    noted: frozenset[str] = field(default_factory=frozenset)  # lines said once
    runbook_told: frozenset[str] = field(default_factory=frozenset)
    resolved_at_ms: int | None = None
    fixed_told: bool = False

    @property
    def open(self) -> bool:
        """Not resolved yet."""
        return self.resolved_at_ms is None

    @property
    def firing(self) -> tuple[AlertEntry, ...]:
        """The alerts firing now."""
        return tuple(a for a in self.alerts if a.firing)

    @property
    def failure(self) -> bool:
        """Whether it is a failure of its target (then it ends only when the target serves)."""
        return any(a.failure for a in self.alerts)

    @property
    def critical(self) -> bool:
        """Whether any of its alerts is critical."""
        return any(a.critical for a in self.alerts)

    def entry(self, name: str) -> AlertEntry | None:
        """The alert of that name, if it is the incident's."""
        return next((a for a in self.alerts if a.name == name), None)


@dataclass(frozen=True, slots=True)
class Step:
    """What one event did: the new state, the messages to send and the lines to write."""

    notice: Notice
    messages: tuple[Message, ...] = ()
    lines: tuple[Line, ...] = ()
