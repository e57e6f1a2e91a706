"""The backfill keeper on the real fake Slurm cluster (backfill/slurm_keeper.py).

It keeps as many backfill jobs per placement as JPU-Share reports idle or reserved GPU
groups (`wanted`, here given directly: the database's view is `service.backfill.
wanted_from`), lets Slurm preempt them for a research job and counts that as a yield, does
not resubmit while the GPUs are taken, adopts its jobs after a restart, cancels extras,
and integrates the GPU-seconds split (a clock of the test's: exact figures).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from jpushare.backfill.slurm_keeper import SlurmKeeper, Want
from jpushare.config import BackfillSettings
from jpushare.executors.backfill_servers import load_all, read_usage, read_yield_stats
from jpushare.executors.base import LaunchSpec, RunState
from jpushare.executors.slurm import SlurmExecutor
from jpushare.executors.slurm_parse import run_state
from tests.executors.contract import wait_for
from tests.executors.live_slurm import cluster_guard, session_prefix, shared_dir

pytestmark = pytest.mark.slurm

PREFIX = session_prefix()
WAIT_S = 60.0
PLACE = ("node-b", "rtx5090")


@pytest.fixture(scope="module", autouse=True)
def _cluster() -> Iterator[None]:
    yield from cluster_guard(PREFIX)


@pytest.fixture
def executor(tmp_path_factory: pytest.TempPathFactory) -> SlurmExecutor:
    return SlurmExecutor(shared_dir(tmp_path_factory, "keeper-logs"), name_prefix=PREFIX)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


SETTINGS = BackfillSettings(
    command="trap 'exit 0' TERM; echo serving {node} port {port} gpus {gpus}; "
    "while :; do sleep 0.1; done",
    gpus_per_server=1,
    backoff_s=30.0,
    backoff_max_s=600.0,
)


def _keeper(ex: SlurmExecutor, wanted: dict[tuple[str, str], Want], clock: Clock) -> SlurmKeeper:
    return SlurmKeeper(ex, SETTINGS, wanted=lambda: dict(wanted), clock=clock)


def _running(k: SlurmKeeper) -> set[str]:
    return {sid for sid, (_, job) in k.backfill.keeper_jobs().items() if job.state == "RUNNING"}


def _gpus_written(k: SlurmKeeper) -> bool:
    """Every job has written its `$SLURM_JOB_GPUS` (Slurm says RUNNING a moment before)."""
    files = [k.backfill.gpus_file(slot) for slot, _ in k.backfill.keeper_jobs().values()]
    return all(f.is_file() and f.read_text().strip() for f in files)


def _node_b_free(ex: SlurmExecutor) -> bool:
    (g,) = [g for g in ex.inventory() if (g.node, g.gpu_type) == PLACE]
    return g.used == 0 and g.backfill == 0


def test_the_keeper_fills_yields_adopts_and_cancels_extras(executor: SlurmExecutor) -> None:
    wait_for(lambda: _node_b_free(executor), 120.0, 1.0, "node-b's 5090s free")
    clock = Clock()
    wanted = {PLACE: Want(capacity=4, free=4, reserved=2)}
    keeper = _keeper(executor, wanted, clock)

    first = keeper.tick()
    assert len(first.submitted) == 4
    wait_for(lambda: _running(keeper) == set(first.submitted), WAIT_S, 0.2, "4 running")
    wait_for(lambda: _gpus_written(keeper), WAIT_S, 0.2, "4 GPU lists written")
    clock.t += 10
    report = keeper.tick()
    assert set(report.running) == set(first.submitted) and not report.submitted
    # 10 s x 4 GPUs served: 2 of them reserved, 2 idle; none idle unserved.
    usage = read_usage(keeper.dir)
    assert (usage.backfill_reserved_gpu_s, usage.backfill_idle_gpu_s, usage.idle_gpu_s) == (
        20.0,
        20.0,
        0.0,
    )
    records = load_all(keeper.dir)
    assert sorted(i for r in records for i in r.gpu_indices) == [0, 1, 2, 3]
    assert {r.node for r in records} == {"node-b"} and len({r.port for r in records}) == 4
    (g,) = [g for g in executor.inventory() if (g.node, g.gpu_type) == PLACE]
    assert (g.used, g.backfill) == (0, 4)  # free for research: not busy, not foreign

    # A research job on 2 of them: Slurm preempts two; JPU-Share now reports 2 free.
    job_id = f"t{uuid.uuid4().hex[:10]}"
    spec = LaunchSpec(job_id, 1, "research", "sleep 300", "node-b", "rtx5090", 2, "gpu")
    executor.submit(spec)

    def research_running() -> bool:
        info = executor.find(job_id, 1)
        return info is not None and info.state is RunState.RUNNING

    wait_for(research_running, WAIT_S, 0.2, "research running")
    wanted[PLACE] = Want(capacity=4, free=2, reserved=0)
    clock.t += 1
    report = keeper.tick()
    assert len(report.ended) == 2 and not report.submitted and not report.cancelled
    stats = read_yield_stats(keeper.dir)
    assert (stats["count"], stats["gpus"]) == (1, 2)  # one research job, two GPUs yielded
    assert len(load_all(keeper.dir)) == 2
    survivors = set(report.running)
    assert len(survivors) == 2

    # One group fewer reported free (a reservation ended, a node's slot drained...): the
    # extra is cancelled, with no backoff for its slot.
    wanted[PLACE] = Want(capacity=4, free=1, reserved=1)
    report = keeper.tick()
    assert len(report.cancelled) == 1 and not report.submitted

    # The research job ends: 4 groups free again, but the preempted slots wait their
    # backoff (30 s of the test's clock); the cancelled one does not.
    executor.cancel(executor.find(job_id, 1).executor_id)  # type: ignore[union-attr]
    wait_for(lambda: not research_running(), WAIT_S, 0.2, "research ended")
    wanted[PLACE] = Want(capacity=4, free=4, reserved=0)
    report = keeper.tick()
    assert len(report.submitted) == 1
    clock.t += 31
    report = keeper.tick()
    assert len(report.submitted) == 2
    jobs = keeper.backfill.keeper_jobs()
    live = {sid for sid, (_, job) in jobs.items() if not run_state(job.state).ended}
    assert len(live) == 4

    # A restarted keeper adopts the four, submits and cancels nothing.
    again = _keeper(executor, wanted, clock)
    report = again.tick()
    assert set(report.adopted) == live and not report.submitted and not report.cancelled

    again.stop_all()

    def all_ended() -> bool:
        return all(run_state(j.state).ended for _, j in again.backfill.keeper_jobs().values())

    wait_for(all_ended, WAIT_S, 0.2, "all ended")
    assert load_all(again.dir) == []
