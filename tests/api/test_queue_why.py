"""GET /v1/queue, /v1/jobs/{id}/why and /v1/placements as dispatcher cycles move the queue."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jpushare import store
from tests.api.conftest import ALL_BUSY, T0, ApiWorld


def queue(api: ApiWorld, user: str = "bob") -> list[tuple[int, int, str]]:
    r = api.get("/v1/queue", user)
    assert r.status_code == 200, r.text
    return [(e["rank"], e["job_id"], e["code"]) for e in r.json()["data"]]


def why(api: ApiWorld, job: int, user: str = "alice") -> dict[str, Any]:
    r = api.get(f"/v1/jobs/{job}/why", user)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def placement(api: ApiWorld, node: str, tier: str) -> dict[str, Any]:
    for p in api.get("/v1/placements").json()["data"]:
        if (p["node"], p["tier"]) == (node, tier):
            found: dict[str, Any] = p
            return found
    raise AssertionError(f"no placement {node}/{tier}")


def test_an_empty_queue(api: ApiWorld) -> None:
    body = api.get("/v1/queue").json()
    assert body["data"] == [] and body["queue_length"] == 0 and body["top_job_id"] is None


def test_a_job_that_fits_now_is_starting_then_running(api: ApiWorld) -> None:
    job = api.submit("alice", 2)
    w = why(api, job)
    assert w["code"] == "STARTING" and w["rank"] == 1 and w["queue_length"] == 1
    assert w["dispatch"] == {"node": "node-c", "tier": "rtx5090", "num_gpus": 2}
    assert "next dispatch cycle starts it" in w["sentence"]
    assert len(w["placements"]) == 4
    api.cycle()
    w = why(api, job)
    assert w["code"] == "DISPATCHED" and w["rank"] is None
    assert w["sentence"].startswith("DISPATCHED to node-c (rtx5090)")
    with api.sessions.begin() as s:
        store.mark_running(s, job, T0 + timedelta(seconds=5), "r1")
    api.clock.advance(185)
    w = why(api, job)
    assert w["code"] == "RUNNING"
    assert w["sentence"] == (
        "RUNNING on node-c (rtx5090) since 2026-01-05 09:00:05 UTC (3m00s, attempt 1)."
    )
    with api.sessions.begin() as s:
        store.end_job(s, job, store.JobState.FAILED, api.clock(), exit_code=3)
    w = why(api, job)
    assert w["code"] == "FAILED"
    assert w["sentence"].startswith("FAILED: exit code 3; on node-c (rtx5090)")
    assert api.get("/v1/queue").json()["data"] == []


def test_queue_order_and_why_codes_after_a_cycle(api: ApiWorld) -> None:
    # Everything busy except 2 of node-c's 5090s.
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 2
    big = api.submit("alice", 4)  # alpha: top job, reserves the 2 idle 5090s
    second = api.submit("carol", 2)  # alpha, later: ranked 3, may not reserve (R2)
    api.clock.advance(1)
    small = api.submit("bob", 2)  # beta, same usage 0, later than big
    api.cycle()
    assert queue(api) == [
        (1, big, "RESERVING"),
        (2, second, "BEHIND_RESERVATION"),
        (3, small, "BEHIND_RESERVATION"),
    ]
    w = why(api, big)
    assert w["reservation"] == {
        "node": "node-c",
        "tier": "rtx5090",
        "gpus": 2,
        "of": 4,
        "since": "2026-01-05T09:00:01Z",
    }
    assert (
        "holds a reservation of 2 of 4 GPUs on node-c (rtx5090) since 2026-01-05" in (w["sentence"])
    )
    w = why(api, small, "bob")
    assert w["rank"] == 3 and w["top_job_id"] == big
    assert w["blocking"]["job_id"] == big
    assert w["blocking"]["reservation"]["gpus"] == 2
    assert "reserved by the top job" in w["sentence"]
    # The placement shows the reservation, and LLM backfill may still use those GPUs.
    p = placement(api, "node-c", "rtx5090")
    assert (p["capacity"], p["busy"], p["reserved"], p["idle"]) == (4, 2, 2, 0)
    assert p["llm_backfill_gpus"] == 2
    assert p["reservations"] == [
        {"job_id": big, "gpus": 2, "of": 4, "since": "2026-01-05T09:00:01Z"}
    ]


def test_the_second_multi_gpu_job_waits_for_priority(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 3
    first = api.submit("alice", 4)
    second = api.submit("bob", 4)
    api.cycle()
    assert queue(api) == [(1, first, "RESERVING"), (2, second, "WAITING_FOR_PRIORITY")]
    # The 5090 frees completely: first fills and goes; then second is top.
    api.busy[("node-c", "rtx5090")] = 0
    api.clock.advance(5)
    _, recorded = api.cycle()
    assert [d.job_id for d in recorded.dispatched] == [first]
    assert queue(api) == [(1, second, "WAITING_FOR_GPUS")]
    assert why(api, first)["code"] == "DISPATCHED"


def test_waiting_for_priority_behind_a_top_job_that_cannot_reserve(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    first = api.submit("alice", 2)
    second = api.submit("bob", 2)
    api.cycle()
    assert queue(api) == [(1, first, "WAITING_FOR_GPUS"), (2, second, "WAITING_FOR_PRIORITY")]
    w = why(api, second)
    assert w["best_idle"] == 0 and w["schedulable_fit_placements"] == 4


def test_a_drained_node_releases_the_reservation_r5(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 2
    job = api.submit("bob", 4)
    api.cycle()
    r = api.post("/v1/admin/nodes/node-c/drain", "root", json={"reason": "fan"})
    assert r.status_code == 200 and r.json()["drained"] is True
    p = placement(api, "node-c", "rtx5090")
    assert not p["schedulable"] and p["drained"] and p["drain_reason"] == "fan"
    api.clock.advance(5)
    api.cycle()
    assert api.get(f"/v1/jobs/{job}").json()["reservation"] is None
    w = why(api, job)
    assert any("(R5)" in note for note in w["notes"])
    metrics = api.client.get("/metrics").text
    assert 'jpushare_reservations_ended_total{reason="r5"} 1.0' in metrics


def test_the_queue_pages(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    jobs = [api.submit("alice", 1) for _ in range(5)]
    body = api.get("/v1/queue", params={"offset": 1, "limit": 2}).json()
    assert [e["job_id"] for e in body["data"]] == jobs[1:3]
    assert [e["rank"] for e in body["data"]] == [2, 3]
    assert body["queue_length"] == 5 and body["count"] == 2 and body["top_job_id"] == jobs[0]


def test_why_after_an_oom_says_it_retried_at_a_stronger_tier(api: ApiWorld) -> None:
    # Only node-a's 3080 Tis are free: the job runs there, runs out of memory, and is
    # requeued at >= rtx4090 (SPEC §5, S10).
    api.busy.update(ALL_BUSY)
    api.busy[("node-a", "rtx3080ti")] = 0
    job = api.submit("alice", 2)
    _, recorded = api.cycle()
    assert recorded.dispatched[0].tier == "rtx3080ti"
    with api.sessions.begin() as s:
        store.mark_running(s, job, T0, "x")
        store.requeue_after_oom(s, job, T0 + timedelta(seconds=30), exit_code=1)
    w = why(api, job)
    assert w["code"] == "WAITING_FOR_GPUS" and w["min_tier"] == "rtx4090"
    assert w["notes"] == ["OOM on rtx3080ti (attempt 1), retried at >= rtx4090"]
    assert {p["tier"] for p in w["placements"]} == {"rtx4090", "rtx5090"}


def test_labs_and_tiers(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    api.submit("bob", 1)
    labs = api.get("/v1/labs").json()
    assert [(lab["name"], lab["queued_jobs"]) for lab in labs["data"]] == [
        ("alpha", 0),
        ("beta", 1),
    ]
    tiers = api.get("/v1/tiers").json()["data"]
    assert [t["name"] for t in tiers] == ["rtx5090", "rtx4090", "rtx3080ti"]
    assert tiers[0] == {
        "name": "rtx5090",
        "tflops": 104.8,
        "sort_order": 30,
        "max_gpus": 8,
        "auto_assign": True,
        "partition": "p5090",
    }
