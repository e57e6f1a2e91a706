"""The dispatcher cycle's two database steps: `load_snapshot` and `record_decisions`.

`load_snapshot` reads what one policy cycle looks at (tiers, placements, the queue with
its reservations, lab usage, running jobs) with plain column selects: 10,000 queued jobs
must load in well under 200 ms on PostgreSQL. `record_decisions` applies one cycle's
`Decisions` in the caller's transaction, every change guarded by the state it expects, so
a stale or repeated application changes nothing (STYLE: "assume" first, act after).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import DateTime, String, Table, select, type_coerce
from sqlalchemy.orm import Session

from jpushare.policy.model import (
    Action,
    Decisions,
    Dispatch,
    QueuedJob,
    Reservation,
    RunningJob,
    Snapshot,
    Tier,
)
from jpushare.store.actions import KINDS
from jpushare.store.errors import ConcurrentUpdate
from jpushare.store.inventory import POLICY_TIER_COLUMNS, PlacementKey, placements
from jpushare.store.launches import launch_details
from jpushare.store.ledger_writes import accrue_reservation, lent_gpus
from jpushare.store.records import DispatchedJob, Recorded
from jpushare.store.schema import ACTIVE_STATES, GpuTier, Job, JobState, Lab
from jpushare.store.times import from_epoch, to_epoch
from jpushare.store.transitions import (
    add_events,
    lock_jobs,
    rowcount,
)
from jpushare.vocabulary import job_id as policy_job_id
from jpushare.vocabulary import store_job_id

_QUEUED = JobState.GLOBAL_QUEUE_WAIT.value
_JOBS = cast(Table, Job.__table__)
_C = _JOBS.c


class QueueMemo:
    """The queued jobs of the last snapshot, each with the row it was built from.

    A dispatcher loads the whole queue every cycle, and between two cycles nearly every
    row is unchanged: building 10,000 `QueuedJob`s (a frozen dataclass each, its time
    converted, its id made a string) was half of `load_snapshot`. A row equal to the one
    a job was built from last time gives back the same (immutable) job. Only valid with
    the same lab and tier names, so a change of either forgets everything. The dispatcher
    keeps one across cycles, the API one across requests.
    """

    __slots__ = ("last",)

    def __init__(self) -> None:
        # (lab names, tier names, job id -> (row, job)): one attribute, replaced whole, so
        # that API requests on several threads may share one memo.
        self.last: tuple[dict[int, str], dict[uuid.UUID, str], dict[int, Any]] | None = None


def load_snapshot(
    session: Session,
    now: datetime,
    busy_by_placement: Mapping[PlacementKey, int] | None = None,
    memo: QueueMemo | None = None,
) -> Snapshot:
    """Everything one policy cycle reads, as policy values (times as UNIX seconds).

    `busy_by_placement`: GPUs research jobs use now per (node, tier name), as the caller
    observed them (see `held_by_jobs` for JPU-Share's own share of them). `memo`: the
    caller's `QueueMemo`, kept from one cycle to the next (a dispatcher's).
    """
    tier_rows = session.execute(
        select(GpuTier.id, *POLICY_TIER_COLUMNS).order_by(GpuTier.sort_order.desc(), GpuTier.name)
    )
    tiers: list[Tier] = []
    tier_names: dict[uuid.UUID, str] = {}
    for tier_row in tier_rows:
        tiers.append(Tier(*tier_row[1:]))
        tier_names[tier_row[0]] = tier_row[1]
    lab_names: dict[int, str] = {}
    lab_usage: dict[str, float] = {}
    for lab_id, lab_name, usage in session.execute(select(Lab.id, Lab.name, Lab.cumulative_usage)):
        lab_names[lab_id] = lab_name
        lab_usage[lab_name] = usage

    # The queue: Core columns (no ORM row loading), and times without the UtcDateTime
    # round trip: 10,000 rows must load fast (see the module docstring).
    when = _time_type(session)
    rows = (
        session.connection()
        .execute(
            select(
                _C.id,
                _C.lab_id,
                _C.num_gpus,
                _C.minimum_tier_sort_order,
                type_coerce(_C.queue_entered_at, when),
                _C.time_limit_s,
                _C.reserved_gpus,
                _C.reserved_node_name,
                _C.reserved_tier_id,
                type_coerce(_C.reservation_since, when),
                type_coerce(_C.reservation_last_accrued_at, when),
            ).where(_C.state == _QUEUED, _C.waiting.is_(None))  # eligible jobs only
        )
        .all()
    )
    known: dict[int, tuple[Any, QueuedJob]] = {}
    last = memo.last if memo is not None else None
    if last is not None and last[0] == lab_names and last[1] == tier_names:
        known = last[2]
    built: dict[int, tuple[Any, QueuedJob]] = {}
    queue: list[QueuedJob] = []
    append = queue.append
    for row in rows:
        jid = row[0]
        hit = known.get(jid)
        if hit is not None and hit[0] == row:
            built[jid] = hit
            append(hit[1])
            continue
        job = _queued_job(row, lab_names, tier_names, now)
        if job.reservation is None or row[9] is not None:  # else it depends on `now`
            built[jid] = (row, job)
        append(job)
    if memo is not None:
        memo.last = (lab_names, tier_names, built)

    running: list[RunningJob] = []
    for jid, node, tier_id, n, started, dispatched, limit_s, lent_from in session.execute(
        select(
            Job.id,
            Job.node_name,
            Job.tier_id,
            Job.num_gpus,
            Job.started_at,
            Job.dispatched_at,
            Job.time_limit_s,
            Job.lent_from_job_id,
        ).where(Job.state.in_([s.value for s in ACTIVE_STATES]))
    ):
        at = started or dispatched
        if node is None or tier_id is None or at is None:
            continue
        running.append(
            RunningJob(
                policy_job_id(jid),
                node,
                tier_names.get(tier_id, str(tier_id)),
                n,
                to_epoch(at),
                limit_s,
                None if lent_from is None else policy_job_id(lent_from),
            )
        )

    return Snapshot(
        tiers=tuple(tiers),
        placements=tuple(placements(session, busy_by_placement)),
        queue=tuple(queue),
        lab_usage=lab_usage,
        now=to_epoch(now),
        running=tuple(running),
    )


def _time_type(session: Session) -> Any:
    """How the queue's times are read: as the driver gives them. PostgreSQL's driver gives an
    aware datetime; SQLite's column is text, which SQLAlchemy's DateTime parses with a
    regular expression (most of a 10,000-row load), `datetime.fromisoformat` much faster."""
    return String() if session.get_bind().dialect.name == "sqlite" else DateTime(timezone=True)


def _queued_job(
    row: Any, lab_names: Mapping[int, str], tier_names: Mapping[uuid.UUID, str], now: datetime
) -> QueuedJob:
    jid, lab_id, n, min_order, entered, limit_s, r_gpus, r_node, r_tier, since, last = row
    reservation = None
    if r_gpus > 0 and r_node is not None and r_tier is not None:
        since_s = to_epoch(_aware(since)) if since is not None else to_epoch(now)
        reservation = Reservation(
            node=r_node,
            tier=tier_names.get(r_tier, str(r_tier)),
            gpus=r_gpus,
            since=since_s,
            last_accrued_at=to_epoch(_aware(last)) if last is not None else since_s,
        )
    return QueuedJob(
        job_id=policy_job_id(jid),
        lab=lab_names[lab_id],
        num_gpus=n,
        min_sort_order=min_order,
        queue_entered_at=_aware(entered).timestamp(),
        reservation=reservation,
        time_limit_s=limit_s,
    )


def _aware(entered: datetime | str) -> datetime:
    if isinstance(entered, str):
        entered = datetime.fromisoformat(entered)
    return entered if entered.tzinfo else entered.replace(tzinfo=UTC)


def held_by_jobs(session: Session) -> dict[PlacementKey, int]:
    """GPUs JPU-Share's own DISPATCHED and RUNNING jobs hold, per (node, tier name).

    A job recorded as dispatched may not show in the executor's `used` yet; a dispatcher
    that takes, per placement, the larger of this and the observed count cannot hand the
    same GPUs out twice.
    """
    out: dict[PlacementKey, int] = defaultdict(int)
    rows = session.execute(
        select(Job.node_name, GpuTier.name, Job.num_gpus)
        .join(GpuTier, GpuTier.id == Job.tier_id)
        .where(Job.state.in_([s.value for s in ACTIVE_STATES]))
    )
    for node, tier, n in rows:
        if node is not None:
            out[(node, tier)] += n
    return dict(out)


def record_decisions(
    session: Session, decisions: Decisions, now: datetime | None = None
) -> Recorded:
    """Apply one cycle's decisions in the caller's transaction; return what was applied.

    1. Lock every job the decisions name (SELECT … FOR UPDATE, id order).
    2. Accruals: the reservation's cost from its `reservation_last_accrued_at` as stored
       (so a stale or repeated decision cannot accrue twice) to the decision's time, with
       the ledger's `accrue_reservation`; the lab is not touched (SPEC §4).
    3. Check each action against the locked row, per job in a guard-safe order (absorb,
       release, start, dispatch); one that no longer matches (stale) is skipped.
    4. Apply the rest: per kind one UPDATE … WHERE id = :id AND state = 'GLOBAL_QUEUE_WAIT'
       AND <the reservation it expects>, sent as one batch. A dispatch sets DISPATCHED,
       the placement, attempts + 1 and dispatched_at. The guards cannot fail under the
       row locks; if one ever does, ConcurrentUpdate is raised and the caller rolls back.
    5. One job event per applied action.

    Each kind of action's part in steps 3-5 is its entry in `store.actions.KINDS`.

    `now` stamps the events and dispatch times (default: the decisions' own time).
    The dispatcher starts only `Recorded.dispatched`, never `decisions.dispatches()`.
    """
    at = now if now is not None else from_epoch(decisions.now)
    by_job: dict[int, list[tuple[int, Action]]] = defaultdict(list)  # (index, action)
    for index, action in enumerate(decisions.actions):
        by_job[store_job_id(action.job_id)].append((index, action))
    accruals = {store_job_id(a.job_id): a for a in decisions.accruals}
    locked = lock_jobs(session, set(by_job) | set(accruals))
    tier_ids: dict[str, uuid.UUID] = {}
    tflops: dict[uuid.UUID, float] = {}
    partitions: dict[str, str | None] = {}
    tier_defaults: dict[str, tuple[int | None, int | None]] = {}
    for tid, name, tf, partition, cpus, mem in session.execute(
        select(
            GpuTier.id,
            GpuTier.name,
            GpuTier.tflops,
            GpuTier.partition,
            GpuTier.cpus_per_gpu,
            GpuTier.mem_per_gpu_mb,
        )
    ):
        tier_ids[name] = tid
        tflops[tid] = tf
        partitions[name] = partition
        tier_defaults[name] = (cpus, mem)

    # 2. Accruals (one reservation at a time in practice: row by row). GPUs lent out are
    # their borrowers' run cost, not the reservation's (a loan's end accrues up to then).
    accrued_total = 0.0
    lent = lent_gpus(session, accruals)
    for job_id, accrual in sorted(accruals.items()):
        job = locked.get(job_id)
        if job is not None:
            tier = job.reserved_tier_id
            tf = tflops.get(tier, 0.0) if tier is not None else 0.0
            accrued_total += accrue_reservation(
                session, job, from_epoch(accrual.accrued_to), tf, lent.get(job_id, 0)
            )

    # 3. Check every action against the locked rows.
    applied: set[int] = set()  # indexes into decisions.actions
    params: dict[type, list[dict[str, Any]]] = defaultdict(list)
    events: list[dict[str, Any]] = []
    dispatched: list[tuple[int, Dispatch, int]] = []
    for job_id in sorted(by_job):
        job = locked.get(job_id)
        for index, action in sorted(by_job[job_id], key=lambda ia: KINDS[type(ia[1])].rank):
            kind = KINDS[type(action)]
            tier_id = tier_ids.get(action.tier)
            if job is None or tier_id is None or job.state != _QUEUED or job.waiting is not None:
                continue  # (held or waiting since the snapshot: not in the queue any more)
            if not kind.valid(job, action, tier_id):
                continue
            params[type(action)].append(kind.params(job, action, tier_id, at))
            events.append(kind.event(job, action, at))
            applied.add(index)
            if isinstance(action, Dispatch):
                dispatched.append((job_id, action, job.attempts + 1))
            job = kind.after(job, action, tier_id, at)

    # 4. and 5. Apply, kind by kind in the guard-safe order, then the events.
    for action_type in sorted(params, key=lambda t: KINDS[t].rank):
        batch = params[action_type]
        matched = rowcount(session.execute(KINDS[action_type].statement, batch))
        if matched != len(batch):
            raise ConcurrentUpdate(
                f"{action_type.__name__}: {matched} of {len(batch)} guarded updates matched"
            )
    add_events(session, events)
    return Recorded(
        dispatched=tuple(_dispatched(session, dispatched, partitions, tier_defaults)),
        applied=tuple(a for i, a in enumerate(decisions.actions) if i in applied),
        skipped=tuple(a for i, a in enumerate(decisions.actions) if i not in applied),
        accrued_tflop_s=accrued_total,
    )


def _dispatched(
    session: Session,
    dispatched: list[tuple[int, Dispatch, int]],
    partitions: Mapping[str, str | None],
    tier_defaults: Mapping[str, tuple[int | None, int | None]],
) -> list[DispatchedJob]:
    if not dispatched:
        return []
    ids = [job_id for job_id, _, _ in dispatched]
    runs = launch_details(session, ids)
    out = []
    for job_id, d, attempt in dispatched:
        placement = (d.node, d.tier, partitions.get(d.tier), d.num_gpus)
        defaults = tier_defaults.get(d.tier, (None, None))
        out.append(runs[job_id].dispatched(job_id, attempt, placement, defaults))
    return out
