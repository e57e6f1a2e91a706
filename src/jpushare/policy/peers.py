"""The peer policies `decide` is compared with: `hol-skip`, `fifo`, `backfill` (policy.md §11).

Each is a pure function with decide's signature, `(Snapshot) -> Decisions`, and emits only
`Dispatch` actions (no reservations, no "why"). They share decide's queue order
(`queue_order`: lab usage, then queue entry, then job id) and its placement order
(`jpushare.policy.order`, with the same `placement_order` option), so that a comparison
isolates the one rule that differs. No I/O, no clock: `backfill` reads time only from
`snapshot.now`.

Cost per cycle: one sort of the queue, a dictionary lookup per job that cannot start
(idle GPUs only ever decrease within a cycle, so a (size, minimum tier) class that found no
placement stays without one), and a few bisects of the idle index per dispatch.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from jpushare.policy.decide import decide, rank_queue
from jpushare.policy.model import (
    Action,
    Decisions,
    Dispatch,
    QueuedJob,
    RunningJob,
    Snapshot,
    Tier,
)
from jpushare.policy.options import ReservedGpus, TopJob
from jpushare.policy.order import PlacementOrder, idle_index_of, reserve_key

Key = tuple[str, str]  # (node, tier)
Class = tuple[int, int]  # (num_gpus, min_sort_order)
Policy = Callable[[Snapshot], Decisions]
"""One cycle of a policy with its options bound: what the simulator runs."""


class NamedPolicy(Protocol):
    """A policy of `POLICIES`: one cycle, with the dispatch order as an option."""

    def __call__(
        self, snapshot: Snapshot, placement_order: PlacementOrder = PlacementOrder.PACK
    ) -> Decisions: ...


class _Cycle:
    """One cycle's idle GPUs per placement, in the placement order's index."""

    def __init__(self, snapshot: Snapshot, placement_order: PlacementOrder) -> None:
        self.tiers: dict[str, Tier] = {t.name: t for t in snapshot.tiers}
        self.index = idle_index_of(snapshot.tiers, snapshot.placements)
        self.idle = self.index.idle
        self.order = placement_order
        self.actions: list[Action] = []

    def first(self, n: int, m: int, exclude: Key | None = None) -> Key | None:
        """The first fit placement with >= n idle GPUs in dispatch order (SPEC §3 (a)),
        `exclude` left out."""
        if exclude is None:
            return self.index.first_to_dispatch(self.order, n, m)
        held = self.idle[exclude]
        self.index.set(exclude, 0)
        try:
            return self.index.first_to_dispatch(self.order, n, m)
        finally:
            self.index.set(exclude, held)

    def dispatch(self, job: QueuedJob, key: Key) -> None:
        self.index.add(key, -job.num_gpus)
        self.actions.append(Dispatch(job.job_id, key[0], key[1], job.num_gpus))


def _decisions(snapshot: Snapshot, order: tuple[str, ...], cycle: _Cycle) -> Decisions:
    return Decisions(now=snapshot.now, order=order, actions=tuple(cycle.actions))


def hol_skip(
    snapshot: Snapshot, placement_order: PlacementOrder = PlacementOrder.PACK
) -> Decisions:
    """The old behaviour (docs/policy.md §0, "before"): walk the fair-share order, start
    whatever fits, skip what does not. Never reserves, so a multi-GPU job can wait behind a
    stream of small ones.
    """
    cycle = _Cycle(snapshot, placement_order)
    queue, order = rank_queue(snapshot.queue, snapshot.lab_usage)
    failed: set[Class] = set()
    for job in queue:
        cls = (job.num_gpus, job.min_sort_order)
        if cls in failed:
            continue
        p = cycle.first(*cls)
        if p is None:
            failed.add(cls)
            continue
        cycle.dispatch(job, p)
    return _decisions(snapshot, order, cycle)


def fifo(snapshot: Snapshot, placement_order: PlacementOrder = PlacementOrder.PACK) -> Decisions:
    """Strict order: start jobs in fair-share order until the first one that cannot start.

    Never skips, never reserves: the head job blocks everyone behind it.
    """
    cycle = _Cycle(snapshot, placement_order)
    queue, order = rank_queue(snapshot.queue, snapshot.lab_usage)
    for job in queue:
        p = cycle.first(job.num_gpus, job.min_sort_order)
        if p is None:
            break
        cycle.dispatch(job, p)
    return _decisions(snapshot, order, cycle)


@dataclass(slots=True)
class _Plan:
    """The blocked top job's planned start (EASY backfill's one reservation, in time)."""

    key: Key  # the placement it is planned on
    start: float  # its planned start ("shadow time")
    extra: int  # GPUs of that placement free at `start` that it does not need


def backfill(
    snapshot: Snapshot, placement_order: PlacementOrder = PlacementOrder.PACK
) -> Decisions:
    """Fair-share priority with EASY backfill, as a Slurm site would run it.

    1. Jobs start in fair-share order while each finds a fit placement with enough idle
       GPUs (on the first in `placement_order`, as in SPEC §3 (a)).
    2. The first job that cannot start (the pivot) gets a planned start: on each of its
       schedulable fit placements, running jobs end at `started_at + time_limit_s`
       (estimates, not the truth; no estimate = never); the placement whose idle GPUs plus
       those released reach `num_gpus` earliest is its plan (ties in reserve order, §1).
    3. Every later job may start (on its first fit placement where it may) only if
       it cannot delay that plan: it runs on another placement, or it ends by its own
       `time_limit_s` no later than the planned start, or it needs no more than the
       plan's spare GPUs (which it then consumes).

    A plan in the past (running jobs overran their estimates) leaves only the spare GPUs
    to backfill. So with no new event, what may start can only shrink as `now` grows,
    which keeps the simulator's cycle skipping exact. A pivot with no finite plan (every
    fit placement down) blocks nobody; the next job that cannot start becomes the pivot.
    """
    now = snapshot.now
    cycle = _Cycle(snapshot, placement_order)
    queue, order = rank_queue(snapshot.queue, snapshot.lab_usage)
    # Expected ends per placement of the running jobs, read only once a plan is needed,
    # and of the jobs this cycle starts before it.
    ends: Ends | None = None
    started: dict[Key, list[End]] = {}

    plan: _Plan | None = None
    failed: set[Class] = set()  # no placement at all has enough idle GPUs
    failed_elsewhere: set[Class] = set()  # none but the plan's placement has
    for job in queue:
        n, m = job.num_gpus, job.min_sort_order
        cls = (n, m)
        if plan is None:
            p = None if cls in failed else cycle.first(n, m)
            if p is not None:
                cycle.dispatch(job, p)
                started.setdefault(p, []).append((_end(now, job.time_limit_s), n, job.job_id))
                continue
            failed.add(cls)
            if ends is None:
                ends = running_ends(snapshot.running)
            plan = _plan(job, cycle, ends, started)
            continue
        if cls in failed:
            continue
        ends_in_time = _end(now, job.time_limit_s) <= plan.start
        if ends_in_time or n <= plan.extra:
            p = cycle.first(n, m)
            if p is None:
                failed.add(cls)
                continue
        else:
            if cls in failed_elsewhere:
                continue
            p = cycle.first(n, m, exclude=plan.key)
            if p is None:
                failed_elsewhere.add(cls)
                continue
        cycle.dispatch(job, p)
        if p == plan.key and not ends_in_time:
            plan.extra -= n  # it still runs at the planned start: it uses spare GPUs
    return _decisions(snapshot, order, cycle)


def _end(started_at: float, time_limit_s: float | None) -> float:
    return math.inf if time_limit_s is None else started_at + time_limit_s


End = tuple[float, int, str]  # (expected end, GPUs, job id) of a running job
Ends = Mapping[Key, Sequence[End]]  # per placement, each sorted


class RunningEnds:
    """The expected ends of running jobs per placement, each list sorted, kept by a shell
    as jobs start and end (the simulator), so that `backfill` need not rebuild them from
    every running job at each cycle. `version` counts changes."""

    def __init__(self) -> None:
        self.by_key: dict[Key, list[End]] = {}
        self.version = 0

    def started(self, r: RunningJob) -> None:
        insort(self.by_key.setdefault((r.node, r.tier), []), _running_end(r))
        self.version += 1

    def ended(self, r: RunningJob) -> None:
        ends = self.by_key[(r.node, r.tier)]
        del ends[bisect_left(ends, _running_end(r))]
        self.version += 1


class IndexedRunning(tuple[RunningJob, ...]):
    """A snapshot's running jobs with the `RunningEnds` they were taken from, as they were
    then (`version`). Equal to the plain tuple; `running_ends` reads the kept lists only
    while nothing has changed since."""

    source: RunningEnds
    version: int

    def __new__(cls, running: Iterable[RunningJob], source: RunningEnds) -> IndexedRunning:
        self = super().__new__(cls, running)
        self.source = source
        self.version = source.version
        return self

    def __reduce__(self) -> tuple[type[tuple[RunningJob, ...]], tuple[tuple[RunningJob, ...]]]:
        # Pickled (or deep-copied) as the plain tuple it equals.
        return (tuple, (tuple(self),))


def _running_end(r: RunningJob) -> End:
    end = math.inf if r.time_limit_s is None else r.started_at + r.time_limit_s
    return (end, r.num_gpus, r.job_id)


def running_ends(running: Sequence[RunningJob]) -> Ends:
    """(expected end, GPUs, job id) of every running job per placement, sorted. Read only."""
    if isinstance(running, IndexedRunning) and running.source.version == running.version:
        return running.source.by_key
    by_key: dict[Key, list[End]] = {}
    for r in running:
        key = (r.node, r.tier)
        bucket = by_key.get(key)
        if bucket is None:
            by_key[key] = [_running_end(r)]
        else:
            bucket.append(_running_end(r))
    for bucket in by_key.values():
        bucket.sort()
    return by_key


def _plan(job: QueuedJob, cycle: _Cycle, ends: Ends, started: dict[Key, list[End]]) -> _Plan | None:
    """The earliest planned start of a job that cannot start now (step 2 of `backfill`).

    Only placements with running jobs can free GPUs, so only those are looked at; one
    whose first expected end is later than the best start found cannot win.
    """
    n = job.num_gpus
    index = cycle.index
    layout = index.layout
    shelves = {shelf for _, _, shelf in layout.fit_shelves(n, job.min_sort_order)}
    shelf_of = layout.shelf_of
    idle = index.idle
    placements = index.placements
    best: _Plan | None = None
    best_key: tuple[float, int, int, str, str] | None = None
    best_start = math.inf
    if started:  # this cycle's starts join the running jobs' ends
        merged = dict(ends)
        for key, extra in started.items():
            merged[key] = sorted([*ends.get(key, ()), *extra])
        ends = merged
    for key, bucket in ends.items():
        if not bucket or bucket[0][0] > best_start or shelf_of.get(key) not in shelves:
            continue
        p = placements[key]
        if not p.schedulable:
            continue
        free = idle[key]
        start: float | None = None
        for entry in bucket:
            end = entry[0]
            if start is not None and end > start:
                break
            free += entry[1]
            if start is None and free >= n:
                start = end
        if start is None or start == math.inf:
            continue
        # Ties in reserve order: the plan is backfill's reservation, in time (SPEC §1).
        k = (start, *reserve_key(layout.tiers[p.tier].sort_order, idle[key], p.node, p.tier))
        if best_key is None or k < best_key:
            best, best_key, best_start = _Plan(key, start, free - n), k, start
    return best


POLICIES: dict[str, NamedPolicy] = {
    "reservation": decide,
    "hol-skip": hol_skip,
    "fifo": fifo,
    "backfill": backfill,
}
"""Every policy the simulator can run, by its CLI name. `reservation` is SPEC §3 itself."""


def named_policy(
    name: str,
    top_job: TopJob = TopJob.FIRST_WAITING,
    reserved_gpus: ReservedGpus = ReservedGpus.LLM_ONLY,
) -> NamedPolicy:
    """The policy of `POLICIES` called `name`, with the reservation policy's options bound:
    its top-job reading (SPEC decision 7) and what reserved GPUs may run (R4 or lending);
    the peers have neither and are returned as is."""
    policy = POLICIES[name]
    if policy is decide and (
        top_job is not TopJob.FIRST_WAITING or reserved_gpus is not ReservedGpus.LLM_ONLY
    ):

        def bound(
            snapshot: Snapshot, placement_order: PlacementOrder = PlacementOrder.PACK
        ) -> Decisions:
            return decide(snapshot, placement_order, top_job=top_job, reserved_gpus=reserved_gpus)

        bound.__name__ = "decide"
        return bound
    return policy
