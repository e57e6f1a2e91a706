"""The lending option (SPEC "Options beyond the note", `reserved_gpus: lend-by-limit`),
hand-worked: one 4-GPU placement, the top job needs 3 GPUs and holds the 1 idle one; a
2-GPU running job ends by its limit at 600 s, a 1-GPU one at 1200 s, so the reservation's
projected fill is 600 s. Costs do not enter here: lending only adds lent dispatches."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jpushare.policy import (
    AbsorbReservation,
    Dispatch,
    Placement,
    QueuedJob,
    ReleaseReason,
    ReleaseReservation,
    Reservation,
    RunningJob,
    Snapshot,
    StartReservation,
    decide,
)
from jpushare.policy.options import ReservedGpus, TopJob
from jpushare.policy.why import running_on_lent_gpus
from tests.constants import RTX3080TI, RTX4090
from tests.policy.invariants import check_cycle
from tests.policy.test_properties import CYCLE_SETTINGS, NOW, snapshots

LEND = ReservedGpus.LEND_BY_LIMIT
TIERS = (RTX3080TI, RTX4090)
USAGE = {"BCG": 1_000.0, "KDG": 2_000.0}


def running(limit_2gpu: float | None = 600.0) -> tuple[RunningJob, ...]:
    return (
        RunningJob("run2", "node-p", "rtx4090", 2, started_at=0.0, time_limit_s=limit_2gpu),
        RunningJob("run1", "node-p", "rtx4090", 1, started_at=0.0, time_limit_s=1200.0),
    )


def first_cycle(limit_b: float | None, limit_2gpu: float | None = 600.0) -> Snapshot:
    return Snapshot(
        TIERS,
        (Placement("node-p", "rtx4090", capacity=4, busy=3),),
        (
            QueuedJob("jobA", "BCG", 3, 10, 0.0),
            QueuedJob("jobB", "KDG", 1, 10, 1.0, time_limit_s=limit_b),
        ),
        USAGE,
        0.0,
        running(limit_2gpu),
    )


RESERVE_A = StartReservation("jobA", "node-p", "rtx4090", 1)


def test_a_job_whose_limit_ends_before_the_projected_fill_runs_on_the_reserved_gpu() -> None:
    d = decide(first_cycle(300.0), reserved_gpus=LEND)

    assert d.actions == (
        RESERVE_A,
        Dispatch("jobB", "node-p", "rtx4090", 1, lent_from="jobA", lent_until=300.0),
    )
    # R4 (the default) keeps the reserved GPU closed to it.
    assert decide(first_cycle(300.0)).actions == (RESERVE_A,)


def test_no_lending_while_a_running_job_the_fill_needs_has_no_time_limit() -> None:
    d = decide(first_cycle(300.0, limit_2gpu=None), reserved_gpus=LEND)

    assert d.actions == (RESERVE_A,)


def test_no_lending_to_a_job_whose_limit_ends_after_the_projected_fill() -> None:
    assert decide(first_cycle(601.0), reserved_gpus=LEND).actions == (RESERVE_A,)
    assert decide(first_cycle(None), reserved_gpus=LEND).actions == (RESERVE_A,)
    # Ending exactly at the fill is in time.
    assert decide(first_cycle(600.0), reserved_gpus=LEND).actions[1:] == (
        Dispatch("jobB", "node-p", "rtx4090", 1, lent_from="jobA", lent_until=600.0),
    )


def test_the_top_job_keeps_its_lent_reservation_and_starts_at_its_projected_fill() -> None:
    held = Reservation("node-p", "rtx4090", gpus=1, since=0.0, last_accrued_at=0.0)
    top = QueuedJob("jobA", "BCG", 3, 10, 0.0, reservation=held)
    # t=5: the node is full (jobB runs on the lent GPU); the reservation is not lost (R5).
    mid = Snapshot(
        TIERS,
        (Placement("node-p", "rtx4090", capacity=4, busy=4),),
        (top,),
        USAGE,
        5.0,
        (
            *running(),
            RunningJob("jobB", "node-p", "rtx4090", 1, 0.0, 300.0, lent_from="jobA"),
        ),
    )
    d = decide(mid, reserved_gpus=LEND)
    assert d.actions == ()
    assert [a.job_id for a in d.accruals] == ["jobA"]

    # t=600: jobB ended by its limit (300 s), run2 by its own: jobA fills and starts.
    fill = Snapshot(
        TIERS,
        (Placement("node-p", "rtx4090", capacity=4, busy=1),),
        (QueuedJob("jobA", "BCG", 3, 10, 0.0, reservation=held),),
        USAGE,
        600.0,
        running()[1:],
    )
    d = decide(fill, reserved_gpus=LEND)
    assert d.actions == (
        AbsorbReservation("jobA", "node-p", "rtx4090", 2, 3),
        Dispatch("jobA", "node-p", "rtx4090", 3),
        ReleaseReservation("jobA", "node-p", "rtx4090", 3, ReleaseReason.FILLED),
    )


def test_a_reservation_with_gpus_still_lent_does_not_fill_on_them() -> None:
    """run2 ended early (t=100) but jobB still holds the lent GPU: jobA absorbs the two
    freed GPUs and waits for its own (the watch-list's 'waited for lent GPUs')."""
    held = Reservation("node-p", "rtx4090", gpus=1, since=0.0, last_accrued_at=95.0)
    snap = Snapshot(
        TIERS,
        (Placement("node-p", "rtx4090", capacity=4, busy=2),),
        (QueuedJob("jobA", "BCG", 3, 10, 0.0, reservation=held),),
        USAGE,
        100.0,
        (
            running()[1],
            RunningJob("jobB", "node-p", "rtx4090", 1, 0.0, 300.0, lent_from="jobA"),
        ),
    )
    d = decide(snap, reserved_gpus=LEND)
    assert d.actions == (AbsorbReservation("jobA", "node-p", "rtx4090", 2, 3),)


@st.composite
def lending_snapshots(draw: st.DrawFn) -> Snapshot:
    """The property tests' snapshots, with a running job (limit or none) on each
    placement's busy GPUs and time limits (or none) on the queued jobs."""
    snap = draw(snapshots())
    limits = st.one_of(st.none(), st.sampled_from([10.0, 60.0, 300.0, 900.0, 3600.0]))
    run = tuple(
        RunningJob(
            f"run-{p.node}-{p.tier}",
            p.node,
            p.tier,
            p.busy,
            draw(st.sampled_from([0.0, 50.0, NOW])),
            draw(limits),
        )
        for p in snap.placements
        if p.busy > 0
    )
    queue = tuple(replace(j, time_limit_s=draw(limits)) for j in snap.queue)
    return replace(snap, queue=queue, running=run)


@pytest.mark.parametrize("reserved_gpus", list(ReservedGpus))
@pytest.mark.parametrize("top_job", list(TopJob))
@CYCLE_SETTINGS
@given(lending_snapshots())
def test_every_cycle_keeps_the_invariants_under_both_reserved_gpu_modes(
    reserved_gpus: ReservedGpus, top_job: TopJob, snap: Snapshot
) -> None:
    d = decide(snap, top_job=top_job, reserved_gpus=reserved_gpus)
    check_cycle(snap, d, top_job.value, reserved_gpus.value)
    llm_only = decide(snap, top_job=top_job)
    if reserved_gpus is ReservedGpus.LLM_ONLY:
        assert d == llm_only
    else:  # lending only adds lent dispatches; everything else is R4's cycle
        assert tuple(a for a in d.actions if getattr(a, "lent_from", None) is None) == (
            llm_only.actions
        )


def test_why_says_a_lent_job_runs_on_reserved_gpus_until_its_time_limit() -> None:
    d = decide(first_cycle(300.0), reserved_gpus=LEND)
    lent = d.actions[1]
    assert isinstance(lent, Dispatch) and lent.lent_from and lent.lent_until is not None
    assert running_on_lent_gpus(lent.lent_from, lent.lent_until) == (
        "runs on GPUs reserved for job jobA until t=300, its time limit, before those GPUs "
        "are needed"
    )
    assert running_on_lent_gpus("12", 50_700.0, lambda t: "14:05").startswith(
        "runs on GPUs reserved for job 12 until 14:05, its time limit"
    )
