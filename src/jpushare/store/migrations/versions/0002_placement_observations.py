"""The dispatcher's last observation of busy GPUs per placement, for the API.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

Written by hand from `jpushare.store.observations.PlacementObservation`. Keyed by node and
tier *name* (the policy's placement key), without foreign keys: an observation is a copy of
what the executor reported, replaced whole every cycle, and must not block removing a node.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "placement_observations",
        sa.Column("node_name", sa.Text(), nullable=False),
        sa.Column("tier_name", sa.Text(), nullable=False),
        sa.Column("busy_gpus", sa.Integer(), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("node_name", "tier_name", name=op.f("pk_placement_observations")),
    )


def downgrade() -> None:
    op.drop_table("placement_observations")
