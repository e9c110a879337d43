"""Alert state written as a delta per evaluation, plus when each group was evaluated.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07 15:20:00

Every evaluation used to delete and re-insert the whole `alert_states` table
(issue 49: a quarter of the daemon's time with an alert pending on each of
5,000 targets). Rows are now inserted, updated and deleted only when an
alert appears, changes or goes, so each names its row by (group, rule,
fingerprint): the index gains the fingerprint. What did move at every
evaluation, each row's `last_eval`, becomes one `alert_group_evals` row per
rule group (Prometheus's `downAt` for restoring `for`); rows from before this
revision keep their own `last_eval`, which the loader still reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `alert_group_evals`; index `alert_states` by group, rule and fingerprint."""
    op.create_table(
        "alert_group_evals",
        sa.Column("group_name", sa.String(), nullable=False),
        sa.Column("evaluated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("group_name", name=op.f("pk_alert_group_evals")),
    )
    op.drop_index(op.f("ix_alert_states_group_name_rule"), table_name="alert_states")
    op.create_index(op.f("ix_alert_states_group_name_rule_fingerprint"), "alert_states",
                    ["group_name", "rule", "fingerprint"])


def downgrade() -> None:
    """Drop `alert_group_evals` and the fingerprint index."""
    op.drop_index(op.f("ix_alert_states_group_name_rule_fingerprint"),
                  table_name="alert_states")
    op.create_index(op.f("ix_alert_states_group_name_rule"), "alert_states",
                    ["group_name", "rule"])
    op.drop_table("alert_group_evals")
