"""Step 1's writes: each run transition the executor's view implies, into the store.

`record_transitions` applies the starts and plain ends of a cycle at once (a fixed number
of statements, `store.batched_runs`), and everything else (confirms, OOM and node-failure
requeues, and whatever the batch could not take) one by one, each in its own savepoint: one
that fails (a value the database refuses, a bug) is logged and skipped, and retried next
cycle, instead of stopping every job's. `settle_cancelled_runs` charges a cancelled job's
run up to its real end. All of it runs in the caller's transaction (`observe`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from sqlalchemy.orm import Session

from jpushare import store
from jpushare.dispatcher.job_ids import row_id
from jpushare.dispatcher.reconcile import Confirmed, Missing, RunEnded, Started, Transition
from jpushare.executors.base import RunInfo, RunState
from jpushare.store.batched_runs import RunEnd, RunStart, end_jobs, mark_running_many
from jpushare.store.observations import cancelled_runs
from jpushare.store.times import same_instant
from jpushare.time_limits import time_limit_reason

log = logging.getLogger(__name__)


class RunChange(Enum):
    """What recording one transition did."""

    UNCHANGED = "unchanged"  # stale or repeated: the store was already past it
    CONFIRMED = "confirmed"  # a DISPATCHED job's run id, never recorded, now is
    STARTED = "started"
    ENDED = "ended"
    REQUEUED = "requeued"  # OOM (escalated) or node failure: back in the queue
    MISSING = "missing"  # nothing recorded: the job is submitted again (steps 5-6)


@dataclass(frozen=True, slots=True)
class RunChanges:
    counts: Counter[RunChange]
    missing: tuple[str, ...]  # DISPATCHED jobs the executor has no run for


# How a run that ended ends its job (OOM and node failures requeue it instead).
_ENDS = {
    RunState.COMPLETED: store.JobState.COMPLETED,
    RunState.FAILED: store.JobState.FAILED,
    RunState.CANCELLED: store.JobState.CANCELLED,
    RunState.TIMEOUT: store.JobState.FAILED,
}


def record_transitions(session: Session, found: Iterable[Transition], now: datetime) -> RunChanges:
    """Record every transition: batched where it can be, else one by one (module docstring)."""
    counts, left = apply_in_batches(session, found)
    missing: list[str] = []
    for t in left:
        try:
            with session.begin_nested():
                change = _apply(session, t, now)
        except Exception:
            log.exception(
                "job %s attempt %d: recording %s failed; skipped this cycle",
                t.job_id,
                t.attempt,
                type(t).__name__,
            )
            continue
        if change is RunChange.MISSING:
            missing.append(t.job_id)
        elif change is not RunChange.UNCHANGED:
            counts[change] += 1
    return RunChanges(counts, tuple(missing))


def apply_in_batches(
    session: Session, found: Iterable[Transition]
) -> tuple[Counter[RunChange], list[Transition]]:
    """Apply the runs seen started and the runs seen ended (not OOM, not node failures)
    all at once (`store.batched_runs`): a fixed number of statements instead of about ten
    per run, which made a cycle that saw 96 runs end take 2 s. In one savepoint: if the
    batch fails, nothing of it stays and every one of them is left to the one-by-one
    path, which skips only the transition that fails. The rest is left as it came."""
    found = list(found)
    # A job with another transition too (a confirm first) keeps its order, one by one.
    others = {t.job_id for t in found if not _batchable(t)}
    starts: list[RunStart] = []
    ends: list[RunEnd] = []
    left: list[Transition] = []
    batched: list[Transition] = []
    for t in found:
        job_id = row_id(t.job_id)
        if t.job_id in others or job_id is None:
            left.append(t)
            continue
        if isinstance(t, Started):
            starts.append(
                RunStart(job_id, t.attempt, store.from_epoch(t.started_at), t.executor_id)
            )
        elif isinstance(t, RunEnded):
            ends.append(_run_end(job_id, t))
        batched.append(t)
    counts: Counter[RunChange] = Counter()
    if not batched:
        return counts, left
    try:
        with session.begin_nested():
            counts[RunChange.STARTED] = len(mark_running_many(session, starts))
            counts[RunChange.ENDED] = len(end_jobs(session, ends))
    except Exception:
        log.exception("recording %d runs' starts and ends at once failed: one by one", len(batched))
        return Counter(), batched + left
    return counts, left


def _batchable(t: Transition) -> bool:
    if row_id(t.job_id) is None:
        return False
    return isinstance(t, Started) or (isinstance(t, RunEnded) and t.state in _ENDS)


def _run_end(job_id: int, t: RunEnded) -> RunEnd:
    """The batch path's end: the same reason as one recorded alone (`_end_reason`)."""
    return RunEnd(
        job_id,
        t.attempt,
        _ENDS[t.state],
        store.from_epoch(t.ended_at),
        store.from_epoch(t.started_at) if t.started_at is not None else None,
        t.exit_code,
        _end_reason(t),
    )


def _end_reason(t: RunEnded) -> str | None:
    if t.state is RunState.CANCELLED:
        return t.reason or "cancelled by the executor"
    if t.state is RunState.TIMEOUT:
        # "FAILED (time limit)" everywhere reads this reason (`time_limits.state_label`).
        return time_limit_reason(t.reason)
    return t.reason


def _apply(session: Session, t: Transition, now: datetime) -> RunChange:
    """Record one transition; what it changed."""
    if isinstance(t, Missing):
        return RunChange.MISSING
    job_id = row_id(t.job_id)
    if job_id is None:  # not a job of ours: nothing to record
        return RunChange.UNCHANGED
    if isinstance(t, Confirmed):
        ok = store.confirm_dispatch(session, job_id, t.executor_id, now, attempt=t.attempt)
        return RunChange.CONFIRMED if ok else RunChange.UNCHANGED
    if isinstance(t, Started):
        at = store.from_epoch(t.started_at)
        ok = store.mark_running(session, job_id, at, t.executor_id, attempt=t.attempt)
        return RunChange.STARTED if ok else RunChange.UNCHANGED
    return _apply_end(session, job_id, t)


def _apply_end(session: Session, job_id: int, t: RunEnded) -> RunChange:
    ended_at = store.from_epoch(t.ended_at)
    started_at = store.from_epoch(t.started_at) if t.started_at is not None else None
    if t.state is RunState.OOM:  # SPEC §5 / S10
        done = store.requeue_after_oom(
            session,
            job_id,
            ended_at,
            attempt=t.attempt,
            started_at=started_at,
            exit_code=t.exit_code,
            reason=t.reason,
        )
        if done is None:
            return RunChange.UNCHANGED
        return RunChange.REQUEUED if done.requeued else RunChange.ENDED
    if t.state is RunState.NODE_FAIL:  # SPEC §5: back to the queue, no escalation
        done = store.requeue_after_node_failure(
            session, job_id, ended_at, attempt=t.attempt, started_at=started_at, reason=t.reason
        )
        return RunChange.UNCHANGED if done is None else RunChange.REQUEUED
    ended = store.end_job(
        session,
        job_id,
        _ENDS[t.state],
        ended_at,
        exit_code=t.exit_code,
        reason=_end_reason(t),
        attempt=t.attempt,
        started_at=started_at,
    )
    return RunChange.UNCHANGED if ended is None else RunChange.ENDED


def settle_cancelled_runs(session: Session, runs: Iterable[RunInfo]) -> int:
    """Charge each cancelled job's last run up to when it really ended (SPEC §4): the cancel
    charged only up to itself, and the run lived on until the dispatcher stopped it. Only
    runs whose ended times the job does not hold yet are settled (each in a savepoint,
    like the transitions); `store.settle_cancelled_run` is idempotent. How many changed."""
    ended: dict[int, RunInfo] = {}
    for r in runs:
        job_id = row_id(r.job_id)
        if job_id is not None and r.state.ended and None not in (r.started_at, r.ended_at):
            ended[job_id] = r
    settled = 0
    for job_id, (attempts, started_at, ended_at) in cancelled_runs(session, ended).items():
        run = ended[job_id]
        assert run.started_at is not None and run.ended_at is not None
        real_start, real_end = store.from_epoch(run.started_at), store.from_epoch(run.ended_at)
        if run.attempt != attempts or (
            started_at is not None
            and ended_at is not None
            and same_instant(started_at, real_start)
            and same_instant(ended_at, real_end)
        ):
            continue
        try:
            with session.begin_nested():
                charged = store.settle_cancelled_run(
                    session, job_id, attempts, real_start, real_end
                )
        except Exception:
            log.exception("job %d attempt %d: settling its cancelled run failed", job_id, attempts)
            continue
        log.info(
            "job %d attempt %d: cancelled run ended; settled (%.1f TFLOP-s charged)",
            job_id,
            attempts,
            charged,
        )
        settled += 1
    return settled
