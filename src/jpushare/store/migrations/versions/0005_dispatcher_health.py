"""The dispatcher's health counters, readable by every API process.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Written by hand from `jpushare.store.health.DispatcherHealthRow`: cycles that succeeded
(and when, by whom), cycles that failed and executor calls that failed, by kind. No row is
inserted: the dispatcher adds them as it counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dispatcher_health",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("holder", sa.Text(), nullable=True),
        sa.Column("cycle_s", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_dispatcher_health")),
    )


def downgrade() -> None:
    op.drop_table("dispatcher_health")
