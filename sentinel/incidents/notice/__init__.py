"""The notification core: what people are told about an incident, decided in one place.

Incident events in (`types.py`), messages and timeline lines out (`core.step`),
no I/O inside; `placing.place` says which incident an alert belongs to. The
daemon keeps each incident's `Notice` in the database and sends what `step`
returns; tests/test_notice_properties.py drives it through random interleavings
and checks its three invariants (never silent, no false resolve, exactly once).
"""

from sentinel.incidents.notice.core import (
    covered,
    first_kind,
    inhibition,
    joined_route,
    over,
    page_due_ms,
    receivers,
    silenced,
    step,
)
from sentinel.incidents.notice.placing import place
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
    Receiver,
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

__all__ = [
    "Acknowledged", "AlertEntry", "AlertFired", "AlertResolved", "Event", "Hold", "HoldBegun",
    "HoldEnded", "Inhibited", "Kind", "Line", "Message", "Notice", "Outcome", "Policy",
    "Reason", "Receiver", "Restarted", "RouteMuted", "RunbookArrived", "Seen", "Serving",
    "Silenced", "Step", "Tick", "Uninhibited", "covered", "first_kind", "inhibition",
    "joined_route", "over", "page_due_ms", "place", "receivers", "silenced", "step",
]
