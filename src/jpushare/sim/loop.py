"""The event loop of `sim.engine` (see its docstring): cycles, events, the policy's actions
applied to the simulated cluster, and the lazy accounting (SPEC §4) of every attempt."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from jpushare.formats.cluster_file import ClusterSpec
from jpushare.formats.trace_file import TraceJob
from jpushare.ledger import Run, accrue_reservation, add_run, settle
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
from jpushare.policy.order import (
    IdleIndex,
    IndexedPlacements,
)
from jpushare.policy.peers import (
    IndexedRunning,
    Policy,
    RunningEnds,
)
from jpushare.sim.jobs import Key, LabQueues, ReservationLog, SimJob
from jpushare.sim.results import (
    Attempt,
    AttemptEnd,
    GpuSample,
    LentRun,
    LentWait,
    TraceJobState,
)
from jpushare.vocabulary import JobId, NodeState

Observer = Callable[[Snapshot, Decisions], None]
Progress = Callable[[int, int], None]

# Event kinds, in the order they apply at equal times.
_END, _CANCEL, _NODE = 0, 1, 2


class Engine:
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
        self.jobs: dict[str, SimJob] = {}
        for spec in jobs:
            m = (
                default_min
                if spec.min_tier is None
                else self.tier_by_name[spec.min_tier].sort_order
            )
            self.jobs[spec.job_id] = SimJob(spec, m)
            self.order.append(spec.job_id)
        self.submissions = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
        self.next_submission = 0

        self.lab_usage: dict[str, float] = {lab: float(u) for lab, u in cluster.labs.items()}
        for spec in jobs:
            self.lab_usage.setdefault(spec.lab, 0.0)
        self.initial_lab_usage = dict(self.lab_usage)

        self.queue: dict[str, QueuedJob] = {}
        self.lab_queues = LabQueues()  # the same jobs, kept in queue order per lab
        self.running: dict[str, RunningJob] = {}
        self.running_ends = RunningEnds()  # the same jobs' expected ends, for `backfill`
        self._running_tuple: tuple[RunningJob, ...] | None = None
        self.reserving: dict[str, SimJob] = {}
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
        self.reservation_log: list[ReservationLog] = []
        self.open_reservation: dict[str, int] = {}  # job -> index in reservation_log
        self.gpu_timeline: list[GpuSample] = [GpuSample(0.0, 0, 0, self.up_gpus)]
        self.lab_timeline: list[tuple[float, str, float]] = []
        self.cycles_run = 0
        self.cycles_total = 0
        # A forecast follows these jobs and stops once all have started (see `forecast`).
        self.watched: set[str] | None = None
        self.first_starts: dict[str, float] = {}
        # Lending (`reserved_gpus: lend-by-limit`): each lender's GPUs lent out now (they are
        # busy, not reserved: the borrower pays for them as its run), every loan, and the
        # lenders' waits for lent GPUs once all their other GPUs are held.
        self.lent_out: dict[str, int] = {}
        self.loans: dict[str, int] = {}  # borrower -> index in lent_runs
        self.detached: dict[str, int] = {}  # the same, for loans whose lender released
        self.lent_runs: list[LentRun] = []
        self.open_wait: dict[str, float] = {}  # lender -> since when it waits for lent GPUs
        self.lent_waits: list[LentWait] = []
        self.lent_gpu_s = 0.0

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
                ReservationLog(q.job_id, r.node, r.tier, r.gpus, r.since - now)
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

    def _end(self, job: SimJob, t: float, epoch: int) -> bool:
        if job.state is not TraceJobState.RUNNING or job.epoch != epoch:
            return False  # stale: the attempt was cut short by a cancel or a node failure
        tier = job.run_key[1]
        borrower = job.spec.job_id
        lent = borrower in self.loans or borrower in self.detached
        if lent and job.spec.time_limit_s < job.spec.duration:
            # Lending counts on enforced limits: the service stops a lent run there.
            self._end_attempt(job, t, AttemptEnd.TIME_LIMIT)
            job.reason = "time limit (on lent GPUs)"
            self._finish(job, TraceJobState.FAILED)
            return True
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

    def _cancel(self, job: SimJob, t: float) -> bool:
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
            self._reserved(j)
            for j in self.reserving.values()
            if j is not job
            and j.reservation is not None
            and (j.reservation.node, j.reservation.tier) == key
        )
        lender = self.jobs.get(a.lent_from) if a.lent_from is not None else None
        if lender is not None:
            # On lent GPUs: the lender's reserved ones there, not the placement's idle ones.
            res = lender.reservation
            if res is None or (res.node, res.tier) != key or self._reserved(lender) < a.num_gpus:
                raise RuntimeError(f"the policy lent GPUs no reservation holds at t={t}: {a}")
            held -= self._reserved(lender)
        elif a.lent_from is not None:
            raise RuntimeError(f"the policy lent GPUs of an unknown job at t={t}: {a}")
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
        run = RunningJob(
            a.job_id, a.node, a.tier, a.num_gpus, t, job.spec.time_limit_s, a.lent_from
        )
        self.running[a.job_id] = run
        self.running_ends.started(run)
        self._running_tuple = None
        run_s = job.spec.duration
        if lender is not None:  # a lent run is stopped at its limit (see `_end`)
            run_s = min(run_s, job.spec.time_limit_s)
        heapq.heappush(self.heap, (t + run_s, _END, a.job_id, job.epoch))
        if lender is not None:
            self._close_span(lender, t)  # its span so far at the size before the loan
            holder = lender.spec.job_id
            self.lent_out[holder] = self.lent_out.get(holder, 0) + a.num_gpus
            self.reserved_gpus -= a.num_gpus
            self.loans[a.job_id] = len(self.lent_runs)
            self.lent_runs.append(LentRun(a.job_id, holder, a.num_gpus, t))

    def _reserved(self, job: SimJob) -> int:
        """The GPUs `job`'s reservation holds and has not lent out."""
        res = job.reservation
        return 0 if res is None else res.gpus - self.lent_out.get(job.spec.job_id, 0)

    def _loan_ends(self, job: SimJob, t: float) -> None:
        """A run on lent GPUs stops: the GPUs go back to their lender's reservation."""
        borrower = job.spec.job_id
        attached = borrower in self.loans
        i = self.loans.pop(borrower) if attached else self.detached.pop(borrower)
        loan = self.lent_runs[i]
        self.lent_runs[i] = replace(loan, ended_at=t)
        self.lent_gpu_s += loan.gpus * max(0.0, t - loan.started_at)
        if not attached:
            return  # its lender released meanwhile: the GPUs are plain free ones now
        holder = loan.lent_from
        self._close_span(self.jobs[holder], t)
        self.lent_out[holder] -= loan.gpus
        self.reserved_gpus += loan.gpus
        if not self.lent_out[holder]:
            del self.lent_out[holder]
            self._end_wait(holder, t)

    def _end_wait(self, holder: str, t: float) -> None:
        since = self.open_wait.pop(holder, None)
        if since is not None:
            self.lent_waits.append(LentWait(holder, since, t))

    def _start_reservation(self, a: StartReservation, t: float) -> None:
        job = self.jobs[a.job_id]
        if job.state is not TraceJobState.QUEUED or job.reservation is not None:
            raise RuntimeError(f"the policy started an impossible reservation at t={t}: {a}")
        job.reservation = Reservation(a.node, a.tier, a.gpus, t, t)
        job.res_span_start = t
        self.reserving[a.job_id] = job
        self.reserved_gpus += a.gpus
        self.open_reservation[a.job_id] = len(self.reservation_log)
        self.reservation_log.append(ReservationLog(a.job_id, a.node, a.tier, a.gpus, t))
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
        if a.total >= job.spec.num_gpus and self.lent_out.get(a.job_id):
            self.open_wait.setdefault(a.job_id, t)  # all held but the lent GPUs
        if job.state is TraceJobState.QUEUED:
            self._enqueue(job.queued())

    def _release(self, job: SimJob, t: float, reason: ReleaseReason) -> None:
        res = job.reservation
        if res is None:
            raise RuntimeError(f"release of a reservation job {job.spec.job_id} does not hold")
        self._close_span(job, t)
        holder = job.spec.job_id
        lent = self.lent_out.pop(holder, 0)
        if lent:
            # Its borrowers run on as ordinary jobs (their GPUs are no reservation's now).
            self._end_wait(holder, t)
            for run in [r for r in self.running.values() if r.lent_from == holder]:
                self.running[run.job_id] = replace(run, lent_from=None)
                self.detached[run.job_id] = self.loans.pop(run.job_id)
            self._running_tuple = None
        job.reservation = None
        del self.reserving[holder]
        self.reserved_gpus -= res.gpus - lent
        entry = self.reservation_log[self.open_reservation.pop(job.spec.job_id)]
        entry.ended_at, entry.reason = t, reason
        if job.state is TraceJobState.QUEUED:
            self._enqueue(job.queued())

    def _close_span(self, job: SimJob, t: float) -> None:
        """Charge the reservation's GPUs since the span began to the job (lazy, SPEC §4)."""
        res = job.reservation
        assert res is not None
        tier = self.tier_by_name[res.tier]
        gpus = self._reserved(job)  # lent GPUs are their borrowers' run cost, not this
        accrual = accrue_reservation(job.account, gpus, job.res_span_start, t, tier.tflops)
        job.account = accrual.account
        self.reserved_gpu_s += gpus * max(0.0, t - job.res_span_start)
        job.res_span_start = t

    # -- job life -------------------------------------------------------------------------

    def _end_attempt(self, job: SimJob, t: float, outcome: AttemptEnd) -> None:
        """An attempt stops at t: free its GPUs, charge its run cost, bill the lab."""
        node, tier_name = job.run_key
        n = job.spec.num_gpus
        p = self.placements[job.run_key]
        self._set_placement(Placement(p.node, p.tier, p.capacity, p.busy - n, p.schedulable))
        self.running_gpus -= n
        self.running_ends.ended(self.running.pop(job.spec.job_id))
        self._running_tuple = None
        if job.spec.job_id in self.loans or job.spec.job_id in self.detached:
            self._loan_ends(job, t)
        run = Run(len(job.attempts) + 1, n, job.run_start, self.tier_by_name[tier_name].tflops)
        ran = add_run(job.account, run, t)
        job.account, cost = ran.account, ran.cost
        self.running_gpu_s += n * max(0.0, t - job.run_start)
        job.attempts.append(Attempt(job.run_start, t, node, tier_name, n, outcome, cost))
        job.state = TraceJobState.QUEUED  # until _requeue or _finish says otherwise
        self._bill(job, t)
        self._mark(t)

    def _requeue(self, job: SimJob) -> None:
        job.state = TraceJobState.QUEUED
        self._enqueue(job.queued())

    def _finish(self, job: SimJob, state: TraceJobState) -> None:
        job.state = state
        self.finished += 1

    def _bill(self, job: SimJob, t: float) -> None:
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
