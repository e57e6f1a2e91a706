"""Create everything: labs, users, tokens, tiers, nodes, GPUs, jobs and their events.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Written by hand from `jpushare.store.schema` (a test checks that the two agree). Plain
SQLAlchemy types only: migrations must not change when application code does.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_STATES = ("GLOBAL_QUEUE_WAIT", "DISPATCHED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")
ROLES = ("student", "pi", "admin")
NODE_STATES = ("up", "down", "drain")


def _in(column: str, values: Sequence[str]) -> str:
    quoted = ", ".join("'" + v + "'" for v in values)
    return f"{column} IN ({quoted})"


def _ts(name: str, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _big_pk() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "gpu_tiers",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("tflops", sa.Double(), nullable=False),
        sa.Column("sort_order", sa.Integer(), nullable=False),
        sa.Column("max_gpus", sa.Integer(), server_default=sa.text("8"), nullable=False),
        sa.Column("auto_assign", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("partition", sa.Text(), nullable=True),
        sa.CheckConstraint("max_gpus BETWEEN 1 AND 8", name=op.f("ck_gpu_tiers_max_gpus")),
        sa.CheckConstraint("tflops > 0", name=op.f("ck_gpu_tiers_tflops_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_tiers")),
        sa.UniqueConstraint("name", name=op.f("uq_gpu_tiers_name")),
    )
    op.create_table(
        "labs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("cumulative_usage", sa.Double(), server_default=sa.text("0"), nullable=False),
        _ts("created_at", False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_labs")),
        sa.UniqueConstraint("name", name=op.f("uq_labs_name")),
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), server_default=sa.text("'up'"), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("admin_drained", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("drain_reason", sa.Text(), nullable=True),
        _ts("observed_at", True),
        _ts("updated_at", False),
        sa.CheckConstraint(_in("state", NODE_STATES), name=op.f("ck_nodes_state")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    op.create_table(
        "gpu_resources",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_name", sa.Text(), nullable=False),
        sa.Column("tier_id", sa.Uuid(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("schedulable", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.CheckConstraint("gpu_index >= 0", name=op.f("ck_gpu_resources_gpu_index")),
        sa.ForeignKeyConstraint(
            ["node_name"],
            ["nodes.name"],
            name=op.f("fk_gpu_resources_node_name_nodes"),
            onupdate="CASCADE",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tier_id"],
            ["gpu_tiers.id"],
            name=op.f("fk_gpu_resources_tier_id_gpu_tiers"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_resources")),
        sa.UniqueConstraint(
            "node_name",
            "tier_id",
            "gpu_index",
            name=op.f("uq_gpu_resources_node_name_tier_id_gpu_index"),
        ),
    )
    op.create_index(op.f("ix_gpu_resources_tier_id"), "gpu_resources", ["tier_id"])
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("lab_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        _ts("created_at", False),
        sa.CheckConstraint(_in("role", ROLES), name=op.f("ck_users_role")),
        sa.ForeignKeyConstraint(
            ["lab_id"], ["labs.id"], name=op.f("fk_users_lab_id_labs"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("name", name=op.f("uq_users_name")),
    )
    op.create_index(op.f("ix_users_lab_id"), "users", ["lab_id"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("label", sa.String(length=200), server_default=sa.text("''"), nullable=False),
        _ts("created_at", False),
        _ts("revoked_at", True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_tokens_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_index(op.f("ix_api_tokens_user_id"), "api_tokens", ["user_id"])
    op.create_table(
        "jobs",
        sa.Column("id", _big_pk(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("lab_id", sa.Integer(), nullable=False),
        sa.Column("num_gpus", sa.Integer(), nullable=False),
        sa.Column("minimum_tier_sort_order", sa.Integer(), nullable=False),
        sa.Column("time_limit_s", sa.Double(), nullable=True),
        sa.Column("state", sa.String(length=32), nullable=False),
        _ts("submitted_at", False),
        _ts("queue_entered_at", False),
        _ts("dispatched_at", True),
        _ts("started_at", True),
        _ts("ended_at", True),
        sa.Column("node_name", sa.Text(), nullable=True),
        sa.Column("tier_id", sa.Uuid(), nullable=True),
        sa.Column("executor_id", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("run_cost", sa.Double(), server_default=sa.text("0"), nullable=False),
        sa.Column("charged_tflop_s", sa.Double(), server_default=sa.text("0"), nullable=False),
        # SPEC §7
        sa.Column("reserved_gpus", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("reserved_node_name", sa.Text(), nullable=True),
        sa.Column("reserved_tier_id", sa.Uuid(), nullable=True),
        _ts("reservation_since", True),
        _ts("reservation_last_accrued_at", True),
        sa.Column(
            "reservation_gpu_seconds", sa.Double(), server_default=sa.text("0"), nullable=False
        ),
        sa.CheckConstraint("num_gpus BETWEEN 1 AND 8", name=op.f("ck_jobs_num_gpus")),
        sa.CheckConstraint(_in("state", JOB_STATES), name=op.f("ck_jobs_state")),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_jobs_attempts")),
        sa.CheckConstraint(
            "reserved_gpus >= 0 AND reserved_gpus <= num_gpus", name=op.f("ck_jobs_reserved_gpus")
        ),
        sa.CheckConstraint(
            "(reserved_gpus = 0 AND reserved_node_name IS NULL AND reserved_tier_id IS NULL)"
            " OR (reserved_gpus > 0 AND reserved_node_name IS NOT NULL"
            " AND reserved_tier_id IS NOT NULL AND state = 'GLOBAL_QUEUE_WAIT')",
            name=op.f("ck_jobs_reservation"),
        ),
        sa.ForeignKeyConstraint(
            ["lab_id"], ["labs.id"], name=op.f("fk_jobs_lab_id_labs"), ondelete="RESTRICT"
        ),
        sa.ForeignKeyConstraint(
            ["reserved_tier_id"],
            ["gpu_tiers.id"],
            name=op.f("fk_jobs_reserved_tier_id_gpu_tiers"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["tier_id"],
            ["gpu_tiers.id"],
            name=op.f("fk_jobs_tier_id_gpu_tiers"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_jobs_user_id_users"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index("ix_jobs_queue", "jobs", ["state", "lab_id", "queue_entered_at", "id"])
    op.create_index(
        "ix_jobs_reserved",
        "jobs",
        ["reserved_node_name", "reserved_tier_id"],
        postgresql_where=sa.text("reserved_gpus > 0"),
        sqlite_where=sa.text("reserved_gpus > 0"),
    )
    op.create_index("ix_jobs_user_id", "jobs", ["user_id", "id"])
    op.create_index("ix_jobs_lab_id", "jobs", ["lab_id", "id"])
    op.create_table(
        "job_events",
        sa.Column("id", _big_pk(), nullable=False),
        sa.Column("job_id", _big_pk(), nullable=False),
        _ts("at", False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("from_state", sa.String(length=32), nullable=True),
        sa.Column("to_state", sa.String(length=32), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_events")),
    )
    op.create_index("ix_job_events_job_id", "job_events", ["job_id", "id"])


def downgrade() -> None:
    op.drop_table("job_events")
    op.drop_table("jobs")
    op.drop_table("api_tokens")
    op.drop_table("users")
    op.drop_table("gpu_resources")
    op.drop_table("nodes")
    op.drop_table("labs")
    op.drop_table("gpu_tiers")
