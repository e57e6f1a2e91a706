"""The dispatcher's lease: leadership that a frozen or cut-off leader loses.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Written by hand from `jpushare.store.leadership.DispatcherLeaseRow`. Replaces the
PostgreSQL advisory lock (and SQLite's `flock`), which a leader kept for as long as its
connection or process lived, even frozen. No row is inserted: the first dispatcher does.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dispatcher_leases",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_dispatcher_leases")),
    )


def downgrade() -> None:
    op.drop_table("dispatcher_leases")
