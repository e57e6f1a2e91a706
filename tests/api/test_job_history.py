"""On both databases: a job's attempts and reservations (`show`), the job list's
user/name/time-window filters (`jobs --since/--until`), and the labs' rank, share and usage
in flight (`labs`)."""

from __future__ import annotations

from typing import Any

import pytest

from jpushare import store
from jpushare.store.cluster_setup import set_lab_usage
from tests.api.conftest import ALL_BUSY, T0, ApiWorld
from tests.constants import TFLOPS


def labs(api: ApiWorld) -> dict[str, dict[str, Any]]:
    r = api.get("/v1/labs")
    assert r.status_code == 200, r.text
    return {lab["name"]: lab for lab in r.json()["data"]}


def test_a_reservation_is_in_flight_until_its_job_ends_and_then_charged(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 2
    job = api.submit("bob", 4)
    api.cycle()  # bob's job reserves node-c's 2 idle 5090s at T0
    api.clock.advance(100)
    beta = labs(api)["beta"]
    assert beta["in_flight_tflop_s"] == pytest.approx(2 * 100 * 104.8)
    assert (beta["reserved_gpus"], beta["running_gpus"], beta["usage_tflop_s"]) == (2, 0, 0.0)
    api.cycle()  # accrues the 100 s into the job: still in flight, not charged
    api.clock.advance(50)
    assert labs(api)["beta"]["in_flight_tflop_s"] == pytest.approx(2 * 150 * 104.8)
    assert api.post(f"/v1/jobs/{job}/cancel", "bob").status_code == 200
    beta = labs(api)["beta"]
    assert beta["in_flight_tflop_s"] == 0.0
    assert beta["usage_tflop_s"] == pytest.approx(2 * 150 * 104.8)
    history = api.get(f"/v1/jobs/{job}/attempts", "alice").json()  # not private: anyone
    assert history["data"] == []
    [span] = history["reservations"]
    assert (span["node"], span["tier"], span["released"]) == ("node-c", "rtx5090", "cancel")
    assert span["held_s"] == pytest.approx(150.0)
    assert span["started_at"] == "2026-01-05T09:00:00Z"


def test_a_running_job_is_in_flight_and_ranks_and_shares_follow_usage(api: ApiWorld) -> None:
    job = api.submit("alice", 2)
    api.cycle()
    with api.sessions.begin() as s:
        assert store.mark_running(s, job, T0, "x.1")
        set_lab_usage(s, "beta", 1000.0)
    tier = api.get(f"/v1/jobs/{job}").json()["tier"]
    api.clock.advance(60)
    now = labs(api)
    assert now["alpha"]["in_flight_tflop_s"] == pytest.approx(2 * 60 * TFLOPS[tier])
    assert (now["alpha"]["running_jobs"], now["alpha"]["running_gpus"]) == (1, 2)
    assert (now["alpha"]["rank"], now["beta"]["rank"]) == (1, 2)
    assert (now["alpha"]["share"], now["beta"]["share"]) == (0.0, 1.0)
    with api.sessions.begin() as s:
        assert store.end_job(s, job, store.JobState.COMPLETED, api.clock(), exit_code=0)
    after = labs(api)
    charged = 2 * 60 * TFLOPS[tier]
    assert after["alpha"]["in_flight_tflop_s"] == 0.0
    assert after["alpha"]["usage_tflop_s"] == pytest.approx(charged)
    assert after["alpha"]["share"] == pytest.approx(charged / (charged + 1000.0))
    ranks = [lab["name"] for lab in sorted(after.values(), key=lambda lab: lab["rank"])]
    assert ranks == (["beta", "alpha"] if charged > 1000.0 else ["alpha", "beta"])


def test_attempts_list_each_try_with_its_placement_outcome_and_cost(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    api.cycle()
    first = api.get(f"/v1/jobs/{job}").json()
    with api.sessions.begin() as s:
        assert store.mark_running(s, job, T0, "x.1")
    api.clock.advance(30)
    with api.sessions.begin() as s:
        assert store.requeue_after_node_failure(s, job, api.clock(), reason="node died")
    api.cycle()
    second = api.get(f"/v1/jobs/{job}").json()
    with api.sessions.begin() as s:
        assert store.mark_running(s, job, api.clock(), "x.2")
    api.clock.advance(10)
    with api.sessions.begin() as s:
        assert store.end_job(s, job, store.JobState.FAILED, api.clock(), exit_code=3)
    r = api.get(f"/v1/jobs/{job}/attempts", "bob")
    assert r.status_code == 200
    one, two = r.json()["data"]
    assert (one["attempt"], one["node"], one["tier"]) == (1, first["node"], first["tier"])
    assert (one["outcome"], one["exit_code"], one["reason"]) == (
        "NODE_FAIL_REQUEUED",
        None,
        "node died",
    )
    assert one["run_cost_tflop_s"] == pytest.approx(30 * TFLOPS[first["tier"]])
    assert (two["attempt"], two["tier"], two["outcome"], two["exit_code"]) == (
        2,
        second["tier"],
        "FAILED",
        3,
    )
    assert two["run_cost_tflop_s"] == pytest.approx(10 * TFLOPS[second["tier"]])
    assert two["started_at"] == "2026-01-05T09:00:30Z"
    assert api.get("/v1/jobs/999/attempts").status_code == 404


def test_the_job_list_filters_by_user_name_and_time_window(api: ApiWorld) -> None:
    early = api.submit("alice", 1)  # T0
    api.cycle()
    with api.sessions.begin() as s:
        assert store.mark_running(s, early, T0, "x.1")
    api.clock.advance(3600)
    with api.sessions.begin() as s:
        assert store.end_job(s, early, store.JobState.COMPLETED, api.clock(), exit_code=0)
    api.clock.advance(3600)  # T0 + 2h
    late = api.submit("bob", 1)
    named = api.post(
        "/v1/jobs",
        "alice",
        json={"workdir": "/tmp", "name": "sweep", "command": "true", "num_gpus": 1},
    ).json()["id"]

    def ids(**params: str) -> list[int]:
        r = api.get("/v1/jobs", params=params)
        assert r.status_code == 200, r.text
        return [j["id"] for j in r.json()["data"]]

    assert ids(user="bob") == [late]
    assert ids(name="sweep") == [named]
    assert ids(user="alice", name="sweep") == [named]
    # sacct's window: jobs submitted before `until` and not ended before `since`.
    assert ids(since="30m") == [named, late]  # early ended at T0+1h, an hour before
    assert ids(since="90m") == [named, late, early]
    assert ids(until="2026-01-05T10:00:00Z") == [early]
    assert ids(since="2026-01-05", until="2026-01-05T09:30:00") == [early]
    r = api.get("/v1/jobs", params={"since": "last tuesday"})
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "VALIDATION_ERROR"
    assert r.json()["error"]["details"]["field"] == "since"
