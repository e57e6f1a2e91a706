"""Notifications: each job's mail request and the notifier's outbox cursors.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

Written by hand from `jpushare.store.notifications` (`JobMailRow`, `NotifyCursorRow`).
`job_mail` holds sbatch's --mail-type / --mail-user of the jobs that asked for mail (no
row: no mail); `notify_cursors` the last `job_events.id` each channel (mail, webhook)
has dealt with, so that a restart neither loses nor repeats a notification.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _big() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "job_mail",
        sa.Column("job_id", _big(), autoincrement=False, nullable=False),
        sa.Column("mail_types", sa.String(length=64), nullable=False),
        sa.Column("mail_user", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_mail_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_mail")),
    )
    op.create_table(
        "notify_cursors",
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("last_event_id", _big(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("channel", name=op.f("pk_notify_cursors")),
    )


def downgrade() -> None:
    op.drop_table("notify_cursors")
    op.drop_table("job_mail")
