"""LLM backfill on Slurm end to end: the real dispatcher cycle, the store, the real
SlurmExecutor and the Slurm keeper reading JPU-Share's view from the database
(`service.backfill.wanted_from`), on node-b's four 5090s.

The keeper fills all four GPUs with backfill jobs; observe counts them free (busy 0) and
never foreign; a 2-GPU research job dispatched there starts with Slurm preempting two of
them, exactly the GPUs it gets; a 4-GPU job then reserves the other two while backfill
keeps serving them (the watch-list's "reserved GPU-hours served by backfill"), and starts
once Slurm preempts the last two. Every lab's usage is its own research jobs' bill only:
nothing the backfill jobs ran is charged to anyone.
"""

from __future__ import annotations

import time

import pytest

from jpushare.backfill.slurm_keeper import SlurmKeeper
from jpushare.config import BackfillSettings
from jpushare.executors.backfill_servers import read_usage, read_yield_stats
from jpushare.service.backfill import wanted_from
from jpushare.store.aggregates import foreign_gpus_by_tier
from jpushare.store.observations import load_observed_busy
from tests.e2e_slurm.conftest import SlurmRig

pytestmark = pytest.mark.slurm

SETTINGS = BackfillSettings(
    command="trap 'exit 0' TERM; while :; do sleep 0.1; done",
    gpus_per_server=1,
    backoff_s=0.0,  # a preempted slot is submitted again at once: Slurm keeps it pending
)


def _backfill_running(keeper: SlurmKeeper) -> int:
    return sum(1 for _, job in keeper.backfill.keeper_jobs().values() if job.state == "RUNNING")


def test_backfill_jobs_yield_through_preemption_and_are_charged_to_no_lab(
    rig: SlurmRig,
) -> None:
    rig.open_only("node-b")
    rig.cycle()
    ahead = [0.0]  # the keeper's clock runs this far ahead of the real one (the split)
    keeper = SlurmKeeper(
        rig.executor,
        SETTINGS,
        wanted=wanted_from(rig.sessions),
        clock=lambda: time.time() + ahead[0],
    )
    try:
        assert len(keeper.tick().submitted) == 4
        rig.wait_for(lambda: _backfill_running(keeper) == 4, "4 backfill jobs run")
        rig.cycle()
        with rig.sessions() as s:
            assert load_observed_busy(s).get(("node-b", "rtx5090"), 0) == 0  # free for research
            assert foreign_gpus_by_tier(s).get("rtx5090", 0) == 0  # and not foreign

        # A 2-GPU research job: Slurm preempts two backfill jobs, the job starts.
        small, hold = rig.start_held("alice", 2, "small")
        assert rig.job(small).node_name == "node-b"
        keeper.tick()
        assert _backfill_running(keeper) == 2
        with rig.sessions() as s:
            assert load_observed_busy(s).get(("node-b", "rtx5090"), 0) == 2
            assert foreign_gpus_by_tier(s).get("rtx5090", 0) == 0

        # A 4-GPU job reserves the two GPUs backfill still serves.
        big = rig.submit("bob", 4, "sleep 1")
        rig.cycle_until(lambda: rig.job(big).reserved_gpus == 2, "the 4-GPU job reserves 2")
        keeper.tick()
        ahead[0] += 10.0
        keeper.tick()  # 10 s more of the split: 2 reserved GPUs served
        assert _backfill_running(keeper) == 2
        assert read_usage(keeper.dir).backfill_reserved_gpu_s >= 20.0

        # The small job ends: the big one is dispatched, Slurm preempts the last two.
        hold.release()
        rig.cycle_until(rig.state_is(big, "RUNNING", "COMPLETED"), "the 4-GPU job starts")
        rig.cycle_until(rig.state_is(big, "COMPLETED"), "the 4-GPU job completes")
        rig.cycle_until(rig.state_is(small, "COMPLETED"), "the small job completes")
        keeper.tick()
        assert read_yield_stats(keeper.dir)["count"] >= 2  # one per preempting research job

        # Each lab is charged its own research jobs, nothing else.
        s_job, b_job = rig.job(small), rig.job(big)
        assert rig.usage("BCG") == pytest.approx(s_job.run_cost + s_job.reservation_cost_tflop_s)
        assert rig.usage("KDG") == pytest.approx(b_job.run_cost + b_job.reservation_cost_tflop_s)
        assert rig.usage("NLP") == 0.0
        assert rig.run_names() == sorted(rig.run_name(j) for j in (small, big))
    finally:
        keeper.stop_all()
