"""API test fixtures: the app on both backends (tests.database), a small cluster, tokens.

`api` is an `ApiWorld`: the app with a settable clock and busy GPUs, a TestClient, a
token per user, and `cycle()`, which does what one dispatcher cycle does to the database
(load_snapshot, decide, record_decisions, commit) so the tests can watch the queue move.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.api import create_app
from jpushare.executors.base import Executor
from jpushare.policy import Decisions, decide
from tests.constants import GROUPS as GROUPS
from tests.constants import PARTITIONED_TIERS
from tests.constants import T0 as T0
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401

# node-a: 4x3080ti; node-b: 4x4090; node-c: 4x4090 + 4x5090 (two placements).
TIERS = PARTITIONED_TIERS

ALL_BUSY = {
    ("node-a", "rtx3080ti"): 4,
    ("node-b", "rtx4090"): 4,
    ("node-c", "rtx4090"): 4,
    ("node-c", "rtx5090"): 4,
}

# name -> (lab, role)
USERS = {
    "alice": ("alpha", "student"),
    "carol": ("alpha", "student"),
    "bob": ("beta", "student"),
    "pia": ("alpha", "pi"),
    "piet": ("beta", "pi"),
    "root": ("alpha", "admin"),
}


# Every job runs in a directory of its own choosing (the API refuses one without).
WORKDIR = "/tmp"


def job_body(num_gpus: int = 1, **fields: Any) -> dict[str, Any]:
    """A POST /v1/jobs body: `true` in WORKDIR unless `fields` say otherwise."""
    return {"command": "true", "num_gpus": num_gpus, "workdir": WORKDIR, **fields}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@dataclass
class ApiWorld:
    sessions: sessionmaker[Session]
    app: FastAPI
    client: TestClient
    clock: Clock
    tokens: dict[str, str]
    users: dict[str, store.UserRecord]
    busy: dict[tuple[str, str], int] = field(default_factory=dict)

    def auth(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"}

    def get(self, path: str, user: str = "alice", **kw: Any) -> Any:
        return self.client.get(path, headers=self.auth(user), **kw)

    def post(self, path: str, user: str = "alice", **kw: Any) -> Any:
        return self.client.post(path, headers=self.auth(user), **kw)

    def submit(self, user: str, num_gpus: int, **body: Any) -> int:
        fields = {"name": f"{user}-{num_gpus}", **body}
        r = self.post("/v1/jobs", user, json=job_body(num_gpus, **fields))
        assert r.status_code == 201, r.text
        job_id: int = r.json()["id"]
        return job_id

    def observed(self, session: Session) -> dict[tuple[str, str], int]:
        """What the app sees as busy: our own jobs, or more where the test says so."""
        held = store.held_by_jobs(session)
        return {k: max(held.get(k, 0), self.busy.get(k, 0)) for k in {*held, *self.busy}}

    def cycle(self) -> tuple[Decisions, store.Recorded]:
        """One dispatcher cycle's database work at the clock's time."""
        now = self.clock()
        with self.sessions.begin() as s:
            decisions = decide(store.load_snapshot(s, now, self.observed(s)))
            recorded = store.record_decisions(s, decisions, now)
        return decisions, recorded


def build_world(
    factory: sessionmaker[Session], clock: Clock
) -> tuple[dict[str, str], dict[str, store.UserRecord]]:
    tokens: dict[str, str] = {}
    users: dict[str, store.UserRecord] = {}
    with factory.begin() as s:
        store.upsert_tiers(s, TIERS)
        store.sync_inventory(s, GROUPS, clock())
        for lab in ("alpha", "beta"):
            store.create_lab(s, lab, clock())
        for name, (lab, role) in USERS.items():
            users[name] = store.create_user(s, name, lab, role, clock())
            tokens[name] = store.issue_token(s, users[name].id, clock(), "test").secret
    return tokens, users


def make_world(
    factory: sessionmaker[Session], executor: Executor | None = None, **app_options: Any
) -> Iterator[ApiWorld]:
    """The world; `app_options` go to `create_app` (e.g. `munge=`)."""
    clock = Clock()
    tokens, users = build_world(factory, clock)
    holder: dict[str, ApiWorld] = {}

    def observed(session: Session) -> Mapping[tuple[str, str], int]:
        return holder["world"].observed(session)

    app = create_app(factory, executor=executor, clock=clock, observed_busy=observed, **app_options)
    with TestClient(app, raise_server_exceptions=False) as client:
        world = ApiWorld(factory, app, client, clock, tokens, users)
        holder["world"] = world
        yield world


@pytest.fixture
def api(sessions: sessionmaker[Session]) -> Iterator[ApiWorld]:  # noqa: F811 (the fixture)
    yield from make_world(sessions)
