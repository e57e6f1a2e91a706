"""sbatch's --hold, --dependency and --array through the API: submit, hold, release,
update (PATCH), why, and the permission and error paths (4xx with a code, never a 500)."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from jpushare import store
from jpushare.store.schema import Job
from tests.api.conftest import ApiWorld, job_body
from tests.api.test_errors import error


def _refresh(api: ApiWorld) -> None:
    """What a dispatcher cycle does first: judge the waiting jobs again."""
    with api.sessions.begin() as s:
        store.refresh_waiting(s, api.clock())


def _end(api: ApiWorld, job_id: int, state: store.JobState) -> None:
    with api.sessions.begin() as s:
        s.execute(
            update(Job).where(Job.id == job_id).values(state=state.value, ended_at=api.clock())
        )


def _queue_ids(api: ApiWorld) -> list[int]:
    r = api.get("/v1/queue")
    assert r.status_code == 200, r.text
    return sorted(e["job_id"] for e in r.json()["data"])


def test_a_dependent_job_waits_outside_the_queue_and_why_says_for_what(api: ApiWorld) -> None:
    first = api.submit("alice", 1)
    r = api.post("/v1/jobs", json=job_body(dependency=f"afterok:{first}"))
    assert r.status_code == 201, r.text
    second = r.json()
    assert second["waiting"] == "DEPENDENCY" and second["dependency"] == f"afterok:{first}"
    assert _queue_ids(api) == [first]
    why = api.get(f"/v1/jobs/{second['id']}/why").json()
    assert why["code"] == "DEPENDENCY"
    assert f"afterok:{first} (job {first} is GLOBAL_QUEUE_WAIT)" in why["sentence"]
    _end(api, first, store.JobState.FAILED)
    _refresh(api)
    why = api.get(f"/v1/jobs/{second['id']}/why").json()
    assert why["code"] == "DEPENDENCY_NEVER_SATISFIED"
    assert "can never be met" in why["sentence"]


def test_hold_release_with_cancels_permission(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    assert error(api.post(f"/v1/jobs/{job}/hold", "bob"), 403, "FORBIDDEN")
    r = api.post(f"/v1/jobs/{job}/hold", "pia")  # alice's lab's PI may, as for cancel
    assert r.status_code == 200 and r.json()["waiting"] == "HELD"
    assert _queue_ids(api) == []
    why = api.get(f"/v1/jobs/{job}/why").json()
    assert why["code"] == "HELD" and f"jpushare release {job}" in why["sentence"]
    api.clock.advance(60)
    r = api.post(f"/v1/jobs/{job}/release")
    assert r.status_code == 200 and r.json()["waiting"] is None
    assert r.json()["queue_entered_at"] == "2026-01-05T09:01:00Z"  # entered when released
    assert _queue_ids(api) == [job]


def test_submit_held_and_hold_of_an_ended_job(api: ApiWorld) -> None:
    r = api.post("/v1/jobs", json=job_body(hold=True))
    assert r.status_code == 201 and r.json()["held"] and r.json()["waiting"] == "HELD"
    job = r.json()["id"]
    api.post(f"/v1/jobs/{job}/cancel")
    assert error(api.post(f"/v1/jobs/{job}/hold"), 409, "CONFLICT")
    assert error(api.post(f"/v1/jobs/{job}/release"), 409, "CONFLICT")


def test_update_name_and_time_limit_while_queued(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    path = f"/v1/jobs/{job}"
    r = api.client.patch(
        path, headers=api.auth("alice"), json={"name": "b", "time_limit": "1:00:00"}
    )
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["time_limit_s"]) == ("b", 3600.0)
    bad = api.client.patch(path, headers=api.auth("alice"), json={})
    assert error(bad, 422, "VALIDATION_ERROR")
    other = api.client.patch(path, headers=api.auth("bob"), json={"name": "x"})
    assert error(other, 403, "FORBIDDEN")


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"dependency": "afterok:999"}, "no job 999"),
        ({"dependency": "before:1"}, "TYPE"),
        ({"array": "5-1"}, "empty range"),
        ({"array": "0-3%0"}, "limit"),
    ],
)
def test_bad_dependency_or_array_is_a_422_and_nothing_stored(
    api: ApiWorld, fields: dict[str, str], words: str
) -> None:
    r = api.post("/v1/jobs", json={**job_body(), **fields})
    assert words in error(r, 422, "VALIDATION_ERROR")["message"]
    assert api.get("/v1/jobs").json()["count"] == 0


def test_an_array_submits_every_task_and_lists_them(api: ApiWorld) -> None:
    r = api.post("/v1/jobs", json=job_body(array="0-3%2", name="sweep"))
    assert r.status_code == 201, r.text
    head = r.json()
    ids = head["array_task_ids"]
    assert len(ids) == 4 and head["id"] == ids[0] == head["array_job_id"]
    assert head["display_id"] == f"{ids[0]}_0"
    listed = api.get("/v1/jobs", params={"array": ids[0]}).json()["data"]
    assert sorted(j["display_id"] for j in listed) == [f"{ids[0]}_{t}" for t in range(4)]
    assert _queue_ids(api) == ids[:2]
    why = api.get(f"/v1/jobs/{ids[3]}/why").json()
    assert why["code"] == "ARRAY_LIMIT" and "array limit: 2 of 2 running" in why["sentence"]
