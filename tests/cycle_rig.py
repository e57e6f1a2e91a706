"""One rig for whole dispatcher cycles, over any executor: a store, the real cycle, and
bounded polling (no bare sleeps as synchronisation).

`CycleRig` serves the real executors (local processes, Slurm): its jobs are bash commands,
a held job waits for a flag file. `MemoryRig` serves the in-memory executor: held jobs wait
on a gate and nothing runs. tests/dispatcher and tests/e2e_slurm build them;
tests/scenario_s2.py runs one scenario over each.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.dispatcher.cycle import CycleDeps, CycleReport, run_cycle
from jpushare.executors.base import Executor
from tests.job_script import FlagHold, Hold, Script, shell
from tests.memory_executor import Gate, MemoryExecutor, Program

TIMEOUT_S = 60.0  # generous: a loaded 2-core CI machine


def wait_for(
    done: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S, poll_s: float = 0.05
) -> None:
    """Poll `done()` until true; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for: {what}")
        pause.wait(poll_s)


@dataclass
class CycleRig:
    """A database with a cluster and users, an executor, and the cycle's dependencies.

    `tmp`: a directory the jobs and the test share (flag files). `poll_s`: the pacing of
    polls and of cycles in `cycle_until`. `check_observed`: every cycle must have observed
    the executor (Slurm: a failing `sinfo` fails the test at once, not at the timeout).
    """

    sessions: sessionmaker[Session]
    users: dict[str, store.UserRecord]
    executor: Executor
    deps: CycleDeps
    tmp: Path
    poll_s: float = 0.05
    check_observed: bool = False

    # --- jobs ----------------------------------------------------------------------------

    def submit(
        self,
        user: str,
        num_gpus: int,
        command: str = "true",
        name: str | None = None,
        **fields: Any,
    ) -> int:
        """Queue a job for `user`; `fields`: store.submit's others (min_tier, time_limit_s)."""
        with self.sessions.begin() as s:
            job = store.submit(
                s,
                user_id=self.users[user].id,
                name=name or f"{user}-{num_gpus}",
                command=command,
                num_gpus=num_gpus,
                now=store.utc_now(),
                **fields,
            ).job
        return job.id

    def script(self, script: Script) -> str:
        """The command of a job that does what `script` says."""
        return shell(script)

    def flag(self, name: str) -> Path:
        """A file a job's command waits for: `touch` it to let the job end."""
        return self.tmp / f"{name}.flag"

    def hold(self, name: str) -> Hold:
        """A job command that runs until released."""
        return FlagHold(self.flag(name), self.poll_s)

    def start_held(self, user: str, num_gpus: int, name: str) -> tuple[int, Hold]:
        """Submit a job of `user` that runs until released; cycle until it runs."""
        hold = self.hold(name)
        job_id = self.submit(user, num_gpus, hold.command)
        self.cycle_until(self.state_is(job_id, "RUNNING"), f"the held job {name!r} runs")
        return job_id, hold

    # --- the store -------------------------------------------------------------------------

    def job(self, job_id: int) -> store.JobRecord:
        with self.sessions() as s:
            return store.get_job(s, job_id)

    def history(self, job_id: int) -> list[store.JobEventRecord]:
        with self.sessions() as s:
            return store.job_history(s, job_id)

    def kinds(self, job_id: int) -> list[str]:
        """The kinds of the job's events, oldest first."""
        return [e.kind for e in self.history(job_id)]

    def released(self, job_id: int) -> list[str]:
        """Why each of the job's reservations was released, in order."""
        return [
            str(e.detail["reason"])
            for e in self.history(job_id)
            if e.kind == "released" and e.detail
        ]

    def usage(self, lab: str) -> float:
        with self.sessions() as s:
            return store.get_lab(s, lab).cumulative_usage

    def state_is(self, job_id: int, *states: str) -> Callable[[], bool]:
        return lambda: self.job(job_id).state in states

    # --- the dispatcher --------------------------------------------------------------------

    def cycle(self) -> CycleReport:
        report = run_cycle(self.deps)
        if self.check_observed:
            assert report.observed is not None, report.error
        return report

    def cycle_until(
        self, done: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S
    ) -> list[CycleReport]:
        """Run cycles until `done()`; fail after `timeout_s`. Returns the reports."""
        reports: list[CycleReport] = []
        deadline = time.monotonic() + timeout_s
        pause = threading.Event()
        while True:
            reports.append(self.cycle())
            if done():
                return reports
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout_s} s waiting for: {what}")
            pause.wait(self.poll_s)  # pacing between cycles, not synchronisation

    def wait_for(self, done: Callable[[], bool], what: str) -> None:
        wait_for(done, what, poll_s=self.poll_s)


@dataclass(frozen=True)
class GateHold:
    """An in-memory job that runs until its gate opens."""

    command: str
    gate: Gate

    def release(self) -> None:
        self.gate.open()


@dataclass
class MemoryRig(CycleRig):
    """The rig over the in-memory executor: held jobs wait on gates; nothing runs."""

    executor: MemoryExecutor
    poll_s: float = 0.005  # nothing to wait for but the database

    def script(self, script: Script) -> str:
        return self.executor.command(script)

    def hold(self, name: str) -> Hold:
        gate = Gate()
        return GateHold(self.executor.program(Program(gate=gate), name), gate)

    def oom_once(self, oom_line: str, then: str) -> str:
        """A job whose first attempt runs out of memory (`oom_line` on stderr, exit 1) after
        0.3 s (a run of 0 s would cost nothing), and whose later attempts print `then`."""
        first = Program(Script(error=oom_line, seconds=0.3, exit_code=1))
        later = Program(Script(then))
        return self.executor.program(lambda spec: first if spec.attempt == 1 else later)

    def foreign(self, node: str, gpu_type: str, gpus: int) -> Callable[[], None]:
        """Hold GPUs outside JPU-Share from now on; returns what gives them back."""
        self.executor.foreign[(node, gpu_type)] = gpus

        def give_back() -> None:
            self.executor.foreign.pop((node, gpu_type), None)

        return give_back
