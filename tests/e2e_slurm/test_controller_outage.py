"""The Slurm controller goes away under a running service, then comes back.

A real `jpushare serve` (API and dispatcher, Slurm executor, SQLite, this test's job-name
prefix) runs two jobs on node-a's two GPUs with a third queued behind them; slurmctld is
stopped (tests/e2e_slurm/controller.py: restarted in a `finally` and by a watchdog), and
one running job ends while it is down. Meanwhile: the dispatcher logs that it cannot read
the executor and retries each cycle; the running jobs stay RUNNING (not declared lost, not
requeued); the queued job waits; the API answers reads and takes a new job. Once slurmctld
is back: the job that ended is recorded COMPLETED, the queued ones start, and every job
ends COMPLETED as exactly one Slurm job.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jpushare import store
from tests.dispatcher.processes import Service, start_service
from tests.e2e_slurm.conftest import SlurmRig, make_rig, slurm_names, wait_for, waits_for
from tests.e2e_slurm.controller import controller_down
from tests.service.demo_service import free_port

pytestmark = pytest.mark.slurm

UNREACHABLE = "executor unreachable, cycle skipped"
RETRIES = 2  # cycles the dispatcher must have retried during the outage


@pytest.fixture
def sqlite_rig(tmp_path: Path, shared: Path) -> Iterator[SlurmRig]:
    yield from make_rig("sqlite", tmp_path, shared)


class Api:
    def __init__(self, url: str, token: str, workdir: Path) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
        )
        self.workdir = str(workdir)

    def submit(self, command: str) -> int:
        body = {"name": "outage", "command": command, "num_gpus": 1, "workdir": self.workdir}
        r = self.http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        job_id: int = r.json()["id"]
        return job_id

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.http.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def states(self, job_ids: list[int]) -> list[str]:
        return [self.job(j)["state"] for j in job_ids]


def test_a_lost_slurm_controller_pauses_dispatching_loses_nothing_and_reconciles(
    sqlite_rig: SlurmRig, tmp_path: Path
) -> None:
    rig = sqlite_rig
    rig.open_only("node-a")  # 2 x rtx4090
    with rig.sessions.begin() as s:
        token = store.issue_token(s, rig.users["alice"].id, store.utc_now()).secret
    port = free_port()
    env = rig.service_env(tmp_path, JPUSHARE_CYCLE_S="0.3", JPUSHARE_LEASE_S="3")
    service = start_service("serve", env, tmp_path, "--port", str(port))
    try:
        api = Api(f"http://127.0.0.1:{port}", token, rig.shared)
        wait_for(lambda: _answers(api), "the service answers")
        ending, running, queued = (api.submit(waits_for(rig.flag(n))) for n in "abc")
        wait_for(lambda: api.states([ending, running]) == ["RUNNING"] * 2, "two jobs run")
        assert api.job(queued)["state"] == "GLOBAL_QUEUE_WAIT"

        with controller_down():
            before = service.log().count(UNREACHABLE)
            rig.flag("a").touch()  # this job ends while the controller is away
            wait_for(
                lambda: service.log().count(UNREACHABLE) >= before + RETRIES,
                f"the dispatcher retries {RETRIES} cycles",
            )
            assert _answers(api)
            assert api.states([ending, running, queued]) == [
                "RUNNING",
                "RUNNING",
                "GLOBAL_QUEUE_WAIT",
            ]
            late = api.submit(waits_for(rig.flag("d")))  # the API still takes jobs
            assert api.http.get("/v1/queue").status_code == 200
            assert api.job(late)["state"] == "GLOBAL_QUEUE_WAIT"
            assert service.proc.poll() is None, service.log()

        jobs = [ending, running, queued, late]
        wait_for(lambda: api.job(ending)["state"] == "COMPLETED", "the ended job is recorded")
        wait_for(lambda: api.job(queued)["state"] == "RUNNING", "the queued job starts")
        for name in "bcd":
            rig.flag(name).touch()
        wait_for(lambda: set(api.states(jobs)) == {"COMPLETED"}, "every job completes")
        assert slurm_names(f"{rig.prefix}-") == sorted(rig.run_name(j) for j in jobs)
        for j in jobs:
            kinds = rig.kinds(j)
            assert kinds.count("dispatched") == 1 and kinds.count("completed") == 1, kinds
            assert "requeued" not in kinds and rig.job(j).attempts == 1
        assert "Traceback" not in service.log()
    finally:
        assert _stop(service) == 0, service.log()


def _answers(api: Api) -> bool:
    try:
        return api.http.get("/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(service: Service) -> int:
    return service.stop()
