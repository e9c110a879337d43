"""The notification core: what people are told about an incident, decided in one place.

Incident events in (`types.py`), messages and timeline lines out (`core.step`),
no I/O inside; `placing.place` says which incident an alert belongs to. Its
small decisions (`rules.py`: muting, inhibition, a joined alert's routes, how an
act-first hold ends, whether a group flush sends) and its rule of resolution
(`over`, through incidents/ending.py) are the functions the daemon calls.
tests/test_notice_properties.py drives `step` through random interleavings and
checks its three invariants (never silent, no false resolve, exactly once).
The daemon does not keep a `Notice` per incident: its state is the database's
rows (groups, holds, intents), and only the decisions above are shared.
"""

from sentinel.incidents.notice.core import (
    covered,
    first_kind,
    over,
    page_due_ms,
    receivers,
    silenced,
    step,
)
from sentinel.incidents.notice.placing import place
from sentinel.incidents.notice.rules import (
    fixed_to,
    group_flush,
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
    "HoldEnded", "Inhibited", "Kind", "Line", "Message", "Notice", "Outcome", "Policy", "Reason",
    "Receiver", "Restarted", "RouteMuted", "RunbookArrived", "Seen", "Serving", "Silenced", "Step",
    "Tick", "Uninhibited", "covered", "first_kind", "fixed_to", "group_flush", "hold_begins",
    "hold_ends", "inhibition", "joined_route", "mute", "muted", "over", "page_due_ms", "place",
    "receivers", "resolved_to", "runbook_update", "silenced",
    "step"
]
