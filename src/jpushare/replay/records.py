"""The service's records of a replay, as the simulator's `SimResult` (pure: JSON in).

Each replayed job's `GET /v1/jobs/{id}` and `GET /v1/jobs/{id}/attempts` become one
`TraceJobResult`, so `sim.report` writes jobs.csv and summary.json exactly as for a simulated
run. A service time T is trace time (T - t0) x speed; a cost in TFLOP-s, which the service
counts in real seconds, is multiplied by the speed. An attempt starts when its executor
says it started (else when it was dispatched: one cancelled before it started) and ends
when its executor says it ended. A reservation's size is not in the records: it counts as
the job's GPU count (what a filled one reached; a released one may have held fewer).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jpushare.formats.trace_file import TraceJob
from jpushare.policy.model import ReleaseReason
from jpushare.sim.engine import (
    Attempt,
    AttemptEnd,
    ReservationRecord,
    SimResult,
    TraceJobResult,
    TraceJobState,
)
from jpushare.vocabulary import JobState

JSON = dict[str, Any]

_OUTCOMES = {  # an attempt's outcome, as the API writes it
    JobState.COMPLETED: AttemptEnd.COMPLETED,
    "OOM_REQUEUED": AttemptEnd.OOM,
    "NODE_FAIL_REQUEUED": AttemptEnd.NODE_DOWN,
    JobState.CANCELLED: AttemptEnd.CANCELLED,
}
_ENDED: dict[str, TraceJobState] = {
    JobState.COMPLETED: TraceJobState.COMPLETED,
    JobState.FAILED: TraceJobState.FAILED,
    JobState.CANCELLED: TraceJobState.CANCELLED,
}
_MEMORY = re.compile(r"out of memory", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class LiveJob:
    """A trace job and what the service recorded of it (`job` None: refused at submission,
    `reason` says why)."""

    trace: TraceJob
    job: JSON | None = None
    attempts: JSON | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ServiceView:
    """What a replay knows of the service beside its jobs."""

    t0: float  # UNIX seconds of trace time 0
    speed: float
    cycle_s: float  # the service's cycle, real seconds
    tflops: Mapping[str, float]  # tier -> TFLOPS
    capacity_gpus: int
    lab_usage_start: Mapping[str, float]  # TFLOP-s, as the service counts them (real)
    lab_usage_end: Mapping[str, float]
    cycles_run: int = 0
    placement: str = "pack"
    wall_s: float = 0.0


@dataclass(frozen=True, slots=True)
class JobTimes:
    """Per job, for `compare`: the first attempt's dispatch and start in trace seconds (the
    gap is the executor's start latency), the service's job id."""

    job_id: str
    service_id: int | None
    first_dispatch: float | None
    first_start: float | None


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


class _Clock:
    def __init__(self, t0: float, speed: float) -> None:
        self.t0 = t0
        self.speed = speed

    def trace(self, when: datetime | None) -> float | None:
        return None if when is None else (when.timestamp() - self.t0) * self.speed


def _attempts(live: LiveJob, clock: _Clock) -> list[Attempt]:
    out: list[Attempt] = []
    job = live.job or {}
    for a in (live.attempts or {}).get("data", []):
        outcome_name = str(a.get("outcome"))
        start = clock.trace(_time(a.get("started_at")) or _time(a.get("dispatched_at")))
        if start is None:
            continue
        end = clock.trace(_time(a.get("ended_at")))
        if outcome_name in _OUTCOMES:
            outcome = _OUTCOMES[outcome_name]
        elif outcome_name == JobState.FAILED:
            reason = str(a.get("reason") or job.get("reason") or "")
            outcome = AttemptEnd.OOM if _MEMORY.search(reason) else AttemptEnd.COMPLETED
        else:  # still dispatched or running when the replay stopped waiting
            outcome = AttemptEnd.CANCELLED
        out.append(
            Attempt(
                start=start,
                end=start if end is None else max(start, end),
                node=str(a.get("node") or ""),
                tier=str(a.get("tier") or ""),
                num_gpus=int(a.get("num_gpus") or live.trace.num_gpus),
                outcome=outcome,
                run_cost=_num(a.get("run_cost_tflop_s")) * clock.speed,
            )
        )
    return out


def _state(live: LiveJob, attempts: Sequence[Attempt]) -> TraceJobState:
    if live.job is None:
        return TraceJobState.REJECTED
    state = str(live.job.get("state"))
    if state in _ENDED:
        return _ENDED[state]
    return TraceJobState.RUNNING if attempts and state == JobState.RUNNING else TraceJobState.QUEUED


def _reservations(live: LiveJob, clock: _Clock) -> list[ReservationRecord]:
    out: list[ReservationRecord] = []
    for r in (live.attempts or {}).get("reservations", []):
        since = clock.trace(_time(r.get("started_at")))
        if since is None:
            continue
        released = r.get("released")
        out.append(
            ReservationRecord(
                job_id=live.trace.job_id,
                node=str(r.get("node") or ""),
                tier=str(r.get("tier") or ""),
                gpus=live.trace.num_gpus,
                since=since,
                ended_at=clock.trace(_time(r.get("ended_at"))),
                reason=ReleaseReason(released) if released else None,
            )
        )
    return out


def job_record(live: LiveJob, clock: _Clock) -> TraceJobResult:
    attempts = _attempts(live, clock)
    job = live.job or {}
    reason = live.reason or str(job.get("reason") or "")
    return TraceJobResult(
        job_id=live.trace.job_id,
        lab=live.trace.lab,
        num_gpus=live.trace.num_gpus,
        state=_state(live, attempts),
        submit_time=live.trace.submit_time,
        attempts=tuple(attempts),
        run_cost=_num(job.get("run_cost_tflop_s")) * clock.speed,
        reservation_cost=_num(job.get("reservation_cost_tflop_s")) * clock.speed,
        billed=_num(job.get("charged_tflop_s")) * clock.speed,
        reason=reason,
    )


def sim_result(jobs: Sequence[LiveJob], view: ServiceView) -> SimResult:
    """The replay as the simulator's result (trace order; `policy` is the service's)."""
    clock = _Clock(view.t0, view.speed)
    records = [job_record(j, clock) for j in jobs]
    reservations = sorted(
        (r for j in jobs for r in _reservations(j, clock)), key=lambda r: (r.since, r.job_id)
    )
    running = math.fsum((a.end - a.start) * a.num_gpus for j in records for a in j.attempts)
    reserved = 0.0
    for rec, live in zip(records, jobs, strict=True):
        spans = (live.attempts or {}).get("reservations", [])
        tier = str(spans[0].get("tier") or "") if spans else ""
        if rec.reservation_cost and view.tflops.get(tier):
            reserved += rec.reservation_cost / view.tflops[tier]
    labs = sorted({j.lab for j in records} | set(view.lab_usage_start) | set(view.lab_usage_end))
    return SimResult(
        policy="reservation",
        cycle_s=view.cycle_s * view.speed,
        jobs=tuple(records),
        reservations=tuple(reservations),
        initial_lab_usage={lab: view.lab_usage_start.get(lab, 0.0) * view.speed for lab in labs},
        lab_usage={lab: view.lab_usage_end.get(lab, 0.0) * view.speed for lab in labs},
        capacity_gpus=view.capacity_gpus,
        running_gpu_s=running,
        reserved_gpu_s=reserved,
        gpu_timeline=(),
        lab_timeline=(),
        cycles_run=view.cycles_run,
        cycles_total=view.cycles_run,
        wall_s=view.wall_s,
        placement=view.placement,
    )


def job_times(jobs: Sequence[LiveJob], view: ServiceView) -> list[JobTimes]:
    """Each job's first dispatch and first start in trace seconds."""
    clock = _Clock(view.t0, view.speed)
    out: list[JobTimes] = []
    for live in jobs:
        attempts = (live.attempts or {}).get("data", [])
        first: JSON | None = attempts[0] if attempts else None
        out.append(
            JobTimes(
                job_id=live.trace.job_id,
                service_id=None if live.job is None else int(live.job["id"]),
                first_dispatch=clock.trace(_time(first.get("dispatched_at"))) if first else None,
                first_start=clock.trace(_time(first.get("started_at"))) if first else None,
            )
        )
    return out
