"""Every error is the JSON envelope with its own code; bad input never reaches a 500."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import APIRouter
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select

from jpushare.store.schema import Job, JobEvent
from tests.api.conftest import ApiWorld


def error(response: Any, status: int, code: str) -> dict[str, Any]:
    """The response's error body, after checking its status, code and shape."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    detail: dict[str, Any] = body["error"]
    return detail


def job_rows(api: ApiWorld) -> tuple[int, int]:
    with api.sessions() as s:
        jobs = s.scalar(select(func.count()).select_from(Job))
        events = s.scalar(select(func.count()).select_from(JobEvent))
    return int(jobs or 0), int(events or 0)


def test_no_token_is_401_unauthenticated(api: ApiWorld) -> None:
    r = api.client.get("/v1/jobs")
    e = error(r, 401, "UNAUTHENTICATED")
    assert "missing" in e["message"]
    assert r.headers["www-authenticate"] == "Bearer, MUNGE"  # MUNGE sign-in too


@pytest.mark.parametrize(
    "header",
    [
        "Bearer jps_not-a-real-token",
        "Bearer nonsense",
        "Bearer " + "x" * 5000,
        "Basic YWxpY2U6c2VjcmV0",
        "Bearer",
    ],
)
def test_a_bad_token_is_401_unauthenticated(api: ApiWorld, header: str) -> None:
    error(api.client.get("/v1/queue", headers={"Authorization": header}), 401, "UNAUTHENTICATED")


def test_a_revoked_token_is_401(api: ApiWorld) -> None:
    tokens = api.get("/v1/admin/users/alice/tokens", "root").json()["data"]
    r = api.post(f"/v1/admin/tokens/{tokens[0]['id']}/revoke", "root")
    assert r.status_code == 200 and r.json()["revoked"] is True
    error(api.get("/v1/jobs", "alice"), 401, "UNAUTHENTICATED")
    assert api.post(f"/v1/admin/tokens/{tokens[0]['id']}/revoke", "root").json()["revoked"] is False


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": 0}, "num_gpus"),
        ({"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": 9}, "num_gpus"),
        ({"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": -1}, "num_gpus"),
        ({"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": "x"}, "num_gpus"),
        ({"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": 2.5}, "num_gpus"),
        ({"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": None}, "num_gpus"),
        ({"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": 10**30}, "num_gpus"),
        ({"workdir": "/tmp", "name": "a", "command": "true"}, "num_gpus"),
        ({"name": "a", "num_gpus": 1}, "command"),
        ({"workdir": "/tmp", "name": "a", "command": "", "num_gpus": 1}, "command"),
        ({"workdir": "/tmp", "name": "a", "command": "a\x00b", "num_gpus": 1}, "command"),
        # 70,000 characters (160,000 UTF-8 bytes): under the character limit, over one argv entry.
        (
            {
                "workdir": "/tmp",
                "name": "a",
                "command": "é" * 50_000 + "가" * 20_000,
                "num_gpus": 1,
            },
            "command",
        ),
        ({"workdir": "/tmp", "name": "n" * 201, "command": "true", "num_gpus": 1}, "name"),
        (
            {
                "workdir": "/tmp",
                "name": "a",
                "command": "true",
                "num_gpus": 1,
                "min_tier": "x" * 101,
            },
            "min_tier",
        ),
        (
            {"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": 1, "min_tier": "\x00"},
            "min_tier",
        ),
        (
            {"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": 1, "time_limit_s": 0},
            "time_limit_s",
        ),
        (
            {"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": 1, "colour": "red"},
            "colour",
        ),
    ],
)
def test_invalid_submissions_are_422_validation_error(
    api: ApiWorld, body: dict[str, Any], field: str
) -> None:
    e = error(api.post("/v1/jobs", "alice", json=body), 422, "VALIDATION_ERROR")
    assert any(err["loc"][-1] == field for err in e["details"]["errors"]), e
    assert field in e["message"]
    assert job_rows(api) == (0, 0)


@pytest.mark.parametrize("user", ["alice", "pia", "root"])
def test_num_gpus_bounds_hold_for_every_role(api: ApiWorld, user: str) -> None:
    # SPEC §2: no role restriction; 1-8 for everyone, and 4 fits this cluster for everyone.
    error(
        api.post("/v1/jobs", user, json={"workdir": "/tmp", "command": "x", "num_gpus": 9}),
        422,
        "VALIDATION_ERROR",
    )
    assert (
        api.post(
            "/v1/jobs", user, json={"workdir": "/tmp", "command": "x", "num_gpus": 4}
        ).status_code
        == 201
    )


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"[]",
        b'"a string"',
        b"",
        b'{"workdir": "/tmp", "command": "x", "num_gpus": 1} trailing',
    ],
)
def test_a_body_that_is_not_a_job_object_is_422(api: ApiWorld, content: bytes) -> None:
    r = api.client.post(
        "/v1/jobs",
        content=content,
        headers={**api.auth("alice"), "Content-Type": "application/json"},
    )
    error(r, 422, "VALIDATION_ERROR")


def test_an_unknown_min_tier_is_422_validation_error(api: ApiWorld) -> None:
    body = {"workdir": "/tmp", "command": "x", "num_gpus": 1, "min_tier": "h100"}
    e = error(api.post("/v1/jobs", json=body), 422, "VALIDATION_ERROR")
    assert "h100" in e["message"]
    assert job_rows(api) == (0, 0)


def test_no_fit_placement_says_what_could_be_asked_and_stores_nothing(api: ApiWorld) -> None:
    # S13 / S7: the largest placement has 4 GPUs.
    e = error(
        api.post("/v1/jobs", json={"workdir": "/tmp", "command": "x", "num_gpus": 8}),
        422,
        "NO_FIT_PLACEMENT",
    )
    assert e["message"] == (
        "no placement can hold num_gpus=8 at tier >= rtx3080ti; the largest fit is 4"
    )
    assert e["details"] == {
        "num_gpus": 8,
        "min_tier": "rtx3080ti",
        "largest_fit": 4,
        "alternatives": [{"num_gpus": 4, "min_tier": "rtx3080ti", "placements": 4}],
    }
    assert job_rows(api) == (0, 0)


def test_no_fit_at_a_minimum_tier_offers_a_weaker_tier(api: ApiWorld) -> None:
    # Take node-c's 5090s out of the capacity: nothing at >= rtx5090 is left.
    for i in range(4):
        r = api.client.put(
            f"/v1/admin/nodes/node-c/gpus/rtx5090/{i}",
            json={"schedulable": False},
            headers=api.auth("root"),
        )
        assert r.status_code == 200, r.text
    body = {"workdir": "/tmp", "command": "x", "num_gpus": 2, "min_tier": "rtx5090"}
    e = error(api.post("/v1/jobs", json=body), 422, "NO_FIT_PLACEMENT")
    assert e["details"]["alternatives"] == [{"num_gpus": 2, "min_tier": "rtx4090", "placements": 2}]
    assert "fits at tier >= rtx4090" in e["message"]
    assert job_rows(api) == (0, 0)


@pytest.mark.parametrize(
    "path",
    ["/v1/jobs/0", "/v1/jobs/-3", "/v1/jobs/abc", f"/v1/jobs/{2**63}", "/v1/jobs/1.5"],
)
def test_a_bad_job_id_is_422(api: ApiWorld, path: str) -> None:
    error(api.get(path), 422, "VALIDATION_ERROR")


@pytest.mark.parametrize("suffix", ["", "/why", "/log"])
def test_an_unknown_job_is_404(api: ApiWorld, suffix: str) -> None:
    e = error(api.get(f"/v1/jobs/{2**63 - 1}{suffix}"), 404, "NOT_FOUND")
    assert e["details"] == {"kind": "job", "key": 2**63 - 1}


def test_cancelling_an_unknown_job_is_404(api: ApiWorld) -> None:
    error(api.post("/v1/jobs/12345/cancel"), 404, "NOT_FOUND")


def test_unknown_paths_and_methods_have_their_codes(api: ApiWorld) -> None:
    error(api.get("/v1/nothing-here"), 404, "NOT_FOUND")
    error(api.client.delete("/v1/jobs", headers=api.auth("alice")), 405, "METHOD_NOT_ALLOWED")


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        ("GET", "/v1/jobs", {"state": "SLEEPING"}),
        ("GET", "/v1/jobs", {"limit": 0}),
        ("GET", "/v1/jobs", {"limit": "many"}),
        ("GET", "/v1/jobs", {"before_id": 2**64}),
        ("GET", "/v1/jobs", {"lab": "a\x00b"}),
        ("GET", "/v1/jobs", {"mine": "perhaps"}),
        ("GET", "/v1/queue", {"limit": 10**9}),
        ("GET", "/v1/queue", {"offset": -1}),
    ],
)
def test_bad_query_parameters_are_422(
    api: ApiWorld, method: str, path: str, params: dict[str, Any]
) -> None:
    r = api.client.request(method, path, params=params, headers=api.auth("alice"))
    error(r, 422, "VALIDATION_ERROR")


def test_an_unexpected_failure_is_500_internal_without_a_traceback(api: ApiWorld) -> None:
    router = APIRouter()

    @router.get("/v1/boom")
    def boom() -> None:
        raise RuntimeError("secret internals /etc/passwd")

    api.app.include_router(router)
    e = error(api.client.get("/v1/boom"), 500, "INTERNAL")
    assert "secret" not in e["message"] and "Traceback" not in e["message"]
    assert e["details"] == {}


@pytest.mark.parametrize(
    "raised",
    [
        sa_exc.OperationalError("SELECT 1", {}, Exception("connection refused")),
        sa_exc.InterfaceError("SELECT 1", {}, Exception("connection closed")),
        sa_exc.TimeoutError("QueuePool limit of size 15 overflow 10 reached"),
    ],
    ids=["refused", "closed", "pool"],
)
def test_a_database_that_cannot_be_reached_is_503_database_unavailable(
    api: ApiWorld, raised: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    router = APIRouter()

    @router.get("/v1/database-down")
    def down() -> None:
        raise raised

    api.app.include_router(router)
    r = api.client.get("/v1/database-down")
    e = error(r, 503, "DATABASE_UNAVAILABLE")
    assert e["details"] == {"retry_after_s": int(r.headers["Retry-After"])}
    assert "SELECT" not in e["message"]
    assert not [rec for rec in caplog.records if rec.exc_info]  # one line, no traceback
