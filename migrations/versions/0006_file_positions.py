"""Where followed log files stopped, so a restart neither misses nor repeats lines.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21 10:00:00

`log_file_positions` holds, per followed file (key `file:TARGET:PATH`), the
device and inode of the file being read and the byte offset and line number
just past the last line handed out. Saved in the same transaction as the log
events those lines led to. Written out in full, as 0001 and 0002 are.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `log_file_positions`."""
    op.create_table(
        "log_file_positions",
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("dev", sa.BigInteger(), nullable=False),
        sa.Column("inode", sa.BigInteger(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("line_no", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_log_file_positions")),
    )


def downgrade() -> None:
    """Drop `log_file_positions`."""
    op.drop_table("log_file_positions")
