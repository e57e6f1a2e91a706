"""Stop and start the fake cluster's `slurmctld` (scripts/slurm/start-fake-cluster.sh's), for
the controller-outage test. Root only.

The controller's pid is in `$FAKE_SLURM_ROOT/run/slurmctld.pid` (default
/var/lib/slurm-fake); it is started again as the start script does (`slurmctld`, which
reads /etc/slurm/slurm.conf, recovers its jobs from its state directory and daemonizes).
Other tests may share the cluster, so `controller_down()` keeps the outage short and
always ends it: in a `finally`, and, should the test process itself be killed before
that, by a watchdog shell in its own session that starts the controller again after
`WATCHDOG_S` if nothing answers `scontrol ping` by then.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.missing import missing

ROOT = Path(os.environ.get("FAKE_SLURM_ROOT", "/var/lib/slurm-fake"))
PID_FILE = ROOT / "run" / "slurmctld.pid"
WATCHDOG_S = 90
WAIT_S = 60.0


def controller_pid() -> int | None:
    """The running slurmctld's pid, from its pid file (None if it is not running)."""
    try:
        pid = int(PID_FILE.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"slurmctld" in cmdline else None


def controller_up() -> bool:
    try:
        out = subprocess.run(
            ["scontrol", "ping"], capture_output=True, text=True, timeout=20, check=False
        ).stdout
    except subprocess.TimeoutExpired:
        return False
    return "is UP" in out


def _wait(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"slurmctld: timed out waiting for {what}")
        threading.Event().wait(0.1)


def stop_controller() -> None:
    pid = controller_pid()
    if pid is None:
        raise RuntimeError(f"no running slurmctld in {PID_FILE}")
    os.kill(pid, signal.SIGTERM)
    _wait(lambda: not Path(f"/proc/{pid}").exists(), "slurmctld to exit")


def start_controller() -> None:
    if controller_pid() is None:
        subprocess.run(
            ["slurmctld"], stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=True
        )
    _wait(controller_up, "slurmctld to answer scontrol ping")


@contextlib.contextmanager
def controller_down() -> Iterator[None]:
    """slurmctld stopped for the body; started again whatever happens."""
    if os.geteuid() != 0:
        missing("stopping slurmctld needs root")
    watchdog = subprocess.Popen(
        [
            "sh",
            "-c",
            f"sleep {WATCHDOG_S}; scontrol ping 2>/dev/null | grep -q 'is UP' || slurmctld",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives the test process
    )
    try:
        stop_controller()
        yield
    finally:
        try:
            start_controller()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(watchdog.pid, signal.SIGKILL)  # the shell and its sleep
            watchdog.wait(timeout=10)
