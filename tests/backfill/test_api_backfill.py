"""GET /v1/backfill with the real local executor and keeper, on both database backends."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare.backfill.keeper import Keeper
from jpushare.config import BackfillSettings
from jpushare.executors.backfill_servers import STOPPING, backfill_dir, load_all, save
from jpushare.executors.base import LaunchSpec
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from tests.api.conftest import ApiWorld, make_world
from tests.backfill.rig import WAIT_S, free_port_base, models, stand_in_command
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401 (fixtures)
from tests.executors.cgroup_cleanup import remove_cgroups
from tests.executors.contract import wait_for


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[LocalExecutor]:
    gpus = [LocalGpu("node-b", i, "rtx4090") for i in range(4)]
    ex = LocalExecutor(tmp_path / "local", gpus=gpus, node="node-b")
    yield ex
    for rec in load_all(backfill_dir(ex.state_dir)):
        cgroup = rec.run_cgroup()
        if cgroup is not None:
            cgroup.kill()
            cgroup.remove()
    remove_cgroups(ex.state_dir)


@pytest.fixture
def api(sessions: sessionmaker[Session], executor: LocalExecutor) -> Iterator[ApiWorld]:  # noqa: F811
    yield from make_world(sessions, executor)


def test_the_running_servers_are_listed_and_a_yielded_one_is_not(
    api: ApiWorld, executor: LocalExecutor, tmp_path: Path
) -> None:
    markers = tmp_path / "m"
    markers.mkdir()
    settings = BackfillSettings(
        command=stand_in_command(markers), port_base=free_port_base(4), grace_s=5.0
    )
    keeper = Keeper(executor, settings)
    empty = api.get("/v1/backfill").json()
    assert (empty["source"], empty["count"], empty["yields"]["count"]) == ("local", 0, 0)
    try:
        keeper.tick()
        for i in range(4):
            wait_for(partial(models, settings.port_base + i), WAIT_S)
        body = api.get("/v1/backfill").json()
        assert body["count"] == 4
        by_gpus = {tuple(s["gpus"]): s for s in body["data"]}
        assert sorted(by_gpus) == [(0,), (1,), (2,), (3,)]
        assert by_gpus[(2,)]["url"] == f"http://127.0.0.1:{settings.port_base + 2}"
        assert by_gpus[(2,)]["node"] == "node-b" and by_gpus[(2,)]["tier"] == "rtx4090"
        # /v1/placements says how many GPUs LLM backfill holds ("LLM" in the CLI, the page).
        (place,) = [
            p
            for p in api.get("/v1/placements").json()["data"]
            if (p["node"], p["tier"]) == ("node-b", "rtx4090")
        ]
        assert (place["llm_gpus"], place["llm_backfill_gpus"]) == (4, 4)
        # A research job takes GPUs 0-1: their servers go, the others stay listed.
        executor.submit(LaunchSpec("7", 1, "r", "sleep 30", "node-b", "rtx4090", 2))
        body = api.get("/v1/backfill").json()
        assert sorted(tuple(s["gpus"]) for s in body["data"]) == [(2,), (3,)]
        assert (body["yields"]["count"], body["yields"]["gpus"]) == (1, 2)
        llm = {
            (p["node"], p["tier"]): p["llm_gpus"] for p in api.get("/v1/placements").json()["data"]
        }
        assert llm[("node-b", "rtx4090")] == 2
        assert body["yields"]["max_seconds"] is not None
        keeper.tick()  # GPU-seconds: from the first tick to this one
        scraped = api.client.get("/metrics").text
        assert "jpushare_backfill_servers 2.0" in scraped
        assert "jpushare_backfill_yield_seconds_count 1.0" in scraped
        assert 'jpushare_backfill_gpu_seconds_total{on="idle"}' in scraped
        assert "jpushare_idle_gpu_seconds_total 0.0" in scraped
        # A server told to stop is not listed from that moment.
        rec = next(r for r in load_all(backfill_dir(executor.state_dir)) if r.gpu_indices == [3])
        rec.state = STOPPING
        save(backfill_dir(executor.state_dir), rec)
        assert [s["gpus"] for s in api.get("/v1/backfill").json()["data"]] == [[2]]
    finally:
        keeper.stop_all()
        for run in executor.runs():
            executor.cancel(run.executor_id)


def test_it_needs_a_token(api: ApiWorld) -> None:
    assert api.client.get("/v1/backfill").status_code == 401
