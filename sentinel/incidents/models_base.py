"""The base every incident-store model shares: naming convention, UTC timestamps, `Base`.

Each stage's tables live in their own module (models.py: incidents and
their timelines; models_notify, models_remediation, models_api, models_ha).
They all derive from `Base` here, and this module imports none of them, so
the models form a tree, not a circle: `sentinel.incidents.models` imports
the stage modules (one way) so that `Base.metadata` holds every table for
the migrations and their drift test.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Dialect, MetaData, TypeDecorator
from sqlalchemy.orm import DeclarativeBase

# Names for every constraint and index, so migrations (and SQLite's batch
# mode, which rebuilds tables) can refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    PostgreSQL stores `timestamptz`; SQLite has no time zone type, so values are
    converted to UTC before they are written and marked UTC when read back.
    Naive datetimes are refused: their meaning depends on the host's zone.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: incident timestamps must be aware")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base carrying the naming convention and type map."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON()}
