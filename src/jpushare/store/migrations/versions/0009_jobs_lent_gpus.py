"""Lending: a job's attempt may run on GPUs lent from another job's reservation.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

Written by hand from `jpushare.store.schema.Job`. `reserved_gpus: lend-by-limit` (SPEC
"Options beyond the note") starts a job whose time limit ends by a reservation's projected
fill on that reservation's GPUs: `lent_from_job_id` names the reserving job and
`lent_until` the end of the borrower's limit, for the current (or last) attempt. Both are
NULL for every other run, and for every job from before this revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column(
                "lent_from_job_id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                nullable=True,
            )
        )
        batch.add_column(sa.Column("lent_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("lent_until")
        batch.drop_column("lent_from_job_id")
