"""One death, one event across a target's streams: a structural record joins the log's event.

The classifier keeps one crash one event within a stream (`deaths.py`): a
record of the death right after the crash's event is that crash's death.
Some records come on a stream of their own: Kubernetes' view of a container
that ended (`collect/pod_deaths.py`) knows nothing of the server's output,
which Sentinel reads elsewhere (a file, Docker, journald, Cloud Logging). The
same death then reaches Sentinel twice, once by the server's words (which
name the cause) and once by the kubelet's record (which names only the
death), in either order. This decides, per target, which of the two stands:

- a record within `WINDOW_MS` after a crash event of another stream of the
  target is that crash's death: dropped (`Reason.SAME_DEATH`);
- a record with no such event is held for `HOLD_MS`: a crash event of
  another stream in that time is its cause, and the record is dropped
  (`Reason.CAUSE_FOLLOWED`); otherwise it is released as an event of its own
  (`Reason.NO_CAUSE`): a death that no line names still opens an event, late
  by at most `HOLD_MS`.

Times are Sentinel's clock at the poll that produced each event (the
kubelet's record carries the time its watch saw it, a log line its own stamp:
the two clocks are not comparable). Only crash events count as causes (a
refused request, a warning, is no death). Pure: events and `now_ms` in,
events and reasons out; LogWatch does the I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from sentinel.logs.deaths import DEDUPE_MS
from sentinel.model import LogEvent

WINDOW_MS = DEDUPE_MS  # a record this long after a crash event of the target is its death
HOLD_MS = 5_000  # a record waits this long for the crash event it may follow
CRASH_SEVERITIES = ("critical", "error")


class Reason(enum.Enum):
    """What became of a structural record."""

    SAME_DEATH = "same_death"  # it followed a crash event of the target: dropped
    CAUSE_FOLLOWED = "cause_followed"  # a crash event came while it was held: dropped
    NO_CAUSE = "no_cause"  # none came: released as an event of its own


@dataclass(slots=True)
class _Target:
    last_crash_ms: int | None = None  # when the last crash event of a log stream came
    held: list[tuple[int, LogEvent]] = field(default_factory=list)  # (until, record)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The events to record now, and what became of each structural record decided now."""

    events: list[LogEvent]
    decided: list[tuple[LogEvent, Reason]]


class DeathJoin:
    """Per target: structural records joined to the crash events of the target's log streams."""

    def __init__(self, window_ms: int = WINDOW_MS, hold_ms: int = HOLD_MS) -> None:
        self.window_ms = window_ms
        self.hold_ms = hold_ms
        self._targets: dict[str, _Target] = {}

    def admit(self, target: str, events: list[LogEvent], structural: bool,
              now_ms: int) -> Outcome:
        """Events a poll of one of `target`'s streams produced at `now_ms`.

        `structural`: the stream carries only records of deaths. Returns what
        to record now: a log stream's events at once (and the held records
        they answered are dropped), a structural stream's records once
        decided, and every held record of the target whose time ran out.
        """
        state = self._targets.setdefault(target, _Target())
        released = self.due(target, now_ms)  # their hold ran out before this poll
        decided: list[tuple[LogEvent, Reason]] = list(released)
        out: list[LogEvent] = [e for e, _ in released]
        if structural:
            for event in events:
                if state.last_crash_ms is not None \
                        and now_ms - state.last_crash_ms <= self.window_ms:
                    decided.append((event, Reason.SAME_DEATH))
                else:
                    state.held.append((now_ms + self.hold_ms, event))
        else:
            out += events
            if any(e.severity in CRASH_SEVERITIES for e in events):
                state.last_crash_ms = now_ms
                decided += [(e, Reason.CAUSE_FOLLOWED) for _, e in state.held]
                state.held = []
        return Outcome(out, decided)

    def due(self, target: str, now_ms: int) -> list[tuple[LogEvent, Reason]]:
        """Held records of `target` whose hold ran out before `now_ms`, released (oldest first).

        A crash event at the hold's last millisecond still drops the record.
        """
        state = self._targets.get(target)
        if state is None or not state.held:
            return []
        ripe = [e for until, e in state.held if until < now_ms]
        state.held = [(until, e) for until, e in state.held if until >= now_ms]
        return [(e, Reason.NO_CAUSE) for e in ripe]

    def held(self, target: str) -> int:
        """How many records of `target` wait for a cause."""
        state = self._targets.get(target)
        return 0 if state is None else len(state.held)
