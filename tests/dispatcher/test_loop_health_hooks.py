"""The loop tells the health counters about every cycle: done, or failed and how."""

from __future__ import annotations

import threading
from dataclasses import replace

import sqlalchemy as sa

from jpushare.dispatcher.cycle import CycleReport
from jpushare.dispatcher.lock import NoLock
from jpushare.dispatcher.loop import Dispatcher
from tests.cycle_rig import MemoryRig


class FailingLock(NoLock):
    """A lock whose renewal raises `errors` in turn, then holds."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors

    def hold(self) -> bool:
        if self.errors:
            raise self.errors.pop(0)
        return True


class Unreachable:
    """An executor whose observation fails, as Slurm's does without its controller."""

    def inventory(self) -> list[object]:
        raise RuntimeError("sinfo: Unable to contact slurm controller")


def test_failed_and_done_cycles_reach_the_hooks(rig: MemoryRig) -> None:
    stop = threading.Event()
    seen: list[str] = []

    def on_cycle(report: CycleReport) -> None:
        seen.append("done" if report.observed is not None else "executor")
        if len(seen) == 4:
            stop.set()

    database_down = sa.exc.OperationalError("SELECT 1", {}, Exception("server closed"))
    lock = FailingLock([database_down, RuntimeError("a bug")])
    dispatcher = Dispatcher(rig.deps, lock, cycle_s=0.01, on_cycle=on_cycle, on_failure=seen.append)
    dispatcher.run_forever(stop)
    assert seen == ["database", "error", "done", "done"]

    seen.clear()
    stop.clear()
    deps = replace(rig.deps, executor=Unreachable())  # type: ignore[arg-type]
    dispatcher = Dispatcher(deps, NoLock(), cycle_s=0.01, on_cycle=on_cycle)
    dispatcher.run_forever(stop)
    assert seen == ["executor"] * 4
