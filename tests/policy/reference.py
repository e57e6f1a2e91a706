"""SPEC §3 transcribed line by line, slowly: the oracle the fast `decide` is compared with.

Every list is re-sorted and re-scanned for every job: no index, no cache, nothing clever.
Only the actions and accruals are modelled (the "why" answers are checked separately).
Conventions it shares with `decide` where the SPEC leaves them open: a swap lists the
Dispatch before the ReleaseReservation; a filled reservation lists Absorb, Dispatch, then
Release(filled); a dispatch under (a) is a swap even onto the job's own reserved placement
(only a reservation that reached num_gpus through (b) is "filled");
R5 also covers a placement whose reserved GPUs were taken outside JPU-Share (free < held).
The placement orders are SPEC §1's, spelled out here again on purpose (not imported).
"""

from __future__ import annotations

from jpushare.policy.fit import fits
from jpushare.policy.model import (
    AbsorbReservation,
    AccrueReservation,
    Action,
    Dispatch,
    Placement,
    QueuedJob,
    ReleaseReason,
    ReleaseReservation,
    Reservation,
    Snapshot,
    StartReservation,
)

Key = tuple[str, str]


def reference_decide(
    snap: Snapshot,
    placement: str = "pack",
    best_idle: dict[str, int] | None = None,
    top_job: str = "first-waiting",
) -> tuple[tuple[str, ...], tuple[Action, ...], tuple[AccrueReservation, ...]]:
    """(queue order, actions, accruals) of one cycle, straight from SPEC §3 and §4.

    `placement`: "pack" (SPEC §1: best fit for dispatch) or "spread" (most idle first).
    `best_idle`, if given, receives for each job that waits the most idle GPUs on one of
    its fit placements once the cycle is done with it (SPEC §8's "why" figure).
    `top_job`: "first-waiting" (SPEC decision 7: the first job that cannot start is the
    top job; R3 is judged there, and the GPUs it frees are looked at again by that job
    first) or "first-queued" (queue[0], R3 judged before the walk).
    """
    assert placement in ("pack", "spread")
    assert top_job in ("first-waiting", "first-queued")
    literal = top_job == "first-queued"
    now = snap.now
    tiers = {t.name: t for t in snap.tiers}
    placements = {p.key: p for p in snap.placements if p.tier in tiers}
    queue = sorted(
        snap.queue, key=lambda j: (snap.lab_usage.get(j.lab, 0.0), j.queue_entered_at, j.job_id)
    )
    top = (queue[0].job_id if queue else None) if literal else None
    idle: dict[Key, int] = {k: p.free for k, p in placements.items()}
    actions: list[Action] = []
    accruals: list[AccrueReservation] = []

    # R5, R3, and the accrual of every reservation up to now (§4: released ones too).
    held: dict[str, Reservation] = {}
    for job in queue:
        res = job.reservation
        if res is None:
            continue
        tier = tiers.get(res.tier)
        if now > res.last_accrued_at:
            tflops = tier.tflops if tier is not None else 0.0
            accruals.append(
                AccrueReservation(job.job_id, res.gpus * (now - res.last_accrued_at) * tflops, now)
            )
        p = placements.get((res.node, res.tier))
        if (
            p is None
            or tier is None
            or not p.schedulable
            or not fits(job.num_gpus, job.min_sort_order, tier, p.capacity)
            or p.free < res.gpus
        ):
            actions.append(_release(job, res, ReleaseReason.R5))
        elif literal and job.job_id != top:
            actions.append(_release(job, res, ReleaseReason.R3))
        else:
            held[job.job_id] = res
    for res in held.values():
        idle[(res.node, res.tier)] -= res.gpus

    def fit(job: QueuedJob) -> list[Placement]:
        return [
            p
            for p in placements.values()
            if fits(job.num_gpus, job.min_sort_order, tiers[p.tier], p.capacity)
        ]

    def dispatch_order(p: Placement) -> tuple[int, int, str, str]:
        # SPEC §1: tier sort_order DESC, then (pack) the fewest idle GPUs that still hold
        # the job or (spread) the most idle, then node name.
        fewest_or_most = idle[p.key] if placement == "pack" else -idle[p.key]
        return (-tiers[p.tier].sort_order, fewest_or_most, p.node, p.tier)

    def reserve_order(p: Placement) -> tuple[int, int, str, str]:
        # SPEC §1: tier sort_order DESC, idle DESC, node name.
        return (-tiers[p.tier].sort_order, -idle[p.key], p.node, p.tier)

    for i, job in enumerate(queue):
        n = job.num_gpus
        res = held.get(job.job_id)
        available = sorted((p for p in fit(job) if idle[p.key] >= n), key=dispatch_order)
        if not available and not literal and top is None:
            # Decision 7: this job cannot start, so it is the top job. R3: every other
            # reservation goes, its GPUs idle at once; the top job looks again.
            top = job.job_id
            for other in list(held):
                if other != top:
                    gone = held.pop(other)
                    actions.append(
                        ReleaseReservation(other, gone.node, gone.tier, gone.gpus, ReleaseReason.R3)
                    )
                    idle[(gone.node, gone.tier)] += gone.gpus
            available = sorted((p for p in fit(job) if idle[p.key] >= n), key=dispatch_order)
            if available:
                top = None  # it starts after all: the next job that cannot is the top
        if available:  # (a)
            p = available[0]
            actions.append(Dispatch(job.job_id, p.node, p.tier, n))
            idle[p.key] -= n
            if res is not None:
                actions.append(_release(job, res, ReleaseReason.SWAP))
                del held[job.job_id]
                idle[(res.node, res.tier)] += res.gpus
            continue
        if res is not None:  # (b)
            key = (res.node, res.tier)
            absorb = max(0, min(idle[key], n - res.gpus))
            total = res.gpus + absorb
            if absorb > 0:
                actions.append(AbsorbReservation(job.job_id, res.node, res.tier, absorb, total))
                idle[key] -= absorb
            if total >= n:
                actions.append(Dispatch(job.job_id, res.node, res.tier, n))
                actions.append(
                    ReleaseReservation(job.job_id, res.node, res.tier, total, ReleaseReason.FILLED)
                )
                idle[key] += total - n
                del held[job.job_id]
                if not literal:
                    top = None  # it starts: the next job that cannot is the top
            continue
        is_top = i == 0 if literal else job.job_id == top
        if is_top and n >= 2:  # (c)
            reservable = sorted((p for p in fit(job) if idle[p.key] > 0), key=reserve_order)
            if reservable:
                p = reservable[0]
                actions.append(StartReservation(job.job_id, p.node, p.tier, idle[p.key]))
                idle[p.key] = 0
        # (d) wait
        if best_idle is not None:
            best_idle[job.job_id] = max((idle[p.key] for p in fit(job)), default=0)
    return tuple(j.job_id for j in queue), tuple(actions), tuple(accruals)


def _release(job: QueuedJob, res: Reservation, reason: ReleaseReason) -> ReleaseReservation:
    return ReleaseReservation(job.job_id, res.node, res.tier, res.gpus, reason)
