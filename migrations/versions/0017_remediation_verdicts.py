"""Verdicts on remediations, and demoted policy steps.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 15:30:00

Some time after an attempt (default 24 h) it gets a verdict: fixed,
recurred, failed or overridden (`verdict`, `verdict_at`, `verdict_detail` on
`remediation_attempts`; written once, claimed with `verdict IS NULL`).
`remediation_steps` holds a policy step demoted to `approval: required`
because its recent runs were mostly not fixed, until a person promotes it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)
VERDICTS = "verdict IS NULL OR verdict IN ('fixed', 'recurred', 'failed', 'overridden')"


def upgrade() -> None:
    """Add the verdict columns and create `remediation_steps`."""
    with op.batch_alter_table("remediation_attempts") as batch:
        batch.add_column(sa.Column("verdict", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("verdict_at", TS, nullable=True))
        batch.add_column(sa.Column("verdict_detail", sa.Text(), nullable=True))
        batch.create_check_constraint("verdict", VERDICTS)
        batch.create_index("ix_remediation_attempts_verdict", ["verdict"])
    op.create_table(
        "remediation_steps",
        sa.Column("policy", sa.String(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("demoted_at", TS, nullable=True),
        sa.Column("demoted_reason", sa.Text(), nullable=False),
        sa.Column("promoted_at", TS, nullable=True),
        sa.Column("promoted_by", sa.String(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("policy", "step", name=op.f("pk_remediation_steps")),
    )


def downgrade() -> None:
    """Drop `remediation_steps` and the verdict columns."""
    op.drop_table("remediation_steps")
    with op.batch_alter_table("remediation_attempts") as batch:
        batch.drop_index("ix_remediation_attempts_verdict")
        batch.drop_constraint("ck_remediation_attempts_verdict", type_="check")
        batch.drop_column("verdict_detail")
        batch.drop_column("verdict_at")
        batch.drop_column("verdict")
