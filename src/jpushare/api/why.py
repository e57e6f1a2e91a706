"""The API's "why" and queue answers: the pure policy run on a fresh snapshot, or history.

A queued job's answer comes from `decide()` on `store.load_snapshot(now, busy)`: the same
function and the same inputs the dispatcher's next cycle will use, so the API cannot drift
from the policy (nothing is recorded: the decisions are only read). Like the policy's own
`Why`, it describes the job as it will be after that cycle's decisions (a reservation the
cycle starts, absorbs into or releases is shown so). A job the next cycle would dispatch
gets the code STARTING. Any other job's answer is its state and what its
`job_events` history says (where it runs, how it ended, OOM retries, undone dispatches).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from jpushare.api.schemas import (
    BlockingPublic,
    DispatchPublic,
    PlacementView,
    QueueEntryPublic,
    ReservationPublic,
    WhyPublic,
)
from jpushare.policy import (
    Decisions,
    Dispatch,
    PlacementOrder,
    Reservation,
    Snapshot,
    Why,
    WhyCode,
    decide,
)
from jpushare.policy.fit import fit_placements
from jpushare.store import from_epoch
from jpushare.store.records import JobEventRecord, JobRecord
from jpushare.store.schema import EventKind, JobState

STARTING = "STARTING"  # queued, and the next cycle dispatches it (not a policy WhyCode)


@dataclass(frozen=True, slots=True)
class QueueView:
    """One policy run on a snapshot, indexed for the API's questions."""

    snapshot: Snapshot
    decisions: Decisions
    ranks: Mapping[str, int]  # policy job id -> 0-based rank
    dispatches: Mapping[str, Dispatch]  # jobs the next cycle would dispatch
    reserved: Mapping[tuple[str, str], int]  # GPUs held by reservations per placement
    placement_order: PlacementOrder = PlacementOrder.PACK

    @classmethod
    def of(
        cls, snapshot: Snapshot, placement_order: PlacementOrder = PlacementOrder.PACK
    ) -> QueueView:
        decisions = decide(snapshot, placement_order)
        reserved: dict[tuple[str, str], int] = defaultdict(int)
        for job in snapshot.queue:
            if job.reservation is not None:
                reserved[(job.reservation.node, job.reservation.tier)] += job.reservation.gpus
        return cls(
            snapshot=snapshot,
            decisions=decisions,
            ranks={job_id: i for i, job_id in enumerate(decisions.order)},
            dispatches={d.job_id: d for d in decisions.dispatches()},
            reserved=dict(reserved),
            placement_order=placement_order,
        )

    @property
    def top_job_id(self) -> int | None:
        return int(self.decisions.order[0]) if self.decisions.order else None


def when(at: datetime | None) -> str:
    """A time for a sentence: '2026-01-05 09:00:00 UTC'."""
    if at is None:
        return "an unknown time"
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _reservation(res: Reservation | None, num_gpus: int) -> ReservationPublic | None:
    if res is None:
        return None
    return ReservationPublic(
        node=res.node, tier=res.tier, gpus=res.gpus, of=num_gpus, since=from_epoch(res.since)
    )


def _sentence(why: Why) -> str:
    """The policy's sentence, with the reservation's start as a date instead of seconds."""
    if why.code is WhyCode.RESERVING and why.reservation is not None:
        res, n = why.reservation, why.num_gpus
        return (
            f"It is the top job and holds a reservation of {res.gpus} of {n} GPUs on "
            f"{res.node} ({res.tier}) since {when(from_epoch(res.since))}; it starts when "
            f"{n - res.gpus} more free up there, or at once if another fit placement has "
            f"{n} idle."
        )
    return why.sentence


def _starting_sentence(d: Dispatch, rank: int, length: int) -> str:
    return (
        f"It is ranked {rank + 1} of {length} and {d.num_gpus} idle "
        f"{'GPU' if d.num_gpus == 1 else 'GPUs'} on {d.node} ({d.tier}) can hold it: the "
        "next dispatch cycle starts it there."
    )


def queued_code_and_sentence(view: QueueView, job_id: str) -> tuple[str, str]:
    why = view.decisions.why.get(job_id)
    if why is not None:
        return why.code.value, _sentence(why)
    d = view.dispatches.get(job_id)
    length = len(view.decisions.order)
    if d is not None:
        return STARTING, _starting_sentence(d, view.ranks.get(job_id, 0), length)
    return STARTING, "It is being dispatched."


def queued_why(
    view: QueueView,
    job: JobRecord,
    history: Sequence[JobEventRecord],
    tier_by_order: Mapping[int, str],
) -> WhyPublic:
    """SPEC §8 for a job in GLOBAL_QUEUE_WAIT, from the policy run in `view`."""
    jid = job.policy_id
    snap = view.snapshot
    tiers = {t.name: t for t in snap.tiers}
    fit = fit_placements(
        job.num_gpus,
        job.minimum_tier_sort_order,
        tiers,
        snap.placements,
        reserved=view.reserved,
        order=view.placement_order,
    )
    places = [
        PlacementView(
            node=p.node,
            tier=p.tier,
            capacity=p.capacity,
            busy=p.busy,
            reserved=view.reserved.get(p.key, 0),
            idle=max(0, p.free - view.reserved.get(p.key, 0)),
            schedulable=p.schedulable,
        )
        for p in fit
    ]
    code, sentence = queued_code_and_sentence(view, jid)
    why = view.decisions.why.get(jid)
    dispatch = view.dispatches.get(jid)
    blocking = None
    if why is not None and why.blocking_job_id is not None:
        held = _reservation(why.blocking_reservation, _queued_num_gpus(snap, why.blocking_job_id))
        if held is not None:
            blocking = BlockingPublic(job_id=int(why.blocking_job_id), reservation=held)
    queued = next((q for q in snap.queue if q.job_id == jid), None)
    own = why.reservation if why is not None else (queued.reservation if queued else None)
    return WhyPublic(
        job_id=job.id,
        state=job.state,
        code=code,
        sentence=sentence,
        rank=view.ranks[jid] + 1 if jid in view.ranks else None,
        queue_length=len(view.decisions.order),
        top_job_id=view.top_job_id,
        num_gpus=job.num_gpus,
        min_tier=tier_by_order.get(job.minimum_tier_sort_order),
        fit_placements=why.fit_placements if why is not None else len(fit),
        schedulable_fit_placements=(
            why.schedulable_fit_placements
            if why is not None
            else sum(1 for p in fit if p.schedulable)
        ),
        best_idle=why.best_idle if why is not None else None,
        reservation=_reservation(own, job.num_gpus),
        blocking=blocking,
        dispatch=(
            DispatchPublic(node=dispatch.node, tier=dispatch.tier, num_gpus=dispatch.num_gpus)
            if dispatch is not None
            else None
        ),
        placements=places,
        notes=history_notes(history),
    )


def _queued_num_gpus(snapshot: Snapshot, job_id: str) -> int:
    return next((q.num_gpus for q in snapshot.queue if q.job_id == job_id), 0)


def queue_entries(
    view: QueueView,
    records: Mapping[int, JobRecord],
    tier_by_order: Mapping[int, str],
    offset: int,
    limit: int,
) -> list[QueueEntryPublic]:
    """The queue in rank order, `limit` entries from `offset` (records: those jobs)."""
    queued = {q.job_id: q for q in view.snapshot.queue}
    usage = view.snapshot.lab_usage
    out: list[QueueEntryPublic] = []
    order = view.decisions.order
    for rank in range(offset, min(len(order), offset + limit)):
        jid = order[rank]
        job = records.get(int(jid))
        q = queued[jid]
        if job is None:  # ended between the snapshot and this read: leave it out
            continue
        code, sentence = queued_code_and_sentence(view, jid)
        why = view.decisions.why.get(jid)
        res = why.reservation if why is not None else None
        out.append(
            QueueEntryPublic(
                rank=rank + 1,
                job_id=job.id,
                name=job.name,
                user=job.user_name,
                lab=q.lab,
                lab_usage_tflop_s=usage.get(q.lab, 0.0),
                num_gpus=q.num_gpus,
                min_tier=tier_by_order.get(q.min_sort_order),
                queue_entered_at=from_epoch(q.queue_entered_at),
                reservation=_reservation(res, q.num_gpus),
                code=code,
                sentence=sentence,
            )
        )
    return out


# --- jobs that are not queued: their history -------------------------------------------------


def history_notes(history: Sequence[JobEventRecord]) -> list[str]:
    """What happened before that a person asking "why" should know, oldest first."""
    notes: list[str] = []
    for e in history:
        d = e.detail or {}
        if e.kind == EventKind.OOM_REQUEUED.value:
            ran_on = d.get("ran_on") or d.get("tier") or "?"
            nxt = d.get("next_tier")
            retry = f", retried at >= {nxt}" if nxt else ", retried"
            notes.append(f"OOM on {ran_on} (attempt {d.get('attempt', '?')}){retry}")
        elif e.kind == EventKind.NODE_FAIL_REQUEUED.value:
            notes.append(
                f"node {d.get('node', '?')} failed under attempt {d.get('attempt', '?')} at "
                f"{when(e.at)}; requeued"
            )
        elif e.kind == EventKind.DISPATCH_UNDONE.value:
            notes.append(
                f"dispatch to {d.get('node', '?')} ({d.get('tier', '?')}) undone at {when(e.at)}:"
                f" {d.get('reason', 'no reason given')}"
            )
        elif e.kind == EventKind.RELEASED.value and d.get("reason") in ("r3", "r5"):
            why = (
                "it was no longer the top job (R3)"
                if d.get("reason") == "r3"
                else "its placement went down, was drained or shrank (R5)"
            )
            notes.append(
                f"its reservation of {d.get('gpus', '?')} GPUs on {d.get('node', '?')} "
                f"({d.get('tier', '?')}) was released at {when(e.at)}: {why}"
            )
    return notes[-5:]


def _last(history: Sequence[JobEventRecord], kind: EventKind) -> JobEventRecord | None:
    return next((e for e in reversed(history) if e.kind == kind.value), None)


def history_why(
    job: JobRecord,
    history: Sequence[JobEventRecord],
    tier_by_order: Mapping[int, str],
    now: datetime,
) -> WhyPublic:
    """The answer for a job that is not queued: its state, and how it got there."""
    where = f"{job.node_name} ({job.tier_name})" if job.node_name else "its placement"
    state = job.state
    if state == JobState.DISPATCHED.value:
        sentence = (
            f"DISPATCHED to {where} at {when(job.dispatched_at)} (attempt {job.attempts}); "
            "waiting for the executor to start it."
        )
    elif state == JobState.RUNNING.value:
        ran = (now - job.started_at).total_seconds() if job.started_at else 0.0
        sentence = (
            f"RUNNING on {where} since {when(job.started_at)} ({_duration(ran)}, "
            f"attempt {job.attempts})."
        )
    elif state == JobState.COMPLETED.value:
        sentence = f"COMPLETED on {where} at {when(job.ended_at)}{_ran_for(job)}."
    elif state == JobState.FAILED.value:
        if job.exit_code is not None:
            sentence = f"FAILED: exit code {job.exit_code}"
            if job.reason:
                sentence += f" ({job.reason})"
        else:
            sentence = f"FAILED: {job.reason or 'no reason recorded'}"
        sentence += f"; on {where} at {when(job.ended_at)}." if job.node_name else "."
    elif state == JobState.CANCELLED.value:
        sentence = f"CANCELLED at {when(job.ended_at)}"
        if job.reason:
            sentence += f" ({job.reason})"
        sentence += "."
    else:
        sentence = f"{state}."
    charged = _last(history, EventKind.CHARGED)
    if JobState(state).ended and charged is not None:
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
        notes=notes,
    )


def _ran_for(job: JobRecord) -> str:
    if job.started_at is None or job.ended_at is None:
        return ""
    return f" after {_duration((job.ended_at - job.started_at).total_seconds())}"


__all__ = [
    "STARTING",
    "QueueView",
    "history_notes",
    "history_why",
    "queue_entries",
    "queued_why",
]
