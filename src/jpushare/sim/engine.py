"""The trace simulator's engine: replay a trace through one policy on a simulated clock.

This module is the simulator's public API; the state machine behind it lives in `loop`
(the event loop, the policy's actions, the accounting), `jobs` (per-job and per-lab
state) and `results` (what a run returns, re-exported here). Reading CLUSTER.yaml /
TRACE.csv lives in `cluster_file` / `trace_file`; writing jobs.csv, summary.json and
plots lives in `report` / `plots`.

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

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from jpushare.formats.cluster_file import ClusterSpec
from jpushare.formats.trace_file import TraceJob, check_tiers
from jpushare.policy.model import (
    Decisions,
    Snapshot,
)
from jpushare.policy.options import ReservedGpus, TopJob, parse_reserved_gpus, parse_top_job
from jpushare.policy.order import (
    PlacementOrder,
    parse_placement_order,
)
from jpushare.policy.peers import (
    POLICIES,
    NamedPolicy,
    Policy,
    named_policy,
)
from jpushare.sim.jobs import Key
from jpushare.sim.loop import Engine, Observer, Progress
from jpushare.sim.results import (
    Attempt,
    AttemptEnd,
    GpuSample,
    LentRun,
    LentWait,
    ReservationRecord,
    SimResult,
    TraceJobResult,
    TraceJobState,
)

__all__ = [
    "Attempt",
    "AttemptEnd",
    "Forecast",
    "GpuSample",
    "LentRun",
    "LentWait",
    "ReservationRecord",
    "SimResult",
    "TraceJobResult",
    "TraceJobState",
    "forecast",
    "simulate",
]


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
    reserved_gpus: ReservedGpus | str = ReservedGpus.LLM_ONLY,
) -> SimResult:
    """Replay `jobs` on `cluster` under `policy` (see the module docstring). `top_job`:
    the reservation policy's top-job reading (SPEC decision 7); `reserved_gpus`: R4
    (`llm-only`) or the lending option (`lend-by-limit`); the peers ignore both."""
    order = parse_placement_order(str(placement))
    lending = parse_reserved_gpus(str(reserved_gpus))
    fn: Policy
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
        name, named = policy, named_policy(policy, parse_top_job(str(top_job)), lending)

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
    engine = Engine(cluster, jobs, fn, cycle_s, observer, every_cycle, progress)
    engine.run()
    return _result(engine, name, order.value, time.perf_counter() - started, lending.value)


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
    engine = Engine(cluster, specs, fn, cycle_s, None, False, None)
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


def _result(
    engine: Engine, policy: str, placement: str, wall_s: float, reserved_gpus: str
) -> SimResult:
    """The run's record, read off the engine once it has stopped."""
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
        for j in (engine.jobs[i] for i in engine.order)
    )
    reservations = tuple(
        ReservationRecord(e.job_id, e.node, e.tier, e.gpus, e.since, e.ended_at, e.reason)
        for e in engine.reservation_log
    )
    return SimResult(
        policy=policy,
        cycle_s=engine.cycle_s,
        jobs=records,
        reservations=reservations,
        initial_lab_usage=engine.initial_lab_usage,
        lab_usage=dict(engine.lab_usage),
        capacity_gpus=engine.cluster.capacity_gpus,
        running_gpu_s=engine.running_gpu_s,
        reserved_gpu_s=engine.reserved_gpu_s,
        gpu_timeline=tuple(engine.gpu_timeline),
        lab_timeline=tuple(engine.lab_timeline),
        cycles_run=engine.cycles_run,
        cycles_total=engine.cycles_total,
        wall_s=wall_s,
        placement=placement,
        reserved_gpus=reserved_gpus,
        lent_runs=tuple(engine.lent_runs),
        lent_waits=tuple(engine.lent_waits),
        lent_gpu_s=engine.lent_gpu_s,
    )
