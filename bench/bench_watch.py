#!/usr/bin/env python3
"""What the watch-list costs on a long history: one scrape's SPEC §10 totals and one
GET /v1/stats/watch window, on SQLite and PostgreSQL (if reachable).

    .venv/bin/python bench/bench_watch.py [--jobs 100000]

Builds a history of ended jobs spread over 60 days (5 events each: submitted, dispatched,
started, completed, charged; one in five also reserved and released, mostly by R3), then
prints the median milliseconds of `lab_reservation_totals` + `size_totals` (what /metrics
adds per scrape) and of `load_watch_records` + `watch_figures` for 7 and 60 days.
Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from jpushare import store
from jpushare.policy import Tier
from jpushare.policy.watch import watch_figures
from jpushare.store.schema import Job, JobEvent
from jpushare.store.watch_records import lab_reservation_totals, load_watch_records, size_totals

T_END = datetime(2026, 3, 1, tzinfo=UTC)
DAYS = 60
REASONS = ("r3", "r3", "r3", "swap", "filled", "r5", "cancel")


def populate(sessions: Any, n_jobs: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    with sessions.begin() as s:
        store.upsert_tiers(s, (Tier("gpu", 100.0, 10),))
        users = []
        for i in range(12):
            store.create_lab(s, f"lab{i:02d}", T_END)
            users.append(store.create_user(s, f"user{i:02d}", f"lab{i:02d}", "student", T_END))
        jobs: list[dict[str, Any]] = []
        events: list[tuple[int, datetime, str, dict[str, Any] | None]] = []
        for j in range(1, n_jobs + 1):
            user = rng.choice(users)
            submitted = T_END - timedelta(seconds=rng.uniform(0, DAYS * 86400))
            started = submitted + timedelta(seconds=rng.expovariate(1 / 600))
            ended = started + timedelta(seconds=rng.expovariate(1 / 3600))
            gpus = rng.choice((1, 1, 1, 1, 2, 4, 8))
            reserved = 0.0
            if gpus > 1 and rng.random() < 0.2:
                held_s = rng.uniform(5, 900)
                since = submitted + timedelta(seconds=5)
                reserved = held_s * 100.0
                events += [
                    (j, since, "reservation_started", {"node": "n", "tier": "gpu", "gpus": 1}),
                    (
                        j,
                        since + timedelta(seconds=held_s),
                        "released",
                        {"reason": rng.choice(REASONS), "gpus": 1, "held_s": held_s},
                    ),
                ]
            run = gpus * (ended - started).total_seconds() * 100.0
            jobs.append(
                {
                    "id": j,
                    "name": f"job{j}",
                    "command": "x",
                    "user_id": user.id,
                    "lab_id": user.lab_id,
                    "num_gpus": gpus,
                    "minimum_tier_sort_order": 10,
                    "state": "COMPLETED",
                    "submitted_at": submitted,
                    "queue_entered_at": submitted,
                    "dispatched_at": started,
                    "started_at": started,
                    "ended_at": ended,
                    "attempts": 1,
                    "run_cost": run,
                    "reservation_gpu_seconds": reserved,
                    "charged_tflop_s": run + reserved,
                }
            )
            events += [
                (j, submitted, "submitted", None),
                (j, started, "dispatched", {"attempt": 1}),
                (j, started, "started", None),
                (j, ended, "completed", None),
                (j, ended, "charged", {"tflop_s": run + reserved}),
            ]
        s.execute(sa.insert(Job), jobs)
        s.execute(
            sa.insert(JobEvent),
            [{"job_id": j, "at": at, "kind": k, "detail": d} for j, at, k, d in events],
        )


def median_ms(fn: Callable[[], object], repeat: int = 5) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1000)
    return statistics.median(runs)


def measure(name: str, url: str, n_jobs: int) -> None:
    store.upgrade(url)
    engine = store.make_engine(url)
    sessions = store.make_sessionmaker(engine)
    populate(sessions, n_jobs)

    def scrape() -> None:
        with sessions.begin() as s:
            lab_reservation_totals(s)
            size_totals(s)

    def window(days: int) -> Callable[[], object]:
        def run() -> None:
            with sessions.begin() as s:
                watch_figures(*load_watch_records(s, T_END - timedelta(days=days), T_END))

        return run

    print(
        f"{name:10}  {n_jobs:>7,} ended jobs  scrape totals {median_ms(scrape):7.1f} ms  "
        f"7-day window {median_ms(window(7)):7.1f} ms  "
        f"{DAYS}-day window {median_ms(window(DAYS)):7.1f} ms",
        flush=True,
    )
    engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        measure("SQLite", store.sqlite_url(Path(tmp) / "bench.sqlite"), args.jobs)
    base = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    schema = f"bench_watch_{uuid.uuid4().hex[:8]}"
    try:
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(sa.text(f"CREATE SCHEMA {schema}"))
    except sa.exc.SQLAlchemyError as exc:
        print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
        return 0
    try:
        url = sa.make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
        measure("PostgreSQL", url.render_as_string(hide_password=False), args.jobs)
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
