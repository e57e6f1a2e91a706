"""Whole dispatcher cycles on SQLite and PostgreSQL: the job lives of SPEC §5 and the
scenarios S2, S3, S10 on the in-memory executor (`rig`), and what is about processes (a
cancel kills the process group, a refused start) on the real local executor (`local_rig`).
S2/S3 run on both (tests/scenario_s2.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import select

from jpushare import store
from jpushare.dispatcher.cycle import CycleDeps
from jpushare.executors.base import Executor, LaunchSpec
from jpushare.executors.process_groups import live_groups
from jpushare.llm_router import HttpRouter
from jpushare.store.observations import PlacementObservation
from jpushare.store.times import same_instant
from jpushare.time_limits import state_label
from tests.constants import TFLOPS
from tests.cycle_rig import CycleRig, MemoryRig
from tests.dispatcher.conftest import LocalRig, local_executor, wait_for
from tests.job_script import Script
from tests.scenario_s2 import reserve_then_fill

CUDA_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_a_one_gpu_job_runs_to_completed_and_its_lab_is_charged_its_run_cost(
    rig: MemoryRig,
) -> None:
    job_id = rig.submit("alice", 1, rig.script(Script("hello from $JPUSHARE_JOB_ID", seconds=0.2)))
    rig.cycle_until(rig.state_is(job_id, "COMPLETED"), "the job completes")

    job = rig.job(job_id)
    run = rig.executor.find(str(job_id), 1)
    assert run is not None and run.started_at is not None and run.ended_at is not None
    assert (job.state, job.exit_code, job.attempts) == ("COMPLETED", 0, 1)
    assert (job.node_name, job.tier_name, job.executor_id) == ("node-a", "rtx4090", f"{job_id}.1")
    expected = 1 * (run.ended_at - run.started_at) * TFLOPS["rtx4090"]
    assert job.run_cost == pytest.approx(expected, abs=1e-3)  # microsecond times
    assert rig.usage("alpha") == pytest.approx(job.run_cost, rel=1e-9)
    assert rig.usage("beta") == 0.0
    assert rig.executor.log(str(job_id), 1) == f"hello from {job_id}\n"
    events = rig.kinds(job_id)
    assert events[:2] == ["submitted", "dispatched"]
    assert events[-2:] == ["completed", "charged"]
    assert events.count("dispatched") == 1


def test_s2_s3_a_two_gpu_job_reserves_beside_a_foreign_job_then_fills(rig: MemoryRig) -> None:
    free = rig.foreign("node-a", "rtx4090", 1)
    reserve_then_fill(rig, free, rig.script(Script(seconds=0.2)))


def test_s2_s3_a_two_gpu_job_reserves_then_fills_when_a_local_job_ends(
    local_rig: LocalRig,
) -> None:
    _, small = local_rig.start_held("alice", 1, "small")
    reserve_then_fill(local_rig, small.release, "true")


def test_an_oom_attempt_is_requeued_at_a_stronger_tier_then_completes(rig: MemoryRig) -> None:
    _, blocker = rig.start_held("bob", 2, "blocker")  # takes both rtx4090 GPUs
    oom = rig.submit("alice", 1, rig.oom_once(CUDA_OOM, then="fits now"))
    # S10: attempt 1 runs on rtx3080ti, runs out of memory, and is requeued at rtx4090.
    rig.cycle_until(
        lambda: rig.job(oom).attempts == 1 and rig.job(oom).state == "GLOBAL_QUEUE_WAIT",
        "the OOM attempt is requeued",
    )
    job = rig.job(oom)
    assert job.minimum_tier_sort_order == 20
    assert job.run_cost > 0 and rig.usage("alpha") == pytest.approx(job.run_cost)
    assert "CUDA out of memory" in (job.reason or "")
    blocker.release()
    rig.cycle_until(rig.state_is(oom, "COMPLETED"), "the second attempt completes")
    job = rig.job(oom)
    assert (job.attempts, job.tier_name) == (2, "rtx4090")
    assert rig.kinds(oom).count("oom_requeued") == 1
    assert rig.executor.log(str(oom), 2) == "fits now\n"
    assert rig.usage("alpha") == pytest.approx(job.run_cost)


def test_cancelling_a_running_job_kills_its_whole_process_group(local_rig: LocalRig) -> None:
    rig = local_rig
    job_id = rig.submit("alice", 1, "sleep 300 & sleep 300; wait")
    rig.cycle_until(rig.state_is(job_id, "RUNNING"), "the job runs")
    key = f"{job_id}.1"
    pgid = int((rig.executor.runs_dir / f"{key}.pid").read_text())
    live = live_groups()
    assert live is not None and pgid in live

    # The API's part: the store says CANCELLED (and charges); the run still lives.
    with rig.sessions.begin() as s:
        cancelled = store.cancel_job(s, job_id, store.utc_now())
    assert cancelled.stop_executor_id == key
    # The dispatcher's part: the next cycle sees a live run nobody wants, and stops it.
    reports = rig.cycle_until(
        lambda: (run := rig.executor.find(str(job_id), 1)) is not None and run.state.ended,
        "the run ends",
    )
    assert any(key in r.stopped_runs for r in reports)
    run = rig.executor.find(str(job_id), 1)
    assert run is not None and run.state == "CANCELLED"
    wait_for(lambda: pgid not in (live_groups() or set()), "the process group is gone")
    job = rig.job(job_id)
    assert job.state == "CANCELLED"
    assert rig.kinds(job_id).count("cancelled") == 1


def test_a_refused_submit_fails_the_job_with_the_executors_reason(local_rig: LocalRig) -> None:
    rig = local_rig
    broken = local_executor(rig.tmp / "broken", workdir=rig.tmp / "no-such-directory")
    deps = CycleDeps(rig.sessions, broken)
    job_id = rig.submit("alice", 1)
    report = _cycle_with(rig, deps)
    assert [j for j, _ in report.dispatched.refused] == [job_id]
    job = rig.job(job_id)
    assert job.state == "FAILED"
    assert job.reason is not None
    assert job.reason.startswith("the executor refused the job: could not start the job")
    assert broken.runs() == []  # nothing left behind
    assert rig.kinds(job_id)[-1] in ("failed", "charged")


def _cycle_with(rig: CycleRig, deps: CycleDeps) -> Any:
    from jpushare.dispatcher.cycle import run_cycle

    return run_cycle(deps)


@dataclass
class RecordingRouter:
    """A real HTTP router on localhost recording each POST /v1/yield body."""

    bodies: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def llm_router() -> Iterator[RecordingRouter]:
    recorder = RecordingRouter()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            recorder.bodies.append({"path": self.path} | json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield recorder
    server.shutdown()
    server.server_close()


class CallOrder:
    """Wraps the router and the executor to record the order of yield and submit."""

    def __init__(self, router: HttpRouter, executor: Executor) -> None:
        self.calls: list[str] = []
        self.router = router
        self.executor = executor

    def request_yield(
        self, node: str, tier: str, num_gpus: int, job_id: str, gpus: Sequence[int] | None = None
    ) -> None:
        self.calls.append(f"yield {job_id}")
        self.router.request_yield(node, tier, num_gpus, job_id, gpus=gpus)

    def close(self) -> None:
        self.router.close()

    def submit(self, spec: LaunchSpec) -> str:
        self.calls.append(f"submit {spec.job_id}")
        return self.executor.submit(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.executor, name)


def test_the_llm_router_is_told_to_yield_before_the_job_is_started(
    rig: MemoryRig, llm_router: RecordingRouter
) -> None:
    router = HttpRouter(llm_router.url)
    both = CallOrder(router, rig.executor)
    deps = CycleDeps(rig.sessions, both, both)
    job_id = rig.submit("bob", 2)
    report = _cycle_with(rig, deps)
    assert report.dispatched.started == (job_id,)
    assert both.calls == [f"yield {job_id}", f"submit {job_id}"]
    assert router.flush(30.0)
    assert llm_router.bodies == [
        {
            "path": "/v1/yield",
            "node": "node-a",
            "tier": "rtx4090",
            "num_gpus": 2,
            "job_id": str(job_id),
        }
    ]
    router.close()


def test_an_unreachable_router_does_not_block_dispatch(rig: MemoryRig) -> None:
    router = HttpRouter("http://127.0.0.1:9", connect_timeout_s=0.5)
    deps = CycleDeps(rig.sessions, rig.executor, router)
    job_id = rig.submit("alice", 1)
    report = _cycle_with(rig, deps)
    assert report.dispatched.started == (job_id,)
    router.close()


class FlakyExecutor:
    """An executor whose next `fail` submits raise like an unreachable backend."""

    def __init__(self, executor: Executor, fail: int) -> None:
        self.executor = executor
        self.fail = fail
        self.submits = 0

    def submit(self, spec: LaunchSpec) -> str:
        self.submits += 1
        if self.fail > 0:
            self.fail -= 1
            raise TimeoutError("sbatch timed out (backend unreachable)")
        return self.executor.submit(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.executor, name)


def test_an_executor_error_leaves_the_job_dispatched_and_the_next_cycle_starts_it_once(
    rig: MemoryRig,
) -> None:
    flaky = FlakyExecutor(rig.executor, fail=1)
    deps = CycleDeps(rig.sessions, flaky)
    job_id = rig.submit("alice", 1, rig.script(Script(seconds=0.2)))
    report = _cycle_with(rig, deps)
    assert report.dispatched.deferred == (job_id,)
    assert rig.job(job_id).state == "DISPATCHED"
    # Its GPU stays promised: a second job cannot take node-a's GPUs twice over.
    report = _cycle_with(rig, deps)
    assert report.resubmitted.started == (job_id,)
    rig.deps = deps
    rig.cycle_until(rig.state_is(job_id, "COMPLETED"), "the job completes")
    assert [r.attempt for r in rig.executor.runs()] == [1]
    assert rig.kinds(job_id).count("dispatched") == 1


def test_a_dispatch_recorded_but_not_submitted_is_submitted_by_the_next_cycle(
    rig: MemoryRig,
) -> None:
    job_id = rig.submit("alice", 1)
    # Steps 2-4 only, as if the process died right after the commit.
    from jpushare.policy import decide

    with rig.sessions.begin() as s:
        now = store.utc_now()
        recorded = store.record_decisions(s, decide(store.load_snapshot(s, now, {})), now)
    assert [d.job_id for d in recorded.dispatched] == [job_id]
    report = rig.cycle()
    assert report.resubmitted.started == (job_id,)
    assert report.dispatched.started == ()
    rig.cycle_until(rig.state_is(job_id, "COMPLETED"), "the job completes")
    assert [(r.job_id, r.attempt) for r in rig.executor.runs()] == [(str(job_id), 1)]


def test_a_run_submitted_but_not_confirmed_is_confirmed_not_started_again(
    rig: MemoryRig,
) -> None:
    job_id = rig.submit("alice", 1, rig.script(Script(seconds=0.2)))
    from jpushare.policy import decide

    with rig.sessions.begin() as s:
        now = store.utc_now()
        recorded = store.record_decisions(s, decide(store.load_snapshot(s, now, {})), now)
    d = recorded.dispatched[0]
    rig.executor.submit(
        LaunchSpec(str(d.job_id), d.attempt, d.name, d.command, d.node, d.tier, d.num_gpus)
    )
    assert rig.job(job_id).executor_id is None
    report = rig.cycle()
    assert report.observed is not None and report.observed.confirmed == 1
    assert report.resubmitted.started == ()
    rig.cycle_until(rig.state_is(job_id, "COMPLETED"), "the job completes")
    assert [(r.job_id, r.attempt) for r in rig.executor.runs()] == [(str(job_id), 1)]
    assert rig.kinds(job_id).count("dispatch_confirmed") == 1


def test_a_run_stopped_at_its_time_limit_ends_failed_time_limit(rig: MemoryRig) -> None:
    job_id = rig.submit("alice", 1, rig.script(Script(seconds=30)), time_limit_s=0.3)
    rig.cycle_until(rig.state_is(job_id, "FAILED"), "the time limit ends the job")
    job = rig.job(job_id)
    assert job.reason is not None and job.reason.startswith("time limit")
    assert state_label(job.state, job.reason) == "FAILED (time limit)"


def test_observe_and_decide_stamp_the_cycles_one_reading_of_the_clock(rig: MemoryRig) -> None:
    # A clock a second later at every reading: two readings in one cycle would show.
    start, readings = store.utc_now(), 0

    def ticking() -> datetime:
        nonlocal readings
        readings += 1
        return start + timedelta(seconds=readings)

    rig.deps = replace(rig.deps, clock=ticking)
    job_id = rig.submit("alice", 1, "true")

    report = rig.cycle()

    assert readings == 1
    dispatched_at = rig.job(job_id).dispatched_at
    with rig.sessions.begin() as s:
        observed_at = s.scalars(select(PlacementObservation.observed_at)).all()
    assert dispatched_at is not None and same_instant(dispatched_at, report.at)
    assert observed_at and all(same_instant(t, report.at) for t in observed_at)
