"""What the dispatcher's observe step reads and writes: active jobs, run owners, busy GPUs.

The executor's view (GPUs in use per placement, foreign jobs included) lives only in the
dispatcher's process; the API, possibly another process or machine, needs it too to answer
"why" and `GET /v1/placements` with the numbers the policy used. The observe step therefore
stores it in `placement_observations` (migration 0002), one row per (node, tier name),
replaced whole in the transaction that applies the observation; `load_observed_busy` reads
it back. Like the rest of the store, nothing here commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Integer, Text, delete, insert, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from jpushare.store.inventory import PlacementKey
from jpushare.store.launches import launch_details
from jpushare.store.records import DispatchedJob
from jpushare.store.schema import ACTIVE_STATES, Base, GpuTier, Job, JobState
from jpushare.store.transitions import id_chunks


class PlacementObservation(Base):
    """GPUs research jobs held on one placement when the dispatcher last looked."""

    __tablename__ = "placement_observations"

    node_name: Mapped[str] = mapped_column(Text, primary_key=True)
    tier_name: Mapped[str] = mapped_column(Text, primary_key=True)
    busy_gpus: Mapped[int] = mapped_column(Integer)
    observed_at: Mapped[datetime]


def save_observed_busy(session: Session, busy: Mapping[PlacementKey, int], now: datetime) -> None:
    """Replace the stored observation with `busy` ((node, tier name) -> GPUs in use)."""
    session.execute(delete(PlacementObservation))
    # Idle placements are stored too (busy 0): the rows' time says when the observation
    # was made, which `load_observed_busy` needs even when nothing was busy.
    rows = [
        {"node_name": node, "tier_name": tier, "busy_gpus": n, "observed_at": now}
        for (node, tier), n in sorted(busy.items())
    ]
    if rows:
        session.execute(insert(PlacementObservation), rows)


def load_observed_busy(session: Session) -> dict[PlacementKey, int]:
    """GPUs research jobs use per (node, tier name): the dispatcher's last observation,
    plus the jobs it recorded as dispatched since (their GPUs are promised, but the
    observation, made at the start of the cycle that dispatched them, predates them).

    What `store.placements(session, busy)` and `store.load_snapshot(..., busy)` take.
    Before the first observation it is every active job's GPUs.
    """
    busy: dict[PlacementKey, int] = {}
    last: datetime | None = None
    rows = session.execute(
        select(
            PlacementObservation.node_name,
            PlacementObservation.tier_name,
            PlacementObservation.busy_gpus,
            PlacementObservation.observed_at,
        )
    )
    for node, tier, n, at in rows:
        busy[(node, tier)] = n
        last = at if last is None or at > last else last
    since = (
        select(Job.node_name, GpuTier.name, Job.num_gpus)
        .join(GpuTier, GpuTier.id == Job.tier_id)
        .where(Job.state.in_([s.value for s in ACTIVE_STATES]))
    )
    if last is not None:
        since = since.where(Job.dispatched_at >= last)
    for job_node, job_tier, gpus in session.execute(since):
        if job_node is not None:
            busy[(job_node, job_tier)] = busy.get((job_node, job_tier), 0) + gpus
    return {key: n for key, n in busy.items() if n > 0}


@dataclass(frozen=True, slots=True)
class ActiveJobRow:
    """A DISPATCHED or RUNNING job as the observe step compares it with the executor's runs."""

    job_id: int
    attempt: int
    state: JobState
    node: str
    tier: str
    num_gpus: int
    executor_id: str | None


def active_jobs(session: Session) -> list[ActiveJobRow]:
    """Every DISPATCHED or RUNNING job with its placement, in id order."""
    rows = session.execute(
        select(
            Job.id,
            Job.attempts,
            Job.state,
            Job.node_name,
            GpuTier.name,
            Job.num_gpus,
            Job.executor_id,
        )
        .join(GpuTier, GpuTier.id == Job.tier_id)
        .where(Job.state.in_([s.value for s in ACTIVE_STATES]))
        .order_by(Job.id)
    )
    return [
        ActiveJobRow(jid, attempt, JobState(state), node, tier, n, executor_id)
        for jid, attempt, state, node, tier, n, executor_id in rows
        if node is not None
    ]


def job_states(session: Session, job_ids: Iterable[int]) -> dict[int, tuple[JobState, int]]:
    """job id -> (state, attempts) for the ids that exist (unknown ids are left out)."""
    out: dict[int, tuple[JobState, int]] = {}
    for chunk in id_chunks(job_ids):
        rows = session.execute(select(Job.id, Job.state, Job.attempts).where(Job.id.in_(chunk)))
        for jid, state, attempts in rows:
            out[jid] = (JobState(state), attempts)
    return out


def cancelled_runs(
    session: Session, job_ids: Iterable[int]
) -> dict[int, tuple[int, datetime | None, datetime | None]]:
    """job id -> (attempts, started_at, ended_at) of those of these jobs that were CANCELLED
    while dispatched or running (they keep their placement; one cancelled in the queue after
    a requeue does not, and its last run was charged when it was requeued): the runs the
    dispatcher may have to settle (`lifecycle.settle_cancelled_run`)."""
    out: dict[int, tuple[int, datetime | None, datetime | None]] = {}
    for chunk in id_chunks(job_ids):
        rows = session.execute(
            select(Job.id, Job.attempts, Job.started_at, Job.ended_at).where(
                Job.id.in_(chunk),
                Job.state == JobState.CANCELLED.value,
                Job.tier_id.is_not(None),
            )
        )
        for jid, attempts, started_at, ended_at in rows:
            out[jid] = (attempts, started_at, ended_at)
    return out


def dispatched_launches(session: Session, job_ids: Iterable[int]) -> list[DispatchedJob]:
    """The DISPATCHED jobs among `job_ids`, with what their launch needs, in id order."""
    out: list[DispatchedJob] = []
    for chunk in id_chunks(job_ids):
        rows = session.execute(
            select(
                Job.id,
                Job.attempts,
                Job.node_name,
                GpuTier.name,
                GpuTier.partition,
                Job.num_gpus,
                GpuTier.cpus_per_gpu,
                GpuTier.mem_per_gpu_mb,
            )
            .join(GpuTier, GpuTier.id == Job.tier_id)
            .where(Job.id.in_(chunk), Job.state == JobState.DISPATCHED.value)
            .order_by(Job.id)
        ).all()
        runs = launch_details(session, [row[0] for row in rows])
        for jid, attempt, node, tier, partition, n, tier_cpus, tier_mem in rows:
            if node is None:
                continue
            out.append(
                runs[jid].dispatched(
                    jid, attempt, (node, tier, partition, n), (tier_cpus, tier_mem)
                )
            )
    return out
