"""Job eligibility: holds, dependencies and job arrays (sbatch's --hold, --dependency,
--array).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

Written by hand from `jpushare.store.schema`. Existing jobs get `waiting` NULL (eligible,
as they always were), no hold, no dependency and no array.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WAITING = ("HELD", "DEPENDENCY", "ARRAY_LIMIT", "DEPENDENCY_NEVER_SATISFIED")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("waiting", sa.String(length=32), nullable=True))
        batch.add_column(
            sa.Column("held", sa.Boolean(), server_default=sa.text("false"), nullable=False)
        )
        batch.add_column(sa.Column("dependency", sa.Text(), nullable=True))
        batch.add_column(
            sa.Column(
                "kill_on_invalid_dep", sa.Boolean(), server_default=sa.text("false"), nullable=False
            )
        )
        batch.add_column(sa.Column("array_job_id", _ID, nullable=True))
        batch.add_column(sa.Column("array_task_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("array_limit", sa.Integer(), nullable=True))
        batch.create_check_constraint(
            "waiting", "waiting IN (" + ", ".join(f"'{w}'" for w in _WAITING) + ")"
        )
    op.create_index(
        "ix_jobs_waiting",
        "jobs",
        ["waiting"],
        postgresql_where=sa.text("waiting IS NOT NULL"),
        sqlite_where=sa.text("waiting IS NOT NULL"),
    )
    op.create_index(
        "ix_jobs_array_job_id",
        "jobs",
        ["array_job_id", "array_task_id"],
        postgresql_where=sa.text("array_job_id IS NOT NULL"),
        sqlite_where=sa.text("array_job_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_array_job_id", table_name="jobs")
    op.drop_index("ix_jobs_waiting", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_waiting"), type_="check")
        for column in (
            "array_limit",
            "array_task_id",
            "array_job_id",
            "kill_on_invalid_dep",
            "dependency",
            "held",
            "waiting",
        ):
            batch.drop_column(column)
