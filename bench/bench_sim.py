"""Benchmark of the trace simulator: a synthetic 15,000-job trace replayed under each policy.

The trace is Philly-shaped (sizes 1/2/4/8 GPUs in 80/3/6/11 %, log-normal run times with
a median of about 5 minutes and a long tail, 10 days of arrivals, 20 labs with skewed
activity) on a 40-node, 256-GPU heterogeneous cluster with a few node failures, so the
queue is busy but drains. Prints the wall time per policy and what the replay did; asserts
nothing.

Run: `.venv/bin/python bench/bench_sim.py` (`--jobs N`, `--policy NAME`, `--every-cycle`).
"""

from __future__ import annotations

import argparse
import random
import time

from jpushare.policy.model import Decisions, Placement, Snapshot, Tier
from jpushare.policy.peers import POLICIES
from jpushare.sim.cluster_file import ClusterSpec, NodeEvent
from jpushare.sim.engine import simulate
from jpushare.sim.report import summary
from jpushare.sim.trace_file import TraceJob

TIERS = (
    Tier("rtx3080ti", 34.1, 10),
    Tier("rtx4090", 82.6, 20),
    Tier("rtx5090", 104.8, 30),
)
SIZES = [1] * 80 + [2] * 3 + [4] * 6 + [8] * 11


def synthetic_cluster(seed: int = 1) -> ClusterSpec:
    rng = random.Random(seed)
    placements = []
    for i in range(40):
        node = f"node-{i:03d}"
        if i % 5 == 0:  # mixed node: two placements
            placements += [Placement(node, "rtx4090", 4), Placement(node, "rtx5090", 4)]
        else:
            placements.append(Placement(node, rng.choice(["rtx3080ti", "rtx4090", "rtx5090"]), 8))
    events = []
    for k in range(6):
        node = f"node-{rng.randrange(40):03d}"
        down = rng.uniform(0, 9 * 86400)
        events += [NodeEvent(down, node, "down"), NodeEvent(down + 3600 * (1 + k), node, "up")]
    events.sort(key=lambda e: e.time)
    return ClusterSpec(TIERS, tuple(sorted(placements, key=lambda p: p.key)), {}, tuple(events))


def synthetic_trace(n: int, seed: int = 2, mu: float = 7.4) -> list[TraceJob]:
    """n jobs over 10 days; run times log-normal(mu, 1.9) seconds (7.4: busy, 7.8: overloaded)."""
    rng = random.Random(seed)
    labs = [f"lab{i:02d}" for i in range(20)]
    weights = [1 / (i + 1) for i in range(20)]
    span = 10 * 86400.0
    jobs = []
    for i in range(n):
        submit = round(rng.uniform(0, span))
        duration = round(min(rng.lognormvariate(mu, 1.9), 5 * 86400)) + 1
        estimate = round(duration * rng.uniform(1.0, 3.0))
        oom = frozenset({"rtx3080ti"}) if rng.random() < 0.01 else frozenset()
        cancel = submit + rng.randrange(60, 7200) if rng.random() < 0.01 else None
        jobs.append(
            TraceJob(
                job_id=f"job{i:05d}",
                submit_time=submit,
                duration=duration,
                num_gpus=rng.choice(SIZES),
                lab=rng.choices(labs, weights)[0],
                cancel_time=cancel,
                oom_on=oom,
                time_limit=estimate,
            )
        )
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--jobs", type=int, default=15_000)
    ap.add_argument("--policy", action="append", choices=list(POLICIES))
    ap.add_argument("--every-cycle", action="store_true")
    ap.add_argument(
        "--overloaded", action="store_true", help="longer jobs: queues of thousands, waits of days"
    )
    args = ap.parse_args()
    cluster = synthetic_cluster()
    jobs = synthetic_trace(args.jobs, mu=7.8 if args.overloaded else 7.4)
    print(f"{len(jobs)} jobs, {cluster.capacity_gpus} GPUs, {len(cluster.placements)} placements")
    print(
        f"{'policy':<12} {'wall s':>7} {'cycles run':>10} {'of':>8} {'util':>6} {'wait p95 s':>11}"
        f" {'mean queue':>10}"
    )
    for policy in args.policy or list(POLICIES):
        queued: list[int] = []

        def observe(snapshot: Snapshot, decisions: Decisions, queued: list[int] = queued) -> None:
            queued.append(len(snapshot.queue))

        t0 = time.perf_counter()
        r = simulate(cluster, jobs, policy, 5.0, every_cycle=args.every_cycle)
        wall = time.perf_counter() - t0
        simulate(cluster, jobs, policy, 5.0, observer=observe)
        s = summary(r)
        print(
            f"{policy:<12} {wall:7.2f} {r.cycles_run:10d} {r.cycles_total:8d} "
            f"{s['gpu_utilization']:6.1%} {s['wait_s']['p95']:11.0f} "
            f"{sum(queued) / max(1, len(queued)):10.0f}"
        )


if __name__ == "__main__":
    main()
