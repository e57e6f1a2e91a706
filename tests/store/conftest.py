"""Store test fixtures: both backends (from tests.database) and a small cluster on them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.policy import Decisions, decide
from tests.constants import GROUPS as GROUPS
from tests.constants import PARTITIONED_TIERS
from tests.constants import T0 as T0
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401

# node-a: 4x3080ti; node-b: 4x4090; node-c: 4x4090 + 4x5090 (two placements).
TIERS = PARTITIONED_TIERS


@dataclass(frozen=True)
class World:
    """The cluster above with labs `alpha` and `beta`, one student in each, and an admin."""

    sessions: sessionmaker[Session]
    alice: store.UserRecord  # student, alpha
    bob: store.UserRecord  # student, beta
    root: store.UserRecord  # admin, alpha


@pytest.fixture
def world(sessions: sessionmaker[Session]) -> World:  # noqa: F811 (the fixture)
    with sessions.begin() as s:
        store.upsert_tiers(s, TIERS)
        store.sync_inventory(s, GROUPS, T0)
        store.create_lab(s, "alpha", T0)
        store.create_lab(s, "beta", T0)
        alice = store.create_user(s, "alice", "alpha", "student", T0)
        bob = store.create_user(s, "bob", "beta", "student", T0)
        root = store.create_user(s, "root", "alpha", "admin", T0)
    return World(sessions, alice, bob, root)


def at(seconds: float) -> datetime:
    """T0 + seconds."""
    return T0 + timedelta(seconds=seconds)


def submit(
    world: World,
    user: store.UserRecord,
    num_gpus: int,
    *,
    seconds: float = 0.0,
    min_tier: str | None = None,
) -> int:
    """Submit a job in its own transaction; its id."""
    with world.sessions.begin() as s:
        job = store.submit(
            s,
            user_id=user.id,
            name=f"{user.name}-{num_gpus}",
            command="python train.py",
            num_gpus=num_gpus,
            now=at(seconds),
            min_tier=min_tier,
        ).job
    return job.id


def dump(factory: sessionmaker[Session]) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the tables a cycle or transition may change, for whole comparisons."""
    out: dict[str, list[tuple[object, ...]]] = {}
    with factory() as s:
        for table in ("jobs", "job_events", "labs"):
            rows = s.execute(text(f"SELECT * FROM {table} ORDER BY id")).all()
            out[table] = [tuple(r) for r in rows]
    return out


Busy = dict[tuple[str, str], int]

# Everything busy except what a test frees.
ALL_BUSY: Busy = {
    ("node-a", "rtx3080ti"): 4,
    ("node-b", "rtx4090"): 4,
    ("node-c", "rtx4090"): 4,
    ("node-c", "rtx5090"): 4,
}


def run_cycle(world: World, seconds: float, busy: Busy) -> tuple[Decisions, store.Recorded]:
    """One dispatcher cycle at T0 + seconds: load, decide, record, commit."""
    with world.sessions.begin() as s:
        decisions = decide(store.load_snapshot(s, at(seconds), busy))
        recorded = store.record_decisions(s, decisions, at(seconds))
    return decisions, recorded
