"""Benchmark of a full dispatcher cycle (`run_cycle`) with 10,000 queued jobs.

What is timed is the service's own cycle, steps 1-6 (see `jpushare.dispatcher.cycle`):
observe (inventory sync of every node, run transitions, busy GPUs stored), snapshot +
decide + record in one transaction (the target: under 500 ms on PostgreSQL), and act +
confirm. The executor is an in-memory fake (instant submit, no processes), so the numbers
are the database's and the policy's, not a backend's.

States (100 nodes x 8 GPUs, 3 tiers, 20 labs, job sizes as in the Philly trace):
- busy: every GPU busy: no dispatch; the cycle orders the queue and answers "why" for all
  (repeated: the database does not change between repetitions);
- mixed: a quarter of the GPUs idle: one first cycle that dispatches ~150 jobs and starts a
  reservation (measured once per repetition on a freshly reset database state);
- then the next cycle, which sees every run it started running (and dispatches more), and
  the one after, which sees all of those runs completed: the executor's reports of many
  starts and ends in one cycle (batched, `store.batched_runs`).

Every writing transaction goes through a dispatcher lease (`DispatcherLease`) as `serve`
runs it, unless `--no-lease`; `--profile FILE` writes cProfile statistics of the measured
cycles (read them with `python -m pstats FILE`).

Run: `.venv/bin/python bench/bench_dispatcher.py [--jobs N] [--repeat K] [--sqlite]
[--no-lease] [--profile FILE] [--waiting N]`; the
database is a fresh schema in `JPUSHARE_TEST_POSTGRES_URL` (default
postgresql+psycopg://postgres@127.0.0.1:5432/test), dropped at the end, or with `--sqlite`
a temporary SQLite file. Prints milliseconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import random
import statistics
import tempfile
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

# The same world as the store benchmark (tiers, 20 labs, Philly-like job sizes).
from bench_store import DEFAULT_URL, T0, populate
from jpushare import store
from jpushare.dispatcher.cycle import CycleDeps, CycleReport, InventoryMemo, run_cycle
from jpushare.dispatcher.lock import DispatcherLease, Fence, NoLock
from jpushare.executors.base import GpuGroup, LaunchSpec, RunInfo, RunState
from jpushare.store.observations import PlacementObservation
from jpushare.store.schema import Job, JobEvent


@dataclass
class FakeExecutor:
    """Instant, in memory: `used` per (node, type) as set, runs as submitted."""

    groups: list[GpuGroup]
    submitted: dict[tuple[str, int], RunInfo] = field(default_factory=dict)

    def inventory(self) -> list[GpuGroup]:
        return self.groups

    def submit(self, spec: LaunchSpec) -> str:
        key = (spec.job_id, spec.attempt)
        run = RunInfo(spec.job_id, spec.attempt, f"{spec.job_id}.{spec.attempt}", RunState.PENDING)
        self.submitted.setdefault(key, run)
        return self.submitted[key].executor_id

    def runs(self) -> list[RunInfo]:
        return list(self.submitted.values())

    def find(self, job_id: str, attempt: int) -> RunInfo | None:
        return self.submitted.get((job_id, attempt))

    def cancel(self, executor_id: str) -> None:
        return None

    def log(self, job_id: str, attempt: int) -> str:
        return ""


def with_used(groups: list[GpuGroup], state: str) -> list[GpuGroup]:
    rng = random.Random(2)
    out = []
    for g in groups:
        used = 8 if state == "busy" else rng.choice([8, 8, 8, 6, 4, 0])
        out.append(GpuGroup(g.node, g.gpu_type, g.total, used, g.state))
    return out


def reset(sessions: sessionmaker[Session]) -> None:
    """Every job back in the queue as populated (undo a measured mixed cycle)."""
    with sessions.begin() as s:
        s.execute(sa.delete(JobEvent))
        s.execute(sa.delete(PlacementObservation))
        s.execute(
            sa.update(Job).values(
                state="GLOBAL_QUEUE_WAIT",
                attempts=0,
                node_name=None,
                tier_id=None,
                executor_id=None,
                dispatched_at=None,
                reserved_gpus=0,
                reserved_node_name=None,
                reserved_tier_id=None,
                reservation_since=None,
                reservation_last_accrued_at=None,
                reservation_gpu_seconds=0.0,
            )
        )


def hold_and_chain(sessions: sessionmaker[Session], n: int) -> None:
    """The first `n` jobs held, the next `n` each waiting for one of them (afterok)."""
    with sessions.begin() as s:
        ids = list(s.scalars(sa.select(Job.id).order_by(Job.id).limit(2 * n)))
        s.execute(sa.update(Job).where(Job.id.in_(ids[:n])).values(held=True, waiting="HELD"))
        s.execute(
            sa.update(Job),
            [
                {"id": jid, "waiting": "DEPENDENCY", "dependency": f"afterok:{held}"}
                for held, jid in zip(ids[:n], ids[n:], strict=True)
            ],
        )


def row(report: CycleReport) -> dict[str, float]:
    p = report.phases_s
    return {
        "observe": p["observe"] * 1000,
        "snapshot+decide+record": p["decide"] * 1000,
        "act+confirm": p["act"] * 1000,
        "whole cycle": report.duration_s * 1000,
        "dispatched": len(report.dispatched.started),
        "started": report.observed.started if report.observed else 0,
        "ended": report.observed.ended if report.observed else 0,
        "reservations": report.reservations_started,
        "queue": report.queue_length,
    }


def show(name: str, rows: list[dict[str, float]]) -> None:
    first = rows[0]
    print(
        f"\n{name}: queue {int(first['queue'] + first['dispatched'])}, "
        f"dispatched {int(first['dispatched'])}, reservations started "
        f"{int(first['reservations'])}, runs seen started {int(first['started'])}, ended "
        f"{int(first['ended'])} per cycle ({len(rows)} cycles)"
    )
    print(f"  {'step':<24} {'median ms':>10} {'max ms':>8}")
    for key in ("observe", "snapshot+decide+record", "act+confirm", "whole cycle"):
        values = [r[key] for r in rows]
        print(f"  {key:<24} {statistics.median(values):>10.1f} {max(values):>8.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--url", default=None, help="PostgreSQL URL (default: the test database)")
    ap.add_argument("--sqlite", action="store_true", help="a temporary SQLite file instead")
    ap.add_argument(
        "--no-lease",
        action="store_true",
        help="no dispatcher lease (by default every transaction is fenced, as `serve` runs)",
    )
    ap.add_argument("--profile", metavar="FILE", help="cProfile the measured cycles into FILE")
    ap.add_argument(
        "--waiting",
        type=int,
        default=0,
        metavar="N",
        help="of the queued jobs, N held and N more waiting on one of those (afterok): the "
        "cycle judges the N waiting ones again each time (`store.waiting_jobs`)",
    )
    args = ap.parse_args()

    base = args.url or os.environ.get("JPUSHARE_TEST_POSTGRES_URL") or DEFAULT_URL
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    tmp = tempfile.TemporaryDirectory()
    if args.sqlite:
        url = store.sqlite_url(Path(tmp.name) / "bench.sqlite")
    else:
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        parsed = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
        url = parsed.render_as_string(hide_password=False)
    print(f"database: {make_url(url).get_backend_name()}, {args.jobs} queued jobs")
    engine: Any = None
    try:
        store.upgrade(url)
        engine = store.make_engine(url)
        sessions = store.make_sessionmaker(engine)
        groups = populate(sessions, args.jobs, args.nodes)
        if args.waiting:
            hold_and_chain(sessions, args.waiting)
        with engine.begin() as c:
            c.execute(sa.text("ANALYZE"))
        clock = [T0 + timedelta(days=2)]

        def now() -> datetime:
            clock[0] += timedelta(seconds=5)
            return clock[0]

        fence: Fence = NoLock()
        if not args.no_lease:
            lease = DispatcherLease(sessions, 60.0)
            assert lease.hold()
            fence = lease
        profiler = cProfile.Profile() if args.profile else None
        busy_deps = CycleDeps(
            sessions, FakeExecutor(with_used(groups, "busy")), clock=now, fence=fence
        )
        run_cycle(busy_deps)  # warm up (and the first inventory sync)
        busy = []
        for _ in range(args.repeat):
            if profiler:
                profiler.enable()
            busy.append(row(run_cycle(busy_deps)))
            if profiler:
                profiler.disable()
        show("busy", busy)

        mixed, starts, ends = [], [], []
        memo = InventoryMemo()  # one process: the inventory is synced once, not each time
        for _ in range(args.repeat):
            reset(sessions)
            fake = FakeExecutor(with_used(groups, "mixed"))
            deps = CycleDeps(sessions, fake, clock=now, inventory_memo=memo, fence=fence)
            if profiler:
                profiler.enable()
            mixed.append(row(run_cycle(deps)))
            if profiler:
                profiler.disable()
            # The next two cycles observe those runs: all started, then all ended.
            at = now().timestamp()
            for key, run in list(fake.submitted.items()):
                fake.submitted[key] = replace(run, state=RunState.RUNNING, started_at=at)
            starts.append(row(run_cycle(deps)))
            for key, run in list(fake.submitted.items()):
                fake.submitted[key] = replace(
                    run, state=RunState.COMPLETED, ended_at=at + 600, exit_code=0
                )
            if profiler:
                profiler.enable()
            ends.append(row(run_cycle(deps)))
            if profiler:
                profiler.disable()
        show("mixed (first cycle after a quarter of the GPUs free up)", mixed)
        show("the next cycle: every run it started is seen running", starts)
        show("the cycle after: every one of them has completed", ends)
        if profiler:
            profiler.dump_stats(args.profile)
    finally:
        if engine is not None:
            engine.dispose()
        if not args.sqlite:
            with admin.connect() as c:
                c.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
            admin.dispose()
        tmp.cleanup()


if __name__ == "__main__":
    main()
