"""Dispatcher test fixtures: a small declared cluster on both databases, and a cycle rig
over it (tests/cycle_rig.py): `rig` on the in-memory executor, for the cycle's logic;
`local_rig` on the real local executor, for what is about processes."""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.dispatcher.cycle import CycleDeps
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from jpushare.formats.cluster_file import parse_cluster
from jpushare.store.cluster_setup import load_cluster_spec
from tests.constants import SMALL_CLUSTER_GPUS
from tests.constants import SMALL_CLUSTER_YAML as CLUSTER_YAML
from tests.cycle_rig import TIMEOUT_S, MemoryRig, wait_for
from tests.cycle_rig import CycleRig as Rig
from tests.database import db_url, empty_db_url, engine, new_database, sessions  # noqa: F401
from tests.memory_executor import FastClock, MemoryExecutor, MemoryGpus

if TYPE_CHECKING:
    from tests.dispatcher.processes import World

__all__ = ["CLUSTER_YAML", "GPUS", "TIMEOUT_S", "Rig", "init_cluster", "wait_for"]

GPUS = tuple(
    LocalGpu(node, index, gpu_type)
    for node, gpu_type, count in SMALL_CLUSTER_GPUS
    for index in range(count)
)


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
class LocalRig(Rig):
    """The rig over the local executor (its state directory is the test's to look at)."""

    executor: LocalExecutor


@pytest.fixture
def rig(sessions: sessionmaker[Session], tmp_path: Path) -> MemoryRig:  # noqa: F811
    """The cluster on the in-memory executor: the cycle's logic, no processes. Its runs'
    clock goes 10 x real time: a run of 1 s takes 0.1 s of the test."""
    users = init_cluster(sessions)
    executor = MemoryExecutor([MemoryGpus(*g) for g in SMALL_CLUSTER_GPUS], FastClock(10.0))
    return MemoryRig(sessions, users, executor, CycleDeps(sessions, executor), tmp_path)


@pytest.fixture
def local_rig(sessions: sessionmaker[Session], tmp_path: Path) -> Iterator[LocalRig]:  # noqa: F811
    """The cluster on the real local executor (bash process groups)."""
    users = init_cluster(sessions)
    executor = local_executor(tmp_path / "executor")
    yield LocalRig(sessions, users, executor, CycleDeps(sessions, executor), tmp_path)
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
