"""A signed-in student against another user's job, through every route that names a job:
the API (list, one, why, queue, log with every parameter, cancel) and the dashboard (the
job's page, cookie-only requests to the API, the sign-in redirect). Nothing private
(command, directory, environment, output) reaches them and nothing of the job changes.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from jpushare.executors.base import LaunchSpec, RunState
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from jpushare.store.schema import User
from jpushare.web.auth import COOKIE
from tests.api.conftest import ALL_BUSY, ApiWorld, make_world
from tests.api.test_log_local import wait_for

SECRET = "s3cr3t-output"
COMMAND = f"echo {SECRET}; echo {SECRET}-err >&2"


@pytest.fixture
def executor(tmp_path: Path) -> LocalExecutor:
    gpus = [LocalGpu("node-b", i, "rtx4090") for i in range(4)]
    return LocalExecutor(tmp_path / "local", gpus=gpus, cancel_grace_s=2.0)


@pytest.fixture
def world(sessions: sessionmaker[Session], executor: LocalExecutor) -> Iterator[ApiWorld]:
    yield from make_world(sessions, executor)


def _alices_finished_job(world: ApiWorld, executor: LocalExecutor, wd: Path) -> int:
    me = pwd.getpwuid(os.geteuid()).pw_name
    with world.sessions.begin() as s:
        s.execute(update(User).where(User.name == "alice").values(unix_user=me))
    world.busy.update(ALL_BUSY)
    world.busy[("node-b", "rtx4090")] = 0
    body = {
        "name": "t",
        "command": COMMAND,
        "num_gpus": 1,
        "workdir": str(wd),
        "environment": {"PATH": "/usr/bin:/bin", "API_KEY": SECRET},
        "error_path": "e-%j.txt",
    }
    r = world.post("/v1/jobs", "alice", json=body)
    assert r.status_code == 201, r.text
    job = int(r.json()["id"])
    _, recorded = world.cycle()
    (d,) = recorded.dispatched
    executor.submit(
        LaunchSpec(
            str(job), d.attempt, d.name, d.command, d.node, d.tier, d.num_gpus,
            unix_user=d.unix_user, workdir=d.workdir, environment=d.environment,
            output=d.output_path, error=d.error_path,
        )
    )  # fmt: skip
    assert wait_for(executor, job, ended=True).state is RunState.COMPLETED
    assert SECRET in world.get(f"/v1/jobs/{job}/log", "alice").json()["log"]
    return job


def test_another_student_reads_nothing_private_through_any_route(
    world: ApiWorld, executor: LocalExecutor, tmp_path: Path
) -> None:
    wd = tmp_path / "proj"
    wd.mkdir()
    job = _alices_finished_job(world, executor, wd)
    for viewer in ("bob", "carol", "piet"):  # another lab's student and pi; alice's labmate
        for path, params in [
            ("/v1/jobs", {}),
            ("/v1/jobs", {"mine": "false"}),
            (f"/v1/jobs/{job}", {}),
            (f"/v1/jobs/{job}/why", {}),
            ("/v1/queue", {}),
        ]:
            r = world.get(path, viewer, params=params)
            assert r.status_code == 200, (viewer, path, r.text)
            assert SECRET not in r.text and str(wd) not in r.text, (viewer, path)
        for params in [
            {},
            {"stderr": "true"},
            {"offset": "0"},
            {"offset": "6"},
            {"attempt": "1"},
            {"attempt": "1", "stderr": "true", "offset": "1"},
        ]:
            r = world.get(f"/v1/jobs/{job}/log", viewer, params=params)
            assert r.status_code == 403, (viewer, params, r.text)
            assert SECRET not in r.text and str(wd) not in r.text
        # The dashboard's page of the job shows what the API shows them: no command, no log.
        world.client.cookies.set(COOKIE, world.tokens[viewer])
        page = world.client.get(f"/jobs/{job}")
        world.client.cookies.clear()
        assert page.status_code == 200 and SECRET not in page.text and str(wd) not in page.text


def test_another_student_cannot_cancel_and_the_cookie_alone_does_not_act(
    world: ApiWorld,
) -> None:
    world.busy.update(ALL_BUSY)  # nothing fits: alice's job stays queued
    job = world.submit("alice", 1, command=f"echo {SECRET}")
    assert world.post(f"/v1/jobs/{job}/cancel", "bob").status_code == 403
    # A browser signed in to the dashboard (cookie) on another site's page cannot make the
    # API act: the API takes no cookie, only `Authorization`.
    world.client.cookies.set(COOKIE, world.tokens["alice"])
    r = world.client.post(f"/v1/jobs/{job}/cancel", headers={"Origin": "https://evil.example"})
    world.client.cookies.clear()
    assert r.status_code == 401, r.text
    assert world.get(f"/v1/jobs/{job}", "alice").json()["state"] == "GLOBAL_QUEUE_WAIT"


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/",
        "/\\evil.example",
        "/\t/evil.example",
        "/\n/evil.example",
        "https://evil.example/",
        "/%2F/evil.example",
        " //evil.example",
        "/\x00//evil.example",
    ],
)
def test_sign_in_never_redirects_off_the_site(world: ApiWorld, target: str) -> None:
    r = world.client.post(
        "/signin",
        data={"token": world.tokens["alice"], "next": target},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    location = r.headers["location"]
    # What a browser does with it: strip tabs and newlines, then resolve against the site.
    cleaned = location.replace("\t", "").replace("\n", "").replace("\r", "").lstrip()
    assert cleaned.startswith("/") and not cleaned.startswith(("//", "/\\")), location
