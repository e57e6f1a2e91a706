"""Submitting, listing, reading and cancelling jobs; who may cancel what."""

from __future__ import annotations

import pytest

from jpushare import store
from tests.api.conftest import ALL_BUSY, T0, ApiWorld
from tests.api.test_errors import error


def test_submit_returns_201_with_the_job(api: ApiWorld) -> None:
    r = api.post(
        "/v1/jobs",
        "alice",
        json={
            "workdir": "/tmp",
            "name": "train",
            "command": "python train.py",
            "num_gpus": 2,
            "min_tier": "rtx4090",
        },
    )
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["name"] == "train" and job["user"] == "alice" and job["lab"] == "alpha"
    assert job["num_gpus"] == 2 and job["min_tier"] == "rtx4090"
    assert job["minimum_tier_sort_order"] == 20
    assert job["state"] == "GLOBAL_QUEUE_WAIT" and job["attempts"] == 0
    assert job["submitted_at"] == "2026-01-05T09:00:00Z"
    assert job["reservation"] is None and job["charged_tflop_s"] == 0.0
    assert api.get(f"/v1/jobs/{job['id']}", "alice").json() == job
    # another lab's student sees it without its command (README, "Privacy")
    private = ["command", "workdir", "environment", "output_path", "error_path", "mail_user"]
    assert api.get(f"/v1/jobs/{job['id']}", "bob").json() == {
        **job,
        **dict.fromkeys(private),
        "hidden": private,
    }


def test_a_job_without_a_name_is_named_after_its_command(api: ApiWorld) -> None:
    r = api.post(
        "/v1/jobs", json={"workdir": "/tmp", "command": "python train.py --lr 1", "num_gpus": 1}
    )
    assert r.status_code == 201 and r.json()["name"] == "python"


def test_list_filters_by_state_lab_and_mine_newest_first(api: ApiWorld) -> None:
    a = api.submit("alice", 1)
    c = api.submit("carol", 1)
    b = api.submit("bob", 1)
    api.post(f"/v1/jobs/{c}/cancel", "carol")

    def ids(user: str = "alice", **params: object) -> list[int]:
        r = api.get("/v1/jobs", user, params=params)
        assert r.status_code == 200, r.text
        assert r.json()["count"] == len(r.json()["data"])
        return [j["id"] for j in r.json()["data"]]

    assert ids() == [b, c, a]
    assert ids(lab="alpha") == [c, a]
    assert ids(lab="nowhere") == []
    assert ids(mine="true") == [a]
    assert ids("carol", mine="true") == [c]
    assert ids(state="CANCELLED") == [c]
    assert ids(state=["GLOBAL_QUEUE_WAIT", "CANCELLED"], lab="alpha") == [c, a]
    page = api.get("/v1/jobs", params={"limit": 2}).json()
    assert [j["id"] for j in page["data"]] == [b, c] and page["next_before_id"] == c
    assert ids(before_id=c) == [a]


@pytest.mark.parametrize(
    ("who", "owner", "allowed"),
    [
        ("alice", "alice", True),  # a student: their own
        ("carol", "alice", False),  # a student: not a lab mate's
        ("bob", "alice", False),  # a student: not another lab's
        ("pia", "alice", True),  # a pi: their lab's
        ("pia", "bob", False),  # a pi: not another lab's
        ("piet", "bob", True),
        ("root", "bob", True),  # an admin: any
    ],
)
def test_who_may_cancel(api: ApiWorld, who: str, owner: str, allowed: bool) -> None:
    job = api.submit(owner, 1)
    r = api.post(f"/v1/jobs/{job}/cancel", who)
    if allowed:
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "CANCELLED"
        assert r.json()["reason"] == f"cancelled by {who}"
    else:
        e = error(r, 403, "FORBIDDEN")
        assert e["details"]["owner"] == owner
        assert api.get(f"/v1/jobs/{job}").json()["state"] == "GLOBAL_QUEUE_WAIT"


def test_cancelling_an_ended_job_is_409_conflict(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    assert api.post(f"/v1/jobs/{job}/cancel").status_code == 200
    e = error(api.post(f"/v1/jobs/{job}/cancel"), 409, "CONFLICT")
    assert e["details"] == {"job_id": job, "state": "CANCELLED", "wanted": "cancel"}


def test_cancel_during_a_reservation_releases_it_and_charges_the_lab(api: ApiWorld) -> None:
    # S11: bob's 4-GPU job reserves the 2 idle 5090s, then is cancelled 100 s later.
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 2
    job = api.submit("bob", 4)
    api.cycle()
    held = api.get(f"/v1/jobs/{job}").json()["reservation"]
    assert held == {
        "node": "node-c",
        "tier": "rtx5090",
        "gpus": 2,
        "of": 4,
        "since": "2026-01-05T09:00:00Z",
    }
    api.clock.advance(100)
    r = api.post(f"/v1/jobs/{job}/cancel", "bob")
    assert r.status_code == 200
    cancelled = r.json()
    assert cancelled["reservation"] is None
    assert cancelled["charged_tflop_s"] == pytest.approx(2 * 100 * 104.8)
    assert cancelled["charge_provisional"] is False  # a reservation's cost is known exactly
    labs = {lab["name"]: lab for lab in api.get("/v1/labs").json()["data"]}
    assert labs["beta"]["usage_tflop_s"] == pytest.approx(2 * 100 * 104.8)
    assert labs["alpha"]["usage_tflop_s"] == 0.0
    assert [lab["name"] for lab in api.get("/v1/labs").json()["data"]] == ["alpha", "beta"]


def test_cancelling_a_running_job_charges_its_run(api: ApiWorld) -> None:
    job = api.submit("alice", 2)
    _, recorded = api.cycle()
    assert [d.job_id for d in recorded.dispatched] == [job]
    with api.sessions.begin() as s:
        assert store.mark_running(s, job, T0, "x.1")
    api.clock.advance(60)
    r = api.post(f"/v1/jobs/{job}/cancel", "pia")
    assert r.status_code == 200
    assert r.json()["state"] == "CANCELLED"
    assert r.json()["run_cost_tflop_s"] == pytest.approx(2 * 60 * 104.8)
    # Charged up to the cancel; the run's real end (from the executor) settles it later.
    assert r.json()["charge_provisional"] is True
