"""The dispatcher's health in /metrics and /healthz, read from the database.

What one dispatching process counts (`service.dispatch_health`) is written to the
database, so an API process that never dispatched (`serve --workers N`, a standby
replica) reports the same figures; here the app is such a process: it shares only the
database with the recorder.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy import insert

from jpushare import store
from jpushare.dispatcher.cycle import CycleReport, Observed
from jpushare.executors.base import SubmitRefused
from jpushare.service.dispatch_health import HealthRecorder, counting
from jpushare.store.leadership import take_lease
from jpushare.store.observations import save_observed_busy
from jpushare.store.schema import EventKind, JobEvent
from tests.api.conftest import ApiWorld
from tests.api.test_metrics import sample


class FailingExecutor:
    """Every call raises, as Slurm's commands do while slurmctld is away."""

    def __init__(self) -> None:
        self.calls = 0

    def inventory(self) -> list[object]:
        raise RuntimeError("sinfo: Unable to contact slurm controller")

    def runs(self) -> list[object]:
        raise RuntimeError("squeue: Unable to contact slurm controller")

    def find(self, job_id: str, attempt: int) -> None:
        raise RuntimeError("squeue failed")

    def submit(self, spec: object) -> str:
        self.calls += 1
        if self.calls == 1:
            raise SubmitRefused("Invalid generic resource specification")  # an answer
        raise RuntimeError("sbatch: Socket timed out")

    def cancel(self, executor_id: str) -> None:
        raise RuntimeError("scancel: Unable to contact slurm controller")

    def log(self, job_id: str, attempt: int) -> str:
        return ""


def report(at: datetime, observed: bool) -> CycleReport:
    return CycleReport(at, 0.01, Observed.__new__(Observed) if observed else None)


def test_a_failing_dispatcher_is_seen_by_every_api_process(api: ApiWorld) -> None:
    health = HealthRecorder(api.sessions, holder="host-a:1", cycle_s=5.0, clock=api.clock)
    r = api.client.get("/healthz").json()
    assert (r["status"], r["dispatcher"]["state"]) == ("degraded", "none")

    health.cycle_done(report(api.clock(), observed=True))
    r = api.client.get("/healthz").json()
    assert (r["status"], r["reason"]) == ("ok", None)
    assert r["dispatcher"]["last_success_at"] is not None
    m = api.client.get("/metrics").text
    assert sample(m, "jpushare_dispatcher_cycles_total") == 1
    assert sample(m, "jpushare_dispatcher_last_success_timestamp_seconds") == (
        api.clock().timestamp()
    )
    assert sample(m, "jpushare_dispatcher_cycle_interval_seconds") == 5.0

    # The controller goes away: every executor call raises, cycles fail.
    executor = counting(FailingExecutor(), health.executor_failed)  # type: ignore[arg-type]
    for _ in range(4):
        api.clock.advance(5)
        for call in (executor.inventory, executor.runs):
            with pytest.raises(RuntimeError):
                call()
        health.cycle_done(report(api.clock(), observed=False))
    with pytest.raises(SubmitRefused):
        executor.submit(object())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        executor.submit(object())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        executor.cancel("42")
    health.cycle_failed("database")
    m = api.client.get("/metrics").text
    assert sample(m, "jpushare_dispatcher_cycles_total") == 1
    assert sample(m, "jpushare_dispatcher_cycles_failed_total", kind="executor") == 4
    assert sample(m, "jpushare_dispatcher_cycles_failed_total", kind="database") == 1
    assert sample(m, "jpushare_dispatcher_cycles_failed_total", kind="error") == 0
    assert sample(m, "jpushare_executor_calls_failed_total", call="inventory") == 4
    assert sample(m, "jpushare_executor_calls_failed_total", call="runs") == 4
    assert sample(m, "jpushare_executor_calls_failed_total", call="find") == 0
    assert sample(m, "jpushare_executor_calls_failed_total", call="submit") == 1  # not refusal
    assert sample(m, "jpushare_executor_calls_failed_total", call="cancel") == 1

    # 20 s without a success, over 3 cycles of 5 s (at least 10 s): degraded, still 200.
    r = api.client.get("/healthz")
    assert r.status_code == 200
    body = r.json()
    assert (body["status"], body["dispatcher"]["state"]) == ("degraded", "stale")
    assert "no dispatcher cycle has succeeded for 20 s" in body["reason"]
    assert "executor 4" in body["reason"]

    # Back: one good cycle and it is ok again; the counters stay (monotonic).
    health.cycle_done(report(api.clock(), observed=True))
    assert api.client.get("/healthz").json()["status"] == "ok"
    m = api.client.get("/metrics").text
    assert sample(m, "jpushare_dispatcher_cycles_total") == 2
    assert sample(m, "jpushare_dispatcher_cycles_failed_total", kind="executor") == 4


def test_counts_made_while_the_database_is_down_are_added_later(
    api: ApiWorld, tmp_path: object
) -> None:
    broken = store.make_sessionmaker(store.make_engine(f"sqlite:///{tmp_path}/no-tables.sqlite"))
    health = HealthRecorder(broken, holder="h", cycle_s=1.0, clock=api.clock)
    health.cycle_failed("database")  # cannot be stored: no table there
    health.cycle_failed("database")
    health.sessions = api.sessions  # the database is back
    health.cycle_done(report(api.clock(), observed=True))
    m = api.client.get("/metrics").text
    assert sample(m, "jpushare_dispatcher_cycles_failed_total", kind="database") == 2
    assert sample(m, "jpushare_dispatcher_cycles_total") == 1


def test_the_leader_requeues_oldest_wait_and_foreign_gpus_are_exported(api: ApiWorld) -> None:
    first = api.submit("alice", 1)
    api.clock.advance(30)
    api.submit("bob", 1)
    api.clock.advance(70)
    with api.sessions.begin() as s:
        take_lease(s, "host-b:7:abc", 15.0)
        at = api.clock()
        s.execute(
            insert(JobEvent),
            [
                {"job_id": first, "at": at, "kind": EventKind.OOM_REQUEUED.value, "detail": {}},
                {"job_id": first, "at": at, "kind": EventKind.OOM_REQUEUED.value, "detail": {}},
                {
                    "job_id": first,
                    "at": at,
                    "kind": EventKind.NODE_FAIL_REQUEUED.value,
                    "detail": {},
                },
            ],
        )
    m = api.client.get("/metrics").text
    assert sample(m, "jpushare_dispatcher_leader", holder="host-b:7:abc") == 1
    assert sample(m, "jpushare_dispatcher_lease_epoch") == 1
    assert sample(m, "jpushare_jobs_requeued_total", cause="oom") == 2
    assert sample(m, "jpushare_jobs_requeued_total", cause="node_failure") == 1
    assert sample(m, "jpushare_oldest_queued_job_wait_seconds") == 100

    # The jobs are dispatched (1 GPU each); the next observation sees 3 busy where `first`
    # runs: what is not ours there is foreign.
    api.cycle()
    with api.sessions.begin() as s:
        job = store.get_job(s, first)
        assert job.node_name is not None and job.tier_name is not None
        ours = store.held_by_jobs(s)[(job.node_name, job.tier_name)]  # both jobs may be there
    other = "rtx3080ti" if job.tier_name != "rtx3080ti" else "rtx4090"
    other_node = "node-a" if other == "rtx3080ti" else "node-b"
    api.clock.advance(1)
    with api.sessions.begin() as s:
        observed = {(job.node_name, job.tier_name): 3, (other_node, other): 0}
        save_observed_busy(s, observed, api.clock())
    m = api.client.get("/metrics").text
    assert sample(m, "jpushare_gpus_foreign", tier=job.tier_name) == 3 - ours
    assert sample(m, "jpushare_gpus_foreign", tier=other) == 0
