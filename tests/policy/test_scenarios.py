"""The seed scenarios S1-S15 (SPEC §9, design note section 5), one test each, named as sentences.

Each test builds its snapshot(s) by hand, runs `decide`, and compares the whole decision
list, the accruals and, where the scenario has them, the usage figures. Multi-cycle
scenarios chain cycles with `chain.apply` (record the decisions) and `chain.advance` (what
happened outside the policy). Costs are TFLOP-seconds: GPUs x seconds x tier TFLOPS.
"""

from __future__ import annotations

import pytest

from jpushare.policy import (
    AbsorbReservation,
    AccrueReservation,
    Decisions,
    Dispatch,
    Placement,
    QueuedJob,
    ReleaseReason,
    ReleaseReservation,
    Reservation,
    Snapshot,
    StartReservation,
    Tier,
    Why,
    WhyCode,
    check_fit,
    decide,
    default_min_sort_order,
    escalate,
)
from jpushare.policy.accounting import job_bill, reservation_accrual, run_cost
from jpushare.policy.fit import Alternative, FitReport
from jpushare.policy.oom import Escalation
from jpushare.policy.options import TopJob
from jpushare.policy.order import PlacementOrder
from tests.constants import RTX3080TI, RTX4090, RTX5090
from tests.policy.chain import advance, apply, charge, job

TIERS = (RTX3080TI, RTX4090)

P = ("node-p", "rtx4090")
Q = ("node-q", "rtx4090")

R3 = ReleaseReason.R3
R5 = ReleaseReason.R5
SWAP = ReleaseReason.SWAP
FILLED = ReleaseReason.FILLED

ONE_4090_FOR_5_S = 1 * 5.0 * 82.6  # 413 TFLOP-s: one reserved 4090 over one 5-second cycle


def queued(
    job_id: str,
    lab: str,
    num_gpus: int,
    *,
    min_sort_order: int = 10,
    entered: float = 0.0,
    reservation: Reservation | None = None,
) -> QueuedJob:
    return QueuedJob(job_id, lab, num_gpus, min_sort_order, entered, reservation)


def snapshot(
    placements: tuple[Placement, ...],
    queue: tuple[QueuedJob, ...],
    lab_usage: dict[str, float],
    *,
    now: float = 0.0,
    tiers: tuple[Tier, ...] = TIERS,
) -> Snapshot:
    return Snapshot(tiers, placements, queue, lab_usage, now)


def quiet_cycles(snap: Snapshot, start: float, stop: float, job_id: str) -> tuple[Snapshot, float]:
    """Run the 5-second cycles start, start+5, ..., stop, in which nothing but time passes.

    Each must decide nothing and accrue one cycle of `job_id`'s reservation; returns the
    last snapshot (decisions applied) and the sum of the accruals.
    """
    accrued = 0.0
    t = start
    while t <= stop:
        snap = advance(snap, t)
        d = decide(snap)
        assert d.actions == ()
        res = job(snap, job_id).reservation
        assert res is not None
        assert d.accruals == (AccrueReservation(job_id, res.gpus * 5.0 * 82.6, t),)
        accrued += d.accruals[0].tflop_s
        snap = apply(snap, d)
        t += 5.0
    return snap, accrued


def accrued(d: Decisions, job_id: str) -> float:
    return sum(a.tflop_s for a in d.accruals if a.job_id == job_id)


# S1 ---------------------------------------------------------------------------------------


def test_s1_the_top_job_dispatches_at_once_on_a_fit_placement_with_enough_idle_gpus() -> None:
    snap = snapshot(
        (Placement("node-p", "rtx4090", capacity=2),),
        (queued("jobA", "BCG", 2),),
        {"BCG": 24_000.0},
    )

    d = decide(snap)

    assert d.order == ("jobA",)
    assert d.actions == (Dispatch("jobA", "node-p", "rtx4090", 2),)
    assert d.accruals == ()
    assert d.why == {}


# S2 ---------------------------------------------------------------------------------------


def test_s2_the_top_job_reserves_the_idle_gpu_and_no_other_job_may_take_it() -> None:
    snap = snapshot(
        (Placement("node-p", "rtx4090", capacity=2, busy=1),),  # another job holds one GPU
        (queued("jobA", "BCG", 2), queued("jobB", "KDG", 1)),
        {"BCG": 24_000.0, "KDG": 28_000.0},
    )

    d = decide(snap)

    held = Reservation("node-p", "rtx4090", gpus=1, since=0.0, last_accrued_at=0.0)
    assert d.order == ("jobA", "jobB")
    assert d.actions == (StartReservation("jobA", "node-p", "rtx4090", 1),)
    assert d.accruals == ()
    assert d.why == {
        "jobA": Why(
            job_id="jobA",
            code=WhyCode.RESERVING,
            rank=0,
            queue_length=2,
            top_job_id="jobA",
            num_gpus=2,
            fit_placements=1,
            schedulable_fit_placements=1,
            best_idle=0,
            reservation=held,
        ),
        # P.idle = 0 for every other job: the single-GPU job may not take the reserved GPU.
        "jobB": Why(
            job_id="jobB",
            code=WhyCode.BEHIND_RESERVATION,
            rank=1,
            queue_length=2,
            top_job_id="jobA",
            num_gpus=1,
            fit_placements=1,
            schedulable_fit_placements=1,
            best_idle=0,
            blocking_job_id="jobA",
            blocking_reservation=held,
        ),
    }
    a, b = d.why["jobA"].sentence, d.why["jobB"].sentence
    assert "1 of 2 GPUs" in a and "node-p" in a and "1 more" in a
    assert "ranked 2 of 2" in b and "jobA" in b and "(1 GPU on node-p, rtx4090)" in b and "R4" in b


# S3 ---------------------------------------------------------------------------------------


def test_s3_the_reservation_absorbs_the_gpu_freed_on_its_placement_and_dispatches() -> None:
    first = snapshot(
        (Placement("node-p", "rtx4090", capacity=2, busy=1),),
        (queued("jobA", "BCG", 2), queued("jobB", "KDG", 1)),
        {"BCG": 24_000.0, "KDG": 28_000.0},
    )
    d0 = decide(first)
    assert d0.actions == (StartReservation("jobA", "node-p", "rtx4090", 1),)

    # Next cycle: the other job on P has ended.
    snap = advance(apply(first, d0), 5.0, freed={P: 1})
    d = decide(snap)

    assert d.accruals == (AccrueReservation("jobA", ONE_4090_FOR_5_S, 5.0),)
    assert d.actions == (
        AbsorbReservation("jobA", "node-p", "rtx4090", added=1, total=2),
        Dispatch("jobA", "node-p", "rtx4090", 2),
        ReleaseReservation("jobA", "node-p", "rtx4090", 2, FILLED),
    )
    assert d.why["jobB"].code is WhyCode.WAITING_FOR_GPUS
    assert d.why["jobB"].best_idle == 0
    assert d.why["jobB"].blocking_job_id is None
    # Lazy accounting: the lab has not been charged; the job carries 413 TFLOP-s.
    after = apply(snap, d)
    assert after.lab_usage == {"BCG": 24_000.0, "KDG": 28_000.0}
    assert [p.busy for p in after.placements] == [2]


# S4 ---------------------------------------------------------------------------------------


def test_s4_a_reservation_swaps_to_a_faster_placement_and_its_gpu_serves_the_next_job() -> None:
    first = snapshot(
        (
            Placement("node-p", "rtx4090", capacity=2, busy=1),
            Placement("node-q", "rtx4090", capacity=2, busy=2),
        ),
        (queued("jobA", "BCG", 2), queued("jobB", "KDG", 1)),
        {"BCG": 24_000.0, "KDG": 28_000.0},
    )
    d0 = decide(first)
    assert d0.actions == (StartReservation("jobA", "node-p", "rtx4090", 1),)
    assert d0.why["jobB"].code is WhyCode.BEHIND_RESERVATION

    # T+5 s: both jobs on Q end at once.
    snap = advance(apply(first, d0), 5.0, freed={Q: 2})
    d = decide(snap)

    assert d.accruals == (AccrueReservation("jobA", ONE_4090_FOR_5_S, 5.0),)
    assert d.actions == (
        Dispatch("jobA", "node-q", "rtx4090", 2),
        ReleaseReservation("jobA", "node-p", "rtx4090", 1, SWAP),
        Dispatch("jobB", "node-p", "rtx4090", 1),  # the released GPU, in the same cycle
    )
    assert d.why == {}
    assert [p.busy for p in apply(snap, d).placements] == [2, 2]


# S5 ---------------------------------------------------------------------------------------


def test_s5_r3_releases_the_reservation_when_another_lab_overtakes_cost_waits_for_job_end() -> None:
    usage = {"BCG": 24_000.0, "KDG": 28_000.0}
    first = snapshot(
        (
            Placement("node-p", "rtx4090", capacity=2, busy=1),  # job X (foreign) holds one
            Placement("node-y", "rtx3080ti", capacity=1, busy=1),  # jobY (BCG) runs here
        ),
        (
            queued("jobA", "BCG", 2, min_sort_order=20),
            queued("jobK", "KDG", 2, min_sort_order=20),
        ),
        usage,
    )
    d0 = decide(first)
    assert d0.order == ("jobA", "jobK")
    assert d0.actions == (StartReservation("jobA", "node-p", "rtx4090", 1),)
    assert d0.why["jobK"].code is WhyCode.WAITING_FOR_PRIORITY

    # T+5 s .. T+295 s: every cycle accrues 413 TFLOP-s into jobA; BCG's usage stays put.
    snap, job_a_reserved = quiet_cycles(apply(first, d0), 5.0, 295.0, "jobA")
    assert snap.lab_usage == usage

    # T+5 min: jobY (BCG) ends and is charged -> BCG 32k > KDG 28k.
    usage = charge(usage, "BCG", job_bill(run_costs=8_000.0, reservation_costs=0.0))
    assert usage == {"BCG": 32_000.0, "KDG": 28_000.0}
    snap = advance(snap, 300.0, freed={("node-y", "rtx3080ti"): 1}, lab_usage=usage)
    d = decide(snap)

    assert d.order == ("jobK", "jobA")
    assert d.accruals == (AccrueReservation("jobA", ONE_4090_FOR_5_S, 300.0),)
    assert d.actions == (
        ReleaseReservation("jobA", "node-p", "rtx4090", 1, R3),
        StartReservation("jobK", "node-p", "rtx4090", 1),  # the new top job reserves it
    )
    job_a_reserved += accrued(d, "jobA")
    assert job_a_reserved == pytest.approx(1 * 300 * 82.6) == pytest.approx(24_780.0)
    # SPEC "Decisions on ambiguities" 1: not charged at release (the note's 56,780), but
    # at job end; jobA is queued again, without a reservation.
    snap = apply(snap, d)
    assert snap.lab_usage == {"BCG": 32_000.0, "KDG": 28_000.0}
    assert job(snap, "jobA").reservation is None
    assert d.why["jobA"].code is WhyCode.WAITING_FOR_PRIORITY
    assert d.why["jobA"].rank == 1
    assert "ranked 2 of 2 behind top job jobK" in d.why["jobA"].sentence
    assert d.why["jobK"].code is WhyCode.RESERVING
    assert "1 of 2 GPUs on node-p (rtx4090) since t=300" in d.why["jobK"].sentence

    # T+15 min: KDG's other jobs have run and ended elsewhere: KDG 60k > BCG 32k again.
    usage = {"BCG": 32_000.0, "KDG": 60_000.0}
    snap = advance(snap, 900.0, lab_usage=usage)
    d = decide(snap)

    assert d.order == ("jobA", "jobK")
    assert d.accruals == (AccrueReservation("jobK", 1 * 600.0 * 82.6, 900.0),)
    assert d.actions == (
        ReleaseReservation("jobK", "node-p", "rtx4090", 1, R3),
        StartReservation("jobA", "node-p", "rtx4090", 1),  # from scratch
    )
    snap = apply(snap, d)
    assert job(snap, "jobA").reservation == Reservation("node-p", "rtx4090", 1, 900.0, 900.0)

    # T+20 min: job X ends; jobA fills and runs for 10 minutes.
    snap = advance(snap, 1_200.0, freed={P: 1})
    d = decide(snap)
    assert d.accruals == (AccrueReservation("jobA", 1 * 300.0 * 82.6, 1_200.0),)
    assert d.actions == (
        AbsorbReservation("jobA", "node-p", "rtx4090", 1, 2),
        Dispatch("jobA", "node-p", "rtx4090", 2),
        ReleaseReservation("jobA", "node-p", "rtx4090", 2, FILLED),
    )
    job_a_reserved += accrued(d, "jobA")
    assert job_a_reserved == pytest.approx(49_560.0)  # both reservations, R3-released one too

    # jobA ends at T+30 min: its whole bill reaches BCG in one step.
    bill = job_bill(run_cost(2, 1_200.0, 1_800.0, 82.6), job_a_reserved)
    assert bill == pytest.approx(99_120.0 + 49_560.0)
    assert charge(usage, "BCG", bill) == pytest.approx({"BCG": 180_680.0, "KDG": 60_000.0})


# S6 ---------------------------------------------------------------------------------------


def test_s6_two_half_free_nodes_are_not_one_placement_so_the_job_reserves_on_one_of_them() -> None:
    snap = snapshot(
        (
            Placement("node1", "rtx4090", capacity=2, busy=1),
            Placement("node2", "rtx4090", capacity=2, busy=1),
        ),
        (queued("jobA", "BCG", 2),),
        {"BCG": 24_000.0},
    )

    d = decide(snap)

    # No Dispatch across the two nodes; equal idle -> the first node name.
    assert d.actions == (StartReservation("jobA", "node1", "rtx4090", 1),)
    why = d.why["jobA"]
    assert why.code is WhyCode.RESERVING
    assert why.fit_placements == 2
    assert why.best_idle == 1  # node2 still has one idle GPU, which is not enough


# S7 ---------------------------------------------------------------------------------------


def test_s7_a_mixed_node_is_two_placements_and_a_job_for_8_gpus_is_rejected_at_submission() -> None:
    tiers = (RTX3080TI, RTX4090, RTX5090)
    node_x = (
        Placement("node-x", "rtx4090", capacity=4),
        Placement("node-x", "rtx5090", capacity=4),
    )

    # num_gpus=4 fits both placements; the stronger tier comes first.
    d = decide(snapshot(node_x, (queued("jobA", "BCG", 4, min_sort_order=20),), {}, tiers=tiers))
    assert d.actions == (Dispatch("jobA", "node-x", "rtx5090", 4),)

    # With one 5090 busy, the 4090s of the same node are a placement of their own.
    busy_5090 = (node_x[0], Placement("node-x", "rtx5090", capacity=4, busy=1))
    d = decide(snapshot(busy_5090, (queued("jobA", "BCG", 4, min_sort_order=20),), {}, tiers=tiers))
    assert d.actions == (Dispatch("jobA", "node-x", "rtx4090", 4),)

    # num_gpus=8: no placement has capacity 8 (4 + 4 on one node is not one placement).
    report = check_fit(8, default_min_sort_order(tiers), tiers, node_x)
    assert report == FitReport(
        ok=False,
        num_gpus=8,
        min_tier="rtx3080ti",
        fit_count=0,
        largest_fit=4,
        alternatives=(Alternative(num_gpus=4, min_tier="rtx3080ti", placements=2),),
        message="no placement can hold num_gpus=8 at tier >= rtx3080ti; the largest fit is 4",
    )

    # A queued 8-GPU job (from before GPUs were removed) is told nothing can hold it.
    d = decide(snapshot(node_x, (queued("jobB", "BCG", 8),), {}, tiers=tiers))
    assert d.actions == ()
    assert d.why["jobB"].code is WhyCode.NO_FIT_PLACEMENT
    assert d.why["jobB"].fit_placements == 0
    assert "8 GPUs" in d.why["jobB"].sentence


# S8 ---------------------------------------------------------------------------------------


def test_s8_the_second_multi_gpu_job_does_not_reserve_and_waits_for_the_top_place() -> None:
    held = Reservation("node-p", "rtx4090", gpus=1, since=0.0, last_accrued_at=0.0)
    snap = snapshot(
        (Placement("node-p", "rtx4090", capacity=2, busy=1),),
        (queued("jobA", "BCG", 2, reservation=held), queued("jobB", "KDG", 2)),
        {"BCG": 24_000.0, "KDG": 28_000.0},
        now=5.0,
    )

    d = decide(snap)

    assert d.accruals == (AccrueReservation("jobA", ONE_4090_FOR_5_S, 5.0),)
    assert d.actions == ()  # R2: jobB may not reserve
    assert d.why["jobA"].code is WhyCode.RESERVING
    assert d.why["jobB"] == Why(
        job_id="jobB",
        code=WhyCode.WAITING_FOR_PRIORITY,
        rank=1,
        queue_length=2,
        top_job_id="jobA",
        num_gpus=2,
        fit_placements=1,
        schedulable_fit_placements=1,
        best_idle=0,
    )
    sentence = d.why["jobB"].sentence
    assert "ranked 2 of 2" in sentence and "jobA" in sentence and "2 GPUs" in sentence
    assert "0 idle" in sentence and "R2" in sentence

    # jobA fills and dispatches. Under decision 7 jobB, the first job that cannot start, is
    # the top job in this same cycle (with no idle GPU to reserve); read literally (queue[0]
    # at the start of the cycle) it was not, and waits for priority.
    snap = advance(apply(snap, d), 10.0, freed={P: 1})
    d = decide(snap)
    filled = (
        AbsorbReservation("jobA", "node-p", "rtx4090", 1, 2),
        Dispatch("jobA", "node-p", "rtx4090", 2),
        ReleaseReservation("jobA", "node-p", "rtx4090", 2, FILLED),
    )
    assert d.actions == filled
    assert d.why["jobB"].code is WhyCode.WAITING_FOR_GPUS
    assert d.why["jobB"].top_job_id == "jobB"
    literal = decide(snap, top_job=TopJob.FIRST_QUEUED)
    assert literal.actions == filled
    assert literal.why["jobB"].code is WhyCode.WAITING_FOR_PRIORITY

    # Next cycle jobB is the top job, but P has no idle GPU to reserve.
    snap = advance(apply(snap, d), 15.0)
    d = decide(snap)
    assert d.actions == ()
    assert d.why["jobB"].code is WhyCode.WAITING_FOR_GPUS
    assert d.why["jobB"].sentence.startswith("It is the top job")


# S9 ---------------------------------------------------------------------------------------


def test_s9_single_gpu_jobs_run_beside_a_reservation_on_gpus_the_top_job_cannot_use() -> None:
    held = Reservation("node-p", "rtx4090", gpus=1, since=0.0, last_accrued_at=0.0)
    snap = snapshot(
        (
            Placement("node-p", "rtx4090", capacity=2, busy=1),
            Placement("node-q", "rtx3080ti", capacity=2),
        ),
        (
            queued("jobA", "BCG", 2, min_sort_order=20, reservation=held),  # Q does not fit it
            queued("jobB", "KDG", 1, entered=1.0),
            queued("jobC", "KDG", 1, entered=2.0),
            queued("jobD", "KDG", 1, entered=3.0),
        ),
        {"BCG": 24_000.0, "KDG": 28_000.0},
        now=5.0,
    )

    d = decide(snap)

    assert d.order == ("jobA", "jobB", "jobC", "jobD")
    assert d.actions == (
        Dispatch("jobB", "node-q", "rtx3080ti", 1),
        Dispatch("jobC", "node-q", "rtx3080ti", 1),
    )
    assert d.accruals == (AccrueReservation("jobA", ONE_4090_FOR_5_S, 5.0),)
    assert set(d.why) == {"jobA", "jobD"}
    assert d.why["jobA"].code is WhyCode.RESERVING
    # jobD fits P too, but P's idle GPU is reserved (R4).
    assert d.why["jobD"].code is WhyCode.BEHIND_RESERVATION
    assert d.why["jobD"].blocking_job_id == "jobA"
    assert d.why["jobD"].blocking_reservation == held
    assert d.why["jobD"].sentence == (
        "It is ranked 4 of 4; the idle GPUs it could use are reserved by the top job jobA "
        "(1 GPU on node-p, rtx4090), which no lower-ranked job may take (R4)."
    )


# S10 --------------------------------------------------------------------------------------


def test_s10_an_oom_job_is_charged_escalates_to_the_next_tier_and_reserves_there() -> None:
    placements = (
        Placement("node-c", "rtx3080ti", capacity=2),
        Placement("node-p", "rtx4090", capacity=2, busy=1),
    )
    usage = {"BCG": 24_000.0}
    first = snapshot(placements, (queued("jobA", "BCG", 2, min_sort_order=10),), usage)

    # Attempt 1: the 4090s have one idle GPU, so the job runs on the 3080 Tis.
    d0 = decide(first)
    assert d0.actions == (Dispatch("jobA", "node-c", "rtx3080ti", 2),)

    # T+10 min: out of memory. The attempt is charged; the minimum rises to rtx4090.
    attempt_1 = run_cost(2, 0.0, 600.0, RTX3080TI.tflops)
    assert attempt_1 == 40_920.0
    usage = charge(usage, "BCG", job_bill(attempt_1, 0.0))
    assert usage == {"BCG": 64_920.0}
    esc = escalate(2, "rtx3080ti", TIERS, placements)
    assert esc == Escalation(
        requeue=True,
        min_sort_order=20,
        next_tier="rtx4090",
        reason="out of memory on rtx3080ti; retrying at >= rtx4090",
    )
    assert esc.min_sort_order is not None
    requeued = queued("jobA", "BCG", 2, min_sort_order=esc.min_sort_order, entered=0.0)
    snap = advance(
        apply(first, d0),
        600.0,
        freed={("node-c", "rtx3080ti"): 2},
        lab_usage=usage,
        submit=(requeued,),
    )

    # Attempt 2: only the 4090 placement fits now; its one idle GPU is reserved (4-(c)).
    d = decide(snap)
    assert d.actions == (StartReservation("jobA", "node-p", "rtx4090", 1),)
    assert d.why["jobA"].code is WhyCode.RESERVING
    assert d.why["jobA"].fit_placements == 1

    # T+15 min: the other 4090 job ends; the reservation fills and the job dispatches.
    snap = advance(apply(snap, d), 900.0, freed={P: 1})
    d = decide(snap)
    assert d.accruals == (AccrueReservation("jobA", 1 * 300.0 * 82.6, 900.0),)
    assert d.actions == (
        AbsorbReservation("jobA", "node-p", "rtx4090", 1, 2),
        Dispatch("jobA", "node-p", "rtx4090", 2),
        ReleaseReservation("jobA", "node-p", "rtx4090", 2, FILLED),
    )
    assert apply(snap, d).lab_usage == {"BCG": 64_920.0}  # the reservation is not charged yet


# S11 --------------------------------------------------------------------------------------


def test_s11_cancelling_a_reserving_job_releases_its_gpus_and_charges_the_reservation() -> None:
    first = snapshot(
        (Placement("node-p", "rtx4090", capacity=2, busy=1),),
        (queued("jobA", "BCG", 2), queued("jobB", "KDG", 1)),
        {"BCG": 24_000.0, "KDG": 28_000.0},
    )
    d0 = decide(first)
    assert d0.actions == (StartReservation("jobA", "node-p", "rtx4090", 1),)

    snap, job_a_reserved = quiet_cycles(apply(first, d0), 5.0, 295.0, "jobA")
    res = job(snap, "jobA").reservation
    assert res == Reservation("node-p", "rtx4090", 1, since=0.0, last_accrued_at=295.0)

    # T+5 min: the user cancels. The shell accrues the last span, releases the
    # reservation (reason cancel) and charges the job's bill in the same step.
    job_a_reserved += reservation_accrual(res.gpus, res.last_accrued_at, 300.0, 82.6)
    assert job_a_reserved == pytest.approx(24_780.0)
    release = ReleaseReservation("jobA", res.node, res.tier, res.gpus, ReleaseReason.CANCEL)
    assert release.reason == "cancel"
    usage = charge(snap.lab_usage, "BCG", job_bill(run_costs=0.0, reservation_costs=job_a_reserved))
    assert usage == pytest.approx({"BCG": 48_780.0, "KDG": 28_000.0})

    # The next cycle: the GPU is idle again and serves the next job.
    snap = advance(snap, 300.0, remove=("jobA",), lab_usage=usage)
    d = decide(snap)
    assert d.order == ("jobB",)
    assert d.accruals == ()
    assert d.actions == (Dispatch("jobB", "node-p", "rtx4090", 1),)


# S12 --------------------------------------------------------------------------------------


def test_s12_a_node_down_releases_the_reservation_by_r5_and_the_job_reserves_elsewhere() -> None:
    usage = {"BCG": 24_000.0}
    first = snapshot(
        (
            Placement("node-p", "rtx4090", capacity=2, busy=1),
            Placement("node-r", "rtx4090", capacity=2, busy=1),
        ),
        (queued("jobA", "BCG", 2),),
        usage,
    )
    d0 = decide(first)
    assert d0.actions == (StartReservation("jobA", "node-p", "rtx4090", 1),)

    # T+5 min: node-p goes down. Cycles in between changed nothing but the accrual, so the
    # next cycle accrues the whole span at once.
    snap = advance(apply(first, d0), 300.0, down=("node-p",))
    d = decide(snap)

    assert d.accruals == (AccrueReservation("jobA", 1 * 300.0 * 82.6, 300.0),)
    # SPEC §3: R5 comes first, then the walk, where the top job reserves anew (4-(c)).
    assert d.actions == (
        ReleaseReservation("jobA", "node-p", "rtx4090", 1, R5),
        StartReservation("jobA", "node-r", "rtx4090", 1),
    )
    assert d.why["jobA"].code is WhyCode.RESERVING
    assert d.why["jobA"].schedulable_fit_placements == 1
    snap = apply(snap, d)
    assert snap.lab_usage == usage  # cost stays on the job (SPEC ambiguity 1)
    job_a_reserved = accrued(d, "jobA")

    # T+10 min: node-p is back, empty: 2 idle GPUs there beat waiting on node-r (swap).
    snap = advance(snap, 600.0, up=("node-p",), freed={P: 1})
    d = decide(snap)
    assert d.accruals == (AccrueReservation("jobA", 1 * 300.0 * 82.6, 600.0),)
    assert d.actions == (
        Dispatch("jobA", "node-p", "rtx4090", 2),
        ReleaseReservation("jobA", "node-r", "rtx4090", 1, SWAP),
    )
    job_a_reserved += accrued(d, "jobA")
    assert job_a_reserved == pytest.approx(49_560.0)


def test_s12_when_every_fit_placement_is_down_the_job_is_released_and_told_so() -> None:
    held = Reservation("node-p", "rtx4090", gpus=1, since=0.0, last_accrued_at=295.0)
    snap = snapshot(
        (
            Placement("node-p", "rtx4090", capacity=2, busy=1, schedulable=False),
            Placement("node-c", "rtx3080ti", capacity=2),  # idle, but below the job's minimum
        ),
        (queued("jobA", "BCG", 2, min_sort_order=20, reservation=held),),
        {"BCG": 24_000.0},
        now=300.0,
    )

    d = decide(snap)

    assert d.accruals == (AccrueReservation("jobA", ONE_4090_FOR_5_S, 300.0),)
    assert d.actions == (ReleaseReservation("jobA", "node-p", "rtx4090", 1, R5),)
    assert d.why == {
        "jobA": Why(
            job_id="jobA",
            code=WhyCode.NO_SCHEDULABLE_PLACEMENT,
            rank=0,
            queue_length=1,
            top_job_id="jobA",
            num_gpus=2,
            fit_placements=1,
            schedulable_fit_placements=0,
            best_idle=0,
        )
    }
    assert "All 1 placements" in d.why["jobA"].sentence
    assert "down or drained" in d.why["jobA"].sentence


# S13 --------------------------------------------------------------------------------------


def test_s13_a_job_no_placement_can_hold_is_rejected_at_submission_with_the_largest_fit() -> None:
    placements = (
        Placement("node-a", "rtx4090", capacity=2),
        Placement("node-b", "rtx4090", capacity=2, busy=2),  # busy does not matter for fit
        Placement("node-c", "rtx3080ti", capacity=2),
    )

    report = check_fit(4, default_min_sort_order(TIERS), TIERS, placements)

    assert report == FitReport(
        ok=False,
        num_gpus=4,
        min_tier="rtx3080ti",
        fit_count=0,
        largest_fit=2,
        alternatives=(Alternative(num_gpus=2, min_tier="rtx3080ti", placements=3),),
        message="no placement can hold num_gpus=4 at tier >= rtx3080ti; the largest fit is 2",
    )
    assert check_fit(2, 20, TIERS, placements).ok


# S14 --------------------------------------------------------------------------------------


def test_s14_gpus_running_llm_backfill_count_as_idle_so_the_job_dispatches_onto_them() -> None:
    # Both GPUs serve LLM backfill: no research job uses them, so busy = 0.
    snap = snapshot(
        (Placement("node-p", "rtx4090", capacity=2, busy=0),),
        (queued("jobA", "BCG", 2),),
        {"BCG": 24_000.0},
    )

    d = decide(snap)

    assert d.actions == (Dispatch("jobA", "node-p", "rtx4090", 2),)
    assert d.why == {}


def test_s14_a_gpu_running_llm_backfill_can_be_reserved_beside_a_research_job() -> None:
    # One GPU runs a research job, the other LLM backfill: the backfill one is reservable.
    snap = snapshot(
        (Placement("node-p", "rtx4090", capacity=2, busy=1),),
        (queued("jobA", "BCG", 2),),
        {"BCG": 24_000.0},
    )

    assert decide(snap).actions == (StartReservation("jobA", "node-p", "rtx4090", 1),)


# S15 --------------------------------------------------------------------------------------


def test_s15_a_burst_of_jobs_from_one_lab_rotates_with_another_lab_as_usage_is_charged() -> None:
    usage = {"BCG": 24_000.0, "KDG": 30_000.0}
    burst = tuple(queued(f"A{i}", "BCG", 2, entered=float(i)) for i in range(1, 6))
    kdg = (queued("K1", "KDG", 2, entered=1.5), queued("K2", "KDG", 2, entered=2.5))
    snap = snapshot((Placement("node-p", "rtx4090", capacity=2),), burst + kdg, usage)

    d = decide(snap)
    assert d.order == ("A1", "A2", "A3", "A4", "A5", "K1", "K2")
    assert d.actions == (Dispatch("A1", "node-p", "rtx4090", 2),)
    # Decision 7: A1 starts, so A2, the first job that cannot, is the top job already.
    assert d.why["A2"].code is WhyCode.WAITING_FOR_GPUS
    assert {d.why[j].code for j in d.why if j != "A2"} == {WhyCode.WAITING_FOR_PRIORITY}
    literal = decide(snap, top_job=TopJob.FIRST_QUEUED)
    assert literal.actions == d.actions
    assert {w.code for w in literal.why.values()} == {WhyCode.WAITING_FOR_PRIORITY}

    # T+5 s: A2 is the top job, but there is no idle GPU to reserve.
    snap = advance(apply(snap, d), 5.0)
    d = decide(snap)
    assert d.actions == ()
    assert d.why["A2"].code is WhyCode.WAITING_FOR_GPUS
    assert d.why["A2"].sentence == (
        "It is the top job; it needs 2 GPUs on one placement and the best of its "
        "1 fit placements has 0 idle."
    )
    assert d.why["K1"].code is WhyCode.WAITING_FOR_PRIORITY
    assert d.why["K1"].rank == 4

    # T+5 min: A1 ends; 2 x 300 s x 82.6 = 49,560 -> BCG 73,560 > KDG 30,000.
    a1 = run_cost(2, 0.0, 300.0, 82.6)
    assert a1 == 49_560.0
    usage = charge(usage, "BCG", job_bill(a1, 0.0))
    snap = advance(apply(snap, d), 300.0, freed={P: 2}, lab_usage=usage)
    d = decide(snap)
    assert d.order == ("K1", "K2", "A2", "A3", "A4", "A5")
    assert d.actions == (Dispatch("K1", "node-p", "rtx4090", 2),)

    # T+10 min: K1 ends -> KDG 79,560 > BCG 73,560: BCG's turn again.
    usage = charge(usage, "KDG", job_bill(run_cost(2, 300.0, 600.0, 82.6), 0.0))
    assert usage == {"BCG": 73_560.0, "KDG": 79_560.0}
    snap = advance(apply(snap, d), 600.0, freed={P: 2}, lab_usage=usage)
    d = decide(snap)
    assert d.order == ("A2", "A3", "A4", "A5", "K2")
    assert d.actions == (Dispatch("A2", "node-p", "rtx4090", 2),)

    # T+15 min: A2 ends -> BCG 123,120: KDG's K2 goes before A3..A5.
    usage = charge(usage, "BCG", job_bill(run_cost(2, 600.0, 900.0, 82.6), 0.0))
    snap = advance(apply(snap, d), 900.0, freed={P: 2}, lab_usage=usage)
    d = decide(snap)
    assert d.order == ("K2", "A3", "A4", "A5")
    assert d.actions == (Dispatch("K2", "node-p", "rtx4090", 2),)


# Placement order (SPEC §1, decision 6): pack (best fit, the default) and spread ----------
#
# Dispatch (a) takes, in the strongest fit tier, the placement with the FEWEST idle GPUs
# that still hold the job under pack, the MOST under spread; reserving (c) takes the most
# idle under both. The numbers in each comment are worked out from the placements by hand.

PACK = PlacementOrder.PACK
SPREAD = PlacementOrder.SPREAD


def test_pack_fills_a_partly_used_node_so_a_whole_node_stays_whole_for_the_8_gpu_job() -> None:
    # node-a: 8 x 4090, 5 busy -> 3 idle; node-b: 8 x 4090, all 8 idle.
    # jobA (1 GPU, BCG, least usage) is the top job; jobB (8 GPUs, KDG) is ranked 2.
    placements = (
        Placement("node-a", "rtx4090", capacity=8, busy=5),
        Placement("node-b", "rtx4090", capacity=8),
    )
    snap = snapshot(
        placements,
        (queued("jobA", "BCG", 1), queued("jobB", "KDG", 8)),
        {"BCG": 0.0, "KDG": 1_000.0},
    )

    # pack: jobA -> node-a (3 idle is the fewest that hold 1); node-b keeps 8 -> jobB starts.
    packed = decide(snap, PACK)
    assert packed.actions == (
        Dispatch("jobA", "node-a", "rtx4090", 1),
        Dispatch("jobB", "node-b", "rtx4090", 8),
    )
    assert dict(packed.why) == {}

    # spread: jobA -> node-b (8 idle is the most); then node-a has 3, node-b 7: no placement
    # holds 8. jobA started, so jobB is the first job that cannot: the top job (decision 7),
    # it reserves the 7 idle GPUs of node-b. Read literally (queue[0] = jobA) it may not
    # reserve (R2): it waits.
    spread = decide(snap, SPREAD)
    assert spread.actions == (
        Dispatch("jobA", "node-b", "rtx4090", 1),
        StartReservation("jobB", "node-b", "rtx4090", 7),
    )
    assert spread.why["jobB"].code is WhyCode.RESERVING
    literal = decide(snap, SPREAD, top_job=TopJob.FIRST_QUEUED)
    assert literal.actions == (Dispatch("jobA", "node-b", "rtx4090", 1),)
    assert literal.why["jobB"].code is WhyCode.WAITING_FOR_PRIORITY
    assert literal.why["jobB"].best_idle == 7  # node-b: 8 - 1


def test_both_orders_reserve_the_most_idle_placement_and_place_the_next_job_apart() -> None:
    # Three 4 x 4090 nodes: node-a 1 busy (3 idle), node-b 2 busy (2 idle), node-c 3 busy
    # (1 idle). jobA needs 4: nothing holds it, so as the top job it reserves (c) the most
    # idle placement, node-a's 3, whatever the dispatch order. jobB needs 1: pack takes
    # node-c (1 idle, the fewest that hold it), spread takes node-b (2 idle, the most now
    # that node-a's 3 are reserved).
    placements = (
        Placement("node-a", "rtx4090", capacity=4, busy=1),
        Placement("node-b", "rtx4090", capacity=4, busy=2),
        Placement("node-c", "rtx4090", capacity=4, busy=3),
    )
    snap = snapshot(
        placements,
        (queued("jobA", "BCG", 4), queued("jobB", "KDG", 1)),
        {"BCG": 0.0, "KDG": 1_000.0},
    )

    assert decide(snap, PACK).actions == (
        StartReservation("jobA", "node-a", "rtx4090", 3),
        Dispatch("jobB", "node-c", "rtx4090", 1),
    )
    assert decide(snap, SPREAD).actions == (
        StartReservation("jobA", "node-a", "rtx4090", 3),
        Dispatch("jobB", "node-b", "rtx4090", 1),
    )


def test_a_tighter_fit_on_a_weaker_tier_never_beats_a_stronger_tier() -> None:
    # node-x: 8 x 5090, all idle; node-y: 8 x 4090 with exactly 2 idle (a perfect fit).
    # The tier comes first in both orders: jobA (2 GPUs, any tier) goes to the 5090s.
    tiers = (RTX3080TI, RTX4090, RTX5090)
    placements = (
        Placement("node-x", "rtx5090", capacity=8),
        Placement("node-y", "rtx4090", capacity=8, busy=6),
    )
    snap = snapshot(placements, (queued("jobA", "BCG", 2),), {}, tiers=tiers)
    for order in (PACK, SPREAD):
        assert decide(snap, order).actions == (Dispatch("jobA", "node-x", "rtx5090", 2),)


def test_pack_breaks_ties_on_the_node_name_and_keeps_filling_the_tightest_node() -> None:
    # Four 1-GPU jobs on three 4 x 4090 nodes with 2, 3 and 2 idle (node-a, node-b, node-c).
    # pack: j1 -> node-a (2 idle; a and c tie, a < c), j2 -> node-a (1 left: now the
    # tightest), j3 -> node-c (2), j4 -> node-c (1).
    # spread: j1 -> node-b (3), j2 -> node-a (2; a, b, c all 2, a first), j3 -> node-b
    # (b and c have 2, b < c), j4 -> node-c (2).
    placements = (
        Placement("node-a", "rtx4090", capacity=4, busy=2),
        Placement("node-b", "rtx4090", capacity=4, busy=1),
        Placement("node-c", "rtx4090", capacity=4, busy=2),
    )
    jobs = tuple(queued(f"j{i}", "BCG", 1, entered=float(i)) for i in range(1, 5))
    snap = snapshot(placements, jobs, {})

    assert decide(snap, PACK).actions == (
        Dispatch("j1", "node-a", "rtx4090", 1),
        Dispatch("j2", "node-a", "rtx4090", 1),
        Dispatch("j3", "node-c", "rtx4090", 1),
        Dispatch("j4", "node-c", "rtx4090", 1),
    )
    assert decide(snap, SPREAD).actions == (
        Dispatch("j1", "node-b", "rtx4090", 1),
        Dispatch("j2", "node-a", "rtx4090", 1),
        Dispatch("j3", "node-b", "rtx4090", 1),
        Dispatch("j4", "node-c", "rtx4090", 1),
    )
    assert decide(snap).actions == decide(snap, PACK).actions  # pack is the default


# SPEC decision 7: the top job is the first job of the order that cannot start ------------
#
# jobH (KDG, 2 GPUs) holds 1 of the 2 GPUs of node-p (the other is busy). A job of BCG,
# the lighter lab, arrives and ranks above it. Worked by hand under both readings.

HELD_ON_P = Reservation("node-p", "rtx4090", gpus=1, since=0.0, last_accrued_at=5.0)
USAGE_7 = {"BCG": 0.0, "KDG": 1_000.0}


def test_decision_7_a_lighter_labs_job_that_starts_elsewhere_leaves_the_reservation() -> None:
    # node-q has 1 idle 4090: jobL (1 GPU) starts there; jobH is the first job that cannot
    # start, so it is the top job and keeps its reservation (nothing to absorb).
    snap = snapshot(
        (Placement("node-p", "rtx4090", 2, busy=1), Placement("node-q", "rtx4090", 1)),
        (queued("jobH", "KDG", 2, reservation=HELD_ON_P), queued("jobL", "BCG", 1, entered=4.0)),
        USAGE_7,
        now=5.0,
    )
    d = decide(snap)
    assert d.order == ("jobL", "jobH")
    assert d.actions == (Dispatch("jobL", "node-q", "rtx4090", 1),)
    assert d.why["jobH"].code is WhyCode.RESERVING
    assert d.why["jobH"].top_job_id == "jobH"
    # Read literally, jobL is queue[0]: R3 releases jobH's GPU first, and jobL (best fit,
    # a tie on 1 idle broken by the node name) starts on that very GPU.
    literal = decide(snap, top_job=TopJob.FIRST_QUEUED)
    assert literal.actions == (
        ReleaseReservation("jobH", "node-p", "rtx4090", 1, R3),
        Dispatch("jobL", "node-p", "rtx4090", 1),
    )


def test_decision_7_a_lighter_labs_job_that_waits_releases_the_reservation_and_reserves() -> None:
    # jobL needs 2 GPUs and no placement has 2 idle: it is the top job; R3 releases jobH's
    # GPU, which makes node-p 1 idle, and jobL reserves it (c). Both readings agree (S5).
    snap = snapshot(
        (Placement("node-p", "rtx4090", 2, busy=1),),
        (queued("jobH", "KDG", 2, reservation=HELD_ON_P), queued("jobL", "BCG", 2, entered=4.0)),
        USAGE_7,
        now=5.0,
    )
    want = (
        ReleaseReservation("jobH", "node-p", "rtx4090", 1, R3),
        StartReservation("jobL", "node-p", "rtx4090", 1),
    )
    assert decide(snap).actions == want
    assert decide(snap, top_job=TopJob.FIRST_QUEUED).actions == want
    assert decide(snap).why["jobH"].code is WhyCode.WAITING_FOR_PRIORITY


def test_decision_7_a_single_gpu_job_above_the_holder_that_waits_releases_it_and_starts() -> None:
    # jobL (1 GPU) finds no idle GPU beside the reservation: it cannot start, so it is the
    # top job; R3 releases jobH's GPU, idle again at once, and jobL starts on it. jobH is
    # then the first job that cannot start, the top job, with nothing idle to reserve.
    snap = snapshot(
        (Placement("node-p", "rtx4090", 2, busy=1),),
        (queued("jobH", "KDG", 2, reservation=HELD_ON_P), queued("jobL", "BCG", 1, entered=4.0)),
        USAGE_7,
        now=5.0,
    )
    d = decide(snap)
    assert d.actions == (
        ReleaseReservation("jobH", "node-p", "rtx4090", 1, R3),
        Dispatch("jobL", "node-p", "rtx4090", 1),
    )
    assert d.why["jobH"].code is WhyCode.WAITING_FOR_GPUS
    assert d.why["jobH"].top_job_id == "jobH"
    literal = decide(snap, top_job=TopJob.FIRST_QUEUED)
    assert literal.actions == d.actions
    assert literal.why["jobH"].code is WhyCode.WAITING_FOR_PRIORITY
