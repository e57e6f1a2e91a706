"""One dispatcher cycle (SPEC §3, §5), as numbered steps with their transactions:

1. observe: read the executor (inventory, runs; no transaction open; for a started job
   whose run the executor no longer lists, ask it what became of the run if it can say:
   `resolve_lost_runs`), then in ONE
   transaction sync the inventory and node states, apply every run transition with its
   charge (RUNNING from the executor's start time; COMPLETED / FAILED / CANCELLED /
   TIMEOUT end the job and charge its lab; OOM requeues with escalation; NODE_FAIL
   requeues; each in its own savepoint, so one that fails is logged and skipped, not the
   whole step), settle the runs of cancelled jobs that have now really ended (charged up
   to their real end: `settle_cancelled_runs`), confirm runs whose id was never
   recorded, and store the busy GPUs per placement for the API. Then, outside it: stop
   runs whose job no longer wants them (a cancel recorded by the API) and submit again
   the jobs recorded DISPATCHED that the executor has no run for (a crash between record
   and submit) — steps 5 and 6 for them.
2. load the snapshot, 3. decide (the pure policy), 4. record the decisions: ONE
   transaction. Its commit is the point of no return ("assume"): only what it applied is
   started, never what `decide` proposed.
5. act, per recorded dispatch: tell the LLM router to yield (fire-and-forget), then
   `executor.submit` (idempotent by (job id, attempt)).
6. confirm or undo: the accepted runs' executor ids in ONE transaction after the last
   submit (one batched statement for all, `store.confirm_dispatches`);
   `SubmitRefused` → the job FAILED with the executor's reason (a refused sbatch leaves no
   job behind); any other error (executor unreachable, sbatch timed out) → nothing: the job
   stays DISPATCHED and the next cycle's observe finds its run (confirm) or none (submit
   again), so a job is neither lost nor started twice.

The cycle never commits anything the executor has not told it, and never tells the executor
anything the database has not committed. Crash points for tests: `crash_points.py`.

Fencing (issue 10, `dispatcher.lock`): every writing transaction above is opened with
`deps.begin()`, which commits only while this process holds the dispatcher lease, and
every executor call (submit, cancel) and router yield is preceded by `deps.fence.may_act()`.
A leader that lost the lease while frozen or cut off gets `LeaseLost` from the first of
them: nothing more is recorded or started, and the loop steps down.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.dispatcher.crash_points import crash_point
from jpushare.dispatcher.lock import Fence, LeaseLost, NoLock
from jpushare.dispatcher.observe import (
    ActiveJob,
    Confirmed,
    Ended,
    Missing,
    Started,
    Transition,
    busy_by_placement,
    stale_runs,
    tier_of,
    transitions,
)
from jpushare.executors.base import (
    Executor,
    GpuGroup,
    LaunchSpec,
    ResolvesLostRuns,
    RunInfo,
    RunState,
    SubmitRefused,
)
from jpushare.llm_router import BackfillRouter, NoRouter
from jpushare.policy import (
    AbsorbReservation,
    Decisions,
    PlacementOrder,
    ReleaseReservation,
    StartReservation,
    decide,
)
from jpushare.store.cycle import QueueMemo
from jpushare.store.observations import (
    ActiveJobRow,
    active_jobs,
    cancelled_runs,
    dispatched_launches,
    job_states,
    save_observed_busy,
)
from jpushare.store.records import DispatchedJob
from jpushare.store.run_reports import RunEnd, RunStart, end_jobs, mark_running_many
from jpushare.store.times import same_instant
from jpushare.time_limits import time_limit_reason

log = logging.getLogger(__name__)

Busy = dict[tuple[str, str], int]


@dataclass(slots=True)
class InventoryMemo:
    """What the last inventory sync wrote, so an unchanged inventory is not rewritten.

    Syncing every node each cycle costs ~2 ms per node (200 ms for 100 nodes); the
    inventory's facts (GPU counts, node states) rarely change, so a cycle syncs only when
    they differ from the last sync, or `resync_s` after it (which also brings back what an
    admin removed while the executor still reports it, and refreshes `observed_at`).
    """

    resync_s: float = 60.0
    last: tuple[tuple[str, str, int, str], ...] | None = None
    at: float = 0.0

    @staticmethod
    def facts(groups: Iterable[GpuGroup]) -> tuple[tuple[str, str, int, str], ...]:
        return tuple(sorted((g.node, g.gpu_type, g.total, g.state.value) for g in groups))

    def needs_sync(self, facts: tuple[tuple[str, str, int, str], ...], now_s: float) -> bool:
        return facts != self.last or now_s - self.at >= self.resync_s

    def synced(self, facts: tuple[tuple[str, str, int, str], ...], now_s: float) -> None:
        """Call once the sync's transaction has committed."""
        self.last, self.at = facts, now_s


@dataclass(frozen=True, slots=True)
class CycleDeps:
    """What a cycle works with. `gpu_type_to_tier` maps executor GPU types to tier names
    where they differ (a type not in it is its own tier name)."""

    sessions: sessionmaker[Session]
    executor: Executor
    router: BackfillRouter = field(default_factory=NoRouter)
    clock: Callable[[], datetime] = store.utc_now
    gpu_type_to_tier: Mapping[str, str] = field(default_factory=dict)
    inventory_memo: InventoryMemo = field(default_factory=lambda: InventoryMemo())
    queue_memo: QueueMemo = field(default_factory=lambda: QueueMemo())  # see load_snapshot
    placement_order: PlacementOrder = PlacementOrder.PACK  # SPEC §1 (JPUSHARE_PLACEMENT)
    fence: Fence = field(default_factory=NoLock)  # the Dispatcher sets its lease here

    def begin(self) -> AbstractContextManager[Session]:
        """A writing transaction of the cycle: it commits only while this process leads."""
        return self.fence.transaction(self.sessions)

    def check_may_act(self) -> None:
        """Before a side effect: `LeaseLost` unless this process may still act."""
        if not self.fence.may_act():
            raise LeaseLost("the dispatcher lease ran out before this call to the executor")

    def gpu_type_of(self, tier: str) -> str:
        """The executor's GPU type for a tier name (the mapping read backwards)."""
        for gpu_type, name in self.gpu_type_to_tier.items():
            if name == tier:
                return gpu_type
        return tier


@dataclass(frozen=True, slots=True)
class Observed:
    """What step 1 saw and did."""

    busy: Busy
    started: int = 0
    confirmed: int = 0
    ended: int = 0
    requeued: int = 0
    resubmit: tuple[DispatchedJob, ...] = ()
    stale: tuple[RunInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What steps 5-6 did with the dispatches of one cycle."""

    started: tuple[int, ...] = ()  # job ids the executor accepted
    refused: tuple[tuple[int, str], ...] = ()  # (job id, reason): now FAILED
    deferred: tuple[int, ...] = ()  # executor error: left DISPATCHED for the next observe
    orphaned: tuple[int, ...] = ()  # accepted, but the job had ended meanwhile: run stopped


@dataclass(frozen=True, slots=True)
class CycleReport:
    """One cycle, for the log and the metrics."""

    at: datetime
    duration_s: float
    observed: Observed | None  # None: the executor could not be read; nothing decided
    queue_length: int = 0  # jobs still queued after the cycle
    dispatched: Outcome = field(default_factory=Outcome)
    resubmitted: Outcome = field(default_factory=Outcome)
    stopped_runs: tuple[str, ...] = ()  # executor ids of stale runs stopped
    reservations_started: int = 0
    reservations_absorbed: int = 0
    reservations_released: Mapping[str, int] = field(default_factory=dict)  # reason -> count
    skipped_decisions: int = 0
    error: str | None = None
    # Seconds per step: observe (1, with its stops and resubmits), decide (2-4), act (5-6).
    phases_s: Mapping[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        """One log line."""
        if self.observed is None:
            return f"cycle skipped ({self.error}) in {self.duration_s * 1000:.0f} ms"
        o = self.observed
        released = ", ".join(f"{k} {v}" for k, v in sorted(self.reservations_released.items()))
        parts = [
            f"dispatched {len(self.dispatched.started)}",
            f"refused {len(self.dispatched.refused)}" if self.dispatched.refused else "",
            f"deferred {len(self.dispatched.deferred)}" if self.dispatched.deferred else "",
            f"resubmitted {len(self.resubmitted.started)}" if self.resubmitted.started else "",
            f"reservations +{self.reservations_started} absorbed {self.reservations_absorbed}"
            + (f" released {released}" if released else ""),
            f"started {o.started} ended {o.ended} requeued {o.requeued}",
            f"stopped {len(self.stopped_runs)}" if self.stopped_runs else "",
            f"queue {self.queue_length}",
            f"{self.duration_s * 1000:.0f} ms",
        ]
        return "cycle: " + ", ".join(p for p in parts if p)


def run_cycle(deps: CycleDeps) -> CycleReport:
    """One whole cycle, steps 1-6 of the module docstring. Raises only on database errors."""
    t0 = time.perf_counter()
    at = deps.clock()

    # 1. Observe.
    try:
        inventory = deps.executor.inventory()
        runs = deps.executor.runs()
        runs = runs + resolve_lost_runs(deps, runs)
    except Exception as exc:  # any backend failure: do not decide blind
        log.error("executor unreachable, cycle skipped: %s", exc)
        return CycleReport(at, time.perf_counter() - t0, None, error=f"executor: {exc}")
    observed = observe(deps, inventory, runs, at)
    crash_point("after_observe")
    stopped = stop_stale_runs(deps, observed.stale)
    resubmitted = start_runs(deps, [_launch_of(deps, row) for row in observed.resubmit])
    t1 = time.perf_counter()

    # 2-4. Snapshot, decide, record: one transaction.
    now = deps.clock()
    with deps.begin() as session:
        snapshot = store.load_snapshot(session, now, observed.busy, deps.queue_memo)
        decisions = decide(snapshot, deps.placement_order)
        recorded = store.record_decisions(session, decisions, now)
        if recorded.dispatched:
            crash_point("in_record")
    t2 = time.perf_counter()
    if recorded.dispatched:
        crash_point("after_record")

    # 5-6. Act, then confirm or undo.
    dispatched = start_runs(deps, [_launch_of(deps, d) for d in recorded.dispatched])
    phases = {"observe": t1 - t0, "decide": t2 - t1, "act": time.perf_counter() - t2}
    report = _report(at, t0, observed, decisions, recorded, dispatched, resubmitted, stopped)
    return replace(report, phases_s=phases)


# --- 1. observe ------------------------------------------------------------------------


def resolve_lost_runs(deps: CycleDeps, runs: list[RunInfo]) -> list[RunInfo]:
    """What became of the runs of started jobs that `runs` does not list (executors that
    can tell: `ResolvesLostRuns`; others' missing runs stay a node failure / a resubmit).

    A Slurm job that ended while the dispatcher was down for longer than `MinJobAge` is
    gone from squeue. Requeueing it as a node failure could run a completed job twice;
    the executor answers from its accounting, or with FAILED "outcome unknown". Only jobs
    with a recorded executor id are asked about: one DISPATCHED without an id crashed
    between its record and its sbatch's confirmation and is submitted again (idempotent
    by job name, unless it also ended more than `MinJobAge` ago: not covered).
    """
    executor = deps.executor
    if not isinstance(executor, ResolvesLostRuns):
        return []
    known = {(r.job_id, r.attempt) for r in runs}
    with deps.sessions() as session:
        lost = [
            row
            for row in active_jobs(session)
            if row.executor_id is not None and (str(row.job_id), row.attempt) not in known
        ]
    out: list[RunInfo] = []
    for row in lost:
        assert row.executor_id is not None
        info = executor.lost_run(str(row.job_id), row.attempt, row.executor_id)
        log.warning(
            "job %d attempt %d: its run %s is gone from the executor's list; it reports %s: %s",
            row.job_id,
            row.attempt,
            row.executor_id,
            info.state.value,
            info.reason,
        )
        out.append(info)
    return out


def observe(
    deps: CycleDeps, inventory: list[GpuGroup], runs: list[RunInfo], now: datetime
) -> Observed:
    """Apply the executor's view to the store in one transaction (step 1)."""
    by_key = {(r.job_id, r.attempt): r for r in runs}
    mapped = [
        GpuGroup(g.node, tier_of(g.gpu_type, deps.gpu_type_to_tier), g.total, g.used, g.state)
        for g in inventory
    ]
    counts: Counter[str] = Counter()
    missing: list[int] = []
    with deps.begin() as session:
        facts, mono = InventoryMemo.facts(mapped), time.monotonic()
        sync = deps.inventory_memo.needs_sync(facts, mono)
        if sync:
            store.sync_inventory(session, mapped, now, mark_missing_down=True)
        active = [_active(row) for row in active_jobs(session)]
        one_by_one = apply_in_batches(session, transitions(active, by_key, store.to_epoch(now)))
        counts.update(one_by_one.counts)
        for t in one_by_one.left:
            # Each in its own savepoint: one that fails (a value the database refuses, a
            # bug) is skipped and retried next cycle instead of stopping every job's.
            try:
                with session.begin_nested():
                    kind = _apply(session, t, now)
            except Exception:
                log.exception(
                    "job %s attempt %d: recording %s failed; skipped this cycle",
                    t.job_id,
                    t.attempt,
                    type(t).__name__,
                )
                continue
            if kind == "missing":
                missing.append(int(t.job_id))
            elif kind:
                counts[kind] += 1
        settle_cancelled_runs(session, runs)
        # Busy GPUs as the policy must see them, from the jobs still active now.
        after = [_active(row) for row in active_jobs(session)]
        busy = busy_by_placement(mapped, after, by_key, {})
        save_observed_busy(session, busy, now)
        owners = job_states(session, _job_ids(runs))
        stale = stale_runs(runs, {str(k): v for k, v in owners.items()})
        resubmit = dispatched_launches(session, missing)
    if sync:
        deps.inventory_memo.synced(facts, mono)
    return Observed(
        busy,
        started=counts["started"],
        confirmed=counts["confirmed"],
        ended=counts["ended"],
        requeued=counts["requeued"],
        resubmit=tuple(resubmit),
        stale=tuple(stale),
    )


def settle_cancelled_runs(session: Session, runs: Iterable[RunInfo]) -> int:
    """Charge each cancelled job's last run up to when it really ended (SPEC §4): the cancel
    charged only up to itself, and the run lived on until the dispatcher stopped it. Only
    runs whose ended times the job does not hold yet are settled (each in a savepoint,
    like the transitions); `store.settle_cancelled_run` is idempotent. How many changed."""
    ended = {
        int(r.job_id): r
        for r in runs
        if r.state.ended
        and r.started_at is not None
        and r.ended_at is not None
        and r.job_id.isdigit()
    }
    settled = 0
    for job_id, (attempts, started_at, ended_at) in cancelled_runs(session, ended).items():
        run = ended[job_id]
        assert run.started_at is not None and run.ended_at is not None
        real_start, real_end = store.from_epoch(run.started_at), store.from_epoch(run.ended_at)
        if run.attempt != attempts or (
            started_at is not None
            and ended_at is not None
            and same_instant(started_at, real_start)
            and same_instant(ended_at, real_end)
        ):
            continue
        try:
            with session.begin_nested():
                charged = store.settle_cancelled_run(
                    session, job_id, attempts, real_start, real_end
                )
        except Exception:
            log.exception("job %d attempt %d: settling its cancelled run failed", job_id, attempts)
            continue
        log.info(
            "job %d attempt %d: cancelled run ended; settled (%.1f TFLOP-s charged)",
            job_id,
            attempts,
            charged,
        )
        settled += 1
    return settled


@dataclass(frozen=True, slots=True)
class _Batched:
    counts: Counter[str]
    left: list[Transition]  # to apply one by one


_BATCH_ENDS = {
    RunState.COMPLETED: store.JobState.COMPLETED,
    RunState.FAILED: store.JobState.FAILED,
    RunState.CANCELLED: store.JobState.CANCELLED,
    RunState.TIMEOUT: store.JobState.FAILED,
}


def apply_in_batches(session: Session, found: Iterable[Transition]) -> _Batched:
    """Apply the runs seen started and the runs seen ended (not OOM, not node failures)
    all at once (`store.run_reports`): a fixed number of statements instead of about ten
    per run, which made a cycle that saw 96 runs end take 2 s. In one savepoint: if the
    batch fails, nothing of it stays and every one of them is left to the one-by-one
    path, which skips only the transition that fails. The rest is left as it came."""
    found = list(found)
    # A job with another transition too (a confirm first) keeps its order, one by one.
    others = {t.job_id for t in found if not _batchable(t)}
    starts: list[RunStart] = []
    ends: list[RunEnd] = []
    left: list[Transition] = []
    batched: list[Transition] = []
    for t in found:
        if t.job_id in others:
            left.append(t)
            continue
        if isinstance(t, Started):
            starts.append(
                RunStart(int(t.job_id), t.attempt, store.from_epoch(t.started_at), t.executor_id)
            )
        elif isinstance(t, Ended):
            ends.append(_run_end(t))
        batched.append(t)
    counts: Counter[str] = Counter()
    if not batched:
        return _Batched(counts, left)
    try:
        with session.begin_nested():
            counts["started"] = len(mark_running_many(session, starts))
            counts["ended"] = len(end_jobs(session, ends))
    except Exception:
        log.exception("recording %d runs' starts and ends at once failed: one by one", len(batched))
        return _Batched(Counter(), batched + left)
    return _Batched(counts, left)


def _batchable(t: Transition) -> bool:
    if not t.job_id.isdigit():
        return False
    return isinstance(t, Started) or (isinstance(t, Ended) and t.state in _BATCH_ENDS)


def _run_end(t: Ended) -> RunEnd:
    state = _BATCH_ENDS[t.state]
    reason = t.reason
    if t.state is RunState.CANCELLED:
        reason = t.reason or "cancelled by the executor"
    elif t.state is RunState.TIMEOUT:
        reason = t.reason or "time limit reached"
    return RunEnd(
        int(t.job_id),
        t.attempt,
        state,
        store.from_epoch(t.ended_at),
        store.from_epoch(t.started_at) if t.started_at is not None else None,
        t.exit_code,
        reason,
    )


def _active(row: ActiveJobRow) -> ActiveJob:
    return ActiveJob(
        str(row.job_id), row.attempt, row.state, row.node, row.tier, row.num_gpus, row.executor_id
    )


def _job_ids(runs: Iterable[RunInfo]) -> list[int]:
    out: list[int] = []
    for r in runs:
        try:
            out.append(int(r.job_id))
        except ValueError:
            continue  # not one of ours
    return out


def _apply(session: Session, t: Transition, now: datetime) -> str | None:
    """Record one transition; what kind it was if it changed the store."""
    job_id = int(t.job_id)
    if isinstance(t, Missing):
        return "missing"
    if isinstance(t, Confirmed):
        ok = store.confirm_dispatch(session, job_id, t.executor_id, now, attempt=t.attempt)
        return "confirmed" if ok else None
    if isinstance(t, Started):
        at = store.from_epoch(t.started_at)
        ok = store.mark_running(session, job_id, at, t.executor_id, attempt=t.attempt)
        return "started" if ok else None
    return _apply_end(session, t)


def _apply_end(session: Session, t: Ended) -> str | None:
    job_id = int(t.job_id)
    ended_at = store.from_epoch(t.ended_at)
    started_at = store.from_epoch(t.started_at) if t.started_at is not None else None
    if t.state is RunState.OOM:  # SPEC §5 / S10
        done = store.requeue_after_oom(
            session,
            job_id,
            ended_at,
            attempt=t.attempt,
            started_at=started_at,
            exit_code=t.exit_code,
            reason=t.reason,
        )
        return None if done is None else ("requeued" if done.requeued else "ended")
    if t.state is RunState.NODE_FAIL:  # SPEC §5: back to the queue, no escalation
        done = store.requeue_after_node_failure(
            session, job_id, ended_at, attempt=t.attempt, started_at=started_at, reason=t.reason
        )
        return None if done is None else "requeued"
    state, reason = {
        RunState.COMPLETED: (store.JobState.COMPLETED, t.reason),
        RunState.FAILED: (store.JobState.FAILED, t.reason),
        RunState.CANCELLED: (store.JobState.CANCELLED, t.reason or "cancelled by the executor"),
        # "FAILED (time limit)" everywhere reads this reason (`time_limits.state_label`).
        RunState.TIMEOUT: (store.JobState.FAILED, time_limit_reason(t.reason)),
    }[t.state]
    ended = store.end_job(
        session,
        job_id,
        state,
        ended_at,
        exit_code=t.exit_code,
        reason=reason,
        attempt=t.attempt,
        started_at=started_at,
    )
    return None if ended is None else "ended"


def stop_stale_runs(deps: CycleDeps, stale: Iterable[RunInfo]) -> tuple[str, ...]:
    """Stop runs whose job was cancelled, ended or requeued (idempotent; errors logged)."""
    stopped: list[str] = []
    for run in stale:
        deps.check_may_act()
        try:
            deps.executor.cancel(run.executor_id)
        except Exception as exc:  # retried next cycle: the run is still stale then
            log.warning("could not stop run %s of job %s: %s", run.executor_id, run.job_id, exc)
            continue
        log.info("stopped run %s: job %s no longer wants it", run.executor_id, run.job_id)
        stopped.append(run.executor_id)
    return tuple(stopped)


# --- 5-6. act, then confirm or undo ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Launch:
    tier: str
    spec: LaunchSpec


def _launch_of(deps: CycleDeps, row: DispatchedJob) -> _Launch:
    return _Launch(
        row.tier,
        LaunchSpec(
            job_id=str(row.job_id),
            attempt=row.attempt,
            name=row.name,
            command=row.command,
            node=row.node,
            gpu_type=deps.gpu_type_of(row.tier),
            num_gpus=row.num_gpus,
            partition=row.partition,
            user=row.user_name,
            time_limit_s=row.time_limit_s,
            unix_user=row.unix_user,
            workdir=row.workdir,
            environment=row.environment,
            output=row.output_path,
            error=row.error_path,
            cpus_per_gpu=row.cpus_per_gpu,
            mem_per_gpu_mb=row.mem_per_gpu_mb,
        ),
    )


def start_runs(deps: CycleDeps, launches: Iterable[_Launch]) -> Outcome:
    """Steps 5 and 6: yield and submit each launch, then confirm the accepted ones together.

    A refusal fails its job at once (its own transaction). The accepted runs are confirmed
    in one transaction after the last submit: a crash before it leaves them DISPATCHED
    without an executor id, which the next observe confirms (the runs exist).
    """
    refused: list[tuple[int, str]] = []
    deferred: list[int] = []
    accepted: list[tuple[_Launch, str]] = []
    for launch in launches:
        spec = launch.spec
        job_id = int(spec.job_id)
        deps.check_may_act()
        # 5. SPEC §6: the router stops LLM backfill there; we do not wait for it.
        deps.router.request_yield(spec.node, launch.tier, spec.num_gpus, spec.job_id)
        try:
            executor_id = deps.executor.submit(spec)
        except SubmitRefused as exc:
            reason = f"the executor refused the job: {exc}"
            with deps.begin() as session:
                store.fail_dispatch(
                    session, job_id, deps.clock(), reason=reason, attempt=spec.attempt
                )
            log.warning("job %d refused: %s", job_id, exc)
            refused.append((job_id, reason))
            continue
        except Exception as exc:  # unreachable / timed out: the next observe reconciles
            log.error("job %d: submit failed, left DISPATCHED for the next cycle: %s", job_id, exc)
            deferred.append(job_id)
            continue
        crash_point("after_submit")
        accepted.append((launch, executor_id))
    if not accepted:
        return Outcome((), tuple(refused), tuple(deferred), ())

    # 6. Confirm. False: the job left DISPATCHED meanwhile (cancelled through the API); a
    # run whose job has ended must not live on.
    started: list[int] = []
    orphans: list[tuple[int, str]] = []
    with deps.begin() as session:
        confirmed = store.confirm_dispatches(
            session,
            [(int(launch.spec.job_id), launch.spec.attempt, eid) for launch, eid in accepted],
            deps.clock(),
        )
        for launch, executor_id in accepted:
            job_id = int(launch.spec.job_id)
            if job_id in confirmed:
                started.append(job_id)
            else:
                orphans.append((job_id, executor_id))
        states = job_states(session, [job_id for job_id, _ in orphans])
    for launch, executor_id in accepted:
        spec = launch.spec
        if int(spec.job_id) in started:
            log.info(
                "job %s attempt %d started on %s/%s x%d as %s",
                spec.job_id,
                spec.attempt,
                spec.node,
                launch.tier,
                spec.num_gpus,
                executor_id,
            )
    orphaned: list[int] = []
    for job_id, executor_id in orphans:
        state, attempt = states.get(job_id, ("", 0))
        if state in ("DISPATCHED", "RUNNING") and attempt == _attempt_of(accepted, job_id):
            started.append(job_id)  # an earlier cycle confirmed it already
            continue
        log.info("job %d ended before its run was confirmed: stopping %s", job_id, executor_id)
        deps.check_may_act()
        try:
            deps.executor.cancel(executor_id)
        except Exception as exc:  # the next observe finds it stale and retries
            log.warning("could not stop run %s: %s", executor_id, exc)
        orphaned.append(job_id)
    return Outcome(tuple(started), tuple(refused), tuple(deferred), tuple(orphaned))


def _attempt_of(accepted: list[tuple[_Launch, str]], job_id: int) -> int:
    return next(launch.spec.attempt for launch, _ in accepted if int(launch.spec.job_id) == job_id)


def _report(
    at: datetime,
    t0: float,
    observed: Observed,
    decisions: Decisions,
    recorded: store.Recorded,
    dispatched: Outcome,
    resubmitted: Outcome,
    stopped: tuple[str, ...],
) -> CycleReport:
    released: Counter[str] = Counter()
    started = absorbed = 0
    for action in recorded.applied:
        if isinstance(action, StartReservation):
            started += 1
        elif isinstance(action, AbsorbReservation):
            absorbed += 1
        elif isinstance(action, ReleaseReservation):
            released[action.reason.value] += 1
    return CycleReport(
        at=at,
        duration_s=time.perf_counter() - t0,
        observed=observed,
        queue_length=len(decisions.order) - len(recorded.dispatched),
        dispatched=dispatched,
        resubmitted=resubmitted,
        stopped_runs=stopped,
        reservations_started=started,
        reservations_absorbed=absorbed,
        reservations_released=dict(released),
        skipped_decisions=len(recorded.skipped),
    )
