"""Store test fixtures: both backends (from tests.database) and a small cluster on them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.executors.base import GpuGroup, NodeState
from jpushare.policy import Tier
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401

T0 = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)

TIERS = (
    Tier("rtx3080ti", 34.1, 10, partition="p3080"),
    Tier("rtx4090", 82.6, 20, partition="p4090"),
    Tier("rtx5090", 104.8, 30, partition="p5090"),
)

# node-a: 4x3080ti; node-b: 4x4090; node-c: 4x4090 + 4x5090 (two placements).
GROUPS = (
    GpuGroup("node-a", "rtx3080ti", 4, 0, NodeState.UP),
    GpuGroup("node-b", "rtx4090", 4, 0, NodeState.UP),
    GpuGroup("node-c", "rtx4090", 4, 0, NodeState.UP),
    GpuGroup("node-c", "rtx5090", 4, 0, NodeState.UP),
)


@dataclass(frozen=True)
class World:
    """The cluster above with labs `alpha` and `beta`, one student in each, and an admin."""

    sessions: sessionmaker[Session]
    alice: store.UserRecord  # student, alpha
    bob: store.UserRecord  # student, beta
    root: store.UserRecord  # admin, alpha


@pytest.fixture
def world(sessions: sessionmaker[Session]) -> World:
    with sessions.begin() as s:
        store.upsert_tiers(s, TIERS)
        store.sync_inventory(s, GROUPS, T0)
        store.create_lab(s, "alpha", T0)
        store.create_lab(s, "beta", T0)
        alice = store.create_user(s, "alice", "alpha", "student", T0)
        bob = store.create_user(s, "bob", "beta", "student", T0)
        root = store.create_user(s, "root", "alpha", "admin", T0)
    return World(sessions, alice, bob, root)
