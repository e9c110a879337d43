"""What a notification adds from an incident's runbook: annotations `summary` and `runbook`.

The newest validated model runbook wins; otherwise the signature's static
runbook (from a RUNBOOK event or the log excerpt itself) fills `runbook`
and the rule's own `summary` stays. An unvalidated model answer is never
sent on: it went to no schema, so it stays on the timeline only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy.orm import Session

from sentinel.incidents.db import Database
from sentinel.incidents.runbook_text import runbook_lines
from sentinel.model import Notification, labels_of
from sentinel.respond.diagnose.records import runbook_events, session_runbook_events

MAX_ANNOTATION = 4000


def runbook_annotations(db: Database, incident_id: int) -> dict[str, str]:
    """The annotations to add to an incident's notifications; empty when it has no runbook."""
    return _from_events(runbook_events(db, incident_id))


def session_runbook_annotations(s: Session, incident_id: int) -> dict[str, str]:
    """`runbook_annotations` inside the caller's transaction (the notify dispatcher's)."""
    return _from_events(session_runbook_events(s, incident_id))


def _from_events(events: list[dict[str, Any]]) -> dict[str, str]:
    model = [d for d in events if d.get("source") == "model" and d.get("validated")
             and isinstance(d.get("runbook"), dict)]
    if model:
        data = model[-1]
        return {"summary": str(data["runbook"].get("summary", ""))[:MAX_ANNOTATION],
                "runbook": "\n".join(runbook_lines(data))[:MAX_ANNOTATION]}
    static = [d for d in events if d.get("source") == "static" and d.get("text")]
    if static:
        return {"runbook": str(static[-1]["text"]).strip()[:MAX_ANNOTATION]}
    return {}


def annotate(notification: Notification, extra: dict[str, str]) -> Notification:
    """The notification with `extra` set on every alert's annotations."""
    if not extra:
        return notification
    alerts = tuple(dataclasses.replace(a, annotations=labels_of({**dict(a.annotations), **extra}))
                   for a in notification.alerts)
    return dataclasses.replace(notification, alerts=alerts)
