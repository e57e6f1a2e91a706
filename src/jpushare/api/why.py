"""The API's "why" and queue answers: what is recorded, and what the next cycle would do.

Facts come from the database as the last cycle and the requests since left it, read once
into a `store.load_snapshot` (one statement for the queue with its reservations, so they
agree with each other at any instant): the rank order, each job's reservation and since
when, busy GPUs from the dispatcher's last observation. The projection is the dispatcher's
policy (`decide`, or the peer `JPUSHARE_POLICY` names) run on that same snapshot: what the
next cycle would do if nothing changed before it runs (nothing is recorded: the decisions
are only read). Answers state the facts and phrase
the projection as "at the next cycle …", with no time. `GET /v1/placements` computes its
figures with the same `metric_figures.placement_counts`. A job that is not queued gets its state
and what its `job_events` history says (`api.why_history`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jpushare.api.estimates import JobEstimate, job_estimate
from jpushare.api.metric_figures import placement_counts
from jpushare.api.schemas.jobs import ReservationPublic
from jpushare.api.schemas.queue import (
    BlockingPublic,
    DispatchPublic,
    PlacementReservation,
    PlacementView,
    PlannedActionPublic,
    QueueEntryPublic,
    WhyPublic,
)
from jpushare.api.why_history import history_notes
from jpushare.api.why_text import STARTING, Facts, Projection, duration, sentence, when
from jpushare.policy import (
    AbsorbReservation,
    Action,
    Decisions,
    Dispatch,
    Placement,
    PlacementOrder,
    QueuedJob,
    ReleaseReason,
    ReleaseReservation,
    Reservation,
    Snapshot,
    StartReservation,
    Tier,
    WhyCode,
    decide,
)
from jpushare.policy.fit import fit_placements
from jpushare.policy.peers import NamedPolicy
from jpushare.sim.estimate import StartEstimates
from jpushare.store import from_epoch
from jpushare.store.records import JobEventRecord, JobRecord
from jpushare.vocabulary import AnswerCode, JobId, store_job_id

PlacementKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class FitTable:
    """The fit placements of one (num_gpus, minimum tier) class, with recorded figures."""

    rows: tuple[PlacementView, ...]
    schedulable: int
    best_idle: int  # the most idle GPUs on one of them now


@dataclass(frozen=True, slots=True)
class QueueView:
    """The recorded queue (a snapshot) and the policy's next cycle on it, indexed."""

    snapshot: Snapshot
    decisions: Decisions
    ranks: Mapping[JobId, int]  # 0-based
    queued: Mapping[JobId, QueuedJob]
    planned: Mapping[JobId, tuple[Action, ...]]  # per job, what the next cycle would do
    held: Mapping[PlacementKey, tuple[QueuedJob, ...]]  # recorded reservations per placement
    r3_releases: Mapping[PlacementKey, tuple[ReleaseReservation, ...]]  # next cycle's R3
    tiers: Mapping[str, Tier]
    placement_order: PlacementOrder = PlacementOrder.PACK  # the dispatcher's (SPEC §1)
    _tables: dict[tuple[int, int], FitTable] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        snapshot: Snapshot,
        placement_order: PlacementOrder = PlacementOrder.PACK,
        policy: NamedPolicy = decide,
    ) -> QueueView:
        decisions = policy(snapshot, placement_order)
        held: dict[PlacementKey, list[QueuedJob]] = defaultdict(list)
        for job in sorted(snapshot.queue, key=lambda q: store_job_id(q.job_id)):
            if job.reservation is not None:
                held[(job.reservation.node, job.reservation.tier)].append(job)
        planned: dict[str, list[Action]] = defaultdict(list)
        r3: dict[PlacementKey, list[ReleaseReservation]] = defaultdict(list)
        for action in decisions.actions:
            planned[action.job_id].append(action)
            if isinstance(action, ReleaseReservation) and action.reason is ReleaseReason.R3:
                r3[(action.node, action.tier)].append(action)
        return cls(
            snapshot=snapshot,
            decisions=decisions,
            ranks={job_id: i for i, job_id in enumerate(decisions.order)},
            queued={q.job_id: q for q in snapshot.queue},
            planned={job: tuple(actions) for job, actions in planned.items()},
            held={key: tuple(jobs) for key, jobs in held.items()},
            r3_releases={key: tuple(rs) for key, rs in r3.items()},
            tiers={t.name: t for t in snapshot.tiers},
            placement_order=placement_order,
        )

    @property
    def top_job(self) -> JobId | None:
        """The policy's top job (SPEC decision 7: the first job that cannot start, not
        always rank 0); the first in order where the policy names none (a peer policy, or
        every job could start)."""
        top = getattr(self.decisions.why, "top_job_id", "")
        if top:
            return str(top)
        return self.decisions.order[0] if self.decisions.order else None

    @property
    def top_job_id(self) -> int | None:
        top = self.top_job
        return store_job_id(top) if top is not None else None

    def fit_table(self, num_gpus: int, min_sort_order: int) -> FitTable:
        """Cached per class: a page of the queue has many jobs and few classes."""
        key = (num_gpus, min_sort_order)
        table = self._tables.get(key)
        if table is None:
            reserved = {key: sum(_gpus_held(j) for j in jobs) for key, jobs in self.held.items()}
            fit = fit_placements(
                num_gpus,
                min_sort_order,
                self.tiers,
                self.snapshot.placements,
                reserved=reserved,
                order=self.placement_order,
            )
            rows = tuple(self._row(p) for p in fit)
            table = FitTable(
                rows,
                sum(1 for r in rows if r.schedulable),
                max((r.idle for r in rows), default=0),
            )
            self._tables[key] = table
        return table

    def _row(self, p: Placement) -> PlacementView:
        jobs = self.held.get(p.key, ())
        counts = placement_counts(p, sum(_gpus_held(j) for j in jobs))
        return PlacementView(
            node=p.node,
            tier=p.tier,
            capacity=p.capacity,
            busy=counts.busy,
            reserved=counts.reserved,
            idle=counts.idle,
            schedulable=p.schedulable,
            reservations=[
                PlacementReservation(
                    job_id=store_job_id(j.job_id),
                    gpus=_gpus_held(j),
                    of=j.num_gpus,
                    since=_since(j.reservation),
                )
                for j in jobs
            ],
        )


def _gpus_held(job: QueuedJob) -> int:
    return job.reservation.gpus if job.reservation is not None else 0


def _since(res: Reservation | None) -> datetime | None:
    return from_epoch(res.since) if res is not None else None


def _reservation(res: Reservation | None, num_gpus: int) -> ReservationPublic | None:
    if res is None:
        return None
    return ReservationPublic(
        node=res.node, tier=res.tier, gpus=res.gpus, of=num_gpus, since=_since(res)
    )


@dataclass(frozen=True, slots=True)
class QueuedAnswer:
    """One queued job's answer; `why` and `queue` both render this, so they agree."""

    code: AnswerCode
    sentence: str
    facts: Facts
    table: FitTable
    planned: tuple[Action, ...]


def answer(view: QueueView, job_id: JobId) -> QueuedAnswer:
    """The facts, the present code, the projection and the sentence for a queued job."""
    job = view.queued[job_id]
    rank = view.ranks[job_id]
    table = view.fit_table(job.num_gpus, job.min_sort_order)
    why = view.decisions.why.get(job_id)  # None: the next cycle dispatches it
    planned = view.planned.get(job_id, ())
    top = view.top_job or ""
    # The policy's blocker is the top job's reservation as the next cycle leaves it; it is a
    # fact only where the top job holds a reservation on that placement now.
    blocker = None
    if why is not None and why.blocking_job_id is not None and why.blocking_reservation:
        blocker = (why.blocking_job_id, why.blocking_reservation)
    recorded_blocker = None
    if blocker is not None:
        held = view.queued[blocker[0]].reservation
        if held is not None and (held.node, held.tier) == (blocker[1].node, blocker[1].tier):
            recorded_blocker = (blocker[0], held)
    facts = Facts(
        rank=rank,
        queue_length=len(view.decisions.order),
        top_job_id=top,
        num_gpus=job.num_gpus,
        reservation=job.reservation,
        fit_placements=len(table.rows),
        schedulable_fit_placements=table.schedulable,
        best_idle=table.best_idle,
        blocking=recorded_blocker,
        is_top=job_id == top,
    )
    projection = Projection(
        actions=planned,
        freed_by=_freed_by(view, job_id, planned),
        blocker=blocker,
        best_idle=why.best_idle if why is not None else table.best_idle,
    )
    code = _code(why.code if why is not None else None, facts)
    return QueuedAnswer(code, sentence(code, facts, projection), facts, table, planned)


def _code(policy: WhyCode | None, facts: Facts) -> AnswerCode:
    """The code for the job as it is now (SPEC §8's fixed set, plus STARTING).

    The policy's code describes the job as the next cycle would leave it; a reservation
    that cycle would start is not held yet, so RESERVING and BEHIND_RESERVATION need a
    recorded one, and a job that holds one is RESERVING until a cycle releases it.
    """
    if policy is None:
        return STARTING
    if policy in (WhyCode.NO_FIT_PLACEMENT, WhyCode.NO_SCHEDULABLE_PLACEMENT):
        return policy
    if facts.reservation is not None:
        return WhyCode.RESERVING
    if policy is WhyCode.BEHIND_RESERVATION and facts.blocking is not None:
        return WhyCode.BEHIND_RESERVATION
    if not facts.is_top and facts.num_gpus >= 2:
        return WhyCode.WAITING_FOR_PRIORITY
    return WhyCode.WAITING_FOR_GPUS


def _freed_by(
    view: QueueView, job_id: JobId, planned: Sequence[Action]
) -> tuple[ReleaseReservation, ...]:
    """Other jobs' reservations the next cycle releases (R3) on a placement where this job
    would start, reserve or absorb: the GPUs it takes are reserved now."""
    keys = {
        (a.node, a.tier)
        for a in planned
        if isinstance(a, Dispatch | StartReservation | AbsorbReservation)
    }
    return tuple(
        r for key in sorted(keys) for r in view.r3_releases.get(key, ()) if r.job_id != job_id
    )


def _planned_public(actions: Sequence[Action]) -> list[PlannedActionPublic]:
    out: list[PlannedActionPublic] = []
    for a in actions:
        if isinstance(a, Dispatch):
            out.append(
                PlannedActionPublic(action="start", node=a.node, tier=a.tier, gpus=a.num_gpus)
            )
        elif isinstance(a, StartReservation):
            out.append(PlannedActionPublic(action="reserve", node=a.node, tier=a.tier, gpus=a.gpus))
        elif isinstance(a, AbsorbReservation):
            out.append(
                PlannedActionPublic(
                    action="absorb", node=a.node, tier=a.tier, gpus=a.added, reserved_after=a.total
                )
            )
        else:
            out.append(
                PlannedActionPublic(
                    action="release", node=a.node, tier=a.tier, gpus=a.gpus, reason=a.reason
                )
            )
    return out


_BASIS_WORDS = {
    "time_limit": "its time limit",
    "user_history": "its user's median run of that many GPUs",
    "lab_history": "its lab's median run of that many GPUs",
    "default": "the default of one hour (no limit, no history)",
    "unknown": "unknown (no run that long seen: as long again as it has run)",
}


def estimate_sentence(est: JobEstimate, now: float, code: AnswerCode) -> str:
    """The start estimate as a projection, with what it assumes ("" without one, and for
    a job the next cycle starts: the sentence already says so)."""
    if est.start is None or code == STARTING:
        return ""
    start = max(est.start, now)
    ahead = "" if est.basis is None else f"; its own run is taken as {_BASIS_WORDS[est.basis]}"
    return (
        f"Estimated to start around {when(from_epoch(start))} (in {duration(start - now)}),"
        " assuming running and queued jobs end at their time limits (or, lacking one, as their"
        " users' past runs that lasted as long did) and no job arrives ahead of it"
        f"{ahead}."
    )


def _start_at(est: JobEstimate) -> datetime | None:
    return from_epoch(est.start) if est.start is not None else None


def _basis(est: JobEstimate) -> str | None:
    return est.basis.value if est.basis is not None else None


def queued_why(
    view: QueueView,
    job: JobRecord,
    history: Sequence[JobEventRecord],
    tier_by_order: Mapping[int, str],
    estimates: StartEstimates | None = None,
) -> WhyPublic:
    """SPEC §8 for a job in the snapshot's queue: recorded facts and the next cycle, and
    the start estimate where a forecast (`api.estimates`) gave one."""
    jid = job.policy_id
    a = answer(view, jid)
    est = job_estimate(estimates, jid, view.snapshot.now)
    f = a.facts
    start = next((x for x in a.planned if isinstance(x, Dispatch)), None)
    blocking = None
    if f.blocking is not None:
        bid, bres = f.blocking
        blocking = BlockingPublic(
            job_id=store_job_id(bid), reservation=_reservation(bres, view.queued[bid].num_gpus)
        )
    return WhyPublic(
        job_id=job.id,
        state=job.state,
        code=a.code,
        sentence=a.sentence,
        rank=f.rank + 1,
        queue_length=f.queue_length,
        top_job_id=view.top_job_id,
        num_gpus=job.num_gpus,
        min_tier=tier_by_order.get(job.minimum_tier_sort_order),
        fit_placements=f.fit_placements,
        schedulable_fit_placements=f.schedulable_fit_placements,
        best_idle=f.best_idle,
        reservation=_reservation(f.reservation, job.num_gpus),
        blocking=blocking,
        dispatch=(
            DispatchPublic(node=start.node, tier=start.tier, num_gpus=start.num_gpus)
            if start is not None
            else None
        ),
        lent_from_job_id=store_job_id(start.lent_from) if start and start.lent_from else None,
        lent_until=from_epoch(start.lent_until) if start and start.lent_until else None,
        next_cycle=_planned_public(a.planned),
        placements=list(a.table.rows),
        notes=history_notes(history),
        estimated_start=_start_at(est),
        estimate_basis=_basis(est),
        estimate_sentence=estimate_sentence(est, view.snapshot.now, a.code) or None,
    )


def queue_entries(
    view: QueueView,
    records: Mapping[int, JobRecord],
    tier_by_order: Mapping[int, str],
    offset: int,
    limit: int,
    estimates: StartEstimates | None = None,
) -> list[QueueEntryPublic]:
    """The queue in rank order, `limit` entries from `offset` (records: those jobs), each
    with its start estimate."""
    usage = view.snapshot.lab_usage
    out: list[QueueEntryPublic] = []
    order = view.decisions.order
    for rank in range(offset, min(len(order), offset + limit)):
        jid = order[rank]
        job = records.get(store_job_id(jid))
        q = view.queued[jid]
        if job is None:  # ended between the snapshot and this read: leave it out
            continue
        a = answer(view, jid)
        est = job_estimate(estimates, jid, view.snapshot.now)
        out.append(
            QueueEntryPublic(
                rank=rank + 1,
                job_id=job.id,
                display_id=job.display_id,
                name=job.name,
                user=job.user_name,
                lab=q.lab,
                lab_usage_tflop_s=usage.get(q.lab, 0.0),
                num_gpus=q.num_gpus,
                min_tier=tier_by_order.get(q.min_sort_order),
                queue_entered_at=from_epoch(q.queue_entered_at),
                reservation=_reservation(q.reservation, q.num_gpus),
                next_cycle=_planned_public(a.planned),
                code=a.code,
                sentence=a.sentence,
                estimated_start=_start_at(est),
                estimate_basis=_basis(est),
            )
        )
    return out


__all__ = [
    "STARTING",
    "QueueView",
    "answer",
    "estimate_sentence",
    "queue_entries",
    "queued_why",
]
