"""`jpushare serve --demo` end to end, as the README's run command uses it: a real process
on a free port with a fresh state dir (SQLite, local executor, examples/cluster.yaml), real
jobs submitted over HTTP that run, complete, get cancelled, reserve and start, with a
"why" at every step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.dispatcher.conftest import wait_for
from tests.dispatcher.processes import Service
from tests.service.demo_service import demo_service


class Api:
    def __init__(self, url: str, token: str, workdir: Path) -> None:
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
        )
        self.workdir = str(workdir)

    def submit(self, command: str, num_gpus: int = 1) -> int:
        body = {"name": "demo", "command": command, "num_gpus": num_gpus, "workdir": self.workdir}
        r = self.client.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        job_id: int = r.json()["id"]
        return job_id

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.client.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def why(self, job_id: int) -> dict[str, Any]:
        r = self.client.get(f"/v1/jobs/{job_id}/why")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        assert body["sentence"]
        return body

    def state_is(self, job_id: int, *states: str) -> bool:
        return self.job(job_id)["state"] in states


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[Service, Api, Path]]:
    with demo_service(tmp_path, "demo", JPUSHARE_CYCLE_S="0.3") as demo:
        values = demo.tokens
        assert values["JPUSHARE_URL"] == demo.url
        yield (
            demo.service,
            Api(values["JPUSHARE_URL"], values["JPUSHARE_TOKEN"], tmp_path),
            tmp_path,
        )


def test_the_demo_service_runs_completes_cancels_and_reserves_jobs_with_a_why_at_each_step(
    demo: tuple[Service, Api, Path],
) -> None:
    service, api, tmp = demo
    assert "jpushare submit --gpus 2 --wait -- sleep 30" in service.log()
    assert "(new, from the example cluster)" in service.log()

    # A job runs and completes.
    done = api.submit("echo hello; sleep 0.5")
    assert api.why(done)["job_id"] == done
    wait_for(lambda: api.state_is(done, "COMPLETED"), "the first job completes")
    assert api.why(done)["state"] == "COMPLETED"
    log = api.client.get(f"/v1/jobs/{done}/log")
    assert log.status_code == 200 and "hello" in log.text

    # A running job is cancelled; its run stops.
    long = api.submit("sleep 300")
    wait_for(lambda: api.state_is(long, "RUNNING"), "the long job runs")
    assert api.why(long)["state"] == "RUNNING"
    r = api.client.post(f"/v1/jobs/{long}/cancel")
    assert r.status_code == 200, r.text
    assert api.job(long)["state"] == "CANCELLED"
    run_file = tmp / "var" / "executor" / "runs" / f"{long}.1.json"
    wait_for(
        lambda: json.loads(run_file.read_text()).get("state") == "CANCELLED", "the run is stopped"
    )

    # Fill the cluster so that no placement has 2 idle GPUs, but some have 1.
    # 16 GPUs: node-b 4x5090, node-c 4x4090 + 4x5090, node-a 2x4090, node-d 2x3080ti.
    flags: dict[int, Path] = {}
    blockers: list[int] = []
    for n in (3, 3, 3, 2, 2):
        flag = tmp / f"flag-{len(blockers)}"
        blockers.append(api.submit(f"while [ ! -e '{flag}' ]; do sleep 0.05; done", n))
        flags[blockers[-1]] = flag
    wait_for(lambda: all(api.state_is(b, "RUNNING") for b in blockers), "the blockers run")

    # The 2-GPU job is the top job: it reserves the idle GPU of the strongest placement.
    pair = api.submit("echo pair", 2)
    wait_for(lambda: api.job(pair)["reservation"] is not None, "the 2-GPU job reserves")
    why = api.why(pair)
    assert why["code"] == "RESERVING", why
    reservation = api.job(pair)["reservation"]
    node = reservation["node"]
    # Free the blocker on that node: the reservation fills and the job starts.
    for b in blockers:
        if api.job(b)["node"] == node:
            flags[b].touch()
    wait_for(lambda: api.state_is(pair, "RUNNING", "COMPLETED"), "the 2-GPU job starts")
    wait_for(lambda: api.state_is(pair, "COMPLETED"), "the 2-GPU job completes")
    assert api.job(pair)["node"] == node
    assert api.why(pair)["state"] == "COMPLETED"
    for flag in flags.values():
        flag.touch()
    wait_for(lambda: all(api.state_is(b, "COMPLETED") for b in blockers), "the blockers end")
