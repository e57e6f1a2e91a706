"""GET /v1/queue, /v1/jobs/{id}/why and /v1/placements as dispatcher cycles move the queue."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.api import create_app
from jpushare.dispatcher.cycle import CycleDeps
from jpushare.policy import decide
from jpushare.store.observations import load_observed_busy
from jpushare.store.schema import Lab
from tests.api.conftest import ALL_BUSY, T0, ApiWorld
from tests.constants import SMALL_CLUSTER_GPUS
from tests.cycle_rig import MemoryRig
from tests.database import sessions  # noqa: F401
from tests.dispatcher.conftest import init_cluster
from tests.memory_executor import MemoryExecutor, MemoryGpus


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
    assert w["next_cycle"] == [
        {
            "action": "start",
            "node": "node-c",
            "tier": "rtx5090",
            "gpus": 2,
            "reserved_after": None,
            "reason": None,
        }
    ]
    assert w["sentence"].endswith("At the next cycle it will start on node-c (rtx5090).")
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
    w = why(api, job)  # still held until a cycle releases it
    assert w["reservation"]["node"] == "node-c" and p["reservations"][0]["job_id"] == job
    assert w["next_cycle"] == [planned("release", "node-c", "rtx5090", 2, reason="r5")]
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


# --- submissions between cycles: facts are recorded ones, the next cycle a projection --------

STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def _stamp(iso: str) -> str:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M:%S UTC")


def agree(api: ApiWorld) -> dict[int, dict[str, Any]]:
    """Read the queue, the placements and every queued job's why at one instant; assert that
    they tell one story; return the whys by job id."""
    queue_body = api.get("/v1/queue").json()
    places = {(p["node"], p["tier"]): p for p in api.get("/v1/placements").json()["data"]}
    held = {
        r["job_id"]: (key, r) for key, p in places.items() for r in p["reservations"]
    }  # recorded reservations, as the placements list them
    out: dict[int, dict[str, Any]] = {}
    for entry in queue_body["data"]:
        job = entry["job_id"]
        w = why(api, job)
        for field in ("rank", "code", "sentence", "reservation", "next_cycle"):
            assert w[field] == entry[field], (job, field)
        # The why table's rows are the placements' figures, reservations included.
        for row in w["placements"]:
            place = places[(row["node"], row["tier"])]
            assert row == {k: place[k] for k in row}, (job, row)
        # The job's reservation is the one the placements list for it, or none.
        res = w["reservation"]
        if res is None:
            assert job not in held
        else:
            where, listed = held[job]
            assert where == (res["node"], res["tier"])
            assert (listed["gpus"], listed["of"], listed["since"]) == (
                res["gpus"],
                res["of"],
                res["since"],
            )
        # Every time in the sentence is a recorded one: its own or the blocking reservation's.
        recorded = {_stamp(r["since"]) for r in (res, (w["blocking"] or {}).get("reservation"))
                    if r is not None}  # fmt: skip
        assert set(STAMP.findall(w["sentence"])) <= recorded, w["sentence"]
        out[job] = w
    return out


def planned(action: str, node: str, tier: str, gpus: int, **more: Any) -> dict[str, Any]:
    return {"action": action, "node": node, "tier": tier, "gpus": gpus,
            "reserved_after": None, "reason": None} | more  # fmt: skip


def charge(api: ApiWorld, lab: str, tflop_s: float) -> None:
    """As if the lab's jobs had ended and been charged (the way the top job loses its place)."""
    with api.sessions.begin() as s:
        s.execute(update(Lab).where(Lab.name == lab).values(cumulative_usage=tflop_s))


def test_between_cycles_why_states_only_what_a_cycle_recorded(api: ApiWorld) -> None:
    # Only one of node-c's 5090s is idle; a 4-GPU job at >= rtx5090 can only reserve it.
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 3
    big = api.submit("alice", 4, min_tier="rtx5090")

    # Before any cycle: nothing is reserved, and the answer says what the cycle will do.
    w = agree(api)[big]
    assert (w["code"], w["reservation"], w["blocking"]) == ("WAITING_FOR_GPUS", None, None)
    assert w["next_cycle"] == [planned("reserve", "node-c", "rtx5090", 1)]
    assert w["sentence"] == (
        "It is the top job and holds no reservation; it needs 4 GPUs on one placement and its "
        "only fit placement has 1 idle. At the next cycle it will reserve 1 GPU on node-c "
        "(rtx5090) and wait there for 3 more, or start at once where 4 are idle."
    )
    assert [(r["busy"], r["reserved"], r["idle"]) for r in w["placements"]] == [(3, 0, 1)]
    api.clock.advance(5)
    assert agree(api)[big] == w  # time passing changes nothing: no time was invented

    # The cycle at 09:00:05 reserves; from then on that time is the fact.
    api.cycle()
    api.clock.advance(5)
    w = agree(api)[big]
    assert w["code"] == "RESERVING" and w["next_cycle"] == []
    assert w["reservation"] == {
        "node": "node-c", "tier": "rtx5090", "gpus": 1, "of": 4, "since": "2026-01-05T09:00:05Z",
    }  # fmt: skip
    assert w["sentence"] == (
        "It is the top job and holds a reservation of 1 of 4 GPUs on node-c (rtx5090) since "
        "2026-01-05 09:00:05 UTC; it starts when 3 more free up there, or at once if another "
        "fit placement has 4 idle."
    )
    assert [(r["busy"], r["reserved"], r["idle"]) for r in w["placements"]] == [(3, 1, 0)]

    # alpha's usage grows and bob (beta) submits: his 4-GPU job is the top job now (R3).
    charge(api, "alpha", 1000.0)
    top = api.submit("bob", 4, min_tier="rtx5090")
    small = api.submit("bob", 1)
    ws = agree(api)
    assert [(ws[j]["rank"], ws[j]["code"]) for j in (top, small, big)] == [
        (1, "WAITING_FOR_GPUS"),
        (2, "WAITING_FOR_GPUS"),
        (3, "RESERVING"),  # it still holds its GPU until a cycle releases it
    ]
    assert ws[big]["next_cycle"] == [planned("release", "node-c", "rtx5090", 1, reason="r3")]
    assert ws[big]["sentence"].endswith(
        "since 2026-01-05 09:00:05 UTC. At the next cycle its reservation will be released, as "
        "it is no longer the top job (R3)."
    )
    # The new top job holds nothing yet; the reserved GPU in its table is job big's.
    assert ws[top]["reservation"] is None
    assert ws[top]["placements"][0]["reservations"] == [
        {"job_id": big, "gpus": 1, "of": 4, "since": "2026-01-05T09:00:05Z"}
    ]
    assert ws[top]["next_cycle"] == [planned("reserve", "node-c", "rtx5090", 1)]
    assert ws[top]["sentence"].endswith(
        f"At the next cycle job {big} will lose its reservation of 1 GPU on node-c (rtx5090), "
        "as it is no longer the top job (R3), and this job will reserve 1 GPU on node-c "
        "(rtx5090) and wait there for 3 more, or start at once where 4 are idle."
    )
    # Nobody holds a reservation in the small job's way yet: none is named as a fact.
    assert ws[small]["blocking"] is None and ws[small]["next_cycle"] == []
    assert ws[small]["sentence"].endswith(
        f"At the next cycle top job {top} will reserve 1 GPU on node-c (rtx5090) that this "
        "job could use, which no lower-ranked job may take (R4)."
    )

    # The cycle at 09:00:13 does all that.
    api.clock.advance(3)
    api.cycle()
    ws = agree(api)
    assert [(ws[j]["code"], ws[j]["next_cycle"]) for j in (top, small, big)] == [
        ("RESERVING", []),
        ("BEHIND_RESERVATION", []),
        ("WAITING_FOR_PRIORITY", []),
    ]
    assert ws[top]["reservation"]["since"] == "2026-01-05T09:00:13Z"
    assert ws[small]["blocking"] == {"job_id": top, "reservation": ws[top]["reservation"]}
    assert "since 2026-01-05 09:00:13 UTC" in ws[small]["sentence"]
    assert ws[big]["reservation"] is None
    assert any("released at 2026-01-05 09:00:13 UTC" in n for n in ws[big]["notes"])


def test_a_reservation_that_grows_then_fills_is_told_as_a_projection(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 2
    big = api.submit("alice", 4, min_tier="rtx5090")
    api.cycle()  # reserves 2 at 09:00:00
    api.busy[("node-c", "rtx5090")] = 1  # one more frees
    api.clock.advance(5)
    w = agree(api)[big]
    assert w["code"] == "RESERVING" and w["reservation"]["gpus"] == 2  # as recorded
    assert w["next_cycle"] == [planned("absorb", "node-c", "rtx5090", 1, reserved_after=3)]
    assert w["sentence"].endswith(
        "it starts when 2 more free up there, or at once if another fit placement has 4 idle. "
        "At the next cycle it will take 1 more idle there (3 of 4 reserved)."
    )
    api.cycle()
    api.busy[("node-c", "rtx5090")] = 0
    api.clock.advance(5)
    w = agree(api)[big]
    assert w["code"] == "STARTING" and w["reservation"]["gpus"] == 3
    assert w["reservation"]["since"] == "2026-01-05T09:00:00Z"  # absorbing keeps the start
    assert w["next_cycle"] == [
        planned("absorb", "node-c", "rtx5090", 1, reserved_after=4),
        planned("start", "node-c", "rtx5090", 4),
        planned("release", "node-c", "rtx5090", 4, reason="filled"),
    ]
    assert w["dispatch"] == {"node": "node-c", "tier": "rtx5090", "num_gpus": 4}
    assert w["sentence"] == (
        "It is the top job and holds a reservation of 3 of 4 GPUs on node-c (rtx5090) since "
        "2026-01-05 09:00:00 UTC. At the next cycle it will take the last 1 GPU it needs there "
        "and start on node-c (rtx5090) with its reservation."
    )


def test_a_swap_is_told_as_a_projection(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 2
    big = api.submit("alice", 4, min_tier="rtx4090")
    api.cycle()  # reserves node-c's 2 idle 5090s (strongest tier first)
    api.busy[("node-b", "rtx4090")] = 0  # node-b frees whole
    w = agree(api)[big]
    assert w["code"] == "STARTING"
    assert w["next_cycle"] == [
        planned("start", "node-b", "rtx4090", 4),
        planned("release", "node-c", "rtx5090", 2, reason="swap"),
    ]
    assert w["sentence"].endswith(
        "At the next cycle it will start on node-b (rtx4090) and its reservation on node-c "
        "(rtx5090) will be released (swap)."
    )


def test_idle_gpus_that_a_higher_ranked_job_takes_first(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    api.busy[("node-b", "rtx4090")] = 2  # 2 idle 4090s, enough for one of the two jobs
    first = api.submit("alice", 2, min_tier="rtx4090")
    second = api.submit("bob", 2, min_tier="rtx4090")
    ws = agree(api)
    assert ws[first]["code"] == "STARTING"
    # Decision 7: `first` starts at the next cycle, so `second` is the top job (not rank 1).
    assert ws[second]["code"] == "WAITING_FOR_GPUS" and ws[second]["best_idle"] == 2
    assert ws[second]["top_job_id"] == second
    assert ws[second]["sentence"] == (
        "It is the top job and holds no reservation; it needs 2 GPUs on one placement and the "
        "best of its 3 fit placements has 2 idle. At the next cycle the jobs ranked above it "
        "will take those GPUs first, leaving at most 0 idle on one of its fit placements."
    )


# --- with the real dispatcher cycle and its recorded observation ------------------------------


@pytest.fixture
def rig_api(
    sessions: sessionmaker[Session],  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> Iterator[tuple[MemoryRig, TestClient, dict[str, str]]]:
    """The dispatcher tests' rig (2 x 4090 on node-a, 1 x 3080 Ti on node-b, the in-memory
    executor) and the API as `serve` builds it: busy GPUs from `placement_observations`."""
    users = init_cluster(sessions)
    executor = MemoryExecutor([MemoryGpus(*g) for g in SMALL_CLUSTER_GPUS])
    rig = MemoryRig(sessions, users, executor, CycleDeps(sessions, executor), tmp_path)
    with sessions.begin() as s:
        token = store.issue_token(s, users["alice"].id, store.utc_now(), "test").secret
    app = create_app(sessions, executor=executor, observed_busy=load_observed_busy)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield rig, client, {"Authorization": f"Bearer {token}"}


def test_a_dispatcher_cycle_records_what_why_then_states(
    rig_api: tuple[MemoryRig, TestClient, dict[str, str]],
) -> None:
    rig, client, auth = rig_api
    _, first = rig.start_held("alice", 1, "first")
    big = rig.submit("bob", 2)  # needs node-a's 2 x 4090; one is busy

    def ask() -> dict[str, Any]:
        body: dict[str, Any] = client.get(f"/v1/jobs/{big}/why", headers=auth).json()
        places = client.get("/v1/placements", headers=auth).json()["data"]
        node_a = next(p for p in places if p["node"] == "node-a")
        assert body["placements"][0] == {k: node_a[k] for k in body["placements"][0]}
        return body

    w = ask()
    assert (w["code"], w["reservation"]) == ("WAITING_FOR_GPUS", None)
    assert w["next_cycle"] == [planned("reserve", "node-a", "rtx4090", 1)]
    assert not STAMP.search(w["sentence"])
    assert [(r["busy"], r["reserved"], r["idle"]) for r in w["placements"]] == [(1, 0, 1)]

    rig.cycle()
    since = rig.job(big).reservation_since
    assert since is not None
    w = ask()
    assert w["code"] == "RESERVING" and w["next_cycle"] == []
    assert datetime.fromisoformat(w["reservation"]["since"]) == since
    assert f"since {since:%Y-%m-%d %H:%M:%S} UTC" in w["sentence"]
    assert [(r["busy"], r["reserved"], r["idle"]) for r in w["placements"]] == [(1, 1, 0)]
    rig.cycle()  # a later cycle accrues the reservation's cost; its start stays recorded
    assert ask()["reservation"] == w["reservation"]

    # The cycle that sees the first job end fills the reservation and dispatches the job.
    first.release()
    rig.cycle_until(rig.state_is(big, "DISPATCHED", "RUNNING", "COMPLETED"), "big starts")
    w = client.get(f"/v1/jobs/{big}/why", headers=auth).json()
    assert w["code"] in ("DISPATCHED", "RUNNING", "COMPLETED") and w["next_cycle"] == []
    assert "node-a (rtx4090)" in w["sentence"]


def test_a_job_dispatched_while_why_reads_is_answered_from_one_state(
    api: ApiWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cycle commits between the route's read of the job and its snapshot. PostgreSQL's
    # READ COMMITTED shows the snapshot without the job; SQLite reads one snapshot throughout.
    job = api.submit("alice", 2)
    real = store.load_snapshot

    def cycle_then_load(*args: Any, **kwargs: Any) -> Any:
        now = api.clock()
        with api.sessions.begin() as s:  # a dispatcher cycle (api.cycle would call us)
            store.record_decisions(s, decide(real(s, now, api.observed(s))), now)
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "load_snapshot", cycle_then_load)
    w = why(api, job)
    if api.sessions.kw["bind"].dialect.name == "postgresql":
        assert w["code"] == "DISPATCHED" and w["sentence"].startswith("DISPATCHED to node-c")
    else:
        assert w["code"] == "STARTING" and w["dispatch"]["node"] == "node-c"


def test_a_reservation_lost_to_r5_moves_at_the_next_cycle(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 2
    job = api.submit("bob", 4)
    api.cycle()  # reserves node-c's 2 idle 5090s
    api.post("/v1/admin/nodes/node-c/drain", "root", json={"reason": "fan"})
    api.busy[("node-b", "rtx4090")] = 3
    w = agree(api)[job]
    assert w["code"] == "RESERVING" and w["reservation"]["node"] == "node-c"
    assert w["next_cycle"] == [
        planned("release", "node-c", "rtx5090", 2, reason="r5"),
        planned("reserve", "node-b", "rtx4090", 1),
    ]
    assert w["sentence"].endswith(
        "At the next cycle its reservation will be released, as its placement is down, drained, "
        "gone or too small for it now (R5), and it will reserve 1 GPU on node-b (rtx4090) and "
        "wait there for 3 more, or start at once where 4 are idle."
    )
    api.clock.advance(5)
    api.cycle()
    w = agree(api)[job]
    assert w["reservation"] == {
        "node": "node-b", "tier": "rtx4090", "gpus": 1, "of": 4, "since": "2026-01-05T09:00:05Z",
    }  # fmt: skip
