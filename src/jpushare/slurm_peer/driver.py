"""The I/O of a peer run: sacctmgr, sbatch, scancel, squeue and sacct on the cluster that
SLURM_CONF names, at the trace's scaled times. The decisions are `plan`'s."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jpushare.formats.cluster_file import ClusterSpec
from jpushare.formats.trace_file import TraceJob
from jpushare.policy.watch import percentile
from jpushare.sim.engine import SimResult
from jpushare.sim.report import write_outputs
from jpushare.slurm_peer.plan import Request, account_of, plan_requests, to_result
from jpushare.slurm_peer.sacct import SACCT_FORMAT, SacctJob, parse_sacct

#: Runs argv with stdin text; returns (exit code, stdout, stderr).
Runner = Callable[[Sequence[str], str | None], tuple[int, str, str]]


class PeerError(Exception):
    """The cluster refused or could not be reached; the message says which command."""


def command_runner(slurm_conf: str | None = None, timeout_s: float = 60.0) -> Runner:
    """The real runner: no shell, times in UTC (as the executor runs Slurm's commands), on
    the cluster of `slurm_conf` (default: the caller's SLURM_CONF)."""
    env = {**os.environ, "TZ": "UTC0", "SLURM_TIME_FORMAT": "standard"}
    if slurm_conf is not None:
        env["SLURM_CONF"] = slurm_conf

    def run(argv: Sequence[str], stdin: str | None) -> tuple[int, str, str]:
        proc = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr

    return run


def _check(run: Runner, argv: Sequence[str], stdin: str | None = None) -> str:
    code, out, err = run(argv, stdin)
    if code != 0:
        raise PeerError(f"{' '.join(argv[:3])}…: exit {code}: {err.strip() or out.strip()}")
    return out


def ensure_accounts(run: Runner, labs: Iterable[str], user: str = "root") -> list[str]:
    """One Slurm account per lab (equal shares, Fairshare=1) with `user` in it, every
    account's usage reset to 0 (the simulator starts each run from the cluster file's usage,
    0 for these labs). Returns the accounts."""
    have = set(_check(run, ["sacctmgr", "-n", "-P", "show", "account", "format=account"]).split())
    accounts = sorted({account_of(lab) for lab in labs})
    for acct in accounts:
        if acct not in have:
            _check(run, ["sacctmgr", "-i", "add", "account", acct, "Fairshare=1"])
    assoc = _check(
        run, ["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", "format=account"]
    ).split()
    for acct in accounts:
        if acct not in assoc:
            _check(run, ["sacctmgr", "-i", "add", "user", user, f"account={acct}"])
    for acct in accounts:
        _check(run, ["sacctmgr", "-i", "modify", "account", acct, "set", "RawUsage=0"])
    return accounts


def busy_jobs(run: Runner) -> list[str]:
    """Jobs pending or running on the cluster (a run would share it with them)."""
    return _check(run, ["squeue", "-h", "-o", "%i"]).split()


def active_ids(run: Runner, ids: Iterable[str]) -> set[str]:
    """Which of `ids` squeue still shows pending, running or completing."""
    wanted = list(ids)
    if not wanted:
        return set()
    out = _check(run, ["squeue", "-h", "-o", "%i", "-j", ",".join(wanted)])
    return set(out.split()) & set(wanted)


def read_sacct(run: Runner, ids: Sequence[str]) -> list[SacctJob]:
    if not ids:
        return []
    out = _check(run, ["sacct", "-X", "-n", "--parsable2", "-o", SACCT_FORMAT, "-j", ",".join(ids)])
    return parse_sacct(out)


@dataclass(slots=True)
class RunLog:
    """What the run did besides what sacct records (peer.json)."""

    t0: float = 0.0
    slurm_ids: dict[str, str] = field(default_factory=dict)  # trace job -> Slurm job id
    submit_lag_s: list[float] = field(default_factory=list)  # wall seconds late, per sbatch
    cancelled: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # trace job -> sbatch's error


@dataclass(frozen=True, slots=True)
class _Event:
    at: float  # wall seconds after t0
    kind: str  # "submit" | "cancel"
    request: Request


def _events(requests: Mapping[str, Request | None]) -> list[_Event]:
    ev: list[_Event] = []
    for req in requests.values():
        if req is None:
            continue
        ev.append(_Event(req.submit_at, "submit", req))
        if req.cancel_at is not None:
            ev.append(_Event(req.cancel_at, "cancel", req))
    ev.sort(key=lambda e: (e.at, e.kind != "submit", e.request.job_id))
    return ev


def submit_all(
    run: Runner,
    requests: Mapping[str, Request | None],
    name_prefix: str,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 4,
) -> RunLog:
    """Submit and cancel at the scaled times (sbatch in a few threads, so that a burst of
    submissions is late by the slowest few, not the sum)."""
    log = RunLog(t0=math.ceil(clock()) + 2.0)
    events = _events(requests)
    total = sum(1 for e in events if e.kind == "submit")
    done = 0

    def submit(req: Request) -> tuple[Request, float, int, str, str]:
        code, out, err = run(["sbatch", *req.sbatch_args(name_prefix)], req.script())
        return req, clock() - (log.t0 + req.submit_at), code, out, err

    with ThreadPoolExecutor(max_workers=workers) as pool:
        i = 0
        while i < len(events):
            wait = log.t0 + events[i].at - clock()
            if wait > 0:
                sleep(min(wait, 1.0))
                continue
            due: list[_Event] = []
            now = clock() - log.t0
            while i < len(events) and events[i].at <= now:
                due.append(events[i])
                i += 1
            subs = [e.request for e in due if e.kind == "submit"]
            for req, lag, code, out, err in pool.map(submit, subs):
                if code == 0 and out.strip():
                    log.slurm_ids[req.job_id] = out.strip().split(";")[0]
                    log.submit_lag_s.append(lag)
                else:
                    log.refused[req.job_id] = (err or out).strip()
            done += len(subs)
            if progress is not None and subs:
                progress(done, total)
            cancels = [log.slurm_ids[e.request.job_id] for e in due if e.kind == "cancel"]
            cancels = [c for c in cancels if c]
            if cancels:
                run(["scancel", *cancels], None)
                log.cancelled += [e.request.job_id for e in due if e.kind == "cancel"]
    return log


def wait_until_done(
    run: Runner,
    ids: Iterable[str],
    *,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 1.0,
    status: Callable[[int], None] | None = None,
) -> None:
    left = set(ids)
    while left:
        left = active_ids(run, left)
        if status is not None:
            status(len(left))
        if left:
            sleep(poll_s)


def collect(
    run: Runner,
    slurm_ids: Mapping[str, str],
    *,
    sleep: Callable[[float], None] = time.sleep,
    tries: int = 60,
) -> dict[str, SacctJob]:
    """sacct's record of every submitted job, once each is final there (slurmctld sends the
    end of a job to slurmdbd a moment after squeue stops showing it)."""
    by_slurm = {sid: job for job, sid in slurm_ids.items()}
    records: dict[str, SacctJob] = {}
    for _ in range(tries):
        records = {
            by_slurm[r.slurm_id]: r
            for r in read_sacct(run, sorted(by_slurm, key=int))
            if r.slurm_id in by_slurm
        }
        if len(records) == len(by_slurm) and all(r.final for r in records.values()):
            return records
        sleep(1.0)
    missing = sorted(set(slurm_ids) - set(records))
    unfinished = sorted(j for j, r in records.items() if not r.final)
    print(
        f"jpushare slurm-peer: sacct lacks {len(missing)} job(s), {len(unfinished)} not final",
        file=sys.stderr,
    )
    return records


def cancel_all(run: Runner, ids: Iterable[str]) -> None:
    ids = list(ids)
    if ids:
        run(["scancel", *ids], None)


def run_trace(
    jobs: Sequence[TraceJob],
    cluster: ClusterSpec,
    speed: float,
    out_dir: Path,
    *,
    run: Runner | None = None,
    name_prefix: str = "peer-",
    progress: Callable[[int, int], None] | None = None,
    status: Callable[[int], None] | None = None,
) -> tuple[SimResult, dict[str, Any]]:
    """The whole run: accounts, submissions and cancels, the wait, sacct, the outputs."""
    run = run or command_runner()
    started = time.monotonic()
    requests = plan_requests(jobs, cluster, speed)
    ensure_accounts(run, {j.lab for j in jobs})
    log = RunLog()
    try:
        log = submit_all(run, requests, name_prefix, progress=progress)
        wait_until_done(run, log.slurm_ids.values(), status=status)
    except KeyboardInterrupt:
        cancel_all(run, log.slurm_ids.values())
        raise
    records = collect(run, log.slurm_ids)
    wall = time.monotonic() - started
    result = to_result(jobs, cluster, requests, records, log.t0, speed, wall)
    doc = write_outputs(result, out_dir)
    meta = run_meta(log, records, requests, speed)
    (out_dir / "peer.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return result, doc


def run_meta(
    log: RunLog,
    records: Mapping[str, SacctJob],
    requests: Mapping[str, Request | None],
    speed: float,
) -> dict[str, Any]:
    """peer.json: the run's scale and what jobs.csv cannot say (sbatch lateness, GPUs of
    two types in one job, the Slurm id of each trace job)."""
    lags = sorted(log.submit_lag_s)
    mixed = sorted(j for j, r in records.items() if len(r.gpus) > 1)
    return {
        "speed": speed,
        "t0_unix": log.t0,
        "slurm_conf": os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"),
        "submitted": len(log.slurm_ids),
        "not_submitted": sorted(j for j, r in requests.items() if r is None),
        "refused_by_sbatch": log.refused,
        "cancelled": sorted(log.cancelled),
        "submit_lag_wall_s": {
            "mean": round(math.fsum(lags) / len(lags), 3) if lags else None,
            "p95": round(percentile(lags, 95), 3) if lags else None,
            "max": round(lags[-1], 3) if lags else None,
        },
        "mixed_gpu_types": mixed,
        "slurm_ids": log.slurm_ids,
        "states": {j: r.state for j, r in sorted(records.items())},
    }
