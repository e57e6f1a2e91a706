"""On the local executor, SQLite and PostgreSQL: the crash campaign of `crash_campaign.py`
(randomized SIGKILLs of `serve` during a workload with OOM escalation, cancels and a
drain); no run twice by the executor's run records, one terminal state per job, every lab
charged exactly what its jobs cost."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from tests.constants import TFLOPS
from tests.dispatcher.crash_campaign import (
    Campaign,
    ExecutorRun,
    Site,
    campaign_kills,
    campaign_seed,
)
from tests.dispatcher.processes import Service, World

KILLS = 4  # per database; each costs a restart and a lease takeover (~2-3 s here)
BURST = 8


def records(state: Path) -> list[dict[str, Any]]:
    """The local executor's run records (`<job>.<attempt>.json`), read raw."""
    return [json.loads(p.read_text()) for p in sorted((state / "executor" / "runs").glob("*.json"))]


def kill_unended(state: Path) -> None:
    """Nothing outlives a failed test: SIGKILL the process group of every unended run."""
    for data in records(state):
        if data["state"] is None and data["pgid"] is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(data["pgid"], signal.SIGKILL)


def local_runs(state: Path) -> list[ExecutorRun]:
    """Every run the local executor recorded, as it recorded it."""
    out = []
    for data in records(state):
        out.append(
            ExecutorRun(
                job_id=int(data["job_id"]),
                attempt=int(data["attempt"]),
                state=data["state"] or "RUNNING",
                ended=data["state"] is not None,
                node=data["node"],
                started_at=data["started_at"],
                ended_at=data["ended_at"],
            )
        )
    return out


def test_serve_killed_at_random_loses_doubles_and_mischarges_nothing(world: World) -> None:
    work = world.tmp / "work"
    work.mkdir()

    def start(name: str, env: dict[str, str]) -> Service:
        return world.start(name, **{"JPUSHARE_LEASE_S": "1.5", **env})

    site = Site(
        sessions=world.sessions,
        db_url=world.db_url,
        users=world.users,
        strong=("node-a", "rtx4090"),
        weak=("node-b", "rtx3080ti"),
        tflops={"node-a": TFLOPS["rtx4090"], "node-b": TFLOPS["rtx3080ti"]},
        work=work,
        start=start,
        runs=lambda: local_runs(world.state),
        duplicate_runs=lambda: [],  # one record file per (job, attempt): see local_runs
    )
    campaign = Campaign(
        site, campaign_seed(), kills=campaign_kills(KILLS), burst=BURST, max_life_s=2.0
    )
    try:
        print(campaign.run())
    finally:
        kill_unended(world.state)
