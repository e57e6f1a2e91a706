"""The backfill keeper on the local executor, with real stand-in server processes.

Each behaviour of issue 22 item 5: servers on every free GPU; a research job never starts
while a server holds one of its GPUs, and only its GPUs are freed; reserved GPUs keep their
servers until the dispatch; a killed keeper's successor adopts or cleans up; a server that
ignores SIGTERM is killed after the grace; nothing a server does is a run (charged to none).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpushare.executors.backfill_servers import STOPPING, read_usage, read_yield_stats
from jpushare.executors.base import RunState
from tests.backfill.rig import WAIT_S, BackfillRig, server_pids
from tests.executors.contract import wait_for


@pytest.fixture
def rig(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BackfillRig]:
    """The rig, with the settings a test names in `KEEPER` (its module-level dict)."""
    made = BackfillRig.make(tmp_path, **dict(getattr(request.function, "keeper", {})))
    yield made
    made.cleanup()


def keeper(**settings: object):  # type: ignore[no-untyped-def]
    """Give a test's rig these keeper settings (and `flags` for the stand-in server)."""

    def mark(fn):  # type: ignore[no-untyped-def]
        fn.keeper = settings
        return fn

    return mark


def test_every_free_gpu_gets_a_server_that_answers_and_holds_its_gpu(rig: BackfillRig) -> None:
    report = rig.keeper().tick()
    assert len(report.started) == 4
    answers = rig.wait_serving([rig.port(i) for i in range(4)])
    assert sorted(a["data"][0]["gpus"] for a in answers.values()) == ["0", "1", "2", "3"]  # type: ignore[index]
    # Each holds its marker: a second holder is refused.
    held = subprocess.run(["flock", "-n", str(rig.markers / "ws1-gpu2"), "true"], check=False)
    assert held.returncode == 1
    # SPEC §1: the GPUs are free for research, and no server is a run.
    assert [g.used for g in rig.executor.inventory()] == [0]
    assert rig.executor.runs() == []


def test_a_job_starts_only_once_the_servers_on_its_gpus_are_gone_and_only_those(
    rig: BackfillRig,
) -> None:
    keeper = rig.keeper()
    keeper.tick()
    rig.wait_serving([rig.port(i) for i in range(4)])
    before = {k: server_pids(r) for k, r in rig.servers().items()}
    assert rig.executor.planned_gpus(rig.job("j1", 2)) == [0, 1]
    rig.executor.submit(rig.job("j1", 2))
    info = rig.wait_end("j1")
    assert info.state is RunState.COMPLETED, rig.executor.log("j1", 1)
    assert "FREE 0,1" in rig.executor.log("j1", 1)
    left = rig.servers()
    assert sorted(left) == ["ws1~2-2", "ws1~3-3"]
    assert {k: server_pids(r) for k, r in left.items()} == {k: before[k] for k in left}
    rig.wait_serving([rig.port(2), rig.port(3)])
    stats = read_yield_stats(rig.dir)
    assert (stats["count"], stats["gpus"], stats["killed"]) == (1, 2, 0)


@keeper(flags=("--term-delay 1.0",))
def test_a_slow_draining_server_delays_the_job_until_it_exits(rig: BackfillRig) -> None:
    rig.keeper().tick()
    rig.wait_serving([rig.port(0)])
    t0 = time.monotonic()
    rig.executor.submit(rig.job("j1", 1))
    waited = time.monotonic() - t0
    assert info_ok(rig, "j1")
    # It drained for a second; the job was not started meanwhile.
    assert waited >= 1.0
    assert read_yield_stats(rig.dir)["seconds_max"] >= 1.0


def info_ok(rig: BackfillRig, job_id: str) -> bool:
    info = rig.wait_end(job_id)
    assert info.state is RunState.COMPLETED, rig.executor.log(job_id, 1)
    return True


@keeper(flags=("--ignore-term",), grace_s=0.5)
def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(rig: BackfillRig) -> None:
    rig.keeper().tick()
    rig.wait_serving([rig.port(0)])
    pids = server_pids(rig.servers()["ws1~0-0"])
    t0 = time.monotonic()
    rig.executor.submit(rig.job("j1", 1))
    waited = time.monotonic() - t0
    assert 0.5 <= waited < 0.5 + 5.0  # the grace, then the kill (bounded), never more
    assert info_ok(rig, "j1")
    assert not any(Path(f"/proc/{p}").exists() and _running(p) for p in pids)
    assert read_yield_stats(rig.dir)["killed"] == 1
    assert "SIGTERM ignored" in (rig.dir / "ws1~0-0.log").read_text()


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def test_reserved_gpus_keep_serving_until_the_dispatch_and_are_counted_apart(
    rig: BackfillRig,
) -> None:
    now = [1000.0]
    keeper = rig.keeper(clock=lambda: now[0])
    rig.reserved[("ws1", "rtx4090")] = 2  # a reservation holds 2 of the 4 idle GPUs
    keeper.tick()
    rig.wait_serving([rig.port(i) for i in range(4)])
    now[0] += 3600.0
    keeper.tick()
    assert len(rig.servers()) == 4  # reserved GPUs keep their servers
    usage = read_usage(rig.dir)
    assert usage.backfill_reserved_gpu_s == pytest.approx(2 * 3600.0)
    assert usage.backfill_idle_gpu_s == pytest.approx(2 * 3600.0)
    assert usage.idle_gpu_s == 0.0
    # The reserving job is dispatched: its 2 GPUs yield; a research run holds them now.
    rig.reserved.clear()
    rig.executor.submit(rig.job("r1", 2, extra="; sleep 30"))
    now[0] += 1800.0
    report = keeper.tick()
    assert sorted(report.ended) == ["ws1~0-0", "ws1~1-1"]
    assert report.started == ()
    usage = read_usage(rig.dir)
    assert usage.backfill_idle_gpu_s == pytest.approx(2 * 3600.0 + 2 * 1800.0)
    assert usage.backfill_reserved_gpu_s == pytest.approx(2 * 3600.0)


@keeper(backoff_s=60.0, backoff_max_s=600.0)
def test_a_freed_group_is_restarted_after_its_backoff_which_grows(rig: BackfillRig) -> None:
    now = [1000.0]
    keeper = rig.keeper(clock=lambda: now[0])
    keeper.tick()
    rig.executor.submit(rig.job("j1", 1))  # yields GPU 0
    assert info_ok(rig, "j1")
    assert keeper.tick().ended == ("ws1~0-0",)
    now[0] += 59.0
    assert keeper.tick().started == ()  # within the backoff
    now[0] += 1.0
    assert keeper.tick().started == ("ws1~0-0",)
    rig.wait_serving([rig.port(0)])
    rig.executor.submit(rig.job("j2", 1))  # taken again at once: a flapping GPU
    assert info_ok(rig, "j2")
    keeper.tick()
    now[0] += 60.0
    assert keeper.tick().started == ()  # the second end in a row waits twice as long
    now[0] += 60.0
    assert keeper.tick().started == ("ws1~0-0",)


# A keeper that starts its servers and is SIGKILLed, as a crash would.
DYING_KEEPER = textwrap.dedent(
    """
    import os, signal, sys, json
    from jpushare.backfill.keeper import Keeper
    from jpushare.config import BackfillSettings
    from jpushare.executors.gpus import LocalGpu
    from jpushare.executors.local import LocalExecutor
    state_dir, command, port = sys.argv[1:4]
    ex = LocalExecutor(state_dir, gpus=[LocalGpu("ws1", i, "rtx4090") for i in range(4)],
                       node="ws1")
    k = Keeper(ex, BackfillSettings(command=command, port_base=int(port), backoff_s=0,
                                    backoff_max_s=0))
    k.tick()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_restarted_keeper_adopts_live_servers_and_cleans_up_dead_ones(rig: BackfillRig) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            DYING_KEEPER,
            str(rig.state_dir),
            rig.settings.command,
            str(rig.settings.port_base),
        ],
        check=False,
        timeout=60,
        env=os.environ | {"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    assert done.returncode == -signal.SIGKILL
    rig.wait_serving([rig.port(i) for i in range(4)])
    servers = rig.servers()
    assert len(servers) == 4
    # One server dies while no keeper runs; another was being stopped by an executor that
    # crashed mid-yield, long ago.
    dead = servers["ws1~1-1"]
    cgroup = dead.run_cgroup()
    if cgroup is not None:
        cgroup.kill()
    else:
        os.killpg(dead.pgid or 0, signal.SIGKILL)
    wait_for(lambda: not server_pids(dead) or None, WAIT_S, what="server 1 to die")
    pids = {k: server_pids(r) for k, r in servers.items()}
    report = rig.keeper().tick()
    assert sorted(report.adopted) == ["ws1~0-0", "ws1~2-2", "ws1~3-3"]
    assert report.ended == ("ws1~1-1",)
    assert report.started == ("ws1~1-1",)  # backoff 0: at once
    now = rig.servers()
    assert {k: server_pids(now[k]) for k in report.adopted} == {k: pids[k] for k in report.adopted}
    rig.wait_serving([rig.port(i) for i in range(4)])
    # The adopted ones still yield to a job.
    rig.executor.submit(rig.job("j1", 4))
    assert info_ok(rig, "j1")
    assert rig.servers() == {}


def test_a_stop_that_an_executor_left_half_done_is_finished(rig: BackfillRig) -> None:
    keeper = rig.keeper()
    keeper.tick()
    rig.wait_serving([rig.port(0)])
    from jpushare.executors.backfill_servers import save

    rec = rig.servers()["ws1~0-0"]
    rec.state, rec.stop_requested_at, rec.grace_s = STOPPING, time.time() - 60.0, 1.0
    save(rig.dir, rec)
    keeper.tick()
    assert "ws1~0-0" not in rig.servers()
    wait_for(lambda: not server_pids(rec) or None, WAIT_S, what="the server to be gone")


def test_a_keeper_stopping_stops_its_servers(rig: BackfillRig) -> None:
    keeper = rig.keeper()
    keeper.tick()
    rig.wait_serving([rig.port(i) for i in range(4)])
    recs = list(rig.servers().values())
    keeper.stop_all()
    assert rig.servers() == {}
    assert all(not server_pids(r) for r in recs)
