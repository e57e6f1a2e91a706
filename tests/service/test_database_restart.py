"""The database restarts under a running service. A private PostgreSQL server
(tests/service/private_postgres.py) is stopped and started under `jpushare serve`: while it
is down the API answers 503 DATABASE_UNAVAILABLE in the JSON error shape, at once, and the
dispatcher says once that it paused; once it is back, both resume, and every job that was
accepted ends exactly once (the executor's own records say how often each ran)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jpushare import store
from tests.dispatcher.conftest import init_cluster, wait_for
from tests.dispatcher.processes import Service, executor_runs, service_env, start_service
from tests.service.demo_service import free_port
from tests.service.private_postgres import PrivatePostgres

# A request to a service whose database is down gets its 503 within this (the engine's
# connect timeout is 5 s); the client's own timeout is above it, so a hang fails the test.
BOUND_S = 15.0
OUTAGES = 2
PAUSED = "database unavailable, dispatching paused"
RESUMED = "database available again"


@pytest.fixture
def server() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres.create()
    try:
        yield pg
    finally:
        pg.destroy()


class Client:
    def __init__(self, url: str, token: str, workdir: Path) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=BOUND_S + 15
        )
        self.workdir = str(workdir)

    def submit(self, command: str) -> httpx.Response:
        body = {"name": "restart", "command": command, "num_gpus": 1, "workdir": self.workdir}
        return self.http.post("/v1/jobs", json=body)

    def states(self, job_ids: list[int]) -> list[str]:
        return [self.http.get(f"/v1/jobs/{j}").json()["state"] for j in job_ids]


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    body: dict[str, Any] = response.json()
    assert body["error"]["code"] == "DATABASE_UNAVAILABLE", body
    assert body["error"]["message"]
    assert response.headers["Retry-After"].isdigit()


def test_a_database_restart_under_serve_gives_503s_pauses_dispatching_and_loses_nothing(
    server: PrivatePostgres, tmp_path: Path
) -> None:
    store.upgrade(server.url)
    engine = store.make_engine(server.url)
    service: Service | None = None
    try:
        sessions = store.make_sessionmaker(engine)
        users = init_cluster(sessions)
        with sessions.begin() as s:
            token = store.issue_token(s, users["alice"].id, store.utc_now()).secret
        engine.dispose()  # the test's connections must not outlive the restart either

        port = free_port()
        state = tmp_path / "state"
        env = service_env(server.url, state, JPUSHARE_CYCLE_S="0.3")
        service = start_service("serve", env, tmp_path, "--port", str(port))
        api = Client(f"http://127.0.0.1:{port}", token, tmp_path)
        wait_for(lambda: _answers(api), "the service answers")
        marks = tmp_path / "ran"
        command = f"echo $JPUSHARE_JOB_ID >> {marks}; sleep 1"

        jobs: list[int] = []
        slowest = 0.0
        for outage in range(1, OUTAGES + 1):
            jobs += [_accepted(api.submit(command)) for _ in range(4)]  # 3 GPUs: one queues
            slowest = max(slowest, _outage(server, service, api, state, jobs, outage))
        print(f"\nslowest 503 while the database was down: {slowest * 1000:.0f} ms")
        jobs += [_accepted(api.submit(command)) for _ in range(2)]
        wait_for(lambda: set(api.states(jobs)) == {"COMPLETED"}, "every accepted job completes")

        # Exactly once each: one run per job in the executor, one mark per run, and the
        # 503s created nothing (ids are consecutive: nothing was taken in between).
        assert jobs == list(range(1, len(jobs) + 1))
        assert executor_runs(state) == sorted((str(j), 1) for j in jobs)
        assert sorted(int(x) for x in marks.read_text().split()) == jobs
        engine = store.make_engine(server.url)
        with store.make_sessionmaker(engine)() as s:
            for j in jobs:
                kinds: list[str] = [e.kind for e in store.job_history(s, j)]
                assert kinds.count("dispatched") == 1 and kinds.count("completed") == 1, kinds
        log = service.log()
        assert "Traceback" not in log, log
        assert log.count(PAUSED) == OUTAGES, log  # one line per outage, not one per cycle
    finally:
        if service is not None:
            assert service.stop() == 0, service.log()
        engine.dispose()


def _outage(
    server: PrivatePostgres, service: Service, api: Client, state: Path, jobs: list[int], n: int
) -> float:
    """Database outage number `n`, while jobs run and queue: every request during it gets
    its 503, the dispatcher pauses, and both resume once it is back. The slowest 503, s."""
    wait_for(lambda: "RUNNING" in api.states(jobs), "a job runs")
    running = [j for j, s in zip(jobs, api.states(jobs), strict=True) if s == "RUNNING"]

    server.stop()
    slowest = 0.0
    requests: list[Callable[[], httpx.Response]] = [
        lambda: api.submit("true"),
        lambda: api.http.get(f"/v1/jobs/{jobs[0]}"),
        lambda: api.http.get("/v1/queue"),
        lambda: api.http.post(f"/v1/jobs/{jobs[-1]}/cancel"),
    ]
    for request in requests:
        began = time.monotonic()
        assert_unavailable(request())
        slowest = max(slowest, time.monotonic() - began)
    assert api.http.get("/healthz").status_code == 503
    wait_for(lambda: service.log().count(PAUSED) == n, "the dispatcher says it paused")
    # The running jobs end while the database is down: their ends wait for it.
    wait_for(lambda: _exited(state, running), "the running jobs end during the outage")
    assert service.proc.poll() is None, service.log()

    server.start()
    wait_for(lambda: _answers(api), "the service answers again")
    wait_for(lambda: service.log().count(RESUMED) == n, "the dispatcher resumes")
    return slowest


def _answers(api: Client) -> bool:
    try:
        return api.http.get("/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _exited(state: Path, job_ids: list[int]) -> bool:
    """Whether the local executor's runs of these jobs (attempt 1) have ended."""
    runs = state / "executor" / "runs"
    return all((runs / f"{j}.1.exit").exists() for j in job_ids)


def _accepted(response: httpx.Response) -> int:
    assert response.status_code == 201, response.text
    job_id: int = response.json()["id"]
    return job_id
