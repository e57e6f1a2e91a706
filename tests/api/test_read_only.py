"""GET requests read through read-only sessions (`api.deps`): on SQLite their transactions
begin deferred, not `BEGIN IMMEDIATE`, and a GET held open does not keep a POST waiting.

Every GET route of the OpenAPI document is called, so a new one is checked too. Threads
with Events, not timings: the only time bound is a generous one on the POST.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from jpushare.api import create_app
from tests.api.conftest import ApiWorld, Clock, build_world

BOUND_S = 20.0


def _engine(sessions: sessionmaker[Session]) -> sa.Engine:
    bind = sessions.kw["bind"]
    assert isinstance(bind, sa.Engine)
    return bind


@pytest.fixture
def begins(api: ApiWorld) -> Iterator[list[str]]:
    """The BEGIN statements the app's engine sends from now on."""
    sent: list[str] = []
    engine = _engine(api.sessions)

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.startswith("BEGIN"):
            sent.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    yield sent
    event.remove(engine, "before_cursor_execute", record)


def test_every_get_route_begins_deferred_on_sqlite(api: ApiWorld, begins: list[str]) -> None:
    # On PostgreSQL the hook sends no BEGIN of its own (the driver's transactions are
    # unchanged); on SQLite reads send a plain BEGIN and writes BEGIN IMMEDIATE.
    sqlite = _engine(api.sessions).dialect.name == "sqlite"
    job = api.submit("alice", 1)
    values = {"job_id": str(job), "name": "alice"}
    paths = [path for path, operations in api.app.openapi()["paths"].items() if "get" in operations]
    assert {"/v1/queue", "/v1/jobs/{job_id}/why", "/metrics"} <= set(paths)
    for path in paths:
        url = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)
        begins.clear()
        r = api.get(url, "root")
        assert r.status_code == 200, (url, r.text)
        assert set(begins) == ({"BEGIN"} if sqlite else set()), url
    begins.clear()
    api.submit("alice", 1)
    assert set(begins) == ({"BEGIN IMMEDIATE"} if sqlite else set())


def test_a_get_held_open_does_not_keep_a_post_waiting(
    sessions: sessionmaker[Session],
) -> None:
    clock = Clock()
    tokens, _ = build_world(sessions, clock)
    in_get, release = threading.Event(), threading.Event()
    armed = [True]

    def observed(session: Session) -> Mapping[tuple[str, str], int]:
        if armed[0]:  # the first call, GET /v1/queue's, inside its transaction
            armed[0] = False
            in_get.set()
            release.wait(BOUND_S + 10)
        return {}

    app = create_app(sessions, clock=clock, observed_busy=observed)
    auth = {"Authorization": f"Bearer {tokens['alice']}"}
    results: dict[str, Any] = {}
    with TestClient(app, raise_server_exceptions=False) as client:

        def get_queue() -> None:
            results["get"] = client.get("/v1/queue", headers=auth)

        getter = threading.Thread(target=get_queue)
        getter.start()
        try:
            assert in_get.wait(BOUND_S)
            posted = threading.Event()

            def post_job() -> None:
                body = {"workdir": "/tmp", "name": "j", "command": "true", "num_gpus": 1}
                results["post"] = client.post("/v1/jobs", headers=auth, json=body)
                posted.set()

            poster = threading.Thread(target=post_job)
            poster.start()
            assert posted.wait(BOUND_S), "the POST waited for the GET"
            poster.join()
        finally:
            release.set()
            getter.join(BOUND_S + 20)
    assert results["post"].status_code == 201, results["post"].text
    assert results["get"].status_code == 200, results["get"].text
