"""Trace jobs -> sbatch requests, and Slurm's records -> the simulator's result (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jpushare.formats.cluster_file import load_cluster
from jpushare.formats.trace_file import TraceJob, load_trace
from jpushare.sim.engine import AttemptEnd, TraceJobState
from jpushare.sim.report import jobs_csv, summary
from jpushare.slurm_peer.plan import (
    gres_request,
    job_record,
    plan_requests,
    time_limit_minutes,
    to_result,
)
from jpushare.slurm_peer.sacct import SacctJob, parse_sacct

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
CLUSTER = load_cluster(ROOT / "examples" / "slurm-cluster.yaml")
TFLOPS = {t.name: t.tflops for t in CLUSTER.tiers}


def job(job_id: str = "j", **kw: object) -> TraceJob:
    base: dict[str, object] = {
        "job_id": job_id,
        "submit_time": 120.0,
        "duration": 600.0,
        "num_gpus": 2,
        "lab": "NLP",
    }
    base.update(kw)
    return TraceJob(**base)  # type: ignore[arg-type]


def record(start: float | None, end: float | None, **kw: object) -> SacctJob:
    base: dict[str, object] = {
        "slurm_id": "1",
        "account": "nlp",
        "state": "COMPLETED",
        "exit_code": "0:0",
        "submit": 1000.0,
        "start": start,
        "end": end,
        "nodes": "node-c" if start is not None else None,
        "gpus": {"rtx5090": 2} if start is not None else {},
        "time_limit_min": 1,
        "name": "peer-j",
    }
    base.update(kw)
    return SacctJob(**base)  # type: ignore[arg-type]


def test_gres_names_a_type_only_when_one_tier_is_allowed() -> None:
    assert gres_request(job(), CLUSTER) == ("gpu:2", ())
    assert gres_request(job(min_tier="rtx3080ti"), CLUSTER) == ("gpu:2", ())
    assert gres_request(job(min_tier="rtx5090"), CLUSTER) == ("gpu:rtx5090:2", ())
    # 4090 or 5090: any type, but not on node-d (3080 Ti only)
    assert gres_request(job(min_tier="rtx4090"), CLUSTER) == ("gpu:2", ("node-d",))


@pytest.mark.parametrize(
    ("limit", "speed", "minutes"),
    [(3600.0, 60.0, 1), (7200.0, 60.0, 2), (3601.0, 60.0, 2), (900.0, 60.0, 1), (3600.0, 1.0, 60)],
)
def test_time_limits_are_whole_wall_minutes_rounded_up(
    limit: float, speed: float, minutes: int
) -> None:
    assert time_limit_minutes(job(time_limit=limit), speed) == minutes


def test_requests_scale_times_and_skip_what_is_never_submitted() -> None:
    jobs = [
        job("a", time_limit=3600.0, cancel_time=300.0),
        job("big", num_gpus=8),  # no placement of this cluster holds 8
        job("gone", cancel_time=120.0),  # cancelled at its submission
    ]
    reqs = plan_requests(jobs, CLUSTER, 60.0)
    a = reqs["a"]
    assert a is not None
    assert (a.submit_at, a.cancel_at, a.run_s, a.time_min) == (2.0, 5.0, 10.0, 1)
    assert a.sbatch_args("peer-") == [
        "--parsable",
        "--job-name=peer-a",
        "--account=nlp",
        "--gres=gpu:2",
        "--time=1",
        "--output=/dev/null",
    ]
    assert "sleep 10.000" in a.script()
    assert reqs["big"] is None and reqs["gone"] is None
    result = to_result(jobs, CLUSTER, reqs, {}, 0.0, 60.0)
    states = {r.job_id: r.state for r in result.jobs}
    assert states == {
        "a": TraceJobState.QUEUED,
        "big": TraceJobState.REJECTED,
        "gone": TraceJobState.CANCELLED,
    }
    assert "8" in next(r.reason for r in result.jobs if r.job_id == "big")


def test_a_start_in_the_submission_second_is_no_wait_and_costs_use_the_tier() -> None:
    # t0 = 1000: submitted at trace 120 (wall 1002), Slurm says it started in second 1001
    req = plan_requests([job()], CLUSTER, 60.0)["j"]
    rec = job_record(job(), req, record(1001.0, 1011.0), TFLOPS, 1000.0, 60.0)
    assert rec.state is TraceJobState.COMPLETED
    (a,) = rec.attempts
    assert (a.start, a.end, a.node, a.tier) == (120.0, 660.0, "node-c", "rtx5090")
    assert rec.wait_s == 0.0
    assert rec.run_cost == pytest.approx(2 * 104.8 * 540.0)
    assert rec.billed == rec.run_cost and rec.reservation_cost == 0.0


def test_oom_tier_fails_without_escalation_and_other_ends() -> None:
    spec = job(oom_on=frozenset({"rtx3080ti"}))
    req = plan_requests([spec], CLUSTER, 60.0)["j"]
    on_3080 = record(1005.0, 1015.0, nodes="node-d", gpus={"rtx3080ti": 2})
    rec = job_record(spec, req, on_3080, TFLOPS, 1000.0, 60.0)
    assert rec.state is TraceJobState.FAILED and rec.attempts[0].outcome is AttemptEnd.OOM
    assert job_record(spec, req, record(1005.0, 1015.0), TFLOPS, 1000.0, 60.0).state is (
        TraceJobState.COMPLETED
    )
    mixed = record(1005.0, 1015.0, gpus={"rtx4090": 1, "rtx5090": 1})
    assert job_record(spec, req, mixed, TFLOPS, 1000.0, 60.0).attempts[0].tier == (
        "rtx4090+rtx5090"
    )
    timeout = record(1005.0, 1065.0, state="TIMEOUT")
    assert job_record(spec, req, timeout, TFLOPS, 1000.0, 60.0).state is TraceJobState.FAILED
    pending_cancel = record(None, None, state="CANCELLED")
    cancelled = job_record(spec, req, pending_cancel, TFLOPS, 1000.0, 60.0)
    assert cancelled.state is TraceJobState.CANCELLED and cancelled.attempts == ()


def test_the_captured_run_becomes_the_simulators_jobs_csv() -> None:
    """The tiny trace's real run (fixtures): sacct's records, read back in trace seconds."""
    trace = load_trace(FIXTURES / "tiny-trace.csv")
    meta = json.loads((FIXTURES / "tiny-peer.json").read_text())
    by_slurm = {sid: j for j, sid in meta["slurm_ids"].items()}
    records = {
        by_slurm[r.slurm_id]: r for r in parse_sacct((FIXTURES / "sacct-ended.txt").read_text())
    }
    reqs = plan_requests(trace, CLUSTER, 60.0)
    result = to_result(trace, CLUSTER, reqs, records, meta["t0_unix"], 60.0)
    assert jobs_csv(result).splitlines() == [
        "job_id,lab,num_gpus,state,submit_time,start_time,end_time,node,tier,wait_s,attempts,run_cost,reservation_cost",
        "t1,BCG,4,COMPLETED,0,0,300,node-b,rtx5090,0,1,125760,0",
        "t2,KDG,4,COMPLETED,0,0,600,node-c,rtx4090,0,1,198240,0",
        "t3,NLP,2,COMPLETED,60,60,360,node-c,rtx5090,0,1,62880,0",
        "t4,BCG,1,CANCELLED,120,120,360,node-a,rtx4090,0,1,19824,0",
        "t5,KDG,8,REJECTED,120,,,,,,0,0,0",
        "t6,NLP,1,CANCELLED,180,,,,,,0,0,0",
        "t7,NLP,2,FAILED,200,200,480,node-d,rtx3080ti,0,1,19096,0",
    ]
    doc = summary(result)
    assert doc["policy"] == "slurm" and doc["placement"] == "multifactor+backfill"
    assert doc["states"] == {"COMPLETED": 3, "FAILED": 1, "CANCELLED": 2, "REJECTED": 1}
    assert doc["capacity_gpus"] == 16 and doc["reservations"]["started"] == 0
    assert doc["lab_usage"]["NLP"] == pytest.approx(62880 + 19096)
