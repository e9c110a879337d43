"""Silences get UUIDs, the ids Alertmanager API v2 clients expect (issue 35).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 09:00:00

`silences.uuid` is the id API v2 shows and takes. Existing silences get one
here (generated in Python: SQLite has no UUID function); their integer id
stays the primary key and is still accepted by GET and DELETE
/api/v2/silence/{id} and `sentinel silence expire`, so ids noted before the
upgrade keep working.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `silences.uuid`, fill it for existing rows, then make it required and unique."""
    op.add_column("silences", sa.Column("uuid", sa.String(36), nullable=True))
    silences = sa.table("silences", sa.column("id", sa.Integer), sa.column("uuid", sa.String))
    conn = op.get_bind()
    for (sid,) in conn.execute(sa.select(silences.c.id)).all():
        conn.execute(silences.update().where(silences.c.id == sid)
                     .values(uuid=str(uuid.uuid4())))
    with op.batch_alter_table("silences") as batch:
        batch.alter_column("uuid", existing_type=sa.String(36), nullable=False)
        batch.create_unique_constraint(op.f("uq_silences_uuid"), ["uuid"])


def downgrade() -> None:
    """Drop `silences.uuid`."""
    with op.batch_alter_table("silences") as batch:
        batch.drop_constraint(op.f("uq_silences_uuid"), type_="unique")
        batch.drop_column("uuid")
