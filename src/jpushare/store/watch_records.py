"""The watch-list's records (SPEC §10) for a time window, read from jobs and job_events.

`load_watch_records(session, since, until)` returns what `jpushare.policy.watch` computes
on, the same records the simulator builds from its replay:

- every reservation that *started* in the window (a `reservation_started` event), with its
  size when it ended (`absorbed` totals) and its release (`released` event, detail.reason),
  or none if it was still held at `until`, and its size over time (`steps`: the start and
  each absorption), for the GPU-seconds it held;
- every job that *ended* (COMPLETED, FAILED, CANCELLED) in the window, with its run cost,
  reservation cost and what was charged to its lab; its wait runs from submission to its
  first `dispatched` event (the simulator starts a job when it dispatches it).

`lab_reservation_totals` and `size_totals` are the all-time sums behind the watch-list's
Prometheus counters (`jpushare.metrics`), aggregated in SQL because a scrape reads them.

Only SELECTs, in the caller's session. Times become UNIX seconds, the policy's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from jpushare.policy.watch import FAILED_REASONS, EndedJob, ReservationSpan
from jpushare.store.schema import ENDED_STATES, EventKind, Job, JobEvent, Lab
from jpushare.store.times import to_epoch
from jpushare.vocabulary import ReleaseReason, store_job_id
from jpushare.vocabulary import job_id as policy_id

_RESERVATION_EVENTS = (
    EventKind.RESERVATION_STARTED.value,
    EventKind.ABSORBED.value,
    EventKind.RELEASED.value,
)


def load_reservation_spans(
    session: Session, since: datetime, until: datetime
) -> list[ReservationSpan]:
    """Reservations started in [since, until], each with its release if it came by `until`.

    One pass over the reservation events of the window in (job, event id) order: a job
    holds at most one reservation at a time (R1), so each `released` closes the span its
    job opened last. A release whose start lies before `since` is not this window's.
    """
    rows = session.execute(
        select(JobEvent.job_id, JobEvent.at, JobEvent.kind, JobEvent.detail, Lab.name)
        .join(Job, Job.id == JobEvent.job_id)
        .join(Lab, Lab.id == Job.lab_id)
        .where(
            JobEvent.kind.in_(_RESERVATION_EVENTS),
            JobEvent.at >= since,
            JobEvent.at <= until,
        )
        .order_by(JobEvent.job_id, JobEvent.id)
    )
    spans: list[ReservationSpan] = []
    open_span: dict[int, dict[str, Any]] = {}
    for job_id, at, kind, detail, lab in rows:
        d: dict[str, Any] = detail or {}
        if kind == EventKind.RESERVATION_STARTED.value:
            open_span[job_id] = {
                "lab": lab,
                "tier": str(d.get("tier", "")),
                "gpus": int(d.get("gpus", 0)),
                "started_at": to_epoch(at),
                "steps": [(to_epoch(at), int(d.get("gpus", 0)))],
            }
            continue
        span = open_span.get(job_id)
        if span is None:
            continue  # it started before the window
        if kind == EventKind.ABSORBED.value:
            span["gpus"] = int(d.get("total", span["gpus"]))
            span["steps"].append((to_epoch(at), span["gpus"]))
            continue
        del open_span[job_id]
        spans.append(
            ReservationSpan(
                policy_id(job_id),
                span["lab"],
                span["tier"],
                int(d.get("gpus", span["gpus"])),
                span["started_at"],
                to_epoch(at),
                _reason(d.get("reason")),
                tuple(span["steps"]),
            )
        )
    for job_id, span in open_span.items():
        spans.append(
            ReservationSpan(
                policy_id(job_id),
                span["lab"],
                span["tier"],
                span["gpus"],
                span["started_at"],
                steps=tuple(span["steps"]),
            )
        )
    spans.sort(key=lambda s: (s.started_at, store_job_id(s.job_id)))
    return spans


def _reason(raw: object) -> ReleaseReason | None:
    try:
        return ReleaseReason(str(raw))
    except ValueError:
        return None


def _first_dispatch() -> Any:
    """SQL for a job's first dispatch time. A job dispatched once (`attempts` counts every
    dispatch) still has it in `dispatched_at`; only the others need the
    earliest `dispatched` event, looked up through job_events' (job_id, id) index."""
    earliest_event = (
        select(func.min(JobEvent.at))
        .where(JobEvent.job_id == Job.id, JobEvent.kind == EventKind.DISPATCHED.value)
        .correlate(Job)
        .scalar_subquery()
    )
    return case(
        (Job.attempts == 0, None),
        ((Job.attempts == 1) & Job.dispatched_at.is_not(None), Job.dispatched_at),
        else_=earliest_event,
    )


def load_ended_jobs(session: Session, since: datetime, until: datetime) -> list[EndedJob]:
    """Jobs that ended in [since, until], with their costs and their wait."""
    first_dispatch = _first_dispatch()
    rows = session.execute(
        select(
            Job.id,
            Lab.name,
            Job.num_gpus,
            Job.submitted_at,
            first_dispatch,
            Job.run_cost,
            Job.reservation_gpu_seconds,
            Job.charged_tflop_s,
        )
        .join(Lab, Lab.id == Job.lab_id)
        .where(
            Job.state.in_([s.value for s in ENDED_STATES]),
            Job.ended_at >= since,
            Job.ended_at <= until,
        )
        .order_by(Job.id)
    )
    out = []
    for job_id, lab, num_gpus, submitted, dispatched, run, reserved, charged in rows:
        wait = None
        if dispatched is not None:
            wait = max(0.0, to_epoch(dispatched) - to_epoch(submitted))
        out.append(
            EndedJob(
                policy_id(job_id), lab, num_gpus, wait, float(run), float(reserved), float(charged)
            )
        )
    return out


def load_watch_records(
    session: Session, since: datetime, until: datetime
) -> tuple[list[ReservationSpan], list[EndedJob]]:
    """Both record sets of the window (see the module docstring)."""
    return load_reservation_spans(session, since, until), load_ended_jobs(session, since, until)


# -- all-time totals for /metrics ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LabReservationTotals:
    """One lab's reservations ever started and ever failed (released by r3, r5, cancel)."""

    started: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class SizeTotals:
    """Ended jobs of one size, all time: sums a scrape turns into counters."""

    jobs: int = 0
    run_tflop_s: float = 0.0
    reservation_tflop_s: float = 0.0
    charged_tflop_s: float = 0.0
    waited: int = 0  # jobs with a first dispatch
    wait_sum_s: float = 0.0


def _epoch_expr(session: Session, column: Any) -> Any:
    """SQL for a timestamp column as UNIX seconds, on either backend."""
    if session.get_bind().dialect.name == "sqlite":
        # Stored as naive-UTC text; julianday reads it (day 2440587.5 is the UNIX epoch).
        return (func.julianday(column) - 2440587.5) * 86400.0
    return func.extract("epoch", column)


def lab_reservation_totals(session: Session) -> dict[str, LabReservationTotals]:
    """lab -> reservations started and failed, over the whole event history (SPEC §10)."""
    reason = JobEvent.detail["reason"].as_string()
    is_started = JobEvent.kind == EventKind.RESERVATION_STARTED.value
    is_failed = (JobEvent.kind == EventKind.RELEASED.value) & reason.in_(
        [r.value for r in FAILED_REASONS]
    )
    rows = session.execute(  # one pass over the reservation events
        select(
            Lab.name,
            func.sum(case((is_started, 1), else_=0)),
            func.sum(case((is_failed, 1), else_=0)),
        )
        .select_from(JobEvent)
        .join(Job, Job.id == JobEvent.job_id)
        .join(Lab, Lab.id == Job.lab_id)
        .where(JobEvent.kind.in_([EventKind.RESERVATION_STARTED.value, EventKind.RELEASED.value]))
        .group_by(Lab.name)
        .order_by(Lab.name)
    )
    return {lab: LabReservationTotals(int(st or 0), int(fa or 0)) for lab, st, fa in rows}


def size_totals(session: Session) -> dict[int, SizeTotals]:
    """GPU count -> totals over every ended job (costs, and waits to the first dispatch)."""
    per_job = (
        select(
            Job.num_gpus.label("num_gpus"),
            Job.run_cost.label("run"),
            Job.reservation_gpu_seconds.label("reserved"),
            Job.charged_tflop_s.label("charged"),
            Job.submitted_at.label("submitted_at"),
            _first_dispatch().label("first_at"),
        )
        .where(Job.state.in_([s.value for s in ENDED_STATES]))
        .subquery()
    )
    wait = _epoch_expr(session, per_job.c.first_at) - _epoch_expr(session, per_job.c.submitted_at)
    rows = session.execute(
        select(
            per_job.c.num_gpus,
            func.count(),
            func.coalesce(func.sum(per_job.c.run), 0.0),
            func.coalesce(func.sum(per_job.c.reserved), 0.0),
            func.coalesce(func.sum(per_job.c.charged), 0.0),
            func.count(per_job.c.first_at),
            func.coalesce(func.sum(wait), 0.0),
        ).group_by(per_job.c.num_gpus)
    )
    return {
        int(n): SizeTotals(int(c), float(run), float(res), float(ch), int(w), float(ws))
        for n, c, run, res, ch, w, ws in rows
    }
