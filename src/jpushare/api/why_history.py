"""The "why" of a job that is not queued (or queued but held or waiting outside the
policy's queue: `waiting_why`): its state, and what its `job_events` say about how
it got there (where it runs, how it ended, OOM retries, requeues after a node failure, lost
reservations). No I/O: the records in, the answer out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from jpushare.api.schemas.queue import DispatchPublic, WhyPublic
from jpushare.api.why_text import duration, on_lent_gpus, when
from jpushare.ledger.eligibility import Verdict
from jpushare.store.records import JobEventRecord, JobRecord
from jpushare.store.schema import EventKind
from jpushare.time_limits import ended_by_time_limit, state_label
from jpushare.vocabulary import JobState, ReleaseReason, Waiting


def history_notes(history: Sequence[JobEventRecord]) -> list[str]:
    """What happened before that a person asking "why" should know, oldest first."""
    notes: list[str] = []
    for e in history:
        d = e.detail or {}
        if e.kind is EventKind.OOM_REQUEUED:
            ran_on = d.get("ran_on") or d.get("tier") or "?"
            nxt = d.get("next_tier")
            retry = f", retried at >= {nxt}" if nxt else ", retried"
            notes.append(f"OOM on {ran_on} (attempt {d.get('attempt', '?')}){retry}")
        elif e.kind is EventKind.NODE_FAIL_REQUEUED:
            notes.append(
                f"node {d.get('node', '?')} failed under attempt {d.get('attempt', '?')} at "
                f"{when(e.at)}; requeued"
            )
        elif e.kind is EventKind.RELEASED and (reason := _reason(d)) in _NOTED_RELEASES:
            assert reason is not None
            notes.append(
                f"its reservation of {d.get('gpus', '?')} GPUs on {d.get('node', '?')} "
                f"({d.get('tier', '?')}) was released at {when(e.at)}: {reason.sentence_then}"
            )
    return notes[-5:]


# The releases a person asking "why" should know of: the others started or cancelled the job.
_NOTED_RELEASES = (ReleaseReason.R3, ReleaseReason.R5)


def _reason(detail: Mapping[str, Any]) -> ReleaseReason | None:
    """A `released` event's reason (None if it names none this version knows)."""
    try:
        return ReleaseReason(detail["reason"])
    except (KeyError, ValueError):
        return None


def _last(history: Sequence[JobEventRecord], kind: EventKind) -> JobEventRecord | None:
    return next((e for e in reversed(history) if e.kind is kind), None)


def history_why(
    job: JobRecord,
    history: Sequence[JobEventRecord],
    tier_by_order: Mapping[int, str],
    now: datetime,
) -> WhyPublic:
    """The answer for a job that is not queued: its state, and how it got there."""
    where = f"{job.node_name} ({job.tier_name})" if job.node_name else "its placement"
    state = job.state
    if state is JobState.DISPATCHED:
        sentence = (
            f"DISPATCHED to {where} at {when(job.dispatched_at)} (attempt {job.attempts}); "
            "waiting for the executor to start it."
        )
    elif state is JobState.RUNNING:
        ran = (now - job.started_at).total_seconds() if job.started_at else 0.0
        sentence = (
            f"RUNNING on {where} since {when(job.started_at)} ({duration(ran)}, "
            f"attempt {job.attempts})."
        )
    elif state is JobState.COMPLETED:
        sentence = f"COMPLETED on {where} at {when(job.ended_at)}{_ran_for(job)}."
    elif state is JobState.FAILED and ended_by_time_limit(state, job.reason):
        sentence = f"{state_label(state, job.reason)}: {job.reason}"
        sentence += f"; on {where} at {when(job.ended_at)}." if job.node_name else "."
    elif state is JobState.FAILED:
        if job.exit_code is not None:
            sentence = f"FAILED: exit code {job.exit_code}"
            if job.reason:
                sentence += f" ({job.reason})"
        else:
            sentence = f"FAILED: {job.reason or 'no reason recorded'}"
        sentence += f"; on {where} at {when(job.ended_at)}." if job.node_name else "."
    elif state is JobState.CANCELLED:
        sentence = f"CANCELLED at {when(job.ended_at)}"
        if job.reason:
            sentence += f" ({job.reason})"
        sentence += "."
    else:
        sentence = f"{state}."
    if state.active and job.lent_from_job_id is not None:
        sentence += " " + on_lent_gpus(job.lent_from_job_id, job.lent_until)
    charged = _last(history, EventKind.CHARGED)
    if state.ended and charged is not None:
        sentence += f" Its lab was charged {job.charged_tflop_s:,.0f} TFLOP-s in all."
    notes = history_notes(history)
    if notes:
        sentence += " Earlier: " + "; ".join(notes) + "."
    return WhyPublic(
        job_id=job.id,
        state=state,
        code=state,
        sentence=sentence,
        num_gpus=job.num_gpus,
        min_tier=tier_by_order.get(job.minimum_tier_sort_order),
        dispatch=(
            DispatchPublic(node=job.node_name, tier=job.tier_name, num_gpus=job.num_gpus)
            if job.node_name and job.tier_name
            else None
        ),
        lent_from_job_id=job.lent_from_job_id if state.active else None,
        lent_until=job.lent_until if state.active else None,
        notes=notes,
    )


def _ran_for(job: JobRecord) -> str:
    if job.started_at is None or job.ended_at is None:
        return ""
    return f" after {duration((job.ended_at - job.started_at).total_seconds())}"


def waiting_why(
    job: JobRecord,
    verdict: Verdict,
    history: Sequence[JobEventRecord],
    tier_by_order: Mapping[int, str],
) -> WhyPublic:
    """The answer for a queued job outside the policy's queue: held, or waiting for its
    dependency or its array's limit; `code` names which (`Waiting`)."""
    code = verdict.waiting
    assert code is not None
    jid = job.display_id
    outside = f"job {jid} is not in the queue yet"
    if code is Waiting.HELD:
        held = _last(history, EventKind.HELD)
        by = f" by {(held.detail or {}).get('by', '?')} at {when(held.at)}" if held else ""
        sentence = f"HELD{by} ({outside}): `jpushare release {jid}` queues it."
    elif code is Waiting.DEPENDENCY_NEVER_SATISFIED:
        sentence = (
            f"DEPENDENCY_NEVER_SATISFIED ({outside}): its {verdict.waits_for}; it stays so "
            f"until cancelled (`jpushare cancel {jid}`; --kill-on-invalid-dep cancels such "
            "a job itself)."
        )
    else:
        then = (
            "when one of its running tasks ends, the next task enters the queue"
            if code is Waiting.ARRAY_LIMIT
            else "once that is met it enters the queue, its queue entry time then"
        )
        sentence = f"{code.value} ({outside}): {verdict.waits_for}; {then}."
    notes = history_notes(history)
    return WhyPublic(
        job_id=job.id,
        state=job.state,
        code=code,
        sentence=sentence,
        num_gpus=job.num_gpus,
        min_tier=tier_by_order.get(job.minimum_tier_sort_order),
        notes=notes,
    )
