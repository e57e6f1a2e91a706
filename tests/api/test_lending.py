"""The lending option in the API (`JPUSHARE_RESERVED_GPUS=lend-by-limit`): `why` says a
job runs on lent GPUs and until when, `placements` shows the loan (the dashboard's
placements page renders these data), and `why` names the policy's top job, which under
decision 7 is not always rank 1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.policy.options import ReservedGpus, TopJob
from jpushare.policy.peers import named_policy
from tests.api.conftest import ALL_BUSY, ApiWorld, make_world
from tests.database import sessions  # noqa: F401

LEND = named_policy("reservation", TopJob.FIRST_WAITING, ReservedGpus.LEND_BY_LIMIT)
C4090 = ("node-c", "rtx4090")


@pytest.fixture
def api(sessions: sessionmaker[Session]) -> Iterator[ApiWorld]:  # noqa: F811 (the fixture)
    yield from make_world(sessions, policy=LEND)


def lend_cycle(api: ApiWorld) -> None:
    """One dispatcher cycle, as `JPUSHARE_RESERVED_GPUS=lend-by-limit` runs it."""
    now = api.clock()
    with api.sessions.begin() as s:
        decisions = LEND(store.load_snapshot(s, now, api.observed(s)))
        store.record_decisions(s, decisions, now)


def why(api: ApiWorld, job: int) -> dict[str, Any]:
    r = api.get(f"/v1/jobs/{job}/why", "bob")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_lent_run_is_told_in_why_and_shown_in_placements(api: ApiWorld) -> None:
    api.busy.update({**ALL_BUSY, C4090: 0})
    long = api.submit("alice", 2, min_tier="rtx4090", time_limit_s=600)
    lend_cycle(api)  # long starts on node-c's 4090s, the only free ones
    with api.sessions.begin() as s:
        assert store.mark_running(s, long, api.clock())
    api.clock.advance(10)
    big = api.submit("bob", 4, min_tier="rtx4090", time_limit_s=3600)
    short = api.submit("bob", 1, min_tier="rtx4090", time_limit_s=60)

    # Before the cycle: the projection says where it will run, and until when.
    w = why(api, short)
    until = "2026-01-05 09:01:10 UTC"  # T0 + 10 s + its 60 s limit
    assert w["sentence"].endswith(
        f"At the next cycle it will start on node-c (rtx4090), where it runs on GPUs reserved "
        f"for job {big} until {until}, its time limit, before those GPUs are needed."
    )
    assert (w["lent_from_job_id"], w["lent_until"]) == (
        big,
        "2026-01-05T09:01:10Z",
    )

    lend_cycle(api)
    w = why(api, short)
    assert w["code"] == "DISPATCHED"
    assert w["sentence"].endswith(
        f"It runs on GPUs reserved for job {big} until {until}, its time limit, before those "
        "GPUs are needed."
    )
    assert (w["lent_from_job_id"], w["lent_until"]) == (big, "2026-01-05T09:01:10Z")
    p = next(p for p in api.get("/v1/placements").json()["data"] if (p["node"], p["tier"]) == C4090)
    # The lent GPU is busy (short's run), not also reserved: 2 long + 1 short, 1 reserved.
    assert (p["busy"], p["reserved"], p["idle"], p["lent"]) == (3, 1, 0, 1)
    assert p["llm_backfill_gpus"] == 1
    assert [(r["job_id"], r["gpus"]) for r in p["reservations"]] == [(big, 2)]
    assert p["loans"] == [
        {"job_id": short, "gpus": 1, "lent_from_job_id": big, "until": "2026-01-05T09:01:10Z"}
    ]
    assert why(api, long)["lent_from_job_id"] is None
    # The dashboard's Placements page says it too, as a person reads the cell.
    page = api.client.get("/placements", cookies={"jpushare_token": api.tokens["alice"]})
    assert page.status_code == 200
    assert "3 busy (1 lent from a reservation) · 1 reserved" in " ".join(page.text.split())


def test_why_names_the_policy_s_top_job_not_rank_one(api: ApiWorld) -> None:
    """Decision 7: rank 1 starts at the next cycle, so rank 2 is the top job."""
    api.busy.update({**ALL_BUSY, C4090: 2})
    small = api.submit("alice", 1, min_tier="rtx4090")
    big = api.submit("bob", 4, min_tier="rtx4090")
    q = api.get("/v1/queue", "bob").json()
    assert q["top_job_id"] == big
    assert [e["job_id"] for e in q["data"]] == [small, big]
    w = why(api, big)
    assert w["top_job_id"] == big
    assert w["sentence"].startswith("It is the top job and holds no reservation;"), w["sentence"]
    assert "will reserve 1 GPU on node-c (rtx4090)" in w["sentence"]
    assert not why(api, small)["sentence"].startswith("It is the top job")
