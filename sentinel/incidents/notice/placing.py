"""Which incident an alert belongs to: one incident per failure (pure; joining.py's rule).

A firing alert belongs to the open incident that already holds it; else a
failure alert (crash, down, health, stall, start-up) joins the target's open
failure incident opened within the join window; else it opens its own. The
`target` is one server today; a fleet incident (one alert on many targets) is a
Notice whose target names the fleet, placed by the same question.
"""

from __future__ import annotations

from collections.abc import Sequence

from sentinel.incidents.notice.types import Notice


def place(open_incidents: Sequence[Notice], target: str, name: str, failure: bool,
          now_ms: int, window_ms: int) -> Notice | None:
    """The open incident the alert goes to, or None: it opens one of its own."""
    mine = [n for n in open_incidents if n.open and n.target == target]
    for n in mine:
        if n.entry(name) is not None:
            return n
    if not failure or not target:
        return None
    joinable = [n for n in mine if n.failure and n.opened_at_ms >= now_ms - window_ms]
    return min(joinable, key=lambda n: (n.opened_at_ms, n.incident_id), default=None)
