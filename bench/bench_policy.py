"""Benchmark of one policy cycle, `decide(snapshot)`, over the whole queue.

Prints a table, milliseconds per cycle: the median wall time of repeated runs and the
least CPU time (`time.process_time`, the figure to compare on a shared machine: it leaves
out the time other processes took); asserts nothing.
Shapes: 1k, 10k and 100k queued jobs x 100 and 1,000 placements, in three cluster states:

- busy: every GPU is busy (the common case: the queue only waits);
- mixed: a quarter of the GPUs idle, job sizes 1-8 as in the Philly trace;
- fragmented: the worst case: every placement has exactly one idle GPU (many GPUs idle)
  but nine jobs in ten ask for 2-8 GPUs, so most jobs fit no idle hole and every one of
  them must still be looked at and answered "why".

Run: `.venv/bin/python bench/bench_policy.py` (add `--quick` for 1k/10k only, `--repeat N`
for more runs per shape; `--lend` runs `reserved_gpus: lend-by-limit`, with time limits).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from jpushare.policy import Placement, QueuedJob, RunningJob, Snapshot, Tier, decide
from jpushare.policy.options import ReservedGpus

TIERS = (
    Tier("rtx3080ti", 34.1, 10),
    Tier("rtx4090", 82.6, 20),
    Tier("rtx5090", 104.8, 30),
)
SIZES = [1] * 80 + [2] * 3 + [4] * 6 + [8] * 11  # roughly Philly's mix of 1/2/4/8


def make_snapshot(
    n_jobs: int, n_placements: int, state: str, seed: int = 1, *, limits: bool = False
) -> Snapshot:
    """`limits`: every queued job gets a time limit, and each placement's busy GPUs one
    running job with a limit (so that lending has projections to work with)."""
    rng = random.Random(seed)
    placements = []
    for i in range(n_placements):
        tier = TIERS[i % len(TIERS)].name
        if state == "busy":
            busy = 8
        elif state == "mixed":
            busy = rng.choice([8, 8, 8, 6, 4, 0])
        else:  # fragmented
            busy = 7
        placements.append(Placement(f"node-{i:05d}", tier, 8, busy))
    labs = [f"lab{i:02d}" for i in range(20)]
    usage = {lab: rng.uniform(0, 1e9) for lab in labs}
    queue = []
    for j in range(n_jobs):
        if state == "fragmented":
            n = 1 if rng.random() < 0.1 else rng.choice([2, 4, 8])
        else:
            n = rng.choice(SIZES)
        queue.append(
            QueuedJob(
                job_id=f"j{j:07d}",
                lab=rng.choice(labs),
                num_gpus=n,
                min_sort_order=rng.choice([10, 10, 10, 20, 30]),
                queue_entered_at=rng.uniform(0, 1e6),
                time_limit_s=rng.choice([600.0, 3600.0, 86400.0]) if limits else None,
            )
        )
    running = tuple(
        RunningJob(f"r{i:05d}", p.node, p.tier, p.busy, 2e6 - 100, rng.choice([900.0, 7200.0]))
        for i, p in enumerate(placements)
        if limits and p.busy
    )
    return Snapshot(TIERS, tuple(placements), tuple(queue), usage, now=2e6, running=running)


def measure(
    snapshot: Snapshot, repeats: int, reserved_gpus: ReservedGpus = ReservedGpus.LLM_ONLY
) -> tuple[float, float, int]:
    """(median wall ms, least CPU ms, dispatches) over `repeats` cycles."""
    times = []
    cpu = []
    dispatched = 0
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        d = decide(snapshot, reserved_gpus=reserved_gpus)
        cpu.append(time.process_time() - c0)
        times.append(time.perf_counter() - t0)
        dispatched = len(d.dispatches())
    return statistics.median(times) * 1000, min(cpu) * 1000, dispatched


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1k and 10k jobs only")
    ap.add_argument("--repeat", type=int, default=0, help="runs per shape (default 3 / 9)")
    ap.add_argument("--lend", action="store_true", help="reserved_gpus: lend-by-limit")
    args = ap.parse_args()
    mode = ReservedGpus.LEND_BY_LIMIT if args.lend else ReservedGpus.LLM_ONLY
    job_counts = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    header = ("jobs", "placements", "state", "ms/cycle", "cpu ms", "us/job", "dispatched")
    print("{:>8} {:>10} {:>10} {:>9} {:>7} {:>7} {:>10}".format(*header))
    for n_jobs in job_counts:
        for n_pl in (100, 1_000):
            for state in ("busy", "mixed", "fragmented"):
                snap = make_snapshot(n_jobs, n_pl, state, limits=args.lend)
                repeats = args.repeat or (3 if n_jobs >= 100_000 else 9)
                ms, cpu, dispatched = measure(snap, repeats, mode)
                print(
                    f"{n_jobs:>8} {n_pl:>10} {state:>10} {ms:>9.1f} {cpu:>7.1f} "
                    f"{cpu * 1000 / n_jobs:>7.2f} {dispatched:>10}"
                )


if __name__ == "__main__":
    main()
