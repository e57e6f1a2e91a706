"""Big lists, as an attacker sends them: jobs with ~500 KB environments and long commands,
then lists of them. A list reads only the private columns its viewer is shown (and never
an environment, which no list shows), and a page has a maximum size.

Memory is measured with tracemalloc around one request: before lean reads a list of other
users' jobs held every byte of their commands and environments at once.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from jpushare.api.schemas.common import MAX_LIST_LIMIT, MAX_QUEUE_LIMIT
from tests.api.conftest import ApiWorld, job_body
from tests.api.test_errors import error

JOBS = 40
ENV = {f"V{i}": "e" * 120_000 for i in range(4)}  # ~480 KB, near the limit of one job
COMMAND = "python train.py " + "c" * 20_000
STORED = JOBS * (480_000 + 20_000)  # ~20 MB of bob's commands and environments


def flood(api: ApiWorld, user: str = "bob") -> list[int]:
    ids = []
    for _ in range(JOBS):
        r = api.post("/v1/jobs", user, json=job_body(1, command=COMMAND, environment=ENV))
        assert r.status_code == 201, r.text[:300]
        ids.append(r.json()["id"])
    return ids


@contextmanager
def peak_bytes() -> Iterator[list[int]]:
    """The most memory Python held during the block, above what it held when it began."""
    out: list[int] = []
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        yield out
        out.append(tracemalloc.get_traced_memory()[1] - base)
    finally:
        tracemalloc.stop()


@contextmanager
def selects(api: ApiWorld) -> Iterator[list[str]]:
    """The SELECT statements the app's database runs inside the block."""
    bind = api.sessions.kw["bind"]
    seen: list[str] = []

    def record(*args: Any) -> None:
        if str(args[2]).lstrip().upper().startswith("SELECT"):
            seen.append(str(args[2]))

    event.listen(bind, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(bind, "before_cursor_execute", record)


def test_a_list_of_other_users_jobs_does_not_load_their_commands_or_environments(
    api: ApiWorld,
) -> None:
    flood(api)
    with peak_bytes() as peak:
        r = api.get("/v1/jobs", "alice", params={"limit": MAX_LIST_LIMIT})
    assert r.status_code == 200 and r.json()["count"] == JOBS
    assert {j["command"] for j in r.json()["data"]} == {None}
    assert peak[0] < STORED / 20, f"{peak[0]} bytes held for a list of {STORED} stored"


def test_the_owner_s_list_loads_the_commands_but_no_environment(api: ApiWorld) -> None:
    flood(api)
    with selects(api) as seen, peak_bytes() as peak:
        r = api.get("/v1/jobs", "bob", params={"mine": True, "limit": MAX_LIST_LIMIT})
    assert r.status_code == 200 and r.json()["count"] == JOBS
    assert {j["command"] for j in r.json()["data"]} == {COMMAND}
    assert {j["environment"] for j in r.json()["data"]} == {None}  # lists never show it
    (listing,) = [q for q in seen if "FROM jobs" in q and "ORDER BY jobs.id DESC" in q]
    assert "jobs.environment" not in listing
    assert "jobs.command" in listing
    # the commands (~0.8 MB) go out; the environments (~19 MB) are never read
    assert peak[0] < STORED / 4, f"{peak[0]} bytes held"


def test_the_queue_loads_no_private_column(api: ApiWorld) -> None:
    flood(api)
    with selects(api) as seen, peak_bytes() as peak:
        r = api.get("/v1/queue", "root", params={"limit": MAX_QUEUE_LIMIT})
    assert r.status_code == 200 and r.json()["queue_length"] == JOBS
    for q in seen:
        for column in ("jobs.environment", "jobs.command", "jobs.workdir"):
            assert column not in q, q
    assert peak[0] < STORED / 20, f"{peak[0]} bytes held"


def test_a_job_read_alone_still_shows_its_owner_everything(api: ApiWorld) -> None:
    (job, *_) = flood(api)
    mine = api.get(f"/v1/jobs/{job}", "bob").json()
    assert mine["command"] == COMMAND and mine["environment"] == ENV
    theirs = api.get(f"/v1/jobs/{job}", "alice").json()
    assert theirs["command"] is None and theirs["environment"] is None


def test_a_page_has_a_maximum_size(api: ApiWorld) -> None:
    e = error(api.get("/v1/jobs", params={"limit": MAX_LIST_LIMIT + 1}), 422, "VALIDATION_ERROR")
    assert e["details"]["errors"][0]["loc"] == ["query", "limit"]
    assert f"limit: Input should be less than or equal to {MAX_LIST_LIMIT}" in e["message"]
    e = error(api.get("/v1/queue", params={"limit": MAX_QUEUE_LIMIT + 1}), 422, "VALIDATION_ERROR")
    assert str(MAX_QUEUE_LIMIT) in e["message"]
    spec = api.client.get("/openapi.json").json()
    (limit,) = [p for p in spec["paths"]["/v1/jobs"]["get"]["parameters"] if p["name"] == "limit"]
    assert limit["schema"]["maximum"] == MAX_LIST_LIMIT
    assert f"at most {MAX_LIST_LIMIT}" in limit["description"]
