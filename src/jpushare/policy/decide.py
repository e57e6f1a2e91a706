"""The dispatch cycle of SPEC §3 as one pure function: `decide(snapshot) -> Decisions`.

No I/O, no clock, no randomness. Same snapshot (in any list order), same decisions.

Cost: one sort of the queue, then O(tiers) per queued job. Idle GPUs are indexed per tier
in sorted lists (`order.IdleIndex`), and a job whose (size, minimum tier) class already
failed since the last change of any idle count reuses that answer, so a cycle over 10^5
jobs costs a few bisects per dispatch plus a dictionary lookup per waiting job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import compress
from operator import attrgetter

from jpushare.policy.accounting import reservation_accrual
from jpushare.policy.fit import fits
from jpushare.policy.lending import Lending
from jpushare.policy.model import (
    AbsorbReservation,
    AccrueReservation,
    Action,
    Decisions,
    Dispatch,
    QueuedJob,
    ReleaseReason,
    ReleaseReservation,
    Reservation,
    Snapshot,
    StartReservation,
)
from jpushare.policy.options import ReservedGpus, TopJob
from jpushare.policy.order import PlacementOrder, idle_index_of
from jpushare.policy.why import ClassView, WhyTable


def queue_order(lab_usage: dict[str, float]) -> Callable[[QueuedJob], tuple[float, float, str]]:
    """The queue comparator (SPEC §1), criteria in order:

    1. the lab's cumulative usage, least first (fair share);
    2. queue_entered_at, earliest first;
    3. job id as text, for a deterministic order.
    """

    def key(job: QueuedJob) -> tuple[float, float, str]:
        return (lab_usage.get(job.lab, 0.0), job.queue_entered_at, job.job_id)

    return key


_JOB_ID = attrgetter("job_id")
_ENTERED = attrgetter("queue_entered_at")
_CLASS = attrgetter("num_gpus", "min_sort_order")
_RESERVATION = attrgetter("reservation")


class RankedQueue(tuple[QueuedJob, ...]):
    """A queue already in `queue_order(lab_usage)` for the very `lab_usage` dict it names.

    Equal to the plain tuple, and the policies decide the same on either (tests check it
    on every cycle of random replays); the simulator keeps its queue ranked as jobs come
    and go and labs are billed, so that a cycle need not sort it.
    """

    lab_usage: dict[str, float]
    job_ids: tuple[str, ...]  # the jobs' ids, in the same order

    def __new__(
        cls, jobs: Iterable[QueuedJob], lab_usage: dict[str, float], job_ids: Iterable[str]
    ) -> RankedQueue:
        self = super().__new__(cls, jobs)
        self.lab_usage = lab_usage
        self.job_ids = tuple(job_ids)
        return self

    def __reduce__(self) -> tuple[type[tuple[QueuedJob, ...]], tuple[tuple[QueuedJob, ...]]]:
        # Pickled (or deep-copied) as the plain tuple it equals.
        return (tuple, (tuple(self),))


def sort_queue(queue: Sequence[QueuedJob], lab_usage: dict[str, float]) -> list[QueuedJob]:
    """The queue in `queue_order`, built as the labs are few: the jobs per lab, each lab's
    sorted by (entry time, id) with two stable sorts on one field each (no key tuples),
    the labs in usage order, labs of equal usage merged. A third of the time of one sort
    by the three-field key, which was half of a cycle over 10^5 jobs."""
    by_lab: dict[str, list[QueuedJob]] = {}
    for job in queue:
        jobs = by_lab.get(job.lab)
        if jobs is None:
            by_lab[job.lab] = [job]
        else:
            jobs.append(job)
    levels: dict[float, list[str]] = {}
    for lab in by_lab:
        levels.setdefault(lab_usage.get(lab, 0.0), []).append(lab)
    ranked: list[QueuedJob] = []
    for usage in sorted(levels):
        labs = levels[usage]
        jobs = by_lab[labs[0]] if len(labs) == 1 else [j for lab in labs for j in by_lab[lab]]
        jobs.sort(key=_JOB_ID)
        jobs.sort(key=_ENTERED)
        ranked += jobs
    return ranked


def rank_queue(
    queue: Sequence[QueuedJob], lab_usage: dict[str, float]
) -> tuple[Sequence[QueuedJob], tuple[str, ...]]:
    """The queue in `queue_order` and its job ids in that order; a `RankedQueue` for this
    very `lab_usage` already is both."""
    if isinstance(queue, RankedQueue) and queue.lab_usage is lab_usage:
        return queue, queue.job_ids
    ranked = sort_queue(queue, lab_usage)
    return ranked, tuple(map(_JOB_ID, ranked))


def _blocks(blocking: tuple[str, Reservation] | None, key: tuple[str, str]) -> bool:
    """Whether `key` is the blocking reservation's placement (whose idle GPUs the views'
    blocker test reads)."""
    return blocking is not None and (blocking[1].node, blocking[1].tier) == key


def decide(
    snapshot: Snapshot,
    placement_order: PlacementOrder = PlacementOrder.PACK,
    *,
    top_job: TopJob = TopJob.FIRST_WAITING,
    reserved_gpus: ReservedGpus = ReservedGpus.LLM_ONLY,
) -> Decisions:
    """One dispatch cycle (SPEC §3). The steps are numbered as in the spec's pseudocode.

    `placement_order` is where (a) dispatches inside a tier (SPEC §1): best fit (`PACK`,
    the spec's rule) or most idle first (`SPREAD`); (c) reserves most idle first either way.
    `top_job` is the job R2 and R3 refer to (SPEC decision 7): the first job of the order
    that cannot start in this cycle (`FIRST_WAITING`, the rule), or queue[0] (`FIRST_QUEUED`).
    `reserved_gpus` is R4 (`LLM_ONLY`) or the lending option (`LEND_BY_LIMIT`, SPEC
    "Options beyond the note"): a job below the top job whose time limit ends by the top
    job's projected fill may start on its reserved GPUs (`Dispatch.lent_from`).
    """
    now = snapshot.now
    tiers = {t.name: t for t in snapshot.tiers}
    index = idle_index_of(snapshot.tiers, snapshot.placements)
    by_key = index.placements
    first_waiting = top_job is TopJob.FIRST_WAITING
    lending = Lending(snapshot) if reserved_gpus is ReservedGpus.LEND_BY_LIMIT else None
    lent = lending.lent if lending is not None else {}  # holder -> its GPUs lent out now

    # 1. The queue in fair-share order. Under decision 7 the top job is found in the walk
    # (4): until then `top_id` is empty.
    queue, order = rank_queue(snapshot.queue, snapshot.lab_usage)
    top_id = "" if first_waiting else (order[0] if order else "")
    top_n = 0 if first_waiting or not queue else queue[0].num_gpus  # its size, for lending

    actions: list[Action] = []
    accruals: list[AccrueReservation] = []
    kept: dict[str, Reservation] = {}

    # 2. Accrue every reservation up to now (into the job: lazy, SPEC §4), then R5 and R3.
    # The jobs holding one, in queue order: found in the snapshot's own order (a C-speed
    # pass over memory in allocation order), then the few ranked.
    holders = list(compress(snapshot.queue, map(_RESERVATION, snapshot.queue)))
    if len(holders) > 1:
        holders.sort(key=queue_order(snapshot.lab_usage))
    for job in holders:
        res = job.reservation
        assert res is not None
        tier = tiers.get(res.tier)
        if now > res.last_accrued_at:
            # GPUs lent out are the borrower's run cost, never also the reservation's.
            cost = reservation_accrual(
                res.gpus - lent.get(job.job_id, 0),
                res.last_accrued_at,
                now,
                tier.tflops if tier else 0.0,
            )
            accruals.append(AccrueReservation(job.job_id, cost, now))
        p = by_key.get((res.node, res.tier))
        if (
            p is None
            or tier is None
            or not p.schedulable
            or not fits(job.num_gpus, job.min_sort_order, tier, p.capacity)
            or p.free + lent.get(job.job_id, 0) < res.gpus  # taken outside JPU-Share
        ):
            actions.append(
                ReleaseReservation(job.job_id, res.node, res.tier, res.gpus, ReleaseReason.R5)
            )
        elif not first_waiting and job.job_id != top_id:
            actions.append(
                ReleaseReservation(job.job_id, res.node, res.tier, res.gpus, ReleaseReason.R3)
            )
        else:
            kept[job.job_id] = res

    # 3. Reserved GPUs are not idle for anyone (R4).
    for holder, res in kept.items():
        index.add((res.node, res.tier), -(res.gpus - lent.get(holder, 0)))

    # What every waiting job of one (size, minimum tier) class sees, cached per generation
    # of the idle index: most queued jobs reuse it, which keeps a cycle linear and cheap.
    fit_counts: dict[tuple[int, int], tuple[int, int]] = {}
    blocking: tuple[str, Reservation] | None = next(iter(kept.items()), None)
    # The waiting jobs, as positions in the queue with the view each saw (shared per class:
    # two appends per job, no tuple and no dict entry each), and the top job's reservation.
    waiting: list[int] = []
    views: list[ClassView] = []
    held: dict[int, Reservation] = {}

    def view(n: int, m: int) -> ClassView:
        c = fit_counts.get((n, m))
        if c is None:
            c = fit_counts[(n, m)] = index.fit_counts(n, m)
        blocker: tuple[str, Reservation] | None = None
        if blocking is not None:
            bres = blocking[1]
            bkey = (bres.node, bres.tier)
            bp, bt = by_key.get(bkey), tiers.get(bres.tier)
            if (
                bp is not None
                and bt is not None
                and fits(n, m, bt, bp.capacity)
                and index.idle[bkey] + bres.gpus >= n
            ):
                blocker = blocking
        return ClassView(index.generation, index.best_idle(n, m), c[0], c[1], blocker)

    def release_others(top: str) -> bool:
        """SPEC decision 7's R3, judged at the top job: release every reservation but its
        own; their GPUs are idle again at once (the top job may take them first)."""
        nonlocal blocking
        released = False
        for holder, hres in list(kept.items()):
            if holder != top:
                actions.append(
                    ReleaseReservation(holder, hres.node, hres.tier, hres.gpus, ReleaseReason.R3)
                )
                index.add((hres.node, hres.tier), hres.gpus - lent.get(holder, 0))
                del kept[holder]
                released = True
        own = kept.get(top)
        blocking = (top, own) if own is not None else None
        return released

    # 4. Walk the whole queue. Below the top job no job holds a reservation (R3 released
    # them all) and only a dispatch changes idle GPUs, always fewer, so a job whose (size,
    # minimum tier) class found nothing finds nothing again: `known_misses` holds those
    # classes' views, and a dispatch drops the views it may have changed (`dead` keeps
    # the classes, so a job of one does not look for GPUs again, only at its view).
    # (Under decision 7 the first job that misses becomes the top job, so no class is
    # known before it.)
    known_misses: dict[tuple[int, int], ClassView] = {}
    dead: set[tuple[int, int]] = set()  # classes that missed: their views may be stale
    missed_view = known_misses.get  # bound once: the loop below runs once per queued job
    wait, saw = waiting.append, views.append
    # Once every class of the queue has missed (and no job may borrow), nothing below can
    # start or change what the others see: the rest of the queue waits with its class's
    # view, recorded as one tail (`WhyTable`) instead of walked job by job.
    classes = 0 if lending is None else -1  # counted at the first miss (many cycles have none)
    tail = len(queue)
    for i, job in enumerate(queue):
        n = job.num_gpus
        cls = (n, job.min_sort_order)
        if (
            lending is not None
            and blocking is not None
            and blocking[0] == top_id
            and job.job_id != top_id
            and job.time_limit_s is not None
            and (
                cls in dead
                or index.first_to_dispatch(placement_order, n, job.min_sort_order) is None
            )
        ):
            # The lending option: below the top job, a job that cannot start on idle GPUs
            # but ends by the top job's projected fill may borrow its reserved GPUs (before
            # any cached miss: the answer depends on the job's own time limit).
            tres = blocking[1]
            tidle = index.idle[(tres.node, tres.tier)]
            until = lending.lend(job, top_id, top_n, tres, tidle, tiers)
            if until is not None:
                actions.append(
                    Dispatch(
                        job.job_id, tres.node, tres.tier, n, lent_from=top_id, lent_until=until
                    )
                )
                continue
        missed = missed_view(cls)
        if missed is None and cls in dead:  # it misses again; only what it sees changed
            missed = known_misses[cls] = view(n, cls[1])
        if missed is not None:
            wait(i)
            saw(missed)
            continue
        m = cls[1]
        # Decision 7: a holder above the top job may still fill or swap; read literally
        # only queue[0] can hold one here.
        res = kept.get(job.job_id) if first_waiting or i == 0 else None
        key = index.first_to_dispatch(placement_order, n, m)
        if key is None and first_waiting and not top_id:
            # Decision 7: the first job that cannot start is the top job; R3 releases the
            # others' reservations, and it looks again at the GPUs they held. If it starts
            # on them, the top job is still to be found (R2: the next that cannot start).
            top_id, top_n = job.job_id, n
            if release_others(top_id):
                key = index.first_to_dispatch(placement_order, n, m)
            if key is not None:
                top_id = ""
        if key is not None:
            # (a) some fit placement has enough idle GPUs: dispatch on the first (SPEC §1).
            actions.append(Dispatch(job.job_id, key[0], key[1], n))
            before = index.idle[key]
            index.add(key, -n)
            if lending is not None:
                lending.started(key, n, job.time_limit_s)
            swapped = res is not None
            if res is not None:
                # A swap (STEP 8, SPEC §3 R4), even on its own placement: the job took idle
                # GPUs beside its reservation, which did not fill by absorbing (b).
                rkey = (res.node, res.tier)
                actions.append(
                    ReleaseReservation(job.job_id, res.node, res.tier, res.gpus, ReleaseReason.SWAP)
                )
                index.add(rkey, res.gpus - lent.get(job.job_id, 0))
                del kept[job.job_id]
                blocking = None
            if swapped or job.job_id == top_id or _blocks(blocking, key):
                known_misses.clear()
                dead.clear()
            elif index.shelf_most(key) < before:
                # Only idle GPUs of `key` went, from `before`, and no placement of its shelf
                # has as many now: a known class whose best idle was larger is unchanged,
                # one whose was smaller does not fit `key`; only views showing `before` may
                # be stale. (Where the shelf still has `before` idle, no view changed.)
                for c in [c for c, v in known_misses.items() if v.best_idle == before]:
                    del known_misses[c]
            if first_waiting and job.job_id == top_id:
                top_id = ""
            continue
        if res is not None:
            # (b) grow the reservation with idle GPUs of its own placement.
            rkey = (res.node, res.tier)
            absorb = max(0, min(index.idle[rkey], n - res.gpus))
            if absorb > 0:
                total = res.gpus + absorb
                actions.append(AbsorbReservation(job.job_id, res.node, res.tier, absorb, total))
                index.add(rkey, -absorb)
                res = Reservation(res.node, res.tier, total, res.since, now)
                blocking = (job.job_id, res)
            # Full, whether it grew now or was already full (e.g. once the GPUs it lent are back):
            # SPEC §3 (b) dispatches either way, else the job would hold its GPUs forever.
            if res.gpus >= n and not lent.get(job.job_id):
                actions.append(Dispatch(job.job_id, res.node, res.tier, n))
                actions.append(
                    ReleaseReservation(
                        job.job_id, res.node, res.tier, res.gpus, ReleaseReason.FILLED
                    )
                )
                index.add(rkey, res.gpus - n)
                del kept[job.job_id]
                blocking = None
                known_misses.clear()
                dead.clear()
                if first_waiting:
                    top_id = ""  # it starts: the top job is the next that cannot (R2)
                continue
        elif (job.job_id == top_id if first_waiting else i == 0) and n >= 2:
            # (c) the top multi-GPU job reserves every idle GPU of the first fit placement
            # in reserve order (SPEC §1: most idle first, whatever the dispatch order).
            pick = index.first_to_reserve(n, m)
            if pick is not None:
                gpus = index.idle[pick]
                actions.append(StartReservation(job.job_id, pick[0], pick[1], gpus))
                index.set(pick, 0)
                res = Reservation(pick[0], pick[1], gpus, now, now)
                blocking = (job.job_id, res)
        # (d) wait; say why. (Only the top job reaches (b) or (c), before any class is known.)
        known_misses[cls] = v = view(n, m)
        dead.add(cls)
        waiting.append(i)
        views.append(v)
        if res is not None:
            held[i] = res
        if classes == 0:
            classes = len(set(map(_CLASS, snapshot.queue)))
        if len(dead) == classes:
            for c in dead - known_misses.keys():
                known_misses[c] = view(*c)
            tail = i + 1
            break

    why = WhyTable(queue, order, waiting, views, held, top_id, tail, dict(known_misses))
    return Decisions(
        now=now, order=order, actions=tuple(actions), accruals=tuple(accruals), why=why
    )
