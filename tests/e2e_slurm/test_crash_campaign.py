"""On the real (fake-GPU) Slurm cluster, PostgreSQL: the crash campaign of
tests/dispatcher/crash_campaign.py, shorter than the local one (fewer kills and jobs).

The strong node is node-a (2 x rtx4090), the weak one node-d (2 x rtx3080ti, partition
`legacy`); the store drains the others. No run twice is read from Slurm itself: every Slurm
job of this test's prefix (`squeue -t all`: MinJobAge keeps ended jobs) is counted by name
`<prefix>-<job>-<attempt>`, at most one each; the runs' states and times are the executor's
reading of that same list.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.dispatcher.crash_campaign import (
    Campaign,
    ExecutorRun,
    Site,
    campaign_kills,
    campaign_seed,
)
from tests.dispatcher.processes import Service, start_service
from tests.e2e_slurm.conftest import TFLOPS, SlurmRig
from tests.executors.live_slurm import slurm

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]

KILLS = 3
BURST = 5


def slurm_runs(rig: SlurmRig) -> list[ExecutorRun]:
    return [
        ExecutorRun(
            job_id=int(r.job_id),
            attempt=r.attempt,
            state=r.state.value,
            ended=r.state.ended,
            node=r.node or "",
            started_at=r.started_at,
            ended_at=r.ended_at,
        )
        for r in rig.executor.runs()
    ]


def duplicate_names(prefix: str) -> list[str]:
    """Names of this prefix that Slurm holds more than one job of (ended ones included)."""
    names = slurm("squeue", "-h", "-t", "all", "-o", "%j").stdout.split()
    counts = Counter(n for n in names if n.startswith(f"{prefix}-"))
    return sorted(name for name, n in counts.items() if n > 1)


def test_serve_killed_at_random_on_slurm_loses_doubles_and_mischarges_nothing(
    postgres_rig: SlurmRig, tmp_path: Path
) -> None:
    rig = postgres_rig
    rig.open_only("node-a", "node-d")
    work = rig.shared / "work"
    work.mkdir()
    work.chmod(0o777)

    def start(name: str, extra: dict[str, str]) -> Service:
        env = rig.service_env(tmp_path, JPUSHARE_CYCLE_S="0.2", JPUSHARE_LEASE_S="1.5", **extra)
        return start_service(name, env, tmp_path, "--no-api", "--log-level", "INFO")

    site = Site(
        sessions=rig.sessions,
        db_url=rig.db_url,
        users=rig.users,
        strong=("node-a", "rtx4090"),
        weak=("node-d", "rtx3080ti"),
        tflops={"node-a": TFLOPS["rtx4090"], "node-d": TFLOPS["rtx3080ti"]},
        work=work,
        start=start,
        runs=lambda: slurm_runs(rig),
        duplicate_runs=lambda: duplicate_names(rig.prefix),
    )
    campaign = Campaign(
        site, campaign_seed(), kills=campaign_kills(KILLS), burst=BURST, max_life_s=2.0
    )
    print(campaign.run())
