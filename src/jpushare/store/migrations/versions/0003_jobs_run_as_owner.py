"""Jobs run as their owner: each user's Unix account, each job's directory, environment,
output files and CPU/memory request, and the tiers' CPU/memory defaults.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Written by hand from `jpushare.store.schema`. `users.unix_user` is filled with the user's
name for existing rows (the `admin user add` default). The job columns are NULL for jobs
submitted before this revision: those keep running as they always did (the service's
account, directory and environment), which is what their submitters saw.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("unix_user", sa.String(length=64), nullable=True))
    op.execute("UPDATE users SET unix_user = name")
    with op.batch_alter_table("users") as batch:
        batch.alter_column("unix_user", existing_type=sa.String(length=64), nullable=False)
        batch.create_index(op.f("ix_users_unix_user"), ["unix_user"])

    with op.batch_alter_table("gpu_tiers") as batch:
        batch.add_column(sa.Column("cpus_per_gpu", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("mem_per_gpu_mb", sa.Integer(), nullable=True))
        batch.create_check_constraint(
            "resources",
            "(cpus_per_gpu IS NULL OR cpus_per_gpu >= 1)"
            " AND (mem_per_gpu_mb IS NULL OR mem_per_gpu_mb >= 1)",
        )

    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("workdir", sa.Text(), nullable=True))
        batch.add_column(sa.Column("environment", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("output_path", sa.Text(), nullable=True))
        batch.add_column(sa.Column("error_path", sa.Text(), nullable=True))
        batch.add_column(sa.Column("cpus_per_gpu", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("mem_per_gpu_mb", sa.Integer(), nullable=True))
        batch.create_check_constraint(
            "resources",
            "(cpus_per_gpu IS NULL OR cpus_per_gpu >= 1)"
            " AND (mem_per_gpu_mb IS NULL OR mem_per_gpu_mb >= 1)",
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_resources"), type_="check")
        for column in (
            "mem_per_gpu_mb",
            "cpus_per_gpu",
            "error_path",
            "output_path",
            "environment",
            "workdir",
        ):
            batch.drop_column(column)
    with op.batch_alter_table("gpu_tiers") as batch:
        batch.drop_constraint(op.f("ck_gpu_tiers_resources"), type_="check")
        batch.drop_column("mem_per_gpu_mb")
        batch.drop_column("cpus_per_gpu")
    with op.batch_alter_table("users") as batch:
        batch.drop_index(op.f("ix_users_unix_user"))
        batch.drop_column("unix_user")
