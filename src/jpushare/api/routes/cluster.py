"""What every authenticated user may read about the cluster: queue, placements, labs, tiers."""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated

from fastapi import APIRouter, Query

from jpushare import store
from jpushare.api.deps import ContextDep, CurrentUser, SessionDep
from jpushare.api.metric_figures import placement_counts
from jpushare.api.privacy import for_viewer
from jpushare.api.routes.backfill import serving_by_placement
from jpushare.api.schemas.admin import LabsPublic, TiersPublic, lab_public, tier_public
from jpushare.api.schemas.common import MAX_QUEUE_LIMIT, SIGNED_IN_ERRORS
from jpushare.api.schemas.queue import (
    PlacementLoan,
    PlacementPublic,
    PlacementReservation,
    PlacementsPublic,
    QueuePublic,
)
from jpushare.api.why import QueueView, queue_entries
from jpushare.store.aggregates import LabInFlight, lab_in_flight, lab_job_counts
from jpushare.store.inventory import tier_names_by_sort_order
from jpushare.store.jobs import Shown
from jpushare.store.reservations import held_reservations, lent_runs

router = APIRouter(prefix="/v1", tags=["cluster"])

_ERRORS = SIGNED_IN_ERRORS


@router.get("/queue", responses=_ERRORS)
def queue(
    session: SessionDep,
    user: CurrentUser,
    ctx: ContextDep,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[
        int, Query(ge=1, le=MAX_QUEUE_LIMIT, description=f"at most {MAX_QUEUE_LIMIT}")
    ] = 500,
) -> QueuePublic:
    """The queue in fair-share order (SPEC §1), each job with its rank (1 = top), its lab's
    usage, its recorded reservation, what the next cycle would do for it (`next_cycle`, a
    projection) and its "why", the same answer as /v1/jobs/{id}/why gives, with its estimated
    start (a projection like `squeue --start`, recomputed once per cycle)."""
    now = ctx.clock()
    snapshot = store.load_snapshot(session, now, ctx.busy(session), ctx.queue_memo)
    view = QueueView.of(snapshot, ctx.placement_order, ctx.policy)
    page = [int(j) for j in view.decisions.order[offset : offset + limit]]
    records = store.get_jobs(session, page, shown=Shown())  # the queue shows no private field
    tiers = tier_names_by_sort_order(session)
    estimates = ctx.estimates(session, snapshot)
    entries = queue_entries(view, records, tiers, offset, limit, estimates)
    data = [for_viewer(e, records[e.job_id], user) for e in entries]
    return QueuePublic(
        data=data,
        count=len(data),
        queue_length=len(view.decisions.order),
        top_job_id=view.top_job_id,
        computed_at=now,
    )


@router.get("/placements", responses=_ERRORS)
def placements(session: SessionDep, user: CurrentUser, ctx: ContextDep) -> PlacementsPublic:
    """Every placement (node, tier) with capacity, busy, reserved and idle GPUs and its
    node's state: where research jobs can start now, and where the LLM router may serve."""
    now = ctx.clock()
    places = store.placements(session, ctx.busy(session))
    nodes = {n.name: n for n in store.list_nodes(session)}
    tflops = {t.name: t.tflops for t in store.list_tiers(session)}
    held = held_reservations(session)
    serving = serving_by_placement(ctx.executor)
    loans: dict[tuple[str, str], list[PlacementLoan]] = defaultdict(list)
    holds = {r.job_id: (r.node, r.tier) for r in held}
    for run in lent_runs(session):
        if holds.get(run.lent_from) == (run.node, run.tier):  # its lender still holds them
            loans[(run.node, run.tier)].append(
                PlacementLoan(
                    job_id=run.job_id,
                    gpus=run.gpus,
                    lent_from_job_id=run.lent_from,
                    until=run.until,
                )
            )
    by_place: dict[tuple[str, str], list[PlacementReservation]] = defaultdict(list)
    for r in held:
        by_place[(r.node, r.tier)].append(
            PlacementReservation(job_id=r.job_id, gpus=r.gpus, of=r.num_gpus, since=r.since)
        )
    data = []
    for p in places:
        node = nodes.get(p.node)
        counts = placement_counts(p, sum(r.gpus for r in by_place[p.key]))
        data.append(
            PlacementPublic(
                node=p.node,
                tier=p.tier,
                tflops=tflops.get(p.tier, 0.0),
                capacity=p.capacity,
                busy=counts.busy,
                reserved=counts.reserved,
                idle=counts.idle,
                llm_backfill_gpus=counts.idle + counts.reserved if p.schedulable else 0,
                llm_gpus=min(serving.get(p.key, 0), counts.idle + counts.reserved),
                schedulable=p.schedulable,
                node_state=node.state if node else "unknown",
                node_state_reason=node.state_reason if node else None,
                drained=node.admin_drained if node else False,
                drain_reason=node.drain_reason if node else None,
                reservations=by_place[p.key],
                lent=sum(loan.gpus for loan in loans[p.key]),
                loans=loans[p.key],
            )
        )
    return PlacementsPublic(data=data, count=len(data), computed_at=now)


@router.get("/labs", responses=_ERRORS)
def labs(session: SessionDep, user: CurrentUser, ctx: ContextDep) -> LabsPublic:
    """Every lab, least usage first (the fair-share order, `rank` 1 first), with its share
    of all labs' usage, its queued and running jobs, and what it holds but has not been
    charged for yet (`in_flight_tflop_s`: charging is lazy, at each job's end)."""
    counts = lab_job_counts(session)
    in_flight = lab_in_flight(session, ctx.clock())
    labs = store.list_labs(session)
    total = sum(lab.cumulative_usage for lab in labs)
    data = []
    for rank, lab in enumerate(labs, start=1):
        held = in_flight.get(lab.name, LabInFlight())
        data.append(
            lab_public(lab, counts.get(lab.name)).model_copy(
                update={
                    "rank": rank,
                    "share": lab.cumulative_usage / total if total > 0 else None,
                    "in_flight_tflop_s": held.tflop_s,
                    "running_gpus": held.running_gpus,
                    "reserved_gpus": held.reserved_gpus,
                }
            )
        )
    return LabsPublic(data=data, count=len(data))


@router.get("/tiers", responses=_ERRORS)
def tiers(session: SessionDep, user: CurrentUser) -> TiersPublic:
    """Every GPU tier, strongest first."""
    data = [tier_public(t) for t in store.list_tiers(session)]
    return TiersPublic(data=data, count=len(data))
