"""What people do on an incident (issue 37): acknowledge, owner, re-run diagnosis.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 11:30:00

`incidents.acknowledged_at` / `acknowledged_by`: a person took the incident;
the dispatcher no longer repeats it and nothing escalates it. `owner`: who
is on it (free text, the name people use). `diagnosis_requested_at`: someone
asked for a new diagnosis; the diagnosis job claims it (conditional UPDATE)
and clears it. Timeline events get four kinds for these acts (notes already
have theirs). All nullable: incidents from before stay as they were.

(Numbered 0013 for this session; it revises 0011 on its branch, and is chained
after 0012 when merged.)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)
OLD_KINDS = (
    "pending", "firing", "value", "resolved", "incident_resolved", "notification_sent",
    "notification_failed", "log_excerpt", "runbook", "action", "note",
)
NEW_KINDS = (*OLD_KINDS, "acknowledged", "assigned", "silenced", "diagnosis_requested")


def _in(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _kinds(values: Sequence[str]) -> None:
    with op.batch_alter_table("timeline_events") as batch:
        batch.drop_constraint(op.f("ck_timeline_events_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_timeline_events_kind"), _in("kind", values))


def upgrade() -> None:
    """Add the acknowledgement, owner and diagnosis-request columns and timeline kinds."""
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("acknowledged_at", TS, nullable=True))
        batch.add_column(sa.Column("acknowledged_by", sa.String(128), nullable=True))
        batch.add_column(sa.Column("owner", sa.String(128), nullable=True))
        batch.add_column(sa.Column("diagnosis_requested_at", TS, nullable=True))
    _kinds(NEW_KINDS)


def downgrade() -> None:
    """Drop them (and the timeline events of the new kinds, which the old check refuses)."""
    op.execute(sa.text(f"DELETE FROM timeline_events WHERE kind IN "
                       f"({', '.join(repr(k) for k in NEW_KINDS[len(OLD_KINDS):])})"))
    _kinds(OLD_KINDS)
    with op.batch_alter_table("incidents") as batch:
        batch.drop_column("diagnosis_requested_at")
        batch.drop_column("owner")
        batch.drop_column("acknowledged_by")
        batch.drop_column("acknowledged_at")
