"""Dispatcher test fixtures: a small declared cluster on both databases, a real local
executor over it, and bounded polling helpers (no bare sleeps as synchronisation)."""

from __future__ import annotations

import contextlib
import os
import pwd
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.dispatcher.cycle import CycleDeps, CycleReport, run_cycle
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from jpushare.formats.cluster_file import parse_cluster
from jpushare.store.cluster_setup import load_cluster_spec
from tests.database import db_url, empty_db_url, engine, new_database, sessions  # noqa: F401

if TYPE_CHECKING:
    from tests.dispatcher.processes import World

# node-a: 2 x rtx4090 (one placement); node-b: 1 x rtx3080ti.
CLUSTER_YAML = """
tiers:
  - {name: rtx3080ti, tflops: 34.1, sort_order: 10}
  - {name: rtx4090, tflops: 82.6, sort_order: 20}
nodes:
  - {name: node-a, gpus: {rtx4090: 2}}
  - {name: node-b, gpus: {rtx3080ti: 1}}
labs: {alpha: 0, beta: 0}
"""

GPUS = (
    LocalGpu("node-a", 0, "rtx4090"),
    LocalGpu("node-a", 1, "rtx4090"),
    LocalGpu("node-b", 0, "rtx3080ti"),
)

TIMEOUT_S = 60.0  # generous: a loaded 2-core CI machine


def init_cluster(factory: sessionmaker[Session]) -> dict[str, store.UserRecord]:
    """The cluster above, a student in each lab and an admin; users by name."""
    now = store.utc_now()
    # Their jobs run as this test's own account: under root the executor switches to the
    # account named, which must exist (tests/dispatcher/test_run_as_owner.py uses others).
    me = pwd.getpwuid(os.geteuid()).pw_name
    with factory.begin() as s:
        load_cluster_spec(s, parse_cluster(CLUSTER_YAML), now)
        return {
            "alice": store.create_user(s, "alice", "alpha", "student", now, unix_user=me),
            "bob": store.create_user(s, "bob", "beta", "student", now, unix_user=me),
            "root": store.create_user(s, "root", "alpha", "admin", now, unix_user=me),
        }


def local_executor(state_dir: Path, **kwargs: object) -> LocalExecutor:
    options: dict[str, object] = {"cancel_grace_s": 2.0, "start_grace_s": 2.0} | kwargs
    return LocalExecutor(state_dir, gpus=GPUS, **options)  # type: ignore[arg-type]


@dataclass
class Rig:
    """A database with the cluster, a local executor and the cycle's dependencies."""

    sessions: sessionmaker[Session]
    users: dict[str, store.UserRecord]
    executor: LocalExecutor
    deps: CycleDeps
    tmp: Path

    def submit(
        self, user: str, num_gpus: int, command: str = "true", name: str | None = None
    ) -> int:
        with self.sessions.begin() as s:
            job = store.submit(
                s,
                user_id=self.users[user].id,
                name=name or f"{user}-{num_gpus}",
                command=command,
                num_gpus=num_gpus,
                now=store.utc_now(),
            ).job
        return job.id

    def job(self, job_id: int) -> store.JobRecord:
        with self.sessions() as s:
            return store.get_job(s, job_id)

    def events(self, job_id: int) -> list[str]:
        with self.sessions() as s:
            return [e.kind for e in store.job_history(s, job_id)]

    def cycle(self) -> CycleReport:
        return run_cycle(self.deps)

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
            pause.wait(0.05)  # pacing between cycles, not synchronisation

    def state_is(self, job_id: int, *states: str) -> Callable[[], bool]:
        return lambda: self.job(job_id).state in states

    def flag(self, name: str) -> Path:
        """A file a job's command waits for: `touch` it to let the job end."""
        return self.tmp / f"{name}.flag"


def wait_for(done: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for: {what}")
        pause.wait(0.05)


def waits_for(flag: Path) -> str:
    """A command that runs until `flag` exists."""
    return f"while [ ! -e '{flag}' ]; do sleep 0.05; done"


@pytest.fixture
def rig(sessions: sessionmaker[Session], tmp_path: Path) -> Iterator[Rig]:  # noqa: F811
    users = init_cluster(sessions)
    executor = local_executor(tmp_path / "executor")
    yield Rig(sessions, users, executor, CycleDeps(sessions, executor), tmp_path)
    for run in executor.runs():  # nothing outlives the test
        if not run.state.ended:
            executor.cancel(run.executor_id)


@pytest.fixture
def world(sessions: sessionmaker[Session], db_url: str, tmp_path: Path) -> Iterator[World]:  # noqa: F811
    """Real service processes on the test database (both backends); killed afterwards."""
    from tests.dispatcher.processes import World  # it imports this module

    w = World(sessions, db_url, tmp_path)
    yield w
    for service in w.services:
        service.kill()


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres)])
def pg_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """`world` on PostgreSQL only, for what SQLite cannot have (a connection to cut)."""
    from tests.dispatcher.processes import World

    with contextlib.contextmanager(new_database)(request.param, tmp_path) as url:
        pg_engine = store.make_engine(url)
        w: World | None = None
        try:
            store.upgrade(url)
            w = World(store.make_sessionmaker(pg_engine), url, tmp_path)
            yield w
        finally:
            for service in w.services if w is not None else []:
                service.kill()
            pg_engine.dispose()
