#!/usr/bin/env python3
"""What one start-estimate forecast costs (`sim.estimate.estimate_starts`) at 1,000 and
10,000 queued jobs: the work the API does once per dispatcher observation.

    .venv/bin/python bench/bench_estimate.py [--queued 1000 10000] [--repeat 3]

A cluster of 100 nodes × 8 GPUs (two tiers), every GPU busy with running jobs of 1-8 GPUs
whose limits end over the next 1-24 h; queued jobs of 1, 2, 4, 8 GPUs (mostly 1) from 12
labs, each with a time limit of 1-24 h. Prints the wall time of the whole forecast, and
with the API's budget (`api.estimates`: the top MAX_FORECAST_JOBS jobs of the queue, at
most MAX_FORECAST_CYCLES cycles). Asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import time

from jpushare.api.estimates import MAX_FORECAST_CYCLES, MAX_FORECAST_JOBS
from jpushare.policy.model import Placement, QueuedJob, RunningJob, Snapshot, Tier
from jpushare.sim.estimate import JobOwner, RunHistory, estimate_starts


def snapshot(queued: int, seed: int = 1) -> tuple[Snapshot, dict[str, JobOwner]]:
    rng = random.Random(seed)
    now = 1_000_000.0
    tiers = (Tier("hi", 100.0, 20), Tier("lo", 50.0, 10))
    placements: list[Placement] = []
    running: list[RunningJob] = []
    owners: dict[str, JobOwner] = {}
    jid = 0
    for n in range(100):
        tier = "hi" if n < 50 else "lo"
        left = 8
        while left:
            size = min(left, rng.choice((1, 1, 2, 4, 8)))
            jid += 1
            limit = rng.uniform(3600, 86400)
            started = now - rng.uniform(0, limit)
            running.append(RunningJob(str(jid), f"n{n}", tier, size, started, limit))
            owners[str(jid)] = JobOwner(f"u{jid % 40}", f"lab{jid % 12}")
            left -= size
        placements.append(Placement(f"n{n}", tier, 8, 8))
    queue: list[QueuedJob] = []
    for i in range(queued):
        jid += 1
        size = rng.choice((1, 1, 1, 1, 2, 4, 8))
        lab = f"lab{rng.randrange(12)}"
        queue.append(QueuedJob(str(jid), lab, size, 10, now - i, None, rng.uniform(3600, 86400)))
        owners[str(jid)] = JobOwner(f"u{jid % 40}", lab)
    usage = {f"lab{i}": float(i * 1e6) for i in range(12)}
    return Snapshot(tiers, tuple(placements), tuple(queue), usage, now, tuple(running)), owners


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queued", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    history = RunHistory(())
    print("| queued | budget | cycles run | jobs placed | wall s (best of N) |")
    print("|---|---|---|---|---|")
    for n in args.queued:
        snap, owners = snapshot(n)
        for budget, jobs in ((None, None), (MAX_FORECAST_CYCLES, MAX_FORECAST_JOBS)):
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                est = estimate_starts(snap, owners, history, max_cycles=budget, max_jobs=jobs)
                best = min(best, time.perf_counter() - t0)
            placed = sum(1 for s in est.starts.values() if s is not None)
            label = "none" if budget is None else f"{jobs:,} jobs, {budget:,} cycles"
            print(f"| {n:,} | {label} | {est.forecast.cycles:,} | {placed:,} | {best:.2f} |")


if __name__ == "__main__":
    main()
