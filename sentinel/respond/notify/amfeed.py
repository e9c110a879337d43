"""What an Alertmanager receiver is told, decided at each flush of its group (pure).

Prometheus's notifier feeds Alertmanager every alert state change at the
evaluation that makes it; Alertmanager does the grouping and waiting. So a
group whose receiver is an Alertmanager ("direct") has no group_wait and no
group_interval of Sentinel's (the dispatcher flushes it in the run that took the
change in), and its flush makes no outbox message: it records in each entry what
Alertmanager is to hold now (`pushed`, the alert as of that flush), and the
resender (amresend.py) posts it, changes at once, everything every resend
interval. Issue 48: a new alert waited Sentinel's group_wait before it reached
Alertmanager.

- A firing alert muted by nothing is pushed as it is now.
- A resolved alert is pushed with its end if Alertmanager was told it fired
  (otherwise it never heard of it: the entry is dropped), and is kept (re-sent
  with its end) for `RESOLVED_RETENTION_MS`, as Prometheus keeps resolved
  alerts for 15 minutes, so a post lost in an outage is made good.
- A silenced or inhibited alert is not pushed again while muted (Alertmanager
  lets it expire at its endsAt); its resolve still goes.
- While the route is in a mute time interval, nothing changes: what was pushed
  stays pushed and the change waits for the window's end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RESOLVED_RETENTION_MS = 15 * 60_000  # Prometheus's resolvedRetention

Entry = dict[str, Any]


def push(entries: Mapping[str, Entry], route_open: bool, now_ms: int
         ) -> tuple[dict[str, Entry], int]:
    """The group's entries after a flush (each with what Alertmanager is to hold now),
    and how many pushed states changed (the resender posts them at once)."""
    out: dict[str, Entry] = {}
    changed = 0
    for fp, entry in entries.items():
        entry = dict(entry)
        alert, pushed = entry["alert"], entry.get("pushed")
        if route_open and alert != pushed:
            if alert["state"] == "firing":
                if not entry.get("muted"):
                    entry["pushed"], changed = alert, changed + 1
            elif pushed is not None and pushed["state"] == "firing":
                entry["pushed"], changed = alert, changed + 1  # its end, muted or not
        if _kept(entry, now_ms):
            out[fp] = entry
    return out, changed


def told(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """The alert to post for the entry now (None: nothing): what was pushed, unless it
    fires and is muted since."""
    pushed = entry.get("pushed")
    if pushed is None or (pushed["state"] == "firing" and entry.get("muted")):
        return None
    return dict(pushed)


def _kept(entry: Mapping[str, Any], now_ms: int) -> bool:
    """Whether the entry stays in the group: it fires, waits to be pushed (a mute window),
    or its pushed end is younger than the retention."""
    alert, pushed = entry["alert"], entry.get("pushed")
    if alert["state"] == "firing":
        return True
    if pushed is None:
        return False  # resolved before Alertmanager was told it fired
    if pushed["state"] == "firing":
        return True  # its end is still to be pushed (the route is muted)
    ended = pushed.get("resolved_at_ms") or 0
    return now_ms - ended < RESOLVED_RETENTION_MS
