"""Test hook: kill or freeze the dispatcher process at a named point of its cycle (SPEC §5
crash safety; a frozen leader must lose its lease, `dispatcher.lock`).

`JPUSHARE_CRASH_AT=<point>` makes the dispatcher SIGKILL itself the first time it reaches
that point, so the tests can prove that a process killed there neither loses a job nor
starts it twice once restarted. SIGKILL, not an exception or `sys.exit`: nothing runs after
it (no `finally`, no commit, no atexit), as with a real kill or power loss.

Points (see `cycle.py` and `launch.py` for where each is):
- `after_observe`: the observation is committed, nothing decided yet;
- `in_record`: the decisions are written in the recording transaction, not committed
  (its row locks held; on PostgreSQL the server ends the transaction once it has idled
  for the lease's length, see `dispatcher.lock`);
- `after_record`: the decisions are committed (jobs DISPATCHED), nothing submitted;
- `after_submit`: the executor accepted a run, its id is not recorded (job DISPATCHED
  without `executor_id`).

`JPUSHARE_CRASH_SIGNAL=STOP` freezes the process there instead (SIGSTOP, the first time
only, so that it goes on after a SIGCONT): the tests of the dispatcher lease freeze a
leader at a known point, let a standby take over, then wake it and watch it step down.

Never set it in production. The local executor does not pass JPUSHARE_* variables on to
jobs, so the jobs themselves never see it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Final, Literal

log = logging.getLogger(__name__)

CRASH_AT_ENV: Final = "JPUSHARE_CRASH_AT"
CRASH_SIGNAL_ENV: Final = "JPUSHARE_CRASH_SIGNAL"
_frozen: set[str] = set()

CrashPoint = Literal["after_observe", "in_record", "after_record", "after_submit"]
CRASH_POINTS: Final[tuple[CrashPoint, ...]] = (
    "after_observe",
    "in_record",
    "after_record",
    "after_submit",
)


def crash_point(point: CrashPoint) -> None:
    """SIGKILL (or SIGSTOP) this process if `JPUSHARE_CRASH_AT` names `point` (a test hook)."""
    if os.environ.get(CRASH_AT_ENV) != point:
        return
    freeze = os.environ.get(CRASH_SIGNAL_ENV, "KILL").upper() == "STOP"
    if freeze and point in _frozen:
        return
    what = "freezing" if freeze else "killing"
    message = f"JPUSHARE_CRASH_AT={point}: {what} dispatcher process {os.getpid()} (test hook)"
    log.critical(message)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    if freeze:
        _frozen.add(point)
        # To this thread: it then stops before its next instruction. Sent to the process,
        # another thread may take the signal, and this one runs on for a moment (seen: into
        # the executor's submit, holding its file lock, before the stop reached it).
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        log.critical("JPUSHARE_CRASH_AT=%s: process %d woke up (test hook)", point, os.getpid())
        return
    os.kill(os.getpid(), signal.SIGKILL)
