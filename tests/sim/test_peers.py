"""The peer policies' defining behaviour, on hand-built snapshots and tiny traces."""

from __future__ import annotations

import random

import pytest

from jpushare.policy.decide import decide
from jpushare.policy.model import Dispatch, Placement, QueuedJob, RunningJob, Snapshot, Tier
from jpushare.policy.order import PlacementOrder
from jpushare.policy.peers import POLICIES, backfill, fifo, hol_skip
from jpushare.sim.engine import SimResult, TraceJobResult, simulate
from tests.sim.builders import cluster, job

T = Tier("g", 10.0, 10)


def snap(
    queue: list[QueuedJob],
    placements: list[Placement],
    running: list[RunningJob] = (),  # type: ignore[assignment]
    now: float = 10.0,
    usage: dict[str, float] | None = None,
) -> Snapshot:
    return Snapshot((T,), tuple(placements), tuple(queue), usage or {}, now, tuple(running))


def q(
    job_id: str, gpus: int, entered: float, limit: float | None = None, lab: str = "L"
) -> QueuedJob:
    return QueuedJob(job_id, lab, gpus, 10, entered, None, limit)


# One 4-GPU node: a 2-GPU job runs until t=100 (by its limit); the top job needs all 4.
BLOCKED = dict(
    placements=[Placement("n1", "g", 4, busy=2)],
    running=[RunningJob("r", "n1", "g", 2, 0.0, 100.0)],
    queue=[q("top", 4, 1.0, 50), q("short", 1, 2.0, 60), q("long", 1, 3.0, 500)],
)


def test_fifo_stops_at_the_first_job_that_cannot_start() -> None:
    d = fifo(snap(**BLOCKED))  # type: ignore[arg-type]
    assert d.actions == ()
    assert d.order == ("top", "short", "long")


def test_hol_skip_skips_the_blocked_job_and_starts_what_fits() -> None:
    d = hol_skip(snap(**BLOCKED))  # type: ignore[arg-type]
    assert d.actions == (Dispatch("short", "n1", "g", 1), Dispatch("long", "n1", "g", 1))


def test_backfill_starts_a_job_that_ends_before_the_top_jobs_planned_start_only() -> None:
    # top is planned at t=100; short ends at 10+60=70 <= 100; long would run past it.
    d = backfill(snap(**BLOCKED))  # type: ignore[arg-type]
    assert d.actions == (Dispatch("short", "n1", "g", 1),)


def test_backfill_lets_a_long_job_use_only_the_spare_gpus_of_the_planned_placement() -> None:
    # 8 GPUs, 5 busy until t=100: top (6 GPUs) is planned at 100, with 8-6 = 2 spare GPUs.
    s = snap(
        queue=[q("top", 6, 1.0), q("long3", 3, 2.0, 1000), q("long2", 2, 3.0, 1000)],
        placements=[Placement("n1", "g", 8, busy=5)],
        running=[RunningJob("r", "n1", "g", 5, 0.0, 100.0)],
    )
    assert backfill(s).actions == (Dispatch("long2", "n1", "g", 2),)


def test_backfill_starts_long_jobs_on_placements_the_top_job_is_not_planned_on() -> None:
    s = snap(
        queue=[q("top", 4, 1.0), q("long", 2, 2.0, 1000)],
        placements=[Placement("n1", "g", 4, busy=2), Placement("n2", "g", 2)],
        running=[RunningJob("r", "n1", "g", 2, 0.0, 100.0)],
    )
    assert backfill(s).actions == (Dispatch("long", "n2", "g", 2),)


def test_backfill_with_an_overdue_plan_only_lets_spare_gpus_be_used() -> None:
    # r should have ended at 100 by its limit; at now=500 the plan (t=100) is in the past.
    s = snap(**{**BLOCKED, "now": 500.0})  # type: ignore[arg-type]
    assert backfill(s).actions == ()


@pytest.mark.parametrize("policy", [hol_skip, fifo, backfill])
def test_peers_use_the_same_order_as_decide_and_never_reserve(policy: object) -> None:
    rng = random.Random(7)
    for _ in range(50):
        queue = [
            q(f"j{i}", rng.choice([1, 2, 4]), float(rng.randrange(5)), lab=rng.choice("ABC"))
            for i in range(rng.randrange(0, 30))
        ]
        usage = {lab: float(rng.randrange(3)) for lab in "AB"}
        placements = [Placement(f"n{k}", "g", 4, busy=rng.randrange(5)) for k in range(3)]
        s = snap(queue, placements, usage=usage)
        d = policy(s)  # type: ignore[operator]
        assert d.order == decide(s).order
        assert all(isinstance(a, Dispatch) for a in d.actions)
        assert sum(1 for _ in d.actions) == len({a.job_id for a in d.actions})


@pytest.mark.parametrize("policy", [hol_skip, fifo, backfill])
def test_peers_dispatch_in_the_placement_order_they_are_given(policy: object) -> None:
    # n1: 8 GPUs, 5 busy (3 idle); n2: 8 idle. "one" (1 GPU) ranks before "eight" (8 GPUs).
    # pack puts "one" on n1 (the fewest idle that hold it) and n2 stays whole for "eight";
    # spread puts "one" on n2 (the most idle), and then no node has 8 idle.
    s = snap(
        [q("one", 1, 1.0), q("eight", 8, 2.0)],
        [Placement("n1", "g", 8, busy=5), Placement("n2", "g", 8)],
    )
    assert policy(s, PlacementOrder.PACK).actions == (  # type: ignore[operator]
        Dispatch("one", "n1", "g", 1),
        Dispatch("eight", "n2", "g", 8),
    )
    assert policy(s, PlacementOrder.SPREAD).actions == (  # type: ignore[operator]
        Dispatch("one", "n2", "g", 1),
    )


@pytest.mark.parametrize("order", list(PlacementOrder))
def test_hol_skip_places_single_gpu_jobs_exactly_where_decide_does(order: PlacementOrder) -> None:
    # With 1-GPU jobs only nobody reserves, so decide's walk is hol-skip's: same placements.
    rng = random.Random(11)
    for _ in range(50):
        queue = [q(f"j{i}", 1, float(rng.randrange(5))) for i in range(rng.randrange(0, 20))]
        placements = [
            Placement(f"n{k}", "g", 8, busy=rng.randrange(9), schedulable=rng.random() < 0.9)
            for k in range(4)
        ]
        s = snap(queue, placements)
        assert hol_skip(s, order).actions == decide(s, order).actions


def start_of(result: SimResult, job_id: str) -> float:
    rec: TraceJobResult = next(j for j in result.jobs if j.job_id == job_id)
    assert rec.first_start is not None
    return rec.first_start


def test_in_a_replay_backfill_does_not_delay_the_big_job_but_hol_skip_does() -> None:
    c = cluster(("n1", {"mid": 4}))
    jobs = [
        job("a", 0, 100, 2),  # holds 2 of 4 GPUs until t=100
        job("big", 5, 50, 4),  # the top waiting job: planned at t=100
        job("short", 10, 40),  # ends by t=50+: may backfill
        *(job(f"long{i}", 10 + i, 300) for i in range(3)),  # would delay big
    ]
    bf = simulate(c, jobs, "backfill")
    hs = simulate(c, jobs, "hol-skip")
    ff = simulate(c, jobs, "fifo")
    assert start_of(bf, "big") == 100.0
    assert start_of(bf, "short") == 10.0  # backfilled
    assert start_of(bf, "long0") >= 150.0  # after big
    assert start_of(hs, "big") > 100.0  # the long jobs took the free GPUs
    assert start_of(hs, "long0") == 10.0
    assert start_of(ff, "short") >= 100.0  # fifo never passes the blocked big job
    assert POLICIES["backfill"] is backfill
