"""Timeline lines of a group flush: who was not told, and why (and when that ended).

Written where the dispatcher decides (flush.py): an alert muted by a silence or
an inhibition, notified though an inhibition matched (the notice core's rule),
a route in a mute time interval. api/told.py reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.models import TimelineEvent, TimelineKind
from sentinel.respond.notify.mute import MuteReason


def note_mute(s: Session, incident_id: int, receiver: str, fp: str, reason: MuteReason | None,
               now_ms: int) -> None:
    """The alert became muted for the receiver (with the reason), or no longer is."""
    if not incident_id:
        return
    data: dict[str, Any]
    if reason is None:
        message, data = f"{receiver}: no longer muted", {"muted": None}
    else:
        message = f"{receiver}: not notified, {reason.text}"
        data = {"muted": reason.text, "silence_id": reason.silence_id,
                "inhibited_by": reason.inhibited_by}
    s.add(TimelineEvent(incident_id=incident_id, at=ms_to_dt(now_ms), kind=TimelineKind.NOTE,
                        message=message, data={**data, "receiver": receiver, "fingerprint": fp}))


def note(s: Session, incident_id: int, receiver: str, fp: str, now_ms: int, message: str,
          data: dict[str, Any]) -> None:
    """One line about one receiver and one alert of the incident."""
    if incident_id:
        s.add(TimelineEvent(incident_id=incident_id, at=ms_to_dt(now_ms), kind=TimelineKind.NOTE,
                            message=message,
                            data={**data, "receiver": receiver, "fingerprint": fp}))


def note_route_muted(s: Session, receiver: str, alerts: Mapping[str, dict[str, Any]],
                      muted: str | None, now_ms: int) -> None:
    """Who was not told because the route is in a mute time interval (once per window per
    alert), and when the window ended (issue 48: a muted route left no line)."""
    for fp, entry in sorted(alerts.items()):
        if entry.get("route_muted") == muted:
            continue
        entry["route_muted"] = muted
        if muted is not None:
            note(s, entry["incident_id"], receiver, fp, now_ms,
                  f"{receiver}: not notified yet, {muted}", {"route_muted": muted})
        else:
            note(s, entry["incident_id"], receiver, fp, now_ms,
                  f"{receiver}: its mute time interval is over", {"route_muted": None})
