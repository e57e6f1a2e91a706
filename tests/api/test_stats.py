"""GET /v1/stats/watch and the watch-list metrics (SPEC §10), on SQLite and PostgreSQL.

The history of the first test is also replayed by the simulator: both shells must give the
same watch-list document for it.
"""

from __future__ import annotations

from typing import Any

import pytest

from jpushare import store
from jpushare.formats.cluster_file import ClusterSpec
from jpushare.formats.trace_file import TraceJob
from jpushare.policy.model import Placement, Tier
from jpushare.sim.engine import simulate
from jpushare.sim.report import summary
from jpushare.store.schema import JobState
from tests.api.conftest import ALL_BUSY, T0, ApiWorld
from tests.api.test_metrics import sample

TFLOPS_5090 = 104.8


def flat(doc: Any, prefix: str = "") -> dict[str, Any]:
    """A nested document as {"a.b.c": leaf}, to compare numbers with a tolerance."""
    if isinstance(doc, dict):
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out |= flat(v, f"{prefix}{k}.")
        return out
    return {prefix.rstrip("."): doc}


def fill_history(api: ApiWorld) -> tuple[int, int]:
    """Only node-c's four 5090s are free. alpha's 2-GPU job runs 0-100 s; beta's 4-GPU job,
    the first that cannot start (SPEC decision 7), reserves the other two in the same cycle,
    at 0 s, fills when the first ends at 100 s, runs 100-110 s."""
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 0
    a = api.submit("alice", 2)
    b = api.submit("bob", 4)
    _, rec = api.cycle()
    assert [d.job_id for d in rec.dispatched] == [a]
    with api.sessions.begin() as s:
        assert store.mark_running(s, a, api.clock())
    api.clock.advance(5)
    api.cycle()  # b keeps its 2
    api.clock.advance(95)
    with api.sessions.begin() as s:
        store.end_job(s, a, JobState.COMPLETED, api.clock())
    _, rec = api.cycle()  # b absorbs 2: filled, dispatched
    assert [d.job_id for d in rec.dispatched] == [b]
    with api.sessions.begin() as s:
        assert store.mark_running(s, b, api.clock())
    api.clock.advance(10)
    with api.sessions.begin() as s:
        store.end_job(s, b, JobState.COMPLETED, api.clock())
    return a, b


def test_the_watch_list_of_a_filled_reservation_worked_by_hand(api: ApiWorld) -> None:
    fill_history(api)
    r = api.get("/v1/stats/watch", params={"since": "1h"})
    assert r.status_code == 200, r.text
    w = r.json()
    assert w["reservations"] == {
        "started": 1,
        "released": {"filled": 1, "swap": 0, "r3": 0, "r5": 0, "cancel": 0},
        "held": 0,
        "failed": 0,
        "failed_rate": 0.0,
    }
    assert list(w["reservations_by_lab"]) == ["beta"]
    assert w["hold_s"] == {"count": 1, "mean": 100.0, "p95": 100.0, "max": 100.0}
    run_a = 2 * 100 * TFLOPS_5090  # 20,960
    run_b = 4 * 10 * TFLOPS_5090  # 4,192
    held_b = 2 * 100 * TFLOPS_5090  # 20,960 (the absorbed two count from 100 s: nothing)
    u = w["usage"]
    assert u["ended_jobs"] == 2
    assert u["charged_tflop_s"] == pytest.approx(run_a + run_b + held_b)
    assert u["reservation_share"] == pytest.approx(held_b / (run_a + run_b + held_b), abs=1e-6)
    assert w["by_gpus"]["2"]["burden"] == 1.0
    assert w["by_gpus"]["2"]["mean_wait_s"] == 0.0
    assert w["by_gpus"]["4"]["burden"] == pytest.approx((run_b + held_b) / run_b)  # 6.0
    assert w["by_gpus"]["4"]["mean_wait_s"] == 100.0

    # The same figures, all time, in /metrics.
    m = api.client.get("/metrics").text
    assert sample(m, "jpushare_lab_reservations_started_total", lab="beta") == 1
    assert sample(m, "jpushare_lab_reservations_failed_total", lab="beta") == 0
    assert sample(m, "jpushare_ended_jobs_total", gpus="4") == 1
    assert sample(
        m, "jpushare_ended_job_tflop_seconds_total", gpus="4", cost="reservation"
    ) == pytest.approx(held_b)
    assert sample(
        m, "jpushare_ended_job_tflop_seconds_total", gpus="4", cost="charged"
    ) == pytest.approx(run_b + held_b)
    assert sample(m, "jpushare_ended_job_tflop_seconds_total", gpus="2", cost="run") == (
        pytest.approx(run_a)
    )
    assert sample(m, "jpushare_job_wait_seconds_count", gpus="4") == 1
    assert sample(m, "jpushare_job_wait_seconds_sum", gpus="4") == pytest.approx(100, abs=1e-3)
    assert sample(m, "jpushare_job_wait_seconds_sum", gpus="2") == pytest.approx(0, abs=1e-3)


def test_the_simulator_reports_the_same_watch_list_for_the_same_history(api: ApiWorld) -> None:
    fill_history(api)
    service = api.get("/v1/stats/watch", params={"since": "1h"}).json()
    del service["since"], service["until"]
    # The same cluster as far as the jobs can see (node-c's 5090s) and the same trace.
    cluster = ClusterSpec(
        (Tier("rtx5090", TFLOPS_5090, 30),), (Placement("node-c", "rtx5090", 4),), {}, ()
    )
    trace = [
        TraceJob("1", 0.0, 100.0, 2, "alpha", None, None, frozenset(), None),
        TraceJob("2", 0.0, 10.0, 4, "beta", None, None, frozenset(), None),
    ]
    doc = summary(simulate(cluster, trace, "reservation"))
    simulated = doc["watch"]
    # The LLM backfill split: the same reserved GPU-hours (2 GPUs x 100 s); the simulator's
    # keeper serves them all, the service ran none (its figures are the keeper's own).
    served = service.pop("backfill")
    assert served["reserved_gpu_hours"] == pytest.approx(200 / 3600, abs=1e-6)
    assert doc["backfill"]["reserved_gpu_hours"] == served["reserved_gpu_hours"]
    assert doc["backfill"]["backfill_reserved_gpu_hours"] == served["reserved_gpu_hours"]
    assert (served["backfill_reserved_gpu_hours"], served["keeper_since"]) == (0.0, None)
    want, got = flat(simulated), flat(service)
    assert want.keys() == got.keys()
    for key, value in want.items():
        assert got[key] == (value if not isinstance(value, float) else pytest.approx(value)), key


def test_a_cancelled_reservation_fails_and_the_window_bounds_the_records(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 2
    b = api.submit("bob", 4)
    api.cycle()  # reserves the 2 idle 5090s at T0
    api.clock.advance(15)
    assert api.post(f"/v1/jobs/{b}/cancel", "bob").status_code == 200
    w = api.get("/v1/stats/watch", params={"since": T0.isoformat()}).json()
    assert w["reservations"]["failed"] == 1
    assert w["reservations"]["failed_rate"] == 1.0
    assert w["reservations"]["released"]["cancel"] == 1
    assert w["reservations_by_lab"]["beta"]["failed"] == 1
    assert w["hold_s"]["mean"] == 15.0
    # Cancelled in the queue: charged 2 x 15 s x 104.8 of reservation, nothing run.
    four = w["by_gpus"]["4"]
    assert four["charged_tflop_s"] == pytest.approx(2 * 15 * TFLOPS_5090)
    assert (four["burden"], four["started"], four["mean_wait_s"]) == (None, 0, None)
    assert w["usage"]["reservation_share"] == 1.0
    m = api.client.get("/metrics").text
    assert sample(m, "jpushare_lab_reservations_failed_total", lab="beta") == 1
    assert sample(m, "jpushare_job_wait_seconds_count", gpus="4") == 0

    # A window that starts after all of it holds nothing.
    api.clock.advance(3600)
    later = api.get("/v1/stats/watch", params={"since": "30m"}).json()
    assert later["reservations"]["started"] == 0
    assert later["usage"]["ended_jobs"] == 0
    assert later["hold_s"]["mean"] is None
    assert later["by_gpus"] == {}
    # The default window is 7 days back from now.
    default = api.get("/v1/stats/watch").json()
    assert default["reservations"]["started"] == 1
    assert default["since"].startswith("2025-12-29T10:00:15")


@pytest.mark.parametrize("since", ["yesterday", "7x", "-3d", "2030-01-01T00:00:00Z", ""])
def test_a_bad_since_is_a_422_naming_the_field(api: ApiWorld, since: str) -> None:
    r = api.get("/v1/stats/watch", params={"since": since})
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert "since" in error["message"]


def test_the_watch_list_needs_a_token(api: ApiWorld) -> None:
    assert api.client.get("/v1/stats/watch").status_code == 401
