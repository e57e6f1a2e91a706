"""Benchmark of the dispatcher's database steps on PostgreSQL with 10,000 queued jobs.

Prints, per cluster state, the median and worst of repeated cycles (milliseconds) for
`load_snapshot`, `decide`, `record_decisions` and the whole cycle (the three plus commit
or rollback); asserts nothing. Each measured cycle runs in a transaction that is rolled
back, so every repetition sees the same database. Also times `submit` one by one.

Setup writes the 10,000 jobs with one bulk INSERT (submitting them one by one would only
measure the submission path 10,000 times); everything measured goes through the store.

States (100 nodes x 8 GPUs, 3 tiers, 20 labs, job sizes as in the Philly trace):
- busy: every GPU busy; the cycle only answers "why" for everyone;
- mixed: a quarter of the GPUs idle: a first cycle with ~150 dispatches and a reservation.

Run: `.venv/bin/python bench/bench_store.py [--jobs N] [--repeat K] [--url URL] [--sqlite]`;
the database is a fresh schema in `JPUSHARE_TEST_POSTGRES_URL` (default
postgresql+psycopg://postgres@127.0.0.1:5432/test), dropped at the end, or with `--sqlite`
a temporary SQLite file.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from jpushare import store
from jpushare.executors.base import GpuGroup, NodeState
from jpushare.policy import Tier, decide
from jpushare.store.schema import Job, Lab

TIERS = (
    Tier("rtx3080ti", 34.1, 10),
    Tier("rtx4090", 82.6, 20),
    Tier("rtx5090", 104.8, 30),
)
SIZES = [1] * 80 + [2] * 3 + [4] * 6 + [8] * 11
DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
T0 = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)


def _admin(url: str, sql: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sa.text(sql))
    engine.dispose()


def populate(sessions: Any, n_jobs: int, n_nodes: int, seed: int = 1) -> list[GpuGroup]:
    rng = random.Random(seed)
    groups = [
        GpuGroup(f"node-{i:04d}", TIERS[i % len(TIERS)].name, 8, 8, NodeState.UP)
        for i in range(n_nodes)
    ]
    with sessions.begin() as s:
        store.upsert_tiers(s, TIERS)
        store.sync_inventory(s, groups, T0)
        users = []
        for i in range(20):
            store.create_lab(s, f"lab{i:02d}", T0)
            users.append(store.create_user(s, f"user{i:02d}", f"lab{i:02d}", "student", T0))
            s.execute(  # distinct usages, the same every run
                sa.update(Lab)
                .where(Lab.name == f"lab{i:02d}")
                .values(cumulative_usage=rng.uniform(0, 1e9))
            )
        rows = []
        for j in range(n_jobs):
            user = rng.choice(users)
            entered = T0 + timedelta(seconds=rng.uniform(0, 1e5))
            rows.append(
                {
                    "name": f"job{j}",
                    "command": "python train.py",
                    "user_id": user.id,
                    "lab_id": user.lab_id,
                    "num_gpus": rng.choice(SIZES),
                    "minimum_tier_sort_order": rng.choice([10, 10, 10, 20, 30]),
                    "state": "GLOBAL_QUEUE_WAIT",
                    "submitted_at": entered,
                    "queue_entered_at": entered,
                }
            )
        s.execute(sa.insert(Job), rows)
    return groups


def busy_map(groups: list[GpuGroup], state: str, seed: int = 2) -> dict[tuple[str, str], int]:
    rng = random.Random(seed)
    if state == "busy":
        return {(g.node, g.gpu_type): 8 for g in groups}
    return {(g.node, g.gpu_type): rng.choice([8, 8, 8, 6, 4, 0]) for g in groups}


def cycle(sessions: Any, now: datetime, busy: dict[tuple[str, str], int]) -> dict[str, float]:
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    with sessions() as s, s.begin():
        snapshot = store.load_snapshot(s, now, busy)
        t1 = time.perf_counter()
        decisions = decide(snapshot)
        t2 = time.perf_counter()
        recorded = store.record_decisions(s, decisions, now)
        t3 = time.perf_counter()
        s.rollback()
    t4 = time.perf_counter()
    out["load_snapshot"] = (t1 - t0) * 1000
    out["decide"] = (t2 - t1) * 1000
    out["record_decisions"] = (t3 - t2) * 1000
    out["cycle"] = (t4 - t0) * 1000
    out["queued"] = len(snapshot.queue)
    out["dispatched"] = len(recorded.dispatched)
    out["actions"] = len(recorded.applied)
    return out


def report(name: str, runs: list[dict[str, float]]) -> None:
    first = runs[0]
    print(
        f"\n{name}: {int(first['queued'])} queued, {int(first['dispatched'])} dispatched, "
        f"{int(first['actions'])} actions per cycle"
    )
    print(f"  {'step':<18} {'median ms':>10} {'max ms':>8}")
    for key in ("load_snapshot", "decide", "record_decisions", "cycle"):
        values = [r[key] for r in runs]
        print(f"  {key:<18} {statistics.median(values):>10.1f} {max(values):>8.1f}")


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--url", default=None, help="PostgreSQL URL (default: the test database)")
    ap.add_argument("--sqlite", action="store_true", help="a temporary SQLite file instead")
    args = ap.parse_args()

    base = args.url or os.environ.get("JPUSHARE_TEST_POSTGRES_URL") or DEFAULT_URL
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    tmp = tempfile.TemporaryDirectory()
    if args.sqlite:
        rendered = store.sqlite_url(Path(tmp.name) / "bench.sqlite")
    else:
        _admin(base, f'CREATE SCHEMA "{schema}"')
        url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
        rendered = url.render_as_string(hide_password=False)
    print(f"database: {make_url(rendered).get_backend_name()}")
    try:
        store.upgrade(rendered)
        engine = store.make_engine(rendered)
        sessions = store.make_sessionmaker(engine)
        t = time.perf_counter()
        groups = populate(sessions, args.jobs, args.nodes)
        print(f"setup: {args.jobs} jobs, {args.nodes} nodes in {time.perf_counter() - t:.1f} s")
        with engine.begin() as c:
            c.execute(sa.text("ANALYZE"))
        now = T0 + timedelta(days=2)
        for state in ("busy", "mixed"):
            busy = busy_map(groups, state)
            cycle(sessions, now, busy)  # warm up
            runs = [cycle(sessions, now, busy) for _ in range(args.repeat)]
            report(state, runs)

        user_id = 1
        latencies = []
        for i in range(200):

            def submit(i: int = i) -> None:
                with sessions.begin() as s:
                    store.submit(
                        s, user_id=user_id, name=f"s{i}", command="true", num_gpus=1, now=now
                    )

            latencies.append(timed(submit))
        latencies.sort()
        print(
            f"\nsubmit (one client, commit each): median {statistics.median(latencies):.2f} ms,"
            f" p99 {latencies[int(len(latencies) * 0.99) - 1]:.2f} ms"
        )
        engine.dispose()
    finally:
        if not args.sqlite:
            _admin(base, f'DROP SCHEMA "{schema}" CASCADE')
        tmp.cleanup()


if __name__ == "__main__":
    main()
