"""The store applies the ledger, nothing else: random histories of jobs (reservations,
accruals, dispatches, starts, ends, node-failure requeues, cancels) driven through the
store on both backends and through `jpushare.ledger` in memory give the same accounts,
the same lab usage and the same end and charge events, to the last bit."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.orm import Session

from jpushare import ledger, store
from jpushare.ledger import Account, EventKind, LedgerEvent, Run
from jpushare.policy.model import (
    AccrueReservation,
    Decisions,
    Dispatch,
    ReleaseReason,
    ReleaseReservation,
    StartReservation,
)
from jpushare.store.times import from_epoch, to_epoch
from jpushare.vocabulary import JobState
from jpushare.vocabulary import job_id as policy_id
from tests.constants import TFLOPS
from tests.store.conftest import World, at

NODE, TIER = "node-c", "rtx5090"
Q = JobState.GLOBAL_QUEUE_WAIT
OPS = ("reserve", "accrue", "release", "dispatch", "start", "complete", "fail", "node", "cancel")
# The events the ledger writes; the others (submitted, reservation_started, ...) are the
# cycle's and the API's.
LEDGER_KINDS = {
    EventKind.COMPLETED,
    EventKind.FAILED,
    EventKind.CANCELLED,
    EventKind.OOM_REQUEUED,
    EventKind.NODE_FAIL_REQUEUED,
    EventKind.CHARGED,
}


@dataclass
class ModelJob:
    """One job as the ledger alone tracks it."""

    id: int
    lab: str
    num_gpus: int
    state: JobState = Q
    account: Account = field(default_factory=Account)
    attempt: int = 0
    started_at: float | None = None
    reserved: int = 0
    last_accrued_at: float | None = None
    events: list[LedgerEvent] = field(default_factory=list)


class Model:
    def __init__(self, usage: dict[str, float]) -> None:
        self.usage = usage

    def charge(self, job: ModelJob, due: float, events: tuple[LedgerEvent, ...]) -> None:
        if due != 0:
            self.usage[job.lab] += due
        job.events.extend(events)

    def accrue(self, job: ModelJob, now: float) -> None:
        accrual = ledger.accrue_reservation(
            job.account, job.reserved, job.last_accrued_at, now, TFLOPS[TIER]
        )
        job.account = accrual.account
        if accrual.accrued_to is not None:
            job.last_accrued_at = accrual.accrued_to

    def end(self, job: ModelJob, kind: EventKind, now: float) -> None:
        run = Run(job.attempt, job.num_gpus, job.started_at, TFLOPS[TIER])
        end = ledger.end_attempt(job.state, kind, job.account, run, now)
        job.state, job.account, job.started_at = end.to_state, end.account, None
        self.charge(job, end.due, end.events)

    def cancel_queued(self, job: ModelJob, now: float) -> None:
        self.accrue(job, now)
        job.reserved, job.last_accrued_at = 0, None
        job.state = ledger.next_state(job.state, EventKind.CANCELLED)
        job.events.append(LedgerEvent(EventKind.CANCELLED, Q, job.state))
        charge = ledger.settle(job.account)
        job.account = charge.account
        self.charge(job, charge.due, charge.events)


def _decide(s: Session, now: float, *actions: Any, accrue: int | None = None) -> None:
    accruals = () if accrue is None else (AccrueReservation(policy_id(accrue), 0.0, now),)
    recorded = store.record_decisions(
        s, Decisions(now, (), tuple(actions), accruals), from_epoch(now)
    )
    assert not recorded.skipped, recorded.skipped


def _step(s: Session, model: Model, job: ModelJob, op: str, t: float) -> None:
    """Apply `op` to the job in the store and in the model, if it can happen now."""
    when, now = at(t), to_epoch(at(t))
    queued, active = job.state is Q, job.state.active
    if op == "reserve" and queued and not job.reserved:
        _decide(s, now, StartReservation(policy_id(job.id), NODE, TIER, job.num_gpus))
        job.reserved, job.last_accrued_at = job.num_gpus, now
    elif op == "accrue" and queued and job.reserved:
        _decide(s, now, accrue=job.id)
        model.accrue(job, now)
    elif op == "release" and queued and job.reserved:
        release = ReleaseReservation(
            policy_id(job.id), NODE, TIER, job.reserved, ReleaseReason.SWAP
        )
        _decide(s, now, release, accrue=job.id)
        model.accrue(job, now)
        job.reserved, job.last_accrued_at = 0, None
    elif op == "dispatch" and queued and not job.reserved:
        _decide(s, now, Dispatch(policy_id(job.id), NODE, TIER, job.num_gpus))
        job.state, job.attempt = JobState.DISPATCHED, job.attempt + 1
    elif op == "start" and job.state is JobState.DISPATCHED:
        assert store.mark_running(s, job.id, when, "run", attempt=job.attempt)
        job.state, job.started_at = JobState.RUNNING, now
    elif op in ("complete", "fail") and active:
        state = JobState.COMPLETED if op == "complete" else JobState.FAILED
        assert store.end_job(s, job.id, state, when, attempt=job.attempt) is not None
        model.end(job, ledger.END_EVENTS[state], now)
    elif op == "node" and active:
        assert store.requeue_after_node_failure(s, job.id, when, attempt=job.attempt)
        model.end(job, EventKind.NODE_FAIL_REQUEUED, now)
    elif op == "cancel" and not job.state.ended:
        store.cancel_job(s, job.id, when)
        if active:
            model.end(job, EventKind.CANCELLED, now)
        else:
            model.cancel_queued(job, now)


def _store_events(s: Session, job_id: int) -> list[tuple[str, str | None, str | None, Any]]:
    rows = s.execute(
        text(
            "SELECT kind, from_state, to_state, detail FROM job_events"
            " WHERE job_id = :id ORDER BY id"
        ),
        {"id": job_id},
    ).all()
    return [
        (kind, from_state, to_state, json.loads(detail) if isinstance(detail, str) else detail)
        for kind, from_state, to_state, detail in rows
        if EventKind(kind) in LEDGER_KINDS
    ]


def _usage(s: Session) -> dict[str, float]:
    rows = s.execute(text("SELECT name, cumulative_usage FROM labs")).all()
    return {name: usage for name, usage in rows}


JOBS = st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3)
STEPS = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.sampled_from(OPS),
        st.integers(0, 4000).map(lambda n: n / 8),  # eighths: exact in both databases
    ),
    max_size=30,
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sizes=JOBS, steps=STEPS)
def test_the_store_bills_exactly_what_the_ledger_says(
    world: World, sizes: list[int], steps: list[tuple[int, str, float]]
) -> None:
    users = [world.alice, world.bob]
    with world.sessions() as s:
        model = Model(_usage(s))
        jobs: list[ModelJob] = []
        for i, n in enumerate(sizes):
            user = users[i % 2]
            record = store.submit(
                s, user_id=user.id, name="h", command="true", num_gpus=n, now=at(0)
            ).job
            jobs.append(ModelJob(record.id, user.lab_name, n))
        t = 1.0
        for index, op, dt in steps:
            t += dt
            _step(s, model, jobs[index % len(jobs)], op, t)
        s.flush()
        try:
            assert _usage(s) == model.usage
            for job in jobs:
                row = s.execute(
                    text(
                        "SELECT state, run_cost, reservation_gpu_seconds, charged_tflop_s"
                        " FROM jobs WHERE id = :id"
                    ),
                    {"id": job.id},
                ).one()
                a = job.account
                assert tuple(row) == (job.state.value, a.run_cost, a.reservation_cost, a.charged)
                events = _store_events(s, job.id)
                assert len(events) == len(job.events), (events, job.events)
                for (kind, from_state, to_state, detail), want in zip(
                    events, job.events, strict=True
                ):
                    assert kind == want.kind.value
                    assert from_state == (want.from_state and want.from_state.value)
                    assert to_state == (want.to_state and want.to_state.value)
                    assert {k: detail[k] for k in want.detail} == dict(want.detail)
        finally:
            s.rollback()
