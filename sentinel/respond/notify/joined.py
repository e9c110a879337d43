"""A joined alert's own routes (issue 48): told where the incident's page did not go.

An alert that joins an open incident (incidents/joining.py) is written as an
intent like any other. Per route it matches, the notice core decides
(`notice.joined_route`): a receiver that holds the incident already (a group of
it holds the incident's alerts, or a message to it named the incident) gets
nothing of its own, one page per incident; any other receiver is paged if the
alert is critical, else told once, as an update, that it joined. Joining may
turn a page into an update; it never leaves a route of a firing alert silent.

"Who holds the incident" is read from the database (groups and outbox rows), so
it is what was decided, not a model of it.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.incidents import notice
from sentinel.incidents.models import Incident
from sentinel.incidents.models_notify import NotifyGroup, OutboxMessage
from sentinel.model import Alert, AlertState, label_value

# A group entry's flag: a joined warning its receiver is told of as an update, not a page.
UPDATE = "update"
IN_CHUNK = 500  # ids per IN (...) list


class JoinedRoutes:
    """One dispatcher run's view of joined alerts: which incidents' alerts joined, and who
    holds each incident (read once per incident, when a joined alert asks)."""

    def __init__(self, s: Session) -> None:
        self._s = s
        self._first: dict[int, str] = {}
        self._holders: dict[int, set[str]] = {}

    def preload(self, incident_ids: Collection[int]) -> None:
        """Read the first alert name of these incidents in one query per IN_CHUNK ids (a
        storm's intents are of thousands of incidents: not one SELECT each)."""
        ids = sorted(set(incident_ids) - {0} - set(self._first))
        for i in range(0, len(ids), IN_CHUNK):
            part = ids[i:i + IN_CHUNK]
            self._first.update(dict.fromkeys(part, ""))  # gone: as `joined` reads a missing one
            self._first.update((int(n), name) for n, name in self._s.execute(
                select(Incident.id, Incident.alertname).where(Incident.id.in_(part))))

    def joined(self, alert: Alert, incident_id: int) -> bool:
        """Whether the alert joined the incident (it is not of the incident's own name)."""
        if not incident_id:
            return False
        if incident_id not in self._first:
            incident = self._s.get(Incident, incident_id)
            self._first[incident_id] = incident.alertname if incident is not None else ""
        first = self._first[incident_id]
        return bool(first) and alert.name != first

    def decide(self, alert: Alert, incident_id: int, receiver: str) -> notice.Reason | None:
        """What the alert does on a route to `receiver`; None: it is not a joined firing."""
        if alert.state is not AlertState.FIRING or not self.joined(alert, incident_id):
            return None
        critical = label_value(alert.labels, "severity") == "critical"
        return notice.joined_route(receiver in self._held_by(incident_id), critical)

    def unheard_end(self, alert: Alert, incident_id: int, group: NotifyGroup | None) -> bool:
        """The end of a joined alert that this route's group never held: nothing to tell
        (its receiver hears the incident's end; a resolved line for an alert it was never
        told of would flush the group early, beside alerts that still fire)."""
        return (alert.state is not AlertState.FIRING and self.joined(alert, incident_id)
                and (group is None or alert.fingerprint not in group.alerts))

    def told(self, incident_id: int, receiver: str) -> None:
        """The receiver holds the incident now (an alert of it went into its group as a page
        would): kept current for the rest of the run."""
        if incident_id in self._holders:
            self._holders[incident_id].add(receiver)

    def _held_by(self, incident_id: int) -> set[str]:
        if incident_id not in self._holders:
            # What this run put in its groups and outbox counts (the dispatcher's session
            # does not autoflush): written first, then read.
            self._s.flush()
            self._holders[incident_id] = _holders(self._s, incident_id)
        return self._holders[incident_id]


def _holders(s: Session, incident_id: int) -> set[str]:
    """Receivers the incident's page reached or waits for: a group of which holds the
    incident's alerts (not only joined warnings it was told of as updates), or a page
    (firing message) to which named the incident."""
    out = {g.receiver for g in s.scalars(select(NotifyGroup))
           if any(int(e.get("incident_id", 0)) == incident_id and not e.get(UPDATE)
                  for e in g.alerts.values())}
    incident = s.get(Incident, incident_id)
    if incident is None:
        return out
    rows = s.execute(select(OutboxMessage.receiver, OutboxMessage.incident_ids,
                            OutboxMessage.notification).where(
        OutboxMessage.created_at >= incident.opened_at, OutboxMessage.kind == "firing"))
    out |= {r for r, ids, body in rows
            if incident_id in (ids or []) and (body or {}).get("kind") == "firing"}
    return out
