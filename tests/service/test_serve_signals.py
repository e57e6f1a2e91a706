"""`jpushare serve --no-api` stops on SIGTERM whichever of its threads the kernel hands the
signal to. Found by the crash campaign (tests/dispatcher/crash_campaign.py) on Slurm: a
SIGTERM taken by the busy dispatcher thread waited for the main thread, which slept for an
hour at a time, so the service ignored `systemctl stop`. The test sends the signal to each
thread but the main one (`tgkill`), as the kernel may.
"""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

import pytest

from jpushare.store.engine import sqlite_url
from tests.dispatcher.conftest import wait_for
from tests.dispatcher.processes import service_env, start_service


def tgkill(pid: int, tid: int, signum: int) -> None:
    """Send `signum` to thread `tid` of process `pid` (glibc's tgkill(2) wrapper)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "tgkill"):
        pytest.skip("this C library has no tgkill()")
    if libc.tgkill(pid, tid, signum) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {signum})")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_serve_stops_on_a_signal_that_its_dispatcher_thread_received(
    tmp_path: Path, signum: signal.Signals
) -> None:
    env = service_env(sqlite_url(tmp_path / "db.sqlite"), tmp_path / "state")
    service = start_service("serve", env, tmp_path, "--no-api", "--log-level", "INFO")
    try:
        wait_for(lambda: "this process is now the dispatcher" in service.log(), "it leads")
        pid = service.proc.pid
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]
        assert threads, "serve runs its dispatcher on a thread"
        for tid in threads:
            tgkill(pid, tid, signum)
        # Bounded by the test's usual generous limit; before the fix it waited an hour.
        assert service.wait_exit("serve stops") == 0, service.log()
        assert f"signal {signum.name}: stopping" in service.log()
        assert "service stopped" in service.log()
    finally:
        service.kill()
