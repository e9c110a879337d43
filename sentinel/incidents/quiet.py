"""Which alert groups an evaluation leaves as they are, found without loading their incidents.

Every evaluation hands the incident stage every firing alert again. With an
alert firing on each of 5,000 targets, loading each one's open incident and
rows as ORM objects to find that nothing changed was 0.7 of the 0.9 CPU-s an
evaluation took (issue 49). Here one Core read of the targets' open incidents
(a tuple per row, no objects) answers, per key, whether the tracker would do
anything: a key is quiet when all its alerts fire and each sits FIRING in one
open incident of its target (its own, or the one it joined) with nothing to
record (`IncidentTracker._settled`: not a new occurrence, announced, no value
event due). Quiet keys are skipped; the rest are loaded and processed as before,
so the decisions are the same, read afresh from the database every evaluation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.incidents.keys import GroupKey
from sentinel.incidents.models import Incident, IncidentAlert, IncidentStatus
from sentinel.model import Alert, AlertState

CHUNK = 500


class RowFacts(NamedTuple):
    """What the tracker reads of an incident's alert row to decide whether it changes."""

    incident_id: int
    group_key: str
    fingerprint: str
    state: str
    fired_at: datetime
    value: float | None
    value_recorded_at: datetime | None
    notified_firing_at: datetime | None


def open_rows(s: Session, targets: Iterable[str]) -> dict[str, dict[str, list[RowFacts]]]:
    """The rows of the targets' open incidents, by target and fingerprint."""
    names = sorted(set(targets))
    out: dict[str, dict[str, list[RowFacts]]] = defaultdict(lambda: defaultdict(list))
    conn = s.connection()  # Core rows: the ORM's result machinery costs more than the read
    for i in range(0, len(names), CHUNK):
        for row in conn.execute(select(
                Incident.target, Incident.id, Incident.group_key, IncidentAlert.fingerprint,
                IncidentAlert.state, IncidentAlert.fired_at, IncidentAlert.value,
                IncidentAlert.value_recorded_at, IncidentAlert.notified_firing_at)
                .join(IncidentAlert).where(Incident.status == IncidentStatus.OPEN.value,
                                           Incident.target.in_(names[i:i + CHUNK]))):
            out[row[0]][row[3]].append(RowFacts(*row[1:]))
    return out


def quiet_keys(s: Session, groups: Mapping[GroupKey, Sequence[Alert]],
               settled: Callable[[RowFacts, Alert], bool]) -> set[GroupKey]:
    """The keys whose alerts all fire, each settled in the one open incident that the
    tracker would record it in (the key's own, else the one its alerts joined)."""
    candidates = [k for k, alerts in groups.items()
                  if alerts and all(a.state is AlertState.FIRING for a in alerts)]
    if not candidates:
        return set()
    rows = open_rows(s, (k.target for k in candidates))
    return {key for key in candidates if _quiet(key, groups[key], rows.get(key.target, {}),
                                                settled)}


def _quiet(key: GroupKey, alerts: Sequence[Alert], held: Mapping[str, list[RowFacts]],
           settled: Callable[[RowFacts, Alert], bool]) -> bool:
    facts = []
    for alert in alerts:
        found = held.get(alert.fingerprint, [])
        if len(found) != 1:  # not recorded yet, or in two open incidents: the full path
            return False
        facts.append(found[0])
    incidents = {f.incident_id for f in facts}
    own = {f.incident_id for rows in held.values() for f in rows if f.group_key == key.text}
    if len(incidents) != 1 or (own and own != incidents):
        return False
    return all(settled(f, a) for f, a in zip(facts, alerts, strict=True))
