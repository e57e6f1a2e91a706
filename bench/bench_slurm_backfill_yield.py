"""Yield latency of LLM backfill on Slurm: research sbatch -> the job running on GPUs that
backfill jobs held (Slurm preempts them: SIGTERM, their exit, then the start).

On the fake cluster (scripts/slurm/start-fake-cluster.sh, node-b's four 5090s free), as
root. Each round: four 1-GPU backfill jobs (the stand-in takes `--exit-after` seconds to
exit after SIGTERM, as a server draining its requests would), then a 2-GPU research job
pinned to node-b; it prints, per round, the seconds until `find()` reports it RUNNING
(polled every 0.05 s) and Slurm's own start - submit (whole seconds). Prints numbers only,
asserts nothing:

    PYTHONPATH=src python bench/bench_slurm_backfill_yield.py --rounds 5 --exit-after 1
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from jpushare.executors.base import LaunchSpec, RunState
from jpushare.executors.slurm import SlurmExecutor
from jpushare.executors.slurm_backfill import BackfillSlot


def _wait(probe: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit("timed out: is node-b free and the backfill partition there?")
        time.sleep(0.05)


def one_round(ex: SlurmExecutor, exit_after: float) -> tuple[float, float]:
    bf = ex.backfill
    assert bf is not None
    server = f"trap 'sleep {exit_after}; exit 0' TERM; while :; do sleep 0.1; done"
    ids = [bf.submit(BackfillSlot("node-b", "rtx5090", i), 1, server, {}) for i in range(4)]

    def all_running() -> bool:
        jobs = bf.keeper_jobs()
        return all(sid in jobs and jobs[sid][1].state == "RUNNING" for sid in ids)

    _wait(all_running)
    job_id = f"b{uuid.uuid4().hex[:10]}"
    spec = LaunchSpec(job_id, 1, "bench", "sleep 300", "node-b", "rtx5090", 2, "gpu")
    t0 = time.monotonic()
    sid = ex.submit(spec)

    def running() -> bool:
        info = ex.find(job_id, 1)
        return info is not None and info.state is RunState.RUNNING

    _wait(running)
    seen = time.monotonic() - t0
    (job,) = [j for j in bf.executor._squeue(f"--name={ex.name_prefix}-{job_id}-1")]
    slurm_s = (job.started_at or 0.0) - (job.submitted_at or 0.0)
    ex.cancel(sid)
    for b in ids:
        bf.cancel(b)
    _wait(
        lambda: all(g.used == 0 and g.backfill == 0 for g in ex.inventory() if g.node == "node-b")
    )
    return seen, slurm_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--exit-after", type=float, default=1.0)
    args = ap.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="bench-backfill-"))
    logs.chmod(0o777)
    ex = SlurmExecutor(logs, name_prefix=f"bb{uuid.uuid4().hex[:6]}")
    seen, slurm = [], []
    try:
        for n in range(args.rounds):
            a, b = one_round(ex, args.exit_after)
            seen.append(a)
            slurm.append(b)
            print(f"round {n + 1}: running after {a:.2f} s (Slurm: start - submit = {b:.0f} s)")
    finally:  # leave none of this run's jobs behind
        for job in ex._squeue():
            if job.name.startswith(ex.name_prefix) and not job.state.startswith(("COMPL", "CANC")):
                ex.cancel(job.slurm_id)
    print(
        f"yield latency over {args.rounds} rounds, servers exiting {args.exit_after:g} s after "
        f"SIGTERM: median {statistics.median(seen):.2f} s, max {max(seen):.2f} s"
    )


if __name__ == "__main__":
    main()
