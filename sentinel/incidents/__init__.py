"""Incidents: firing alerts become incidents with a timeline, stored with SQLAlchemy.

    db.py          Database(url): engine, sessions, `upgrade()` (Alembic, migrations/)
    models.py      the schema, typed SQLAlchemy 2.0 models
    tracker.py     IncidentTracker: alerts → incidents → notifications
    alert_states.py persisted rule-engine alerts (restore after restart)
    queries.py     list_incidents / get_incident → frozen dataclasses
    render.py      text and JSON for `incidents list/show`
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Imported on first use (PEP 562): `sentinel incidents list` needs the queries, not the
# tracker, and `import sentinel.incidents.convert` should not pay for SQLAlchemy.
_WHERE = {
    "Database": "db", "DatabaseError": "db", "IncidentAlertView": "queries",
    "IncidentDetail": "queries", "IncidentSummary": "queries", "TimelineEntry": "queries",
    "get_incident": "queries", "list_incidents": "queries", "IncidentTracker": "tracker",
}

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sentinel.incidents' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"sentinel.incidents.{module}"), name)
    globals()[name] = value
    return value
