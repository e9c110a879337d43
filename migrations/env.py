"""Alembic environment for Sentinel's incident store.

`sentinel.incidents.db.Database.upgrade()` configures Alembic in code and
hands over an open connection (`config.attributes["connection"]`), so no
alembic.ini is needed. For writing a new revision by hand with the alembic
CLI, point `sqlalchemy.url` (or $SENTINEL_DATABASE_URL) at a scratch database.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection, create_engine

from sentinel.incidents.db import normalize_url
from sentinel.incidents.models import Base, use_postgresql_options

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        use_postgresql_options()  # the partial index's WHERE, for autogenerate
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table,
        # which is why every constraint has a name.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate over the caller's connection, or one opened from the configured URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("SENTINEL_DATABASE_URL")
    if not url:
        raise RuntimeError("no connection given: set sqlalchemy.url or SENTINEL_DATABASE_URL")
    engine = create_engine(normalize_url(url))
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (--sql) migrations are not supported")
run_migrations_online()
