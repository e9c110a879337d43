"""Honest clocks on incidents (issue 33): the first evidence, and the time to recovery.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 08:40:00

`evidence_at`: when the failure first showed (a crash line's own timestamp, else
the alert going active); `detect_ms` now runs from it to `opened_at`.
`recovery_ms`: first evidence to verified serving, written when a verified
remediation ends the incident. Both nullable: incidents from before stay as they were.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `incidents.evidence_at` and `incidents.recovery_ms`."""
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("evidence_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("recovery_ms", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    """Drop them."""
    with op.batch_alter_table("incidents") as batch:
        batch.drop_column("recovery_ms")
        batch.drop_column("evidence_at")
