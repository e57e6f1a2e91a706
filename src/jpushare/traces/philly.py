"""Microsoft Philly (DIR-LAB 15k-job subset) → TRACE.csv.

Source: `data/traces/philly_dirlab_15k/philly_data_training.csv`, columns
`u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status`. Rows are in
submit order; `interval` is the gap to the previous submission, so submit time is the
running sum (the first row at 0). `wall_time` is always 0: the trace has no queueing data,
only how long each job ran.

Decisions (each one is counted in the `LoadReport` and printed by `jpushare trace philly`):

- **Labs from users.** Users are ranked by their number of jobs in the *whole file* (ties:
  smaller numeric user id first). The `top_users` (default 8) busiest users are each their
  own lab, `u<user>`; every other user goes to one of `other_labs` (default 4) shared labs,
  `grp<k>` with `k = crc32(user) % other_labs`. CRC-32 (not Python's salted `hash`) keeps the
  assignment identical across runs and machines, and ranking over the whole file keeps a
  user's lab the same whatever window is selected. In this trace the top 5 users submit
  half the jobs, so the big labs compete with each other and with four pools of small users.
- **Over 8 GPUs** (280 jobs, 16–48 GPUs, always multi-node): outside SPEC §2 (1–8 GPUs on
  one node). Default `over8="drop"`: dropped and counted. `over8="clamp"` keeps them as
  8-GPU jobs with the same duration instead (less demand than the real job).
- **Multi-node jobs of at most 8 GPUs** (160 jobs: e.g. 8 GPUs over 2–8 nodes, 4 over 2):
  Philly's scheduler spread them because no single node had the GPUs free, not because the
  job needed several nodes; a JPU-Share user would ask for the same GPUs on one node.
  Default `multi_node="keep"`: kept as a one-node job (counted as adjusted);
  `multi_node="drop"` drops them.
- **Killed jobs** (1,953): `run_time` is how long the job ran before the user (or the
  system) killed it. Default `killed="duration"`: a plain job of that duration, like Pass
  and Failed ones. Why: the trace has no queueing data, so the real kill time on the
  simulator's clock is unknown; the user's decision to kill was taken while watching the
  job *run*, and keeping it a duration makes every policy replay the same GPU-seconds of
  work, which is what a policy comparison needs. `killed="cancel"` instead sets
  `cancel_time = submit + run_time` (the kill as a wall-clock deadline: a job that waits in
  the simulated queue runs shorter, or is cancelled before it starts).
- **time_limit** (used by EASY backfill): `time_limit="hour"` (default) writes
  `hour_time_limit(run_time)`: the duration rounded up to whole hours, at least one hour;
  `time_limit="none"` leaves the column empty (the simulator then uses the exact duration).
- **Window.** `window_s` (e.g. `10 * DAY_S`, the CLI's `--window last10d`) keeps only jobs
  submitted in the last `window_s` seconds before the file's last submission: the first
  ~48 days are sparse, the last ~10 hold ~14k jobs. Earlier jobs are dropped (counted);
  the cluster starts empty. Times are rebased so the first kept job is submitted at 0.
  With `carry_over=True` (`--carry-over`), a job submitted before the window that would
  still be running at its start (had it started at submission: there is no queueing
  data) enters at the window start with its remaining duration, and t = 0 is the window
  start: the replay then begins with the standing load of long jobs.
- `min_tier` is empty (Philly has no GPU-model constraint); `oom_on` is empty.
- `job_id` is `p<u_id>` zero-padded to five digits, so text order = trace order.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jpushare.traces import (
    MAX_GPUS_PER_JOB,
    LoadReport,
    TraceRow,
    TraceWindow,
    csv_records,
    hour_time_limit,
    read_csv_file,
    window_start,
)

PHILLY_COLUMNS: tuple[str, ...] = (
    "u_id",
    "user",
    "gpu_num",
    "cpu_num",
    "node_num",
    "interval",
    "run_time",
    "wall_time",
    "new_status",
)

Over8 = Literal["drop", "clamp"]
MultiNode = Literal["keep", "drop"]
Killed = Literal["duration", "cancel"]
TimeLimitRule = Literal["hour", "none"]


@dataclass(frozen=True, slots=True)
class PhillyJob:
    """One raw Philly row, with its absolute submit time (running sum of `interval`)."""

    u_id: int
    user: str
    gpu_num: int
    node_num: int
    submit_time: int
    run_time: int
    status: str


@dataclass(frozen=True, slots=True)
class PhillyOptions:
    """How to convert; the defaults are the documented choices of the module docstring."""

    top_users: int = 8
    other_labs: int = 4
    over8: Over8 = "drop"
    multi_node: MultiNode = "keep"
    killed: Killed = "duration"
    time_limit: TimeLimitRule = "hour"
    window_s: int | None = None
    carry_over: bool = False


def parse_philly(lines: Iterable[str]) -> list[PhillyJob]:
    """Parse the raw CSV text (header included) into jobs with absolute submit times."""
    reader = csv_records(lines, PHILLY_COLUMNS, "a Philly DIR-LAB trace")
    jobs: list[PhillyJob] = []
    clock = 0
    for record in reader:
        clock += int(record["interval"])
        jobs.append(
            PhillyJob(
                u_id=int(record["u_id"]),
                user=record["user"].strip(),
                gpu_num=int(record["gpu_num"]),
                node_num=int(record["node_num"]),
                submit_time=clock,
                run_time=int(record["run_time"]),
                status=record["new_status"].strip(),
            )
        )
    return jobs


def read_philly(path: str | Path) -> list[PhillyJob]:
    """`parse_philly` on a file."""
    return read_csv_file(path, parse_philly)


def _user_sort_key(user: str) -> tuple[int, int | str]:
    return (0, int(user)) if user.isdigit() else (1, user)


def philly_labs(
    jobs: Sequence[PhillyJob], top_users: int = 8, other_labs: int = 4
) -> dict[str, str]:
    """user -> lab. The `top_users` users with most jobs get `u<user>`, the rest `grp<k>`.

    Ranking: job count descending, ties by numeric user id ascending. Others:
    `k = zlib.crc32(user.encode()) % other_labs`. Deterministic for a given file.
    """
    if top_users < 0 or other_labs < 1:
        raise ValueError("top_users must be >= 0 and other_labs >= 1")
    counts = Counter(job.user for job in jobs)
    ranked = sorted(counts, key=lambda u: (-counts[u], _user_sort_key(u)))
    top = set(ranked[:top_users])
    labs: dict[str, str] = {}
    for user in ranked:
        if user in top:
            labs[user] = f"u{user}"
        else:
            labs[user] = f"grp{zlib.crc32(user.encode('utf-8')) % other_labs}"
    return labs


def convert_philly(
    jobs: Sequence[PhillyJob], options: PhillyOptions | None = None
) -> tuple[list[TraceRow], LoadReport]:
    """Philly jobs -> trace rows (rebased to start at 0) and the counts of what was done."""
    opts = options or PhillyOptions()
    report = LoadReport(source="philly")
    labs = philly_labs(jobs, opts.top_users, opts.other_labs)
    window = TraceWindow(
        report, window_start((job.submit_time for job in jobs), opts.window_s), opts.carry_over
    )
    rows: list[TraceRow] = []
    for job in jobs:
        report.read += 1
        placed = window.place(job.submit_time, job.run_time, "submitted before the window")
        if placed is None:
            continue
        submit, duration = placed
        if job.run_time <= 0:
            report.drop("run_time <= 0")
            continue
        if job.gpu_num < 1:
            report.drop("no GPU")
            continue
        gpus = job.gpu_num
        if gpus > MAX_GPUS_PER_JOB:
            if opts.over8 == "drop":
                report.drop("over 8 GPUs (multi-node)")
                continue
            report.adjusted["over 8 GPUs clamped to 8"] += 1
            gpus = MAX_GPUS_PER_JOB
        elif job.node_num > 1:
            if opts.multi_node == "drop":
                report.drop("multi-node, <= 8 GPUs")
                continue
            report.adjusted["multi-node, <= 8 GPUs: kept on one node"] += 1
        if submit != job.submit_time:
            report.adjusted["running at the window start: carried over, remaining duration"] += 1
        cancel: int | None = None
        if job.status == "Killed":
            if opts.killed == "cancel":
                cancel = job.submit_time + job.run_time
                report.adjusted["Killed: cancel_time = submit + run_time"] += 1
            else:
                report.adjusted["Killed: kept as a plain duration"] += 1
        limit = hour_time_limit(duration) if opts.time_limit == "hour" else None
        rows.append(
            TraceRow(
                job_id=f"p{job.u_id:05d}",
                submit_time=submit,
                duration=duration,
                num_gpus=gpus,
                lab=labs[job.user],
                cancel_time=cancel,
                time_limit=limit,
            )
        )
    return window.finish(rows)


def load_philly(
    path: str | Path, options: PhillyOptions | None = None
) -> tuple[list[TraceRow], LoadReport]:
    """Read and convert the Philly CSV at `path`."""
    return convert_philly(read_philly(path), options)


__all__ = [
    "PHILLY_COLUMNS",
    "PhillyJob",
    "PhillyOptions",
    "convert_philly",
    "load_philly",
    "parse_philly",
    "philly_labs",
    "read_philly",
]
