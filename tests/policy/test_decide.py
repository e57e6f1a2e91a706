"""Edge cases of the dispatch cycle (SPEC §3) that the seed scenarios do not reach."""

from __future__ import annotations

from jpushare.policy import (
    AbsorbReservation,
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
    WhyCode,
    decide,
)
from jpushare.policy.order import PlacementOrder
from tests.constants import RTX3080TI, TIERS

R5 = ReleaseReason.R5


def held(gpus: int, node: str = "node-p", tier: str = "rtx4090") -> Reservation:
    return Reservation(node, tier, gpus, since=0.0, last_accrued_at=5.0)


def one_cycle(
    placements: tuple[Placement, ...],
    *queue: QueuedJob,
    tiers: tuple[Tier, ...] = TIERS,
    usage: dict[str, float] | None = None,
) -> Decisions:
    return decide(Snapshot(tiers, placements, queue, usage or {}, now=5.0))


def test_an_empty_queue_decides_nothing() -> None:
    d = one_cycle((Placement("node-p", "rtx4090", 2),))
    assert d == Decisions(now=5.0, order=(), actions=(), accruals=(), why={})


def test_a_reservation_that_is_already_full_dispatches_on_its_placement() -> None:
    # E.g. restored by an undo after a failed sbatch: (b) dispatches once reserved == num_gpus,
    # whether or not it absorbed anything this cycle. Elsewhere nothing has 2 idle GPUs.
    d = one_cycle(
        (Placement("node-p", "rtx4090", 2), Placement("node-q", "rtx4090", 2, busy=1)),
        QueuedJob("jobA", "BCG", 2, 20, 0.0, held(2)),
        QueuedJob("jobB", "KDG", 1, 20, 0.0),
    )

    assert d.actions == (
        Dispatch("jobA", "node-p", "rtx4090", 2),
        ReleaseReservation("jobA", "node-p", "rtx4090", 2, ReleaseReason.FILLED),
        Dispatch("jobB", "node-q", "rtx4090", 1),
    )
    assert d.why == {}


def test_a_reserving_job_that_takes_idle_gpus_beside_its_reservation_is_a_swap() -> None:
    # This used to be released as "filled gpus=1" although nothing was absorbed and the
    # job took 3 GPUs; SPEC §3: only a reservation that reached num_gpus through (b) fills.
    d = one_cycle(
        (Placement("node-p", "rtx4090", 4),),
        QueuedJob("jobA", "BCG", 3, 20, 0.0, held(1)),
        QueuedJob("jobB", "KDG", 1, 20, 0.0),
    )

    # 4 free - 1 reserved = 3 idle >= 3: (a) takes 3, the reserved GPU is released to jobB.
    assert d.actions == (
        Dispatch("jobA", "node-p", "rtx4090", 3),
        ReleaseReservation("jobA", "node-p", "rtx4090", 1, ReleaseReason.SWAP),
        Dispatch("jobB", "node-p", "rtx4090", 1),
    )


def test_r5_releases_a_reservation_whose_gpus_a_job_outside_jpushare_took() -> None:
    d = one_cycle(
        (Placement("node-p", "rtx4090", 2, busy=2),),
        QueuedJob("jobA", "BCG", 2, 20, 0.0, held(1)),
    )
    assert d.actions == (ReleaseReservation("jobA", "node-p", "rtx4090", 1, R5),)
    assert d.why["jobA"].code is WhyCode.WAITING_FOR_GPUS


def test_r5_releases_a_reservation_on_a_placement_gone_from_the_inventory() -> None:
    d = one_cycle(
        (Placement("node-q", "rtx4090", 2, busy=1),),
        QueuedJob("jobA", "BCG", 2, 20, 0.0, held(1)),
    )
    assert d.actions == (
        ReleaseReservation("jobA", "node-p", "rtx4090", 1, R5),
        StartReservation("jobA", "node-q", "rtx4090", 1),
    )


def test_r5_releases_a_reservation_on_a_placement_that_shrank_below_the_job() -> None:
    d = one_cycle(
        (Placement("node-p", "rtx4090", 2),),  # was 4; two GPUs left the inventory
        QueuedJob("jobA", "BCG", 4, 20, 0.0, held(1)),
    )
    assert d.actions == (ReleaseReservation("jobA", "node-p", "rtx4090", 1, R5),)
    assert d.why["jobA"].code is WhyCode.NO_FIT_PLACEMENT


def test_r5_releases_a_reservation_on_a_tier_that_is_no_longer_auto_assign() -> None:
    manual_4090 = Tier("rtx4090", 82.6, 20, auto_assign=False)
    d = one_cycle(
        (Placement("node-p", "rtx4090", 2, busy=1),),
        QueuedJob("jobA", "BCG", 2, 20, 0.0, held(1)),
        tiers=(RTX3080TI, manual_4090),
    )
    assert d.actions == (ReleaseReservation("jobA", "node-p", "rtx4090", 1, R5),)


def test_r5_releases_a_reservation_on_a_tier_removed_from_the_table() -> None:
    d = one_cycle(
        (Placement("node-p", "rtx4090", 2, busy=1),),
        QueuedJob("jobA", "BCG", 2, 10, 0.0, held(1)),
        tiers=(RTX3080TI,),
    )
    assert d.actions == (ReleaseReservation("jobA", "node-p", "rtx4090", 1, R5),)


def test_stale_reservations_of_lower_jobs_go_by_r3_and_broken_ones_by_r5() -> None:
    d = one_cycle(
        (
            Placement("node-p", "rtx4090", 4, busy=1),
            Placement("node-q", "rtx4090", 4, busy=2, schedulable=False),
        ),
        QueuedJob("jobA", "BCG", 4, 20, 0.0, held(1)),
        QueuedJob("jobB", "KDG", 4, 20, 0.0, held(1)),
        QueuedJob("jobC", "LDB", 4, 20, 0.0, held(2, node="node-q")),
        usage={"BCG": 0.0, "KDG": 1.0, "LDB": 2.0},
    )

    assert d.order == ("jobA", "jobB", "jobC")
    # R5 before the walk; R3 where the walk finds the top job (jobA cannot start: decision 7).
    assert d.actions[:2] == (
        ReleaseReservation("jobC", "node-q", "rtx4090", 2, R5),
        ReleaseReservation("jobB", "node-p", "rtx4090", 1, ReleaseReason.R3),
    )
    # jobB's released GPU is idle again: 3 free - 1 kept by jobA = 2 idle, both absorbed.
    assert d.actions[2:] == (AbsorbReservation("jobA", "node-p", "rtx4090", 2, 3),)
    assert d.why["jobB"].code is WhyCode.WAITING_FOR_PRIORITY
    assert d.why["jobC"].code is WhyCode.WAITING_FOR_PRIORITY


def test_a_single_gpu_top_job_waits_without_reserving() -> None:
    d = one_cycle(
        (Placement("node-p", "rtx4090", 2, busy=2),),
        QueuedJob("jobA", "BCG", 1, 20, 0.0),
    )
    assert d.actions == ()
    assert d.why["jobA"].code is WhyCode.WAITING_FOR_GPUS
    assert d.why["jobA"].sentence.startswith("It is the top job; it needs 1 GPU")


# Idle GPUs: node-a 2, node-b 3, node-c 3 (4090s); node-d 8 (3080 Ti); node-e 1 (5090).
ORDER_PLACEMENTS = (
    Placement("node-a", "rtx4090", 4, busy=2),
    Placement("node-b", "rtx4090", 4, busy=1),
    Placement("node-c", "rtx4090", 4, busy=1),
    Placement("node-d", "rtx3080ti", 8),
    Placement("node-e", "rtx5090", 2, busy=1),
)


def test_dispatch_prefers_the_stronger_tier_then_the_fewest_idle_gpus_that_hold_the_job() -> None:
    jobs = [QueuedJob(f"j{i}", "BCG", 2, 10, float(i)) for i in range(5)]

    d = one_cycle(ORDER_PLACEMENTS, *jobs)

    assert d.actions == (
        Dispatch("j0", "node-a", "rtx4090", 2),  # 5090 has 1 idle; a has 2, b and c 3
        Dispatch("j1", "node-b", "rtx4090", 2),  # a has 0; b and c tie on 3 -> b
        Dispatch("j2", "node-c", "rtx4090", 2),  # b has 1, c 3
        Dispatch("j3", "node-d", "rtx3080ti", 2),  # no 4090 has 2 idle any more
        Dispatch("j4", "node-d", "rtx3080ti", 2),
    )


def test_spread_dispatch_prefers_the_stronger_tier_then_more_idle_gpus_then_the_node_name() -> None:
    jobs = [QueuedJob(f"j{i}", "BCG", 2, 10, float(i)) for i in range(5)]

    d = decide(Snapshot(TIERS, ORDER_PLACEMENTS, tuple(jobs), {}, 5.0), PlacementOrder.SPREAD)

    assert d.actions == (
        Dispatch("j0", "node-b", "rtx4090", 2),  # 5090 has 1 idle; b and c tie on 3 -> b
        Dispatch("j1", "node-c", "rtx4090", 2),  # c has 3, a and b have 2 and 1
        Dispatch("j2", "node-a", "rtx4090", 2),
        Dispatch("j3", "node-d", "rtx3080ti", 2),  # no 4090 has 2 idle any more
        Dispatch("j4", "node-d", "rtx3080ti", 2),
    )


def test_the_top_job_reserves_on_the_strongest_fit_tier_even_with_fewer_idle_gpus() -> None:
    d = one_cycle(
        (Placement("node-a", "rtx4090", 4, busy=1), Placement("node-b", "rtx5090", 4, busy=3)),
        QueuedJob("jobA", "BCG", 4, 10, 0.0),
    )
    assert d.actions == (StartReservation("jobA", "node-b", "rtx5090", 1),)


def test_a_lower_job_that_cannot_use_the_reserved_placement_is_not_behind_the_reservation() -> None:
    d = one_cycle(
        (Placement("node-p", "rtx4090", 2, busy=1), Placement("node-x", "rtx5090", 1, busy=1)),
        QueuedJob("jobA", "BCG", 2, 20, 0.0, held(1)),
        QueuedJob("jobB", "KDG", 1, 30, 0.0),  # needs a 5090
        QueuedJob("jobC", "KDG", 1, 20, 1.0),  # could use P's reserved GPU
        usage={"BCG": 0.0, "KDG": 1.0},
    )
    assert d.actions == ()
    assert d.why["jobB"].code is WhyCode.WAITING_FOR_GPUS
    assert d.why["jobC"].code is WhyCode.BEHIND_RESERVATION
