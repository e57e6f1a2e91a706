"""The service's records of a replay become the simulator's jobs.csv and summary.json, in
trace seconds: times (T - t0) x speed, costs x speed."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from typing import Any

import pytest

from jpushare.formats.trace_file import TraceJob
from jpushare.replay.records import LiveJob, ServiceView, job_times, sim_result
from jpushare.sim.report import jobs_csv, summary

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
SPEED = 10.0


def at(real_s: float) -> str:
    """The API's time `real_s` seconds after t0."""
    return datetime.fromtimestamp(T0 + real_s, UTC).isoformat().replace("+00:00", "Z")


def attempt(
    n: int,
    node: str,
    tier: str,
    d: float,
    s: float,
    e: float,
    outcome: str,
    cost: float,
    reason: str | None = None,
) -> dict[str, Any]:
    return {
        "attempt": n,
        "node": node,
        "tier": tier,
        "num_gpus": 2,
        "dispatched_at": at(d),
        "started_at": at(s),
        "ended_at": at(e),
        "outcome": outcome,
        "exit_code": 0,
        "reason": reason,
        "run_cost_tflop_s": cost,
    }


OOM_THEN_DONE = LiveJob(
    TraceJob("j1", 0.0, 50.0, 2, "NLP", oom_on=frozenset({"rtx4090"})),
    job={
        "id": 1,
        "state": "COMPLETED",
        "run_cost_tflop_s": 30.0,
        "reservation_cost_tflop_s": 4.0,
        "charged_tflop_s": 34.0,
        "reason": None,
    },
    attempts={
        "data": [
            attempt(1, "node-a", "rtx4090", 0.5, 0.6, 5.6, "OOM_REQUEUED", 10.0),
            attempt(2, "node-b", "rtx5090", 8.0, 8.2, 13.2, "COMPLETED", 20.0),
        ],
        "reservations": [
            {
                "node": "node-b",
                "tier": "rtx5090",
                "started_at": at(6.0),
                "ended_at": at(8.0),
                "released": "filled",
                "held_s": 2.0,
            },
        ],
    },
)
REJECTED = LiveJob(TraceJob("j2", 5.0, 10.0, 8, "BCG"), reason="no placement holds 8 GPUs")
CANCELLED_QUEUED = LiveJob(
    TraceJob("j3", 10.0, 10.0, 1, "BCG", cancel_time=30.0),
    job={
        "id": 2,
        "state": "CANCELLED",
        "run_cost_tflop_s": 0.0,
        "reservation_cost_tflop_s": 0.0,
        "charged_tflop_s": 0.0,
    },
    attempts={"data": [], "reservations": []},
)
VIEW = ServiceView(
    t0=T0,
    speed=SPEED,
    cycle_s=0.5,
    tflops={"rtx4090": 82.6, "rtx5090": 104.8},
    capacity_gpus=16,
    lab_usage_start={"NLP": 0.0, "BCG": 1.0},
    lab_usage_end={"NLP": 34.0, "BCG": 1.0},
    cycles_run=40,
)


def rows() -> list[dict[str, str]]:
    result = sim_result([OOM_THEN_DONE, REJECTED, CANCELLED_QUEUED], VIEW)
    return list(csv.DictReader(io.StringIO(jobs_csv(result))))


def test_jobs_csv_rows_are_in_trace_seconds_and_costs_scaled_by_the_speed() -> None:
    j1, j2, j3 = rows()
    assert j1 == {
        "job_id": "j1",
        "lab": "NLP",
        "num_gpus": "2",
        "state": "COMPLETED",
        "submit_time": "0",
        "start_time": "82",
        "end_time": "132",
        "node": "node-b",
        "tier": "rtx5090",
        "wait_s": "6",  # the first attempt's start: 0.6 s x 10
        "attempts": "2",
        "run_cost": "300",
        "reservation_cost": "40",
    }
    assert (j2["state"], j2["start_time"], j2["attempts"], j2["run_cost"]) == (
        "REJECTED",
        "",
        "0",
        "0",
    )
    assert (j3["state"], j3["wait_s"], j3["attempts"]) == ("CANCELLED", "", "0")


def test_the_summary_is_the_simulators_with_the_services_counts() -> None:
    result = sim_result([OOM_THEN_DONE, REJECTED, CANCELLED_QUEUED], VIEW)
    doc = summary(result)
    assert doc["cycle_s"] == 5.0  # the service's 0.5 s at 10x
    assert doc["states"] == {"COMPLETED": 1, "FAILED": 0, "CANCELLED": 1, "REJECTED": 1}
    assert doc["attempts"] == {"completed": 1, "oom": 1}
    assert doc["reservations"]["started"] == 1
    assert doc["reservations"]["ended"]["filled"] == 1
    assert doc["reservations"]["mean_hold_s"] == pytest.approx(20.0)
    assert doc["lab_usage"] == {"BCG": 10.0, "NLP": 340.0}
    assert doc["cycles"] == {"run": 40, "total": 40}
    # GPU-seconds run: 2 GPUs x (50 + 50) s; reserved: 40 TFLOP-s / 104.8 TFLOPS.
    assert result.running_gpu_s == pytest.approx(200.0)
    assert result.reserved_gpu_s == pytest.approx(40.0 / 104.8)


def test_a_final_oom_failure_counts_as_an_oom_attempt() -> None:
    failed = LiveJob(
        TraceJob("j4", 0.0, 10.0, 2, "NLP"),
        job={
            "id": 3,
            "state": "FAILED",
            "run_cost_tflop_s": 5.0,
            "reservation_cost_tflop_s": 0.0,
            "charged_tflop_s": 5.0,
            "reason": "out of memory on rtx5090, and no stronger auto-assign tier exists",
        },
        attempts={
            "data": [attempt(1, "node-b", "rtx5090", 0.1, 0.2, 1.2, "FAILED", 5.0)],
            "reservations": [],
        },
    )
    doc = summary(sim_result([failed], VIEW))
    assert doc["states"]["FAILED"] == 1
    assert doc["attempts"] == {"oom": 1}


def test_job_times_give_the_first_dispatch_and_start() -> None:
    t = job_times([OOM_THEN_DONE, REJECTED], VIEW)
    assert t[0].service_id == 1
    assert t[0].first_dispatch == pytest.approx(5.0)
    assert t[0].first_start == pytest.approx(6.0)
    assert (t[1].service_id, t[1].first_dispatch) == (None, None)
