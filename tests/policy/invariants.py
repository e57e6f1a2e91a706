"""The per-cycle invariants of SPEC §3 (docs/policy.md §3.2), checked on one (snapshot, decisions).

`check_cycle` replays the decision list against a ledger of idle and reserved GPUs per
placement: every action must be possible at the moment it is taken, so a job below rank 0
can never have taken GPUs that the top job reserved. Used by the random-snapshot
properties and, per cycle, by the event-sequence properties.
"""

from __future__ import annotations

import math
from collections import Counter

from jpushare.policy.fit import fits
from jpushare.policy.model import (
    AbsorbReservation,
    Decisions,
    Dispatch,
    ReleaseReason,
    ReleaseReservation,
    Snapshot,
    StartReservation,
    WhyCode,
)

Key = tuple[str, str]


def check_cycle(
    snap: Snapshot, d: Decisions, top_job: str = "first-waiting", reserved_gpus: str = "llm-only"
) -> None:
    """Assert every per-cycle invariant of `d` = decide(`snap`, top_job=`top_job`).

    The top job is queue[0] (`first-queued`) or, by SPEC decision 7 (`first-waiting`),
    the first job of the order that does not dispatch in this cycle."""
    first_waiting = top_job == "first-waiting"
    tiers = {t.name: t for t in snap.tiers}
    placements = {p.key: p for p in snap.placements}
    jobs = {j.job_id: j for j in snap.queue}
    assert sorted(d.order) == sorted(jobs), "the order is a permutation of the queue"
    will_dispatch = {a.job_id for a in d.dispatches()}
    if first_waiting:
        top = next((j for j in d.order if j not in will_dispatch), None)
    else:
        top = d.order[0] if d.order else None

    # The ledger at the start of the cycle: Slurm-free GPUs minus every reservation held.
    idle: dict[Key, int] = {k: p.free for k, p in placements.items()}
    held: dict[str, tuple[Key, int]] = {}  # job -> (placement, reserved GPUs)
    for j in snap.queue:
        if j.reservation is not None:
            key = (j.reservation.node, j.reservation.tier)
            held[j.job_id] = (key, j.reservation.gpus)
            if key in idle:
                idle[key] -= j.reservation.gpus
    initially_held = set(held)
    used_own: dict[str, int] = {}  # reserved GPUs a dispatch took from the job's own hold
    dispatched: dict[str, Key] = {}
    released: set[str] = set()
    walk_started = False
    lent: Counter[str] = Counter()  # holder -> GPUs of its reservation lent out
    for r in snap.running:
        if r.lent_from is not None:
            lent[r.lent_from] += r.num_gpus
    for holder, (hkey, _) in held.items():  # GPUs lent out are busy, not reserved-idle
        if hkey in idle:
            idle[hkey] += lent[holder]
    ends: dict[Key, list[tuple[float, int]]] = {}  # placement -> (limit's end, GPUs)
    for r in snap.running:
        if r.lent_from is None:
            end = math.inf if r.time_limit_s is None else r.started_at + r.time_limit_s
            ends.setdefault((r.node, r.tier), []).append((end, r.num_gpus))
    lent_now: Counter[Key] = Counter()

    for a in d.actions:
        job = jobs[a.job_id]
        key = (a.node, a.tier)
        if isinstance(a, ReleaseReservation):
            assert a.job_id in held, f"{a}: the job holds no reservation"
            hkey, gpus = held.pop(a.job_id)
            released.add(a.job_id)
            assert key == hkey and a.gpus == gpus, f"{a}: not the reservation held ({hkey}, {gpus})"
            if a.reason in (ReleaseReason.R3, ReleaseReason.R5):
                # Decision 7 judges R3 at the top job, in the walk; R5 always comes first.
                if a.reason is ReleaseReason.R5 or not first_waiting:
                    assert not walk_started, f"{a}: R3/R5 come before the walk over the queue"
                assert a.job_id in initially_held
            if a.reason is ReleaseReason.R3:
                # (Decision 7: judged at a job above it, which may then start on the GPUs
                # the release freed; the holder may become the top job after it.)
                if not first_waiting:
                    assert a.job_id != top, f"{a}: R3 on the top job"
                assert d.order.index(a.job_id) > 0, f"{a}: R3 on the first job of the order"
            if a.reason is ReleaseReason.R5:
                p = placements.get(key)
                t = tiers.get(a.tier)
                assert (
                    p is None
                    or t is None
                    or not p.schedulable
                    or not fits(job.num_gpus, job.min_sort_order, t, p.capacity)
                    or p.free + lent[a.job_id] < gpus
                ), f"{a}: the placement is up and fits"
            if a.reason in (ReleaseReason.FILLED, ReleaseReason.SWAP):
                assert a.job_id in dispatched, f"{a}: released as {a.reason} without a dispatch"
                if a.reason is ReleaseReason.FILLED:  # (b): on its own placement, whole
                    assert dispatched[a.job_id] == key, a
                    assert gpus == job.num_gpus, f"{a}: filled below num_gpus"
            assert a.reason is not ReleaseReason.CANCEL, "decide never cancels"
            if key in idle:
                idle[key] += gpus - lent[a.job_id] - used_own.pop(a.job_id, 0)
            continue

        walk_started = True
        p = placements[key]
        tier = tiers[a.tier]
        assert p.schedulable, f"{a}: on a node that is down or drained"
        assert fits(job.num_gpus, job.min_sort_order, tier, p.capacity), f"{a}: does not fit"
        if isinstance(a, Dispatch) and a.lent_from is not None:
            # The lending option: on the top job's reserved GPUs, ending by its fill.
            assert reserved_gpus == "lend-by-limit", f"{a}: lent under R4"
            assert a.lent_from == top and top in held and held[top][0] == key, a
            assert a.job_id not in dispatched and a.num_gpus == job.num_gpus, a
            assert job.time_limit_s is not None and job.reservation is None, a
            assert a.lent_until == snap.now + job.time_limit_s, a
            lent[top] += a.num_gpus
            assert lent[top] <= held[top][1], f"{a}: lends more GPUs than are reserved"
            lacking = jobs[top].num_gpus - held[top][1] - idle[key]
            fill = snap.now
            for end, n in sorted(ends.get(key, ())):
                if lacking <= 0:
                    break
                lacking -= n
                fill = end
            assert lacking <= 0 and a.lent_until <= fill, f"{a}: ends after the fill {fill}"
            dispatched[a.job_id] = key
            lent_now[key] += a.num_gpus
            continue
        if isinstance(a, Dispatch):
            assert a.job_id not in dispatched, f"{a}: dispatched twice"
            assert a.num_gpus == job.num_gpus, f"{a}: one placement, all the GPUs the job asks"
            own = 0
            if a.job_id in held and held[a.job_id][0] == key:
                own = min(held[a.job_id][1], a.num_gpus)
            from_idle = a.num_gpus - own
            assert from_idle <= idle[key], f"{a}: takes reserved or busy GPUs (R4)"
            idle[key] -= from_idle
            used_own[a.job_id] = own
            limit = job.time_limit_s
            end = math.inf if limit is None else snap.now + limit
            ends.setdefault(key, []).append((end, a.num_gpus))
            dispatched[a.job_id] = key
        elif isinstance(a, StartReservation):
            assert a.job_id == top, f"{a}: only the top job may reserve (R2)"
            assert job.num_gpus >= 2, f"{a}: only a multi-GPU job may reserve (R2)"
            # (A job whose reservation R5 released this cycle may reserve elsewhere at once.)
            assert a.job_id not in held, f"{a}: one reservation at a time (R1)"
            assert 0 < a.gpus == idle[key], f"{a}: reserves every idle GPU of the placement"
            assert a.gpus < job.num_gpus, f"{a}: would have dispatched instead"
            idle[key] = 0
            held[a.job_id] = (key, a.gpus)
        elif isinstance(a, AbsorbReservation):
            # (Under decision 7 a holder above the top job may fill and start.)
            by = a.job_id == top or (first_waiting and a.job_id in will_dispatch)
            assert by and a.job_id in held, f"{a}: absorb without a reservation"
            hkey, gpus = held[a.job_id]
            assert hkey == key, f"{a}: grows only on its own placement (R1)"
            assert 0 < a.added <= idle[key], f"{a}: absorbs GPUs that are not idle"
            assert a.total == gpus + a.added <= job.num_gpus, a
            idle[key] -= a.added
            held[a.job_id] = (key, a.total)

    # Whatever was held and not released is still held; nothing ends over capacity.
    for job_id, (key, _) in held.items():
        assert job_id not in dispatched, f"{job_id} dispatched and still reserving"
        assert key in placements and placements[key].schedulable
    assert len(held) <= 1, f"more than one reservation after the cycle: {held}"
    for job_id in held:
        assert job_id == top and jobs[job_id].num_gpus >= 2
        assert 0 < held[job_id][1] < jobs[job_id].num_gpus
    dispatched_gpus = Counter[Key]()
    for a in d.dispatches():
        if a.lent_from is None:  # lent GPUs are counted in the reservation
            dispatched_gpus[(a.node, a.tier)] += a.num_gpus
    for key, p in placements.items():
        reserved = sum(g for k, g in held.values() if k == key)
        assert p.busy + dispatched_gpus[key] + reserved <= p.capacity, f"{key} over capacity"
        assert idle[key] >= 0, f"{key}: more GPUs taken than were idle"

    # Every queued job that did not dispatch has one answer, the others none (SPEC §8).
    assert set(d.why) == set(jobs) - set(dispatched)
    for job_id, why in d.why.items():
        job = jobs[job_id]
        assert why.job_id == job_id and why.rank == d.order.index(job_id)
        assert why.top_job_id == top and why.queue_length == len(jobs)
        assert why.num_gpus == job.num_gpus
        assert (why.code is WhyCode.RESERVING) == (job_id in held), why
        if why.code is WhyCode.RESERVING:
            assert why.reservation is not None
            assert (why.reservation.node, why.reservation.tier) == held[job_id][0]
            assert why.reservation.gpus == held[job_id][1]
        if why.code is WhyCode.WAITING_FOR_PRIORITY:
            assert job_id != top and job.num_gpus >= 2
        if why.code is WhyCode.BEHIND_RESERVATION:
            assert why.blocking_job_id == top and top in held
            assert why.blocking_reservation is not None
            assert why.blocking_reservation.gpus == held[top][1]
        fit_keys = [
            k
            for k, p in placements.items()
            if (t := tiers.get(p.tier)) is not None
            and fits(job.num_gpus, job.min_sort_order, t, p.capacity)
        ]
        assert why.fit_placements == len(fit_keys)
        assert why.schedulable_fit_placements == sum(placements[k].schedulable for k in fit_keys)
        assert (why.code is WhyCode.NO_FIT_PLACEMENT) == (not fit_keys)
        no_schedulable = bool(fit_keys) and not any(placements[k].schedulable for k in fit_keys)
        assert (why.code is WhyCode.NO_SCHEDULABLE_PLACEMENT) == no_schedulable
        assert 0 <= why.best_idle < job.num_gpus or why.code is WhyCode.RESERVING
        assert why.sentence
