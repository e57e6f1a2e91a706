"""/v1/admin: only admins; tiers, nodes and GPUs, labs, users, tokens."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare.store.health import CYCLE_OK, HealthCount, add_health_counts
from tests.api.conftest import ApiWorld, make_world
from tests.api.test_errors import error


@pytest.mark.parametrize("user", ["alice", "pia"])
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/admin/nodes", None),
        ("GET", "/v1/admin/users", None),
        ("POST", "/v1/admin/labs", {"name": "gamma"}),
        ("POST", "/v1/admin/users", {"name": "eve", "lab": "alpha", "role": "admin"}),
        ("POST", "/v1/admin/users/alice/tokens", {"label": "mine"}),
        ("POST", "/v1/admin/nodes/node-a/drain", {"reason": "x"}),
        ("POST", "/v1/admin/tiers", {"name": "h100", "tflops": 400, "sort_order": 40}),
    ],
)
def test_non_admins_get_403_forbidden(
    api: ApiWorld, user: str, method: str, path: str, body: object
) -> None:
    r = api.client.request(method, path, json=body, headers=api.auth(user))
    e = error(r, 403, "FORBIDDEN")
    assert e["details"]["needs"] == "admin"


def test_admin_without_a_token_is_401(api: ApiWorld) -> None:
    error(api.client.get("/v1/admin/nodes"), 401, "UNAUTHENTICATED")


def test_labs_users_and_tokens(api: ApiWorld) -> None:
    r = api.post("/v1/admin/labs", "root", json={"name": "gamma"})
    assert r.status_code == 201 and r.json()["name"] == "gamma"
    error(api.post("/v1/admin/labs", "root", json={"name": "gamma"}), 409, "CONFLICT")
    error(api.post("/v1/admin/labs", "root", json={"name": "  "}), 422, "VALIDATION_ERROR")
    gus = {"name": "gus", "lab": "gamma", "role": "pi", "unix_user": "nobody"}
    r = api.post("/v1/admin/users", "root", json=gus)
    assert r.status_code == 201 and r.json()["role"] == "pi" and r.json()["lab"] == "gamma"
    assert r.json()["unix_user"] == "nobody"
    error(
        api.post("/v1/admin/users", "root", json={"name": "gus", "lab": "gamma"}), 409, "CONFLICT"
    )
    error(
        api.post("/v1/admin/users", "root", json={"name": "hal", "lab": "nowhere"}),
        404,
        "NOT_FOUND",
    )
    error(
        api.post("/v1/admin/users", "root", json={"name": "hal", "lab": "gamma", "role": "king"}),
        422,
        "VALIDATION_ERROR",
    )
    users = api.get("/v1/admin/users", "root", params={"lab": "gamma"}).json()
    assert [(u["name"], u["unix_user"]) for u in users["data"]] == [("gus", "nobody")]
    r = api.post("/v1/admin/users/gus/tokens", "root", json={"label": "laptop"})
    assert r.status_code == 201
    secret = r.json()["secret"]
    assert secret.startswith("jps_") and r.json()["token"]["label"] == "laptop"
    me = api.client.post(
        "/v1/jobs",
        json={"workdir": "/tmp", "command": "true", "num_gpus": 1},
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert me.status_code == 201 and me.json()["user"] == "gus" and me.json()["lab"] == "gamma"
    listed = api.get("/v1/admin/users/gus/tokens", "root").json()["data"]
    assert [t["label"] for t in listed] == ["laptop"]
    assert "secret" not in listed[0]
    error(api.post("/v1/admin/users/nobody/tokens", "root", json={}), 404, "NOT_FOUND")
    error(api.post("/v1/admin/tokens/999999/revoke", "root"), 404, "NOT_FOUND")


def test_tiers_create_and_update(api: ApiWorld) -> None:
    body = {"name": "h100", "tflops": 400.0, "sort_order": 40, "max_gpus": 8, "partition": "ph"}
    r = api.post("/v1/admin/tiers", "root", json=body)
    assert r.status_code == 201, r.text
    assert r.json() == {**body, "auto_assign": True}
    error(api.post("/v1/admin/tiers", "root", json=body), 409, "CONFLICT")
    r = api.client.patch(
        "/v1/admin/tiers/h100", json={"auto_assign": False}, headers=api.auth("root")
    )
    assert r.status_code == 200 and r.json() == {**body, "auto_assign": False}
    r = api.client.patch("/v1/admin/tiers/h100", json={"partition": None}, headers=api.auth("root"))
    assert r.json()["partition"] is None and r.json()["tflops"] == 400.0
    error(
        api.client.patch("/v1/admin/tiers/nope", json={}, headers=api.auth("root")),
        404,
        "NOT_FOUND",
    )
    for bad in ({**body, "name": "x", "tflops": 0}, {**body, "name": "y", "max_gpus": 9}):
        error(api.post("/v1/admin/tiers", "root", json=bad), 422, "VALIDATION_ERROR")
    error(
        api.post("/v1/admin/tiers", "root", json={**body, "name": "z", "sort_order": 2**40}),
        422,
        "VALIDATION_ERROR",
    )


def test_nodes_gpus_drain_undrain_remove(api: ApiWorld) -> None:
    root = api.auth("root")
    nodes = api.get("/v1/admin/nodes", "root").json()
    assert [n["name"] for n in nodes["data"]] == ["node-a", "node-b", "node-c"]
    assert nodes["data"][2]["gpus"] == {"rtx4090": 4, "rtx5090": 4}
    r = api.client.put("/v1/admin/nodes/node-d/gpus", json={"gpus": {"rtx4090": 8}}, headers=root)
    assert r.status_code == 200 and r.json()["gpus"] == {"rtx4090": 8}
    error(
        api.client.put("/v1/admin/nodes/node-d/gpus", json={"gpus": {"tpu": 1}}, headers=root),
        404,
        "NOT_FOUND",
    )
    # 8 GPUs on one node now fit: no NO_FIT_PLACEMENT any more.
    assert (
        api.post("/v1/jobs", json={"workdir": "/tmp", "command": "x", "num_gpus": 8}).status_code
        == 201
    )
    r = api.post("/v1/admin/nodes/node-d/drain", "root", json={"reason": "maintenance"})
    assert r.json()["drained"] and not r.json()["schedulable"]
    r = api.post("/v1/admin/nodes/node-d/undrain", "root")
    assert not r.json()["drained"] and r.json()["schedulable"]
    error(api.post("/v1/admin/nodes/ghost/drain", "root", json={"reason": "x"}), 404, "NOT_FOUND")
    error(api.post("/v1/admin/nodes/node-d/drain", "root", json={}), 422, "VALIDATION_ERROR")
    r = api.client.put(
        "/v1/admin/nodes/node-d/gpus/rtx4090/7", json={"schedulable": False}, headers=root
    )
    assert r.json()["gpus"] == {"rtx4090": 7}
    error(
        api.client.put(
            "/v1/admin/nodes/node-d/gpus/rtx4090/99", json={"schedulable": False}, headers=root
        ),
        404,
        "NOT_FOUND",
    )
    r = api.client.delete("/v1/admin/nodes/node-d", headers=root)
    assert [n["name"] for n in r.json()["data"]] == ["node-a", "node-b", "node-c"]
    error(api.client.delete("/v1/admin/nodes/node-d", headers=root), 404, "NOT_FOUND")
    # The 8-GPU job can no longer run anywhere: its why says so.
    job = api.get("/v1/jobs").json()["data"][0]
    assert api.get(f"/v1/jobs/{job['id']}/why").json()["code"] == "NO_FIT_PLACEMENT"


def test_health_and_openapi(api: ApiWorld) -> None:
    # No dispatcher has ever run a cycle on this database: the API serves, degraded.
    r = api.client.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "degraded"
    assert r.json()["dispatcher"]["state"] == "none" and "no dispatcher" in r.json()["reason"]
    with api.sessions.begin() as s:
        add_health_counts(s, {CYCLE_OK: HealthCount(1, api.clock())}, holder="h", cycle_s=5.0)
    r = api.client.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok", r.json()
    spec = api.client.get("/openapi.json").json()
    for path in (
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/cancel",
        "/v1/jobs/{job_id}/why",
        "/v1/jobs/{job_id}/log",
        "/v1/queue",
        "/v1/placements",
        "/v1/labs",
        "/v1/tiers",
        "/healthz",
        "/metrics",
    ):
        assert path in spec["paths"], path
    assert "JobCreate" in spec["components"]["schemas"]
    assert api.client.get("/docs").status_code == 200


def test_a_user_is_a_unix_account_of_this_host(api: ApiWorld) -> None:
    """The account is checked with the system's account database when added."""
    api.post("/v1/admin/labs", "root", json={"name": "gamma"})
    # default: the user's name, which is no account here
    r = api.post("/v1/admin/users", "root", json={"name": "jpst-nosuch", "lab": "gamma"})
    error(r, 422, "UNKNOWN_UNIX_ACCOUNT")
    assert r.json()["error"]["details"] == {"unix_user": "jpst-nosuch"}
    assert "no Unix account 'jpst-nosuch'" in r.json()["error"]["message"]
    body = {"name": "ivy", "lab": "gamma", "unix_user": "jpst-nosuch"}
    error(api.post("/v1/admin/users", "root", json=body), 422, "UNKNOWN_UNIX_ACCOUNT")
    # nothing was stored by the refused requests
    assert api.get("/v1/admin/users", "root", params={"lab": "gamma"}).json()["data"] == []
    # a name that could be an option or a path is refused before any lookup
    for bad in ("-rf", "../etc", "a b", "x" * 65):
        body = {"name": "ivy", "lab": "gamma", "unix_user": bad}
        error(api.post("/v1/admin/users", "root", json=body), 422, "VALIDATION_ERROR")
    # an existing account, under another user name
    body = {"name": "ivy", "lab": "gamma", "unix_user": "nobody"}
    r = api.post("/v1/admin/users", "root", json=body)
    assert r.status_code == 201 and r.json()["unix_user"] == "nobody"


def test_a_user_mapped_to_uid_0_needs_allow_root(api: ApiWorld) -> None:
    """A user whose account is root would run every job as root: refused unless asked."""
    api.post("/v1/admin/labs", "root", json={"name": "gamma"})
    body = {"name": "ivy", "lab": "gamma", "unix_user": "root"}
    r = api.post("/v1/admin/users", "root", json=body)
    e = error(r, 422, "ROOT_ACCOUNT")
    assert e["details"] == {"unix_user": "root", "uid": 0}
    assert "uid 0" in e["message"] and "allow_root" in e["message"]
    assert api.get("/v1/admin/users", "root", params={"lab": "gamma"}).json()["data"] == []
    r = api.post("/v1/admin/users", "root", json={**body, "allow_root": True})
    assert r.status_code == 201 and r.json()["unix_user"] == "root"


def test_a_service_that_is_not_root_adds_users_of_its_own_account_only(
    sessions: sessionmaker[Session],
) -> None:
    """`serve` passes its one account (it is not root); the API holds new users to it, as
    the start check does (which a running service would not repeat)."""
    for w in make_world(sessions, only_unix_user="nobody"):
        w.post("/v1/admin/labs", "root", json={"name": "gamma"})
        body = {"name": "ivy", "lab": "gamma", "unix_user": "root"}
        r = w.post("/v1/admin/users", "root", json=body)
        error(r, 422, "ACCOUNT_NOT_SERVED")
        assert r.json()["error"]["details"] == {"unix_user": "root", "served": "nobody"}
        assert w.get("/v1/admin/users", "root", params={"lab": "gamma"}).json()["data"] == []
        body = {"name": "ivy", "lab": "gamma", "unix_user": "nobody"}
        assert w.post("/v1/admin/users", "root", json=body).status_code == 201
