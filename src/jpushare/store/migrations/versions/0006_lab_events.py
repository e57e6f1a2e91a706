"""Lab events: an audit trail of changes to a lab's usage made by a person.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Written by hand from `jpushare.store.lab_events.LabEventRow`. `jpushare admin lab
set-usage` writes one row per change (before, after, who); jobs' charges stay on the jobs.
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
    op.create_table(
        "lab_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("lab_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("actor", sa.Text(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["lab_id"], ["labs.id"], name=op.f("fk_lab_events_lab_id_labs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lab_events")),
    )
    op.create_index("ix_lab_events_lab_id", "lab_events", ["lab_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_lab_events_lab_id", table_name="lab_events")
    op.drop_table("lab_events")
