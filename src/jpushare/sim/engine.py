"""The trace simulator's engine: replay a trace through one policy on a simulated clock.

This module holds the state machine only (jobs, placements, reservations, lab usage, an
event heap). Reading CLUSTER.yaml / TRACE.csv lives in `cluster_file` / `trace_file`;
writing jobs.csv, summary.json and plots lives in `report` / `plots`.

Public API
----------
``simulate(cluster, jobs, policy="reservation", cycle_s=5.0, *, placement="pack",
observer=None, every_cycle=False, progress=None) -> SimResult``

- `cluster`: a `ClusterSpec` (tiers, placements, starting lab usage, node events).
- `jobs`: `TraceJob`s (any order; tier names must exist: see `trace_file.check_tiers`).
- `policy`: a name of `jpushare.policy.peers.POLICIES` ("reservation" is SPEC §3's
  `decide` itself, called as is) or any `(Snapshot) -> Decisions` function (for cycle
  skipping to be exact it must have the property stated under "Time" below; if unsure,
  pass `every_cycle=True`). Actions the cluster cannot honour raise RuntimeError.
- `placement`: the dispatch order inside a tier (`jpushare.policy.order.PlacementOrder`:
  "pack", SPEC §1's best fit, or "spread"), given to a named policy; a policy function
  passed as is must bind its own. `SimResult.label` is "<policy>/<placement>".
- `observer(snapshot, decisions)`: called after every cycle that ran, once its decisions
  have been applied. The snapshot is exactly what the policy saw.
- `every_cycle=True` runs the policy at every cycle instead of skipping idle ones (for
  checking that skipping changes nothing).
- `progress(finished_jobs, total_jobs)`: called when jobs have finished in a cycle.

`SimResult.jobs` holds one `TraceJobResult` per trace job, in trace order, with every attempt,
its run and reservation costs and what was billed to its lab; its state is COMPLETED,
FAILED, CANCELLED or REJECTED, or QUEUED if nothing could ever start it again (e.g. its
only fit node stayed down). `SimResult.reservations` lists every reservation with its
release reason; `gpu_timeline` and `lab_timeline` feed the plots. Usage conservation: once
every job has ended, `sum(lab_usage) - sum(initial_lab_usage) == sum(job.billed)` and each
ended job's `billed == run_cost + reservation_cost`.

Time (docs/formats.md §3): cycles at t = 0, c, 2c, ... At a cycle at t, every job end, cancel and
node event with time <= t is applied (in time order; ends before cancels before node events
at equal times), then every submission with submit_time <= t joins the queue (or is
REJECTED: SPEC §2), then the policy runs once. A cycle is skipped when no event was applied
in it and the previous cycle that ran had no action: the policies' actions depend only on
state that events and actions change (`backfill` also on `now`, but only so that fewer
jobs may start as time passes), so the skipped cycle would have done nothing. The cost
follows the number of events, not the simulated time.

Speed: each cycle calls the policy on a whole snapshot, so the engine hands it the two
things it would otherwise rebuild from scratch every cycle, kept up to date as jobs and
placements change: the placements with their idle index (`IndexedPlacements`) and the
queue already in fair-share order (`RankedQueue`, from per-lab lists). Both are equal to
plain tuples and the policies decide the same on either (tests/sim/test_engine.py checks it
on every cycle); `bench/bench_sim.py` measures the result on the shipped traces.

Accounting (SPEC §4) is lazy, with the store's own rules (`jpushare.ledger`): run cost per
attempt and reservation cost per span of constant size join the job's account, and the lab
is billed (`settle`) when an attempt ends (completed, OOM, node down, cancelled) or a
queued job is cancelled. Reservation spans are closed at start / absorb / release, not at
every cycle, so the float sums are the same whether cycles are skipped or not; the policy's
per-cycle `AccrueReservation`s only move `Reservation.last_accrued_at` as the service would.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import chain
from operator import attrgetter

from jpushare.formats.cluster_file import ClusterSpec
from jpushare.formats.trace_file import TraceJob, check_tiers
from jpushare.ledger import Account, Run, accrue_reservation, add_run, settle
from jpushare.policy.decide import RankedQueue
from jpushare.policy.fit import FitReport, check_fit, default_min_sort_order, fits
from jpushare.policy.model import (
    AbsorbReservation,
    Decisions,
    Dispatch,
    Placement,
    QueuedJob,
    ReleaseReason,
    ReleaseReservation,
    Reservation,
    RunningJob,
    Snapshot,
    StartReservation,
    Tier,
)
from jpushare.policy.oom import escalate
from jpushare.policy.options import TopJob, parse_top_job
from jpushare.policy.order import (
    IdleIndex,
    IndexedPlacements,
    PlacementOrder,
    parse_placement_order,
)
from jpushare.policy.peers import (
    POLICIES,
    IndexedRunning,
    NamedPolicy,
    Policy,
    RunningEnds,
    named_policy,
)
from jpushare.vocabulary import JobId, NodeState

Key = tuple[str, str]  # (node, tier)
Observer = Callable[[Snapshot, Decisions], None]
Progress = Callable[[int, int], None]


class TraceJobState(StrEnum):
    """A trace job's state. The last four are final; QUEUED at the end means it never could
    start again (e.g. its only fit node stayed down)."""

    PENDING = "PENDING"  # not submitted yet
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    REJECTED = "REJECTED"


class AttemptEnd(StrEnum):
    """How one attempt (one dispatch) ended."""

    COMPLETED = "completed"
    OOM = "oom"  # out of memory: SPEC §5 escalation
    NODE_DOWN = "node_down"  # back to the queue, no escalation
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Attempt:
    start: float
    end: float
    node: str
    tier: str
    num_gpus: int
    outcome: AttemptEnd
    run_cost: float  # TFLOP-seconds


@dataclass(frozen=True, slots=True)
class TraceJobResult:
    """One trace job after the replay."""

    job_id: JobId
    lab: str
    num_gpus: int
    state: TraceJobState
    submit_time: float
    attempts: tuple[Attempt, ...]
    run_cost: float  # TFLOP-seconds, every attempt
    reservation_cost: float  # TFLOP-seconds, every reservation it held
    billed: float  # what reached its lab's usage
    reason: str = ""  # why REJECTED or FAILED

    @property
    def first_start(self) -> float | None:
        return self.attempts[0].start if self.attempts else None

    @property
    def wait_s(self) -> float | None:
        """First start minus submission (None if it never started)."""
        return None if not self.attempts else self.attempts[0].start - self.submit_time

    @property
    def last(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None


@dataclass(frozen=True, slots=True)
class ReservationRecord:
    """One reservation from start to release (`ended_at`/`reason` None: still held)."""

    job_id: JobId
    node: str
    tier: str
    gpus: int  # size when it ended
    since: float
    ended_at: float | None
    reason: ReleaseReason | None

    @property
    def hold_s(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.since


@dataclass(frozen=True, slots=True)
class GpuSample:
    """GPU use from `t` until the next sample."""

    t: float
    running: int
    reserved: int
    up: int  # capacity of the placements that are schedulable


@dataclass(frozen=True)
class SimResult:
    policy: str
    cycle_s: float
    jobs: tuple[TraceJobResult, ...]  # trace order
    reservations: tuple[ReservationRecord, ...]  # in start order
    initial_lab_usage: dict[str, float]
    lab_usage: dict[str, float]  # final
    capacity_gpus: int  # the inventory's GPUs (down nodes included)
    running_gpu_s: float
    reserved_gpu_s: float
    gpu_timeline: tuple[GpuSample, ...]
    lab_timeline: tuple[tuple[float, str, float], ...]  # (t, lab, usage after a bill)
    cycles_run: int
    cycles_total: int  # cycle times passed, run or skipped
    wall_s: float = field(compare=False, default=0.0)
    placement: str = PlacementOrder.PACK.value  # the dispatch order (SPEC §1)

    @property
    def label(self) -> str:
        """What reports call this run: "<policy>/<placement>", e.g. "reservation/pack"."""
        return f"{self.policy}/{self.placement}"


def simulate(
    cluster: ClusterSpec,
    jobs: Sequence[TraceJob],
    policy: str | Policy = "reservation",
    cycle_s: float = 5.0,
    *,
    placement: PlacementOrder | str = PlacementOrder.PACK,
    observer: Observer | None = None,
    every_cycle: bool = False,
    progress: Progress | None = None,
    top_job: TopJob | str = TopJob.FIRST_WAITING,
) -> SimResult:
    """Replay `jobs` on `cluster` under `policy` (see the module docstring). `top_job`:
    the reservation policy's top-job reading (SPEC decision 7; ignored by the peers)."""
    order = parse_placement_order(str(placement))
    fn: Policy
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
        name, named = policy, named_policy(policy, parse_top_job(str(top_job)))

        def fn(snapshot: Snapshot) -> Decisions:
            return named(snapshot, order)
    else:
        name, fn = getattr(policy, "__name__", "custom"), policy
    if not (cycle_s > 0 and math.isfinite(cycle_s)):
        raise ValueError(f"cycle_s must be > 0, got {cycle_s}")
    check_tiers(jobs, cluster.tiers)
    if len({j.job_id for j in jobs}) != len(jobs):
        raise ValueError("job ids must be unique within a trace")
    started = time.perf_counter()
    engine = _Engine(cluster, jobs, fn, cycle_s, observer, every_cycle, progress)
    engine.run()
    return engine.result(name, order.value, time.perf_counter() - started)


@dataclass(frozen=True, slots=True)
class Forecast:
    """When each followed queued job would start if nothing changed but the clock.

    Times are on the snapshot's clock. `unresolved` jobs did not start before the forecast
    stopped: its cycle budget ran out (`horizon` is then the last time it reached) or
    nothing left could start them (e.g. no placement fits them, or only GPUs held by jobs
    outside JPU-Share, whose ends are unknown, would).
    """

    starts: Mapping[str, float]
    unresolved: frozenset[str]
    horizon: float
    cycles: int


def forecast(
    snapshot: Snapshot,
    run_s: Mapping[str, float],
    *,
    policy: str | NamedPolicy = "reservation",
    placement: PlacementOrder | str = PlacementOrder.PACK,
    cycle_s: float = 5.0,
    max_cycles: int | None = None,
    follow: Iterable[str] | None = None,
    running_labs: Mapping[str, str] | None = None,
) -> Forecast:
    """Run `policy` forward from `snapshot` (a live state) until every followed job starts.

    `run_s` holds, for every queued and running job, how long its run lasts (its time
    limit, or an estimate: see `sim.estimate`); a running job ends at `started_at` plus
    that, or at once if that has passed. GPUs a placement has busy beyond its running jobs
    (jobs outside JPU-Share) stay busy. No job arrives, fails or is cancelled; lab usage
    grows as the engine bills ends (SPEC §4), so the fair-share order evolves as it
    would. `follow`: the queued jobs to wait for (default: all). `running_labs`: each
    running job's lab, billed when it ends (a snapshot's running jobs do not name it;
    without it their cost reaches no lab).
    """
    order = parse_placement_order(str(placement))
    named = POLICIES[policy] if isinstance(policy, str) else policy

    def fn(s: Snapshot) -> Decisions:
        return named(s, order)

    now = snapshot.now
    places = {p.key: p for p in snapshot.placements}
    held: dict[Key, int] = {}
    running = [r for r in snapshot.running if (r.node, r.tier) in places]
    for r in running:
        held[(r.node, r.tier)] = held.get((r.node, r.tier), 0) + r.num_gpus
    placements = tuple(
        replace(p, busy=max(p.busy, held.get(p.key, 0))) for p in snapshot.placements
    )
    specs = [
        TraceJob(
            q.job_id,
            min(0.0, q.queue_entered_at - now),
            max(0.0, run_s[q.job_id]),
            q.num_gpus,
            q.lab,
            time_limit=q.time_limit_s or max(0.0, run_s[q.job_id]),
        )
        for q in snapshot.queue
    ]
    specs += [
        TraceJob(
            r.job_id,
            r.started_at - now,
            max(0.0, run_s[r.job_id]),
            r.num_gpus,
            (running_labs or {}).get(r.job_id, ""),
        )
        for r in running
    ]
    cluster = ClusterSpec(snapshot.tiers, placements, dict(snapshot.lab_usage))
    engine = _Engine(cluster, specs, fn, cycle_s, None, False, None)
    engine.submissions = []  # every job is in the state the snapshot says, not pending
    for q in snapshot.queue:
        engine.seed_queued(q, now)
    for r in running:
        engine.seed_running(r, now)
    queued = {q.job_id for q in snapshot.queue}
    engine.watched = set(queued if follow is None else queued.intersection(follow))
    followed = frozenset(engine.watched)
    engine.run(max_cycles, force_first=True)
    last = (engine.cycles_total - 1) * cycle_s
    return Forecast(
        starts={j: now + t for j, t in engine.first_starts.items()},
        unresolved=frozenset(followed - engine.first_starts.keys()),
        horizon=now + max(0.0, last),
        cycles=engine.cycles_run,
    )


# Event kinds, in the order they apply at equal times.
_END, _CANCEL, _NODE = 0, 1, 2


@dataclass(slots=True)
class _ReservationLog:
    job_id: JobId
    node: str
    tier: str
    gpus: int
    since: float
    ended_at: float | None = None
    reason: ReleaseReason | None = None


class _Job:
    """The engine's mutable view of one trace job."""

    __slots__ = (
        "account",
        "attempts",
        "cancel_requested",
        "epoch",
        "min_sort_order",
        "reason",
        "res_span_start",
        "reservation",
        "run_key",
        "run_start",
        "spec",
        "state",
    )

    def __init__(self, spec: TraceJob, min_sort_order: int) -> None:
        self.spec = spec
        self.state = TraceJobState.PENDING
        self.min_sort_order = min_sort_order
        self.reservation: Reservation | None = None
        self.res_span_start = 0.0  # reserved GPUs are costed up to here
        self.attempts: list[Attempt] = []
        self.epoch = 0  # bumps at every dispatch; stale end events carry an old one
        self.run_start = 0.0
        self.run_key: Key = ("", "")
        self.account = Account()  # run and reservation costs, and what reached the lab
        self.cancel_requested = False
        self.reason = ""

    def queued(self) -> QueuedJob:
        s = self.spec
        return QueuedJob(
            s.job_id,
            s.lab,
            s.num_gpus,
            self.min_sort_order,
            s.submit_time,  # queue_entered_at: kept on OOM / node-down requeue (SPEC §5)
            self.reservation,
            s.time_limit_s,
        )


_ENTRY = attrgetter("queue_entered_at", "job_id")
_JOB_ID = attrgetter("job_id")


class _LabQueues:
    """The queued jobs of each lab in (queue_entered_at, job id) order.

    The queue in `queue_order` (lab usage, entry time, job id) is then the labs' lists one
    after the other in usage order, merged where usages tie: a cycle gets it as a
    `RankedQueue` without sorting every job (the labs are few).
    """

    def __init__(self) -> None:
        self.keys: dict[str, list[tuple[float, str]]] = {}
        self.jobs: dict[str, list[QueuedJob]] = {}
        self.ids: dict[str, list[str]] = {}

    def put(self, q: QueuedJob) -> None:
        keys = self.keys.get(q.lab)
        if keys is None:
            keys = self.keys[q.lab] = []
            self.jobs[q.lab] = []
            self.ids[q.lab] = []
        k = (q.queue_entered_at, q.job_id)
        i = bisect_left(keys, k)
        if i < len(keys) and keys[i] == k:
            self.jobs[q.lab][i] = q
        else:
            keys.insert(i, k)
            self.jobs[q.lab].insert(i, q)
            self.ids[q.lab].insert(i, q.job_id)

    def remove(self, q: QueuedJob) -> None:
        keys = self.keys[q.lab]
        i = bisect_left(keys, (q.queue_entered_at, q.job_id))
        del keys[i]
        del self.jobs[q.lab][i]
        del self.ids[q.lab][i]

    def ranked(self, lab_usage: dict[str, float]) -> RankedQueue:
        labs = sorted((lab_usage.get(lab, 0.0), lab) for lab, jobs in self.jobs.items() if jobs)
        jobs: list[Iterable[QueuedJob]] = []
        ids: list[Iterable[str]] = []
        i = 0
        while i < len(labs):
            j = i + 1
            while j < len(labs) and labs[j][0] == labs[i][0]:
                j += 1
            if j == i + 1:
                jobs.append(self.jobs[labs[i][1]])
                ids.append(self.ids[labs[i][1]])
            else:  # labs with equal usage: their jobs interleave by entry time, then id
                tied = chain.from_iterable(self.jobs[lab] for _, lab in labs[i:j])
                merged = sorted(tied, key=_ENTRY)  # merges the sorted runs
                jobs.append(merged)
                ids.append(map(_JOB_ID, merged))
            i = j
        return RankedQueue(chain.from_iterable(jobs), lab_usage, chain.from_iterable(ids))


class _Engine:
    def __init__(
        self,
        cluster: ClusterSpec,
        jobs: Sequence[TraceJob],
        policy: Policy,
        cycle_s: float,
        observer: Observer | None,
        every_cycle: bool,
        progress: Progress | None,
    ) -> None:
        self.cluster = cluster
        self.tiers: tuple[Tier, ...] = cluster.tiers
        self.tier_by_name = {t.name: t for t in cluster.tiers}
        self.inventory = cluster.placements  # static capacity: fit, check_fit, escalate
        self.policy = policy
        self.cycle_s = cycle_s
        self.observer = observer
        self.every_cycle = every_cycle
        self.progress = progress

        self.placements: dict[Key, Placement] = {p.key: p for p in cluster.placements}
        # The policies' idle index, kept up to date as placements change: each cycle gets a
        # copy with its placements (`IndexedPlacements`) instead of building one.
        self.idle_index = IdleIndex(self.tier_by_name, cluster.placements)
        self._placement_tuple: tuple[Placement, ...] | None = None
        default_min = default_min_sort_order(cluster.tiers)
        self.order: list[str] = []
        self.jobs: dict[str, _Job] = {}
        for spec in jobs:
            m = (
                default_min
                if spec.min_tier is None
                else self.tier_by_name[spec.min_tier].sort_order
            )
            self.jobs[spec.job_id] = _Job(spec, m)
            self.order.append(spec.job_id)
        self.submissions = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
        self.next_submission = 0

        self.lab_usage: dict[str, float] = {lab: float(u) for lab, u in cluster.labs.items()}
        for spec in jobs:
            self.lab_usage.setdefault(spec.lab, 0.0)
        self.initial_lab_usage = dict(self.lab_usage)

        self.queue: dict[str, QueuedJob] = {}
        self.lab_queues = _LabQueues()  # the same jobs, kept in queue order per lab
        self.running: dict[str, RunningJob] = {}
        self.running_ends = RunningEnds()  # the same jobs' expected ends, for `backfill`
        self._running_tuple: tuple[RunningJob, ...] | None = None
        self.reserving: dict[str, _Job] = {}
        self.heap: list[tuple[float, int, str, int]] = []
        for spec in jobs:
            if spec.cancel_time is not None:
                heapq.heappush(self.heap, (spec.cancel_time, _CANCEL, spec.job_id, 0))
        for i, ev in enumerate(cluster.events):
            heapq.heappush(self.heap, (ev.time, _NODE, "", i))

        self.fit_reports: dict[tuple[int, int], FitReport] = {}
        self.finished = 0
        self.running_gpus = 0
        self.reserved_gpus = 0
        self.up_gpus = cluster.capacity_gpus
        self.running_gpu_s = 0.0
        self.reserved_gpu_s = 0.0
        self.reservation_log: list[_ReservationLog] = []
        self.open_reservation: dict[str, int] = {}  # job -> index in reservation_log
        self.gpu_timeline: list[GpuSample] = [GpuSample(0.0, 0, 0, self.up_gpus)]
        self.lab_timeline: list[tuple[float, str, float]] = []
        self.cycles_run = 0
        self.cycles_total = 0
        # A forecast follows these jobs and stops once all have started (see `forecast`).
        self.watched: set[str] | None = None
        self.first_starts: dict[str, float] = {}

    # -- a live state (forecasts) -----------------------------------------------------------

    def seed_queued(self, q: QueuedJob, now: float) -> None:
        """`q` waits in the queue (entered at its own time), with its reservation if any."""
        job = self.jobs[q.job_id]
        job.state = TraceJobState.QUEUED
        job.min_sort_order = q.min_sort_order
        r = q.reservation
        if r is not None:
            job.reservation = Reservation(r.node, r.tier, r.gpus, r.since - now, 0.0)
            # Its cost since it began is not billed yet (SPEC §4: billed when the job
            # ends), so it reaches the lab at the job's end in the forecast too.
            job.res_span_start = r.since - now
            self.reserving[q.job_id] = job
            self.reserved_gpus += r.gpus
            self.open_reservation[q.job_id] = len(self.reservation_log)
            self.reservation_log.append(
                _ReservationLog(q.job_id, r.node, r.tier, r.gpus, r.since - now)
            )
        self._enqueue(job.queued())

    def seed_running(self, r: RunningJob, now: float) -> None:
        """`r` runs (its GPUs already counted busy) and ends after its `duration`."""
        job = self.jobs[r.job_id]
        job.state = TraceJobState.RUNNING
        job.epoch = 1
        job.run_start = r.started_at - now
        job.run_key = (r.node, r.tier)
        run = RunningJob(r.job_id, r.node, r.tier, r.num_gpus, job.run_start, r.time_limit_s)
        self.running[r.job_id] = run
        self.running_ends.started(run)
        self._running_tuple = None
        self.running_gpus += r.num_gpus
        end = max(0.0, job.run_start + job.spec.duration)
        heapq.heappush(self.heap, (end, _END, r.job_id, job.epoch))

    # -- the loop -------------------------------------------------------------------------

    def run(self, max_cycles: int | None = None, *, force_first: bool = False) -> None:
        c = self.cycle_s
        k = 0
        acted = False
        reported = -1
        while True:
            t = k * c
            changed = self._apply_events(t)
            changed = self._admit(t) or changed
            if changed or acted or self.every_cycle or (k == 0 and force_first):
                acted = self._cycle(t)
            if self.watched is not None and not self.watched:
                break  # a forecast: every job it follows has started
            if max_cycles is not None and self.cycles_run >= max_cycles:
                break
            if self.progress is not None and self.finished != reported:
                reported = self.finished
                self.progress(self.finished, len(self.jobs))
            nxt = self._next_event_time()
            if acted:
                k += 1
            elif nxt is None:
                break
            elif self.every_cycle:
                k += 1
            else:
                # Nothing can change before the next event: jump to the first cycle whose
                # time (computed as k * c, as when running every cycle) is >= it. The
                # division may round either way, so correct the guess in both directions.
                j = max(k + 1, math.ceil(nxt / c))
                while j - 1 > k and (j - 1) * c >= nxt:
                    j -= 1
                while j * c < nxt:
                    j += 1
                k = j
        self.cycles_total = k + 1

    def _next_event_time(self) -> float | None:
        nxt = self.heap[0][0] if self.heap else None
        if self.next_submission < len(self.submissions):
            submit = self.submissions[self.next_submission].submit_time
            if nxt is None or submit < nxt:
                nxt = submit
        return nxt

    def _cycle(self, t: float) -> bool:
        lab_usage = dict(self.lab_usage)
        snapshot = Snapshot(
            tiers=self.tiers,
            placements=self._placements(),
            queue=self.lab_queues.ranked(lab_usage),
            lab_usage=lab_usage,
            now=t,
            running=self._running(),
        )
        decisions = self.policy(snapshot)
        self.cycles_run += 1
        for acc in decisions.accruals:
            job = self.jobs[acc.job_id]
            r = job.reservation
            if r is not None:
                job.reservation = Reservation(r.node, r.tier, r.gpus, r.since, acc.accrued_to)
                self._enqueue(job.queued())
        for action in decisions.actions:
            if isinstance(action, Dispatch):
                self._dispatch(action, t)
            elif isinstance(action, StartReservation):
                self._start_reservation(action, t)
            elif isinstance(action, AbsorbReservation):
                self._absorb(action, t)
            elif isinstance(action, ReleaseReservation):
                self._release(self.jobs[action.job_id], t, action.reason)
        if decisions.actions:
            self._mark(t)
        if self.observer is not None:
            self.observer(snapshot, decisions)
        return bool(decisions.actions)

    def _enqueue(self, q: QueuedJob) -> None:
        """A job joins the queue, or its queued view changes (reservation, minimum tier)."""
        self.queue[q.job_id] = q
        self.lab_queues.put(q)

    def _dequeue(self, job_id: JobId) -> None:
        self.lab_queues.remove(self.queue.pop(job_id))

    def _running(self) -> tuple[RunningJob, ...]:
        if self._running_tuple is None:
            self._running_tuple = IndexedRunning(self.running.values(), self.running_ends)
        return self._running_tuple

    def _placements(self) -> tuple[Placement, ...]:
        if self._placement_tuple is None:
            self._placement_tuple = IndexedPlacements(
                self.placements.values(), self.idle_index, self.tiers
            )
        return self._placement_tuple

    def _set_placement(self, p: Placement) -> None:
        self.placements[(p.node, p.tier)] = p
        self.idle_index.replace_placement(p)
        self._placement_tuple = None

    # -- events ---------------------------------------------------------------------------

    def _apply_events(self, t: float) -> bool:
        changed = False
        heap = self.heap
        while heap and heap[0][0] <= t:
            when, kind, job_id, n = heapq.heappop(heap)
            if kind == _END:
                changed = self._end(self.jobs[job_id], when, n) or changed
            elif kind == _CANCEL:
                changed = self._cancel(self.jobs[job_id], when) or changed
            else:
                changed = self._node_event(n, when) or changed
        return changed

    def _admit(self, t: float) -> bool:
        """Submissions with submit_time <= t join the queue, or are REJECTED (SPEC §2)."""
        changed = False
        subs = self.submissions
        while self.next_submission < len(subs) and subs[self.next_submission].submit_time <= t:
            spec = subs[self.next_submission]
            self.next_submission += 1
            job = self.jobs[spec.job_id]
            cls = (spec.num_gpus, job.min_sort_order)
            report = self.fit_reports.get(cls)
            if report is None:
                report = check_fit(cls[0], cls[1], self.tiers, self.inventory)
                self.fit_reports[cls] = report
            if not report.ok:
                job.state = TraceJobState.REJECTED
                job.reason = report.message
                self.finished += 1
            elif job.cancel_requested:  # cancelled before any cycle saw it queued
                job.state = TraceJobState.CANCELLED
                self.finished += 1
            else:
                job.state = TraceJobState.QUEUED
                self._enqueue(job.queued())
                changed = True
        return changed

    def _end(self, job: _Job, t: float, epoch: int) -> bool:
        if job.state is not TraceJobState.RUNNING or job.epoch != epoch:
            return False  # stale: the attempt was cut short by a cancel or a node failure
        tier = job.run_key[1]
        if tier not in job.spec.oom_on:
            self._end_attempt(job, t, AttemptEnd.COMPLETED)
            self._finish(job, TraceJobState.COMPLETED)
            return True
        # SPEC §5 / S10: charged for the attempt, then retry on the next stronger tier.
        self._end_attempt(job, t, AttemptEnd.OOM)
        esc = escalate(job.spec.num_gpus, tier, self.tiers, self.inventory)
        if esc.requeue and esc.min_sort_order is not None:
            job.min_sort_order = esc.min_sort_order
            self._requeue(job)
        else:
            job.reason = esc.reason
            self._finish(job, TraceJobState.FAILED)
        return True

    def _cancel(self, job: _Job, t: float) -> bool:
        if job.state is TraceJobState.PENDING:
            job.cancel_requested = True
            return False
        if job.state is TraceJobState.QUEUED:
            if job.reservation is not None:
                self._release(job, t, ReleaseReason.CANCEL)  # S11
            self._dequeue(job.spec.job_id)
            self._bill(job, t)
            self._finish(job, TraceJobState.CANCELLED)
            return True
        if job.state is TraceJobState.RUNNING:
            self._end_attempt(job, t, AttemptEnd.CANCELLED)
            self._finish(job, TraceJobState.CANCELLED)
            return True
        return False

    def _node_event(self, index: int, t: float) -> bool:
        ev = self.cluster.events[index]
        up = ev.state == NodeState.UP
        changed = False
        for p in self.cluster.placements_of(ev.node):
            cur = self.placements[p.key]
            if cur.schedulable != up:
                self._set_placement(replace(cur, schedulable=up))
                self.up_gpus += cur.capacity if up else -cur.capacity
                changed = True
        if not up:
            # SPEC §5: running jobs go back to the queue, charged for what they ran.
            for job_id in sorted(j for j, r in self.running.items() if r.node == ev.node):
                job = self.jobs[job_id]
                self._end_attempt(job, t, AttemptEnd.NODE_DOWN)
                self._requeue(job)
                changed = True
        if changed:
            self._mark(t)
        return changed

    # -- actions --------------------------------------------------------------------------

    def _dispatch(self, a: Dispatch, t: float) -> None:
        job = self.jobs[a.job_id]
        key = (a.node, a.tier)
        p = self.placements.get(key)
        tier = self.tier_by_name.get(a.tier)
        held = sum(
            j.reservation.gpus
            for j in self.reserving.values()
            if j is not job
            and j.reservation is not None
            and (j.reservation.node, j.reservation.tier) == key
        )
        if (
            job.state is not TraceJobState.QUEUED
            or p is None
            or tier is None
            or not p.schedulable
            or a.num_gpus != job.spec.num_gpus
            or not fits(a.num_gpus, job.min_sort_order, tier, p.capacity)
            or p.capacity - p.busy - held < a.num_gpus
        ):
            raise RuntimeError(f"the policy made an impossible dispatch at t={t}: {a}")
        self._set_placement(
            Placement(p.node, p.tier, p.capacity, p.busy + a.num_gpus, p.schedulable)
        )
        if self.watched is not None and a.job_id in self.watched:
            self.watched.discard(a.job_id)
            self.first_starts[a.job_id] = t
        self.running_gpus += a.num_gpus
        self._dequeue(a.job_id)
        job.state = TraceJobState.RUNNING
        job.epoch += 1
        job.run_start = t
        job.run_key = key
        run = RunningJob(a.job_id, a.node, a.tier, a.num_gpus, t, job.spec.time_limit_s)
        self.running[a.job_id] = run
        self.running_ends.started(run)
        self._running_tuple = None
        heapq.heappush(self.heap, (t + job.spec.duration, _END, a.job_id, job.epoch))

    def _start_reservation(self, a: StartReservation, t: float) -> None:
        job = self.jobs[a.job_id]
        if job.state is not TraceJobState.QUEUED or job.reservation is not None:
            raise RuntimeError(f"the policy started an impossible reservation at t={t}: {a}")
        job.reservation = Reservation(a.node, a.tier, a.gpus, t, t)
        job.res_span_start = t
        self.reserving[a.job_id] = job
        self.reserved_gpus += a.gpus
        self.open_reservation[a.job_id] = len(self.reservation_log)
        self.reservation_log.append(_ReservationLog(a.job_id, a.node, a.tier, a.gpus, t))
        self._enqueue(job.queued())

    def _absorb(self, a: AbsorbReservation, t: float) -> None:
        job = self.jobs[a.job_id]
        res = job.reservation
        if res is None or (res.node, res.tier) != (a.node, a.tier) or res.gpus + a.added != a.total:
            raise RuntimeError(f"the policy absorbed into a reservation it does not hold: {a}")
        self._close_span(job, t)
        job.reservation = replace(res, gpus=a.total, last_accrued_at=t)
        self.reserved_gpus += a.added
        self.reservation_log[self.open_reservation[a.job_id]].gpus = a.total
        if job.state is TraceJobState.QUEUED:
            self._enqueue(job.queued())

    def _release(self, job: _Job, t: float, reason: ReleaseReason) -> None:
        res = job.reservation
        if res is None:
            raise RuntimeError(f"release of a reservation job {job.spec.job_id} does not hold")
        self._close_span(job, t)
        job.reservation = None
        del self.reserving[job.spec.job_id]
        self.reserved_gpus -= res.gpus
        entry = self.reservation_log[self.open_reservation.pop(job.spec.job_id)]
        entry.ended_at, entry.reason = t, reason
        if job.state is TraceJobState.QUEUED:
            self._enqueue(job.queued())

    def _close_span(self, job: _Job, t: float) -> None:
        """Charge the reservation's GPUs since the span began to the job (lazy, SPEC §4)."""
        res = job.reservation
        assert res is not None
        tier = self.tier_by_name[res.tier]
        accrual = accrue_reservation(job.account, res.gpus, job.res_span_start, t, tier.tflops)
        job.account = accrual.account
        self.reserved_gpu_s += res.gpus * max(0.0, t - job.res_span_start)
        job.res_span_start = t

    # -- job life -------------------------------------------------------------------------

    def _end_attempt(self, job: _Job, t: float, outcome: AttemptEnd) -> None:
        """An attempt stops at t: free its GPUs, charge its run cost, bill the lab."""
        node, tier_name = job.run_key
        n = job.spec.num_gpus
        p = self.placements[job.run_key]
        self._set_placement(Placement(p.node, p.tier, p.capacity, p.busy - n, p.schedulable))
        self.running_gpus -= n
        self.running_ends.ended(self.running.pop(job.spec.job_id))
        self._running_tuple = None
        run = Run(len(job.attempts) + 1, n, job.run_start, self.tier_by_name[tier_name].tflops)
        ran = add_run(job.account, run, t)
        job.account, cost = ran.account, ran.cost
        self.running_gpu_s += n * max(0.0, t - job.run_start)
        job.attempts.append(Attempt(job.run_start, t, node, tier_name, n, outcome, cost))
        job.state = TraceJobState.QUEUED  # until _requeue or _finish says otherwise
        self._bill(job, t)
        self._mark(t)

    def _requeue(self, job: _Job) -> None:
        job.state = TraceJobState.QUEUED
        self._enqueue(job.queued())

    def _finish(self, job: _Job, state: TraceJobState) -> None:
        job.state = state
        self.finished += 1

    def _bill(self, job: _Job, t: float) -> None:
        """Everything the job held and was not billed for reaches its lab now (SPEC §4)."""
        charge = settle(job.account)
        if charge.due == 0.0:
            return
        lab = job.spec.lab
        self.lab_usage[lab] += charge.due
        job.account = charge.account
        self.lab_timeline.append((t, lab, self.lab_usage[lab]))

    def _mark(self, t: float) -> None:
        s = GpuSample(t, self.running_gpus, self.reserved_gpus, self.up_gpus)
        last = self.gpu_timeline[-1]
        if (last.running, last.reserved, last.up) == (s.running, s.reserved, s.up):
            return
        if last.t == t:
            self.gpu_timeline[-1] = s
        else:
            self.gpu_timeline.append(s)

    # -- result ---------------------------------------------------------------------------

    def result(self, policy: str, placement: str, wall_s: float) -> SimResult:
        records = tuple(
            TraceJobResult(
                job_id=j.spec.job_id,
                lab=j.spec.lab,
                num_gpus=j.spec.num_gpus,
                state=j.state,
                submit_time=j.spec.submit_time,
                attempts=tuple(j.attempts),
                run_cost=j.account.run_cost,
                reservation_cost=j.account.reservation_cost,
                billed=j.account.charged,
                reason=j.reason,
            )
            for j in (self.jobs[i] for i in self.order)
        )
        reservations = tuple(
            ReservationRecord(e.job_id, e.node, e.tier, e.gpus, e.since, e.ended_at, e.reason)
            for e in self.reservation_log
        )
        return SimResult(
            policy=policy,
            cycle_s=self.cycle_s,
            jobs=records,
            reservations=reservations,
            initial_lab_usage=self.initial_lab_usage,
            lab_usage=dict(self.lab_usage),
            capacity_gpus=self.cluster.capacity_gpus,
            running_gpu_s=self.running_gpu_s,
            reserved_gpu_s=self.reserved_gpu_s,
            gpu_timeline=tuple(self.gpu_timeline),
            lab_timeline=tuple(self.lab_timeline),
            cycles_run=self.cycles_run,
            cycles_total=self.cycles_total,
            wall_s=wall_s,
            placement=placement,
        )
