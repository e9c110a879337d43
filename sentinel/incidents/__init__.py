"""Incidents: firing alerts become incidents with a timeline, stored with SQLAlchemy.

    db.py          Database(url): engine, sessions, `upgrade()` (Alembic, migrations/)
    models.py      the schema, typed SQLAlchemy 2.0 models
    tracker.py     IncidentTracker: alerts → incidents → notifications
    alert_states.py persisted rule-engine alerts (restore after restart)
    queries.py     list_incidents / get_incident → frozen dataclasses
    render.py      text and JSON for `incidents list/show`
"""

from sentinel.incidents.db import Database, DatabaseError
from sentinel.incidents.queries import (
    IncidentAlertView,
    IncidentDetail,
    IncidentSummary,
    TimelineEntry,
    get_incident,
    list_incidents,
)
from sentinel.incidents.tracker import IncidentTracker

__all__ = [
    "Database",
    "DatabaseError",
    "IncidentAlertView",
    "IncidentDetail",
    "IncidentSummary",
    "IncidentTracker",
    "TimelineEntry",
    "get_incident",
    "list_incidents",
]
