"""Chaining dispatch cycles in tests: the next snapshot from the previous decisions.

A stand-in for the shell, small enough to be obviously right: `apply` records one cycle's
decisions (dispatched jobs leave the queue and their GPUs become busy; reservations start,
grow, are released and are accrued up to the cycle's `now`), and `advance` moves the
clock and applies what happened outside the policy (jobs ending, nodes going down, usage
changes, submissions). Lab usage never moves here: it is charged at job end, by the test (`charge`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from jpushare.policy.model import (
    AbsorbReservation,
    Decisions,
    Dispatch,
    Placement,
    QueuedJob,
    ReleaseReservation,
    Reservation,
    Snapshot,
    StartReservation,
)

Key = tuple[str, str]  # (node, tier)


def apply(snapshot: Snapshot, decisions: Decisions) -> Snapshot:
    """The snapshot right after the shell recorded `decisions` (same `now`)."""
    now = decisions.now
    reservations: dict[str, Reservation | None] = {j.job_id: j.reservation for j in snapshot.queue}
    for acc in decisions.accruals:
        res = reservations[acc.job_id]
        assert res is not None, f"accrual for {acc.job_id}, which holds no reservation"
        reservations[acc.job_id] = replace(res, last_accrued_at=acc.accrued_to)
    busy: dict[Key, int] = {p.key: p.busy for p in snapshot.placements}
    dispatched: set[str] = set()
    for action in decisions.actions:
        if isinstance(action, Dispatch):
            busy[(action.node, action.tier)] += action.num_gpus
            dispatched.add(action.job_id)
        elif isinstance(action, StartReservation):
            reservations[action.job_id] = Reservation(
                action.node, action.tier, action.gpus, since=now, last_accrued_at=now
            )
        elif isinstance(action, AbsorbReservation):
            res = reservations[action.job_id]
            assert res is not None
            # SPEC §4: absorbed GPUs count from the cycle that absorbed them.
            reservations[action.job_id] = replace(res, gpus=action.total, last_accrued_at=now)
        elif isinstance(action, ReleaseReservation):
            reservations[action.job_id] = None
    queue = tuple(
        replace(j, reservation=reservations[j.job_id])
        for j in snapshot.queue
        if j.job_id not in dispatched
    )
    placements = tuple(replace(p, busy=busy[p.key]) for p in snapshot.placements)
    return replace(snapshot, placements=placements, queue=queue)


def advance(
    snapshot: Snapshot,
    now: float,
    *,
    freed: Mapping[Key, int] | None = None,
    down: Iterable[str] = (),
    up: Iterable[str] = (),
    lab_usage: Mapping[str, float] | None = None,
    submit: Iterable[QueuedJob] = (),
    remove: Iterable[str] = (),
) -> Snapshot:
    """The snapshot at `now`, after events outside the policy.

    freed: GPUs of a placement whose research jobs ended; down/up: node names;
    lab_usage: the new usage map (after the test charged ended jobs); submit: new queued
    jobs; remove: queued job ids that left the queue (cancelled, failed).
    """
    assert now >= snapshot.now
    freed = freed or {}
    down_set, up_set = set(down), set(up)
    placements: list[Placement] = []
    for p in snapshot.placements:
        busy = p.busy - freed.get(p.key, 0)
        assert busy >= 0, f"{p.key} frees more GPUs than are busy"
        schedulable = p.schedulable
        if p.node in down_set:
            schedulable = False
        if p.node in up_set:
            schedulable = True
        placements.append(replace(p, busy=busy, schedulable=schedulable))
    gone = set(remove)
    queue = tuple(j for j in snapshot.queue if j.job_id not in gone) + tuple(submit)
    usage = dict(lab_usage) if lab_usage is not None else dict(snapshot.lab_usage)
    return replace(snapshot, now=now, placements=tuple(placements), queue=queue, lab_usage=usage)


def charge(lab_usage: Mapping[str, float], lab: str, tflop_s: float) -> dict[str, float]:
    """A new usage map with `tflop_s` added to `lab` (what the shell does at a job's end)."""
    out = dict(lab_usage)
    out[lab] = out.get(lab, 0.0) + tflop_s
    return out


def job(snapshot: Snapshot, job_id: str) -> QueuedJob:
    """The queued job `job_id` of `snapshot`."""
    return next(j for j in snapshot.queue if j.job_id == job_id)
