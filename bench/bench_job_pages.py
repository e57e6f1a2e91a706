#!/usr/bin/env python3
"""What a lab member's pages cost the server: My jobs, a job's page, Placements and the
queue, next to the JSON API's answers they are built from, on a SQLite file.

    .venv/bin/python bench/bench_job_pages.py [--jobs 2000] [--nodes 64] [--queued 500]
        [--repeat 20]

Builds `--nodes` nodes of 8 GPUs, fills every GPU with a running 1-GPU job (the Placements
page lists who holds each), and gives the measured user `--jobs` ended jobs plus a queued
one, and `--queued` more queued jobs of another user, a tenth of them held (shown after
the queue) and one an array's task; then prints the median milliseconds of each request
(the API's app, in process, through Starlette's test client): `GET /jobs` (100 newest
jobs, their bills: one extra lean read of the same 100 records) against
`GET /v1/jobs?mine=true`, `GET /jobs/ID` (job, why, attempts, log, record) against
`GET /v1/jobs/ID`, `GET /placements` (plus the active jobs) against `GET /v1/placements`,
and `GET /` (the queue, plus the queued jobs' list for the held ones and the `ID_TASK`s)
against `GET /v1/queue?limit=500`. Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.api import create_app
from jpushare.executors.base import GpuGroup, NodeState
from jpushare.policy import Tier, decide
from jpushare.vocabulary import JobState
from jpushare.web.auth import COOKIE

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def populate(
    sessions: sessionmaker[Session], clock: Clock, jobs: int, nodes: int, waiting: int
) -> tuple[str, int]:
    """The measured user's token and the id of its queued job."""
    groups = [GpuGroup(f"n{i:03d}", "gpu", 8, 0, NodeState.UP) for i in range(nodes)]
    with sessions.begin() as s:
        store.upsert_tiers(s, (Tier("gpu", 100.0, 10),))
        store.sync_inventory(s, groups, clock())
        store.create_lab(s, "lab", clock())
        me = store.create_user(s, "me", "lab", "student", clock())
        other = store.create_user(s, "other", "lab", "student", clock())
        token = store.issue_token(s, me.id, clock(), "bench").secret
    with sessions.begin() as s:
        for i in range(jobs):
            job = store.submit(
                s, user_id=me.id, name=f"old{i}", command="x", num_gpus=1, now=clock()
            ).job
            store.cancel_job(s, job.id, clock(), reason="bench")
    with sessions.begin() as s:
        for i in range(nodes * 8):
            store.submit(s, user_id=other.id, name=f"run{i}", command="x", num_gpus=1, now=clock())
    with sessions.begin() as s:
        recorded = store.record_decisions(s, decide(store.load_snapshot(s, clock(), {})), clock())
        for d in recorded.dispatched:
            store.mark_running(s, d.job_id, clock())
    clock.now += timedelta(minutes=30)
    with sessions.begin() as s:
        queued = store.submit(s, user_id=me.id, name="next", command="x", num_gpus=1, now=clock())
        for i in range(waiting):
            elig = store.Eligibility(hold=i % 10 == 0, array_tasks=(0, 1) if i == 1 else None)
            store.submit(
                s,
                user_id=other.id,
                name=f"wait{i}",
                command="x",
                num_gpus=1,
                now=clock(),
                eligibility=elig,
            )
        running = len(store.list_jobs(s, store.JobFilter(states=(JobState.RUNNING,), limit=1000)))
    print(f"{jobs:,} ended jobs of the user, {running:,} running on {nodes} nodes", flush=True)
    return token, queued.job.id


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1000)
    return statistics.median(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--queued", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = store.sqlite_url(Path(tmp) / "bench.sqlite")
        store.upgrade(url)
        engine = store.make_engine(url)
        sessions = store.make_sessionmaker(engine)
        clock = Clock()
        token, queued = populate(sessions, clock, args.jobs, args.nodes, args.queued)
        app = create_app(sessions, clock=clock, munge=None, observed_busy=store.held_by_jobs)
        with TestClient(app) as client:
            bearer = {"Authorization": f"Bearer {token}"}
            client.cookies.set(COOKIE, token)
            pairs = [
                ("/jobs", "/v1/jobs?mine=true&limit=100"),
                (f"/jobs/{queued}", f"/v1/jobs/{queued}"),
                ("/placements", "/v1/placements"),
                ("/", "/v1/queue?limit=500"),
            ]
            for page, api in pairs:
                for path in (page, api):  # warm-up, and a check that both answer
                    r = client.get(path, headers=bearer if path == api else {})
                    assert r.status_code == 200, (path, r.status_code, r.text[:200])
                page_ms = median_ms(partial(client.get, page), args.repeat)
                api_ms = median_ms(partial(client.get, api, headers=bearer), args.repeat)
                print(f"{page:14} {page_ms:7.1f} ms   {api:32} {api_ms:7.1f} ms", flush=True)
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
