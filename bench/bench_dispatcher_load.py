"""Dispatcher cycles with 10,000 queued jobs while 50 clients submit, on PostgreSQL.

The busy case: cycles once took 2.1 s with 6,300 queued while 50 clients submitted.
Here a real API (`jpushare serve --no-dispatcher`, as `bench_api` starts it) takes POST
/v1/jobs from `--clients` concurrent clients on loopback at `--rate` req/s in all (open
loop, Poisson arrivals; `--rate 0`: back to back, the server saturated) for `--duration`
seconds, while a dispatcher in a process of its own runs `run_cycle` back to back on the
same database, under a dispatcher lease (every transaction fenced, as `serve` runs it).

The dispatcher's executor is in memory (no processes): a run is RUNNING as soon as it is
submitted and COMPLETED `--run-s` seconds later, and the inventory's `used` is the runs
still going, so cycles start, end and charge jobs as well as order the queue. 24 nodes x 8
GPUs (3 tiers), 10 labs, `--jobs` jobs queued before the clients start.

Prints per-cycle milliseconds (median, p95, max, and the steps of the slowest cycle), the
cycles' dispatches and ends, and the clients' latencies; asserts nothing.

Run: `.venv/bin/python bench/bench_dispatcher_load.py [--jobs 10000] [--clients 50]
[--rate 100] [--duration 20] [--run-s 5]`; PostgreSQL is `JPUSHARE_TEST_POSTGRES_URL`
(default postgresql+psycopg://postgres@127.0.0.1:5432/test), in a schema dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

from bench_api import DEFAULT_PG, closed_loop, database, open_loop, percentile, populate, server
from bench_read_queue import queue_jobs
from jpushare import store
from jpushare.dispatcher.cycle import CycleDeps, run_cycle
from jpushare.dispatcher.lock import DispatcherLease
from jpushare.executors.base import GpuGroup, LaunchSpec, NodeState, RunInfo, RunState


@dataclass
class TimedExecutor:
    """In memory: runs start at once and complete `run_s` later; `used` follows them."""

    groups: list[GpuGroup]
    run_s: float
    runs_by_key: dict[tuple[str, int], tuple[RunInfo, int]] = field(default_factory=dict)

    def _now(self) -> float:
        return time.time()

    def inventory(self) -> list[GpuGroup]:
        used: Counter[tuple[str, str]] = Counter()
        now = self._now()
        for run, gpus in self.runs_by_key.values():
            assert run.started_at is not None
            if now < run.started_at + self.run_s and run.node is not None:
                used[(run.node, run.reason or "")] += gpus
        return [
            GpuGroup(g.node, g.gpu_type, g.total, used[(g.node, g.gpu_type)], g.state)
            for g in self.groups
        ]

    def submit(self, spec: LaunchSpec) -> str:
        key = (spec.job_id, spec.attempt)
        if key not in self.runs_by_key:
            run = RunInfo(
                spec.job_id,
                spec.attempt,
                f"{spec.job_id}.{spec.attempt}",
                RunState.RUNNING,
                node=spec.node,
                started_at=self._now(),
                reason=spec.gpu_type,  # remembered for `inventory`, not read by the cycle
            )
            self.runs_by_key[key] = (run, spec.num_gpus)
        return self.runs_by_key[key][0].executor_id

    def runs(self) -> list[RunInfo]:
        now = self._now()
        out = []
        for run, _ in self.runs_by_key.values():
            assert run.started_at is not None
            end = run.started_at + self.run_s
            if now >= end:
                out.append(
                    RunInfo(
                        run.job_id,
                        run.attempt,
                        run.executor_id,
                        RunState.COMPLETED,
                        node=run.node,
                        started_at=run.started_at,
                        ended_at=end,
                        exit_code=0,
                    )
                )
            else:
                out.append(run)
        return out

    def find(self, job_id: str, attempt: int) -> RunInfo | None:
        return next((r for r in self.runs() if (r.job_id, r.attempt) == (job_id, attempt)), None)

    def cancel(self, executor_id: str) -> None:
        return None

    def log(self, job_id: str, attempt: int) -> str:
        return ""


def dispatcher(url: str, run_s: float, stop: EventType, out: Any) -> None:
    """The child process: cycles back to back until `stop`; one dict per cycle to `out`."""
    engine = store.make_engine(url)
    sessions = store.make_sessionmaker(engine)
    with sessions() as s:
        groups = [
            GpuGroup(p.node, p.tier, p.capacity, 0, NodeState.UP) for p in store.placements(s, {})
        ]
    lease = DispatcherLease(sessions, 60.0)
    assert lease.hold()
    deps = CycleDeps(sessions, TimedExecutor(groups, run_s), fence=lease)
    run_cycle(deps)  # the first inventory sync, not measured
    while not stop.is_set():
        report = run_cycle(deps)
        observed = report.observed
        out.put(
            {
                "ms": report.duration_s * 1000,
                "phases": {k: v * 1000 for k, v in report.phases_s.items()},
                "dispatched": len(report.dispatched.started),
                "ended": observed.ended if observed is not None else 0,
                "queue": report.queue_length,
            }
        )
    lease.close()
    engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rate", type=float, default=100.0, help="req/s in all; 0: back to back")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of submissions")
    ap.add_argument("--run-s", type=float, default=5.0, help="how long each fake run lasts")
    args = ap.parse_args()
    pg = os.environ.get("JPUSHARE_TEST_POSTGRES_URL") or DEFAULT_PG

    with database("postgresql", pg) as url, tempfile.TemporaryDirectory() as tmp:
        tokens = populate(url, args.clients)
        queue_jobs(url, args.jobs, args.clients)
        print(
            f"PostgreSQL, {args.jobs} queued, {args.clients} clients at "
            f"{'back to back' if args.rate <= 0 else f'{args.rate:g} req/s'} for "
            f"{args.duration:g} s, runs of {args.run_s:g} s; {os.cpu_count()} CPUs"
        )
        ctx = mp.get_context("spawn")
        stop, out = ctx.Event(), ctx.Queue()
        with server(url, 1, Path(tmp) / "state") as srv:
            child = ctx.Process(target=dispatcher, args=(url, args.run_s, stop, out))
            child.start()
            try:
                if args.rate > 0:
                    latencies, wall = asyncio.run(
                        open_loop(srv, tokens, args.rate, args.duration, True, seed=1)
                    )
                else:
                    total = int(args.duration * 400)  # about the duration at saturation
                    latencies, wall = asyncio.run(closed_loop(srv, tokens, total, seed=1))
            finally:
                stop.set()
            cycles = []
            while child.is_alive() or not out.empty():
                try:
                    cycles.append(out.get(timeout=1))
                except Exception:  # queue.Empty once the child is done
                    if not child.is_alive():
                        break
            child.join(30)

    ms = sorted(c["ms"] for c in cycles)
    lat = sorted(x * 1000 for x in latencies)
    print(f"\nclients: {len(lat)} submissions in {wall:.1f} s ({len(lat) / wall:.0f} req/s)")
    print(f"  latency ms: p50 {percentile(lat, 0.5):.0f}, p99 {percentile(lat, 0.99):.0f}")
    print(
        f"cycles: {len(ms)}, dispatched {sum(c['dispatched'] for c in cycles)}, "
        f"ended {sum(c['ended'] for c in cycles)}, queue at the end {cycles[-1]['queue']}"
    )
    print(
        f"  cycle ms: median {statistics.median(ms):.0f}, p95 {percentile(ms, 0.95):.0f}, "
        f"max {ms[-1]:.0f}"
    )
    worst = max(cycles, key=lambda c: c["ms"])
    steps = ", ".join(f"{k} {v:.0f}" for k, v in worst["phases"].items())
    print(f"  slowest cycle: {steps} ms; dispatched {worst['dispatched']}, ended {worst['ended']}")


if __name__ == "__main__":
    main()
