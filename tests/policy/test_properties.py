"""Hypothesis properties of the policy (docs/policy.md §3.2).

One cycle on random snapshots: random tiers (some not auto-assign, some sharing a sort
order), placements with busy GPUs and down nodes, a queue over a few labs with tied usage
and entry times, and either no reservation, one reservation that is valid for its
placement, or several stale ones. Then random event sequences (submit, finish, OOM,
cancel, node down/up) replayed by the simulator, every cycle checked, usage conserved.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jpushare.policy import (
    AbsorbReservation,
    Decisions,
    Dispatch,
    Placement,
    QueuedJob,
    ReleaseReservation,
    Reservation,
    Snapshot,
    StartReservation,
    Tier,
    decide,
    queue_order,
)
from jpushare.policy.fit import fits
from jpushare.policy.options import TopJob
from jpushare.policy.order import PlacementOrder
from jpushare.sim import ClusterSpec, NodeEvent, TraceJob, TraceJobState, simulate
from jpushare.vocabulary import NodeState
from tests.policy.invariants import check_cycle
from tests.policy.reference import reference_decide

# Deterministic, and small enough for a 2-core CI box.
CYCLE_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

NOW = 100.0
LABS = ("BCG", "KDG", "LDB")
# Every property holds for both dispatch orders (SPEC §1: pack, the default, and spread).
BOTH_PLACEMENTS = pytest.mark.parametrize("placement", list(PlacementOrder))
BOTH_TOP_JOBS = pytest.mark.parametrize("top_job", list(TopJob))


@st.composite
def tiers(draw: st.DrawFn) -> tuple[Tier, ...]:
    count = draw(st.integers(1, 4))
    out = []
    for k in range(count):
        out.append(
            Tier(
                name=f"t{k}",
                tflops=draw(st.sampled_from([34.1, 82.6, 104.8])),
                sort_order=draw(st.integers(1, 4)) * 10,
                max_gpus=draw(st.sampled_from([2, 4, 8, 8, 8, 8])),
                auto_assign=draw(st.sampled_from([True, True, True, True, False])),
            )
        )
    return tuple(out)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    tier_list = draw(tiers())
    names = [t.name for t in tier_list]
    placements: list[Placement] = []
    for n in range(draw(st.integers(1, 6))):
        for tier in draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True)):
            capacity = draw(st.sampled_from([1, 2, 2, 4, 4, 8]))
            placements.append(
                Placement(
                    node=f"node{n}",
                    tier=tier,
                    capacity=capacity,
                    busy=draw(st.integers(0, capacity)),
                    schedulable=draw(st.sampled_from([True, True, True, False])),
                )
            )
    usage = {lab: draw(st.sampled_from([0.0, 1000.0, 2000.0])) for lab in LABS}
    jobs = [
        QueuedJob(
            job_id=f"job{i}",
            lab=draw(st.sampled_from(LABS)),
            num_gpus=draw(st.sampled_from([1, 1, 2, 2, 2, 3, 4, 4, 8])),
            min_sort_order=draw(st.sampled_from([0, 0, 0, 10, 20, 30])),
            queue_entered_at=float(draw(st.integers(0, 3))),
        )
        for i in range(draw(st.integers(0, 10)))
    ]
    mode = draw(st.sampled_from(["none", "valid", "valid", "stale"]))
    if mode == "valid" and jobs:
        _reserve_validly(draw, jobs, tier_list, placements, usage)
    elif mode == "stale" and jobs:
        keys = [p.key for p in placements] + [("gone", names[0]), ("node0", "retired")]
        for i in draw(st.lists(st.integers(0, len(jobs) - 1), min_size=1, max_size=3)):
            node, tier = draw(st.sampled_from(keys))
            gpus = draw(st.integers(1, jobs[i].num_gpus))
            jobs[i] = replace(jobs[i], reservation=Reservation(node, tier, gpus, 0.0, 50.0))
    return Snapshot(tier_list, tuple(placements), tuple(jobs), usage, NOW)


def _reserve_validly(
    draw: st.DrawFn,
    jobs: list[QueuedJob],
    tier_list: tuple[Tier, ...],
    placements: list[Placement],
    usage: dict[str, float],
) -> None:
    """Give one job (the top job, usually) a reservation its placement can hold now."""
    ranked = sorted(range(len(jobs)), key=lambda i: queue_order(usage)(jobs[i]))
    i = ranked[0] if draw(st.booleans()) else draw(st.sampled_from(ranked))
    job = jobs[i]
    by_name = {t.name: t for t in tier_list}
    holdable = [
        p
        for p in placements
        if p.schedulable
        and p.free >= 1
        and fits(job.num_gpus, job.min_sort_order, by_name[p.tier], p.capacity)
    ]
    if job.num_gpus < 2 or not holdable:
        return
    p = draw(st.sampled_from(holdable))
    # Up to full: a full reservation can come back from an undo after a failed sbatch.
    gpus = draw(st.integers(1, min(p.free, job.num_gpus)))
    since = draw(st.sampled_from([0.0, 50.0, NOW]))
    res = Reservation(p.node, p.tier, gpus, since, draw(st.sampled_from([since, NOW])))
    jobs[i] = replace(job, reservation=res)


@BOTH_TOP_JOBS
@BOTH_PLACEMENTS
@CYCLE_SETTINGS
@given(snapshots())
def test_every_cycle_keeps_the_invariants_of_spec_section_3(
    placement: PlacementOrder, top_job: TopJob, snap: Snapshot
) -> None:
    # Per placement: busy + dispatched + reserved <= capacity; at most one reservation,
    # the top job's, num_gpus >= 2; each dispatch on one fit placement; nobody below the
    # top job takes its reserved GPUs; every waiting job has a why.
    check_cycle(snap, decide(snap, placement, top_job=top_job), top_job.value)


@BOTH_TOP_JOBS
@BOTH_PLACEMENTS
@CYCLE_SETTINGS
@given(snapshots())
def test_decide_matches_the_spec_pseudocode_transcribed_literally(
    placement: PlacementOrder, top_job: TopJob, snap: Snapshot
) -> None:
    d = decide(snap, placement, top_job=top_job)
    best_idle: dict[str, int] = {}
    order, actions, accruals = reference_decide(snap, placement.value, best_idle, top_job.value)
    assert d.order == order
    assert d.actions == actions
    assert d.accruals == accruals
    assert d.now == snap.now
    # "why": the most idle GPUs on a fit placement when the cycle was done with the job.
    assert {j: d.why[j].best_idle for j in best_idle} == best_idle


@BOTH_PLACEMENTS
@CYCLE_SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_the_same_snapshot_in_any_list_order_gives_the_same_decisions(
    placement: PlacementOrder, snap: Snapshot, rnd: random.Random
) -> None:
    tiers_, placements, queue = list(snap.tiers), list(snap.placements), list(snap.queue)
    labs = list(snap.lab_usage.items())
    for seq in (tiers_, placements, queue, labs):
        rnd.shuffle(seq)
    shuffled = Snapshot(tuple(tiers_), tuple(placements), tuple(queue), dict(labs), snap.now)

    assert decide(shuffled, placement) == decide(snap, placement)


# -- Over random event sequences, through the simulator ---------------------------------------

EVENT_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
FINAL = {
    TraceJobState.COMPLETED,
    TraceJobState.FAILED,
    TraceJobState.CANCELLED,
    TraceJobState.REJECTED,
}


@st.composite
def workloads(draw: st.DrawFn) -> tuple[ClusterSpec, tuple[TraceJob, ...]]:
    """A small cluster with node outages (each node comes back) and a trace that submits,
    finishes, runs out of memory and cancels."""
    tier_list = (
        Tier("t10", 34.1, 10),
        Tier("t20", 82.6, 20, max_gpus=draw(st.sampled_from([4, 8]))),
        Tier("t25", 312.0, 25, auto_assign=False),
        Tier("t30", 104.8, 30),
    )
    placements = []
    for n in range(draw(st.integers(1, 4))):
        for tier in draw(
            st.lists(
                st.sampled_from(["t10", "t20", "t25", "t30"]), min_size=1, max_size=2, unique=True
            )
        ):
            placements.append(Placement(f"node{n}", tier, draw(st.sampled_from([1, 2, 4, 8]))))
    placements.sort(key=lambda p: p.key)
    nodes = sorted({p.node for p in placements})
    events: list[NodeEvent] = []
    for node in draw(st.lists(st.sampled_from(nodes), max_size=3)):
        down = float(draw(st.integers(0, 400)))
        up = down + float(draw(st.integers(1, 300)))
        events += [NodeEvent(down, node, NodeState.DOWN), NodeEvent(up, node, NodeState.UP)]
    events.sort(key=lambda e: e.time)
    labs = {lab: float(draw(st.sampled_from([0, 5_000, 20_000]))) for lab in LABS}
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        submit = float(draw(st.integers(0, 300)))
        delay = draw(st.none() | st.integers(0, 600))
        cancel = None if delay is None else submit + delay
        jobs.append(
            TraceJob(
                job_id=f"job{i:02d}",
                submit_time=submit,
                duration=float(draw(st.integers(1, 400))),
                num_gpus=draw(st.sampled_from([1, 1, 2, 2, 3, 4, 8])),
                lab=draw(st.sampled_from(LABS)),
                min_tier=draw(st.sampled_from([None, None, "t10", "t20", "t30"])),
                cancel_time=cancel,
                oom_on=frozenset(
                    draw(st.lists(st.sampled_from(["t10", "t20", "t30"]), max_size=2))
                ),
            )
        )
    return ClusterSpec(tier_list, tuple(placements), labs, tuple(events)), tuple(jobs)


class _Ledger:
    """GPU-seconds held, rebuilt from what the observer sees, independently of the engine."""

    def __init__(self, cluster: ClusterSpec, jobs: tuple[TraceJob, ...]) -> None:
        self.tflops = {t.name: t.tflops for t in cluster.tiers}
        self.specs = {j.job_id: j for j in jobs}
        self.cluster = cluster
        self.holding: dict[str, tuple[str, int, float]] = {}  # job -> (tier, gpus, since)
        self.reserved_cost: dict[str, float] = dict.fromkeys(self.specs, 0.0)
        self.reserved_gpu_s = 0.0
        self.dispatches: dict[str, list[Dispatch]] = {j: [] for j in self.specs}
        self.starts: dict[str, list[float]] = {j: [] for j in self.specs}
        self.cycles = 0

    def _close(self, job_id: str, at: float) -> None:
        tier, gpus, since = self.holding.pop(job_id)
        self.reserved_cost[job_id] += gpus * (at - since) * self.tflops[tier]
        self.reserved_gpu_s += gpus * (at - since)

    def observe(self, snap: Snapshot, d: Decisions) -> None:
        check_cycle(snap, d)
        self.cycles += 1
        queued = {j.job_id: j for j in snap.queue}
        for job_id in list(self.holding):
            if job_id not in queued:  # it left the queue between cycles: only a cancel can
                cancel = self.specs[job_id].cancel_time
                assert cancel is not None and cancel <= snap.now
                self._close(job_id, cancel)
        for job_id, (_, gpus, _) in self.holding.items():
            res = queued[job_id].reservation
            assert res is not None and res.gpus == gpus, "the engine lost a reservation"
        for a in d.actions:
            if isinstance(a, StartReservation):
                self.holding[a.job_id] = (a.tier, a.gpus, snap.now)
            elif isinstance(a, AbsorbReservation):
                self._close(a.job_id, snap.now)
                self.holding[a.job_id] = (a.tier, a.total, snap.now)
            elif isinstance(a, ReleaseReservation):
                self._close(a.job_id, snap.now)
            elif isinstance(a, Dispatch):
                self.dispatches[a.job_id].append(a)
                self.starts[a.job_id].append(snap.now)

    def attempt_end(self, job_id: str, start: float, node: str) -> float:
        """When an attempt started at `start` on `node` must end: completion, cancel or the
        node going down, whichever comes first."""
        spec = self.specs[job_id]
        ends = [start + spec.duration]
        if spec.cancel_time is not None and spec.cancel_time > start:
            ends.append(spec.cancel_time)
        ends += [
            e.time
            for e in self.cluster.events
            if e.node == node and e.state == "down" and e.time > start
        ]
        return min(ends)


@BOTH_PLACEMENTS
@EVENT_SETTINGS
@given(workloads())
def test_every_cycle_of_a_replay_keeps_the_invariants_and_usage_is_conserved(
    placement: PlacementOrder, workload: tuple[ClusterSpec, tuple[TraceJob, ...]]
) -> None:
    cluster, jobs = workload
    ledger = _Ledger(cluster, jobs)

    result = simulate(
        cluster, jobs, "reservation", 5.0, placement=placement, observer=ledger.observe
    )

    assert ledger.cycles == result.cycles_run
    assert ledger.holding == {}, "a reservation outlived the replay"
    by_tier = {t.name: t for t in cluster.tiers}
    run_gpu_s = 0.0
    for record in result.jobs:
        assert record.state in FINAL, f"{record.job_id} never ended: {record.state}"
        spec = ledger.specs[record.job_id]
        # Each attempt is one observed Dispatch: one placement, every GPU the job asked for.
        assert [(a.start, a.node, a.tier) for a in record.attempts] == [
            (t, dsp.node, dsp.tier)
            for t, dsp in zip(
                ledger.starts[record.job_id], ledger.dispatches[record.job_id], strict=True
            )
        ]
        expected_run = 0.0
        for a in record.attempts:
            end = ledger.attempt_end(record.job_id, a.start, a.node)
            assert a.end == end
            assert a.num_gpus == spec.num_gpus
            expected_run += a.num_gpus * (end - a.start) * by_tier[a.tier].tflops
            run_gpu_s += a.num_gpus * (end - a.start)
        assert record.run_cost == pytest.approx(expected_run)
        assert record.reservation_cost == pytest.approx(ledger.reserved_cost[record.job_id])
        assert record.billed == pytest.approx(record.run_cost + record.reservation_cost)

    # Conservation (SPEC §4): every GPU-second held, running or reserved, reached its lab's
    # usage exactly once, lab by lab.
    for lab in set(result.lab_usage) | set(result.initial_lab_usage):
        grew = result.lab_usage.get(lab, 0.0) - result.initial_lab_usage.get(lab, 0.0)
        held = sum(r.run_cost + ledger.reserved_cost[r.job_id] for r in result.jobs if r.lab == lab)
        assert grew == pytest.approx(held, rel=1e-9, abs=1e-6)
    assert result.running_gpu_s == pytest.approx(run_gpu_s)
    assert result.reserved_gpu_s == pytest.approx(ledger.reserved_gpu_s)
