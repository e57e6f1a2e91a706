"""Hypothesis properties of one dispatch cycle on random snapshots (issue 2, "Tests").

Random tiers (some not auto-assign, some sharing a sort order), placements with busy GPUs
and down nodes, a queue over a few labs with tied usage and entry times, and either no
reservation, one reservation that is valid for its placement, or several stale ones.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jpushare.policy import (
    Placement,
    QueuedJob,
    Reservation,
    Snapshot,
    Tier,
    decide,
    queue_order,
)
from jpushare.policy.fit import fits
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
    gpus = draw(st.integers(1, min(p.free, job.num_gpus - 1)))
    since = draw(st.sampled_from([0.0, 50.0, NOW]))
    res = Reservation(p.node, p.tier, gpus, since, draw(st.sampled_from([since, NOW])))
    jobs[i] = replace(job, reservation=res)


@CYCLE_SETTINGS
@given(snapshots())
def test_every_cycle_keeps_the_invariants_of_spec_section_3(snap: Snapshot) -> None:
    # Per placement: busy + dispatched + reserved <= capacity; at most one reservation,
    # the top job's, num_gpus >= 2; each dispatch on one fit placement; nobody below the
    # top job takes its reserved GPUs; every waiting job has a why.
    check_cycle(snap, decide(snap))


@CYCLE_SETTINGS
@given(snapshots())
def test_decide_matches_the_spec_pseudocode_transcribed_literally(snap: Snapshot) -> None:
    d = decide(snap)
    order, actions, accruals = reference_decide(snap)
    assert d.order == order
    assert d.actions == actions
    assert d.accruals == accruals
    assert d.now == snap.now


@CYCLE_SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_the_same_snapshot_in_any_list_order_gives_the_same_decisions(
    snap: Snapshot, rnd: random.Random
) -> None:
    tiers_, placements, queue = list(snap.tiers), list(snap.placements), list(snap.queue)
    labs = list(snap.lab_usage.items())
    for seq in (tiers_, placements, queue, labs):
        rnd.shuffle(seq)
    shuffled = Snapshot(tuple(tiers_), tuple(placements), tuple(queue), dict(labs), snap.now)

    assert decide(shuffled) == decide(snap)
