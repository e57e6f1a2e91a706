"""The end-to-end rig on the real (fake-GPU) Slurm cluster: a store, the real dispatcher cycle
and the real `SlurmExecutor`, with the cluster's state made well-defined per test.

- The cluster is scripts/slurm/start-fake-cluster.sh's; unreachable -> skip, or fail under
  CI=true (tests/executors/live_slurm.py). Tests that set nodes down need root.
- The store holds examples/slurm-cluster.yaml (tiers with their partitions, the four
  nodes); each test opens only the nodes it uses and drains the rest in the store (admin
  drain), so no job can land elsewhere. Slurm itself is left as it is.
- Each test has its own Slurm job-name prefix: JPU-Share job ids restart at 1 in every
  fresh database, and the executor finds runs by name (`<prefix>-<job>-<attempt>`), so a
  shared prefix would make a test find an earlier test's run. Teardown cancels every job of
  the prefix (JPU-Share's and the "foreign" ones the test submitted by hand, named
  `<prefix>f<n>`, which JPU-Share does not parse as its own) and resumes nodes left down.
- Cycles are run explicitly (`cycle_until`), with bounded polling; blockers wait for flag
  files in a directory the jobs (run by slurmd) and the test share.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jpushare import store
from jpushare.dispatcher.cycle import CycleDeps
from jpushare.executors.slurm import SlurmExecutor
from jpushare.formats.cluster_file import load_cluster
from jpushare.store.cluster_setup import load_cluster_spec
from tests.constants import TFLOPS
from tests.cycle_rig import TIMEOUT_S, CycleRig, wait_for
from tests.database import new_database
from tests.executors.live_slurm import (
    NODES,
    cancel_prefixed,
    require_cluster,
    resume_all,
    session_prefix,
    slurm,
)
from tests.job_script import FlagHold

REPO = Path(__file__).resolve().parents[2]
CLUSTER_FILE = REPO / "examples" / "slurm-cluster.yaml"
POLL_S = 0.1

__all__ = ["TFLOPS", "TIMEOUT_S", "SlurmRig", "make_rig", "wait_for", "waits_for"]


@pytest.fixture(scope="session", autouse=True)
def _cluster_up() -> None:
    require_cluster()


def waits_for(flag: Path) -> str:
    """A command that runs until `flag` exists."""
    return FlagHold(flag, POLL_S).command


def slurm_names(prefix: str) -> list[str]:
    """Names of every Slurm job the controller still holds whose name starts with prefix."""
    out = slurm("squeue", "-h", "-t", "all", "-o", "%j").stdout
    return sorted(name for name in out.split() if name.startswith(prefix))


def slurm_state(job_name: str) -> list[str]:
    out = slurm("squeue", "-h", "-t", "all", f"--name={job_name}", "-o", "%T").stdout
    return out.split()


@dataclass(kw_only=True)
class SlurmRig(CycleRig):
    """The cycle rig (tests/cycle_rig.py) on a SlurmExecutor with this test's prefix; `tmp`
    is the directory the jobs and the test share."""

    executor: SlurmExecutor
    db_url: str
    prefix: str
    foreign: list[str] = field(default_factory=list)
    poll_s: float = POLL_S
    check_observed: bool = True

    @property
    def shared(self) -> Path:
        return self.tmp

    def open_only(self, *nodes: str) -> None:
        """Drain every node but `nodes` in the store (admin drain: R5 for JPU-Share only)."""
        now = store.utc_now()
        with self.sessions.begin() as s:
            for node in NODES:
                if node in nodes:
                    store.undrain_node(s, node, now)
                else:
                    store.drain_node(s, node, "e2e test: not used", now)

    def service_env(self, tmp_path: Path, **settings: str) -> dict[str, str]:
        """The environment of a `jpushare serve` on this rig's database and Slurm prefix:
        this process's less its JPUSHARE_* settings, state under tmp_path/var, `settings`."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")}
        env.update(
            JPUSHARE_DATABASE_URL=self.db_url,
            JPUSHARE_STATE_DIR=str(tmp_path / "var"),
            JPUSHARE_EXECUTOR="slurm",
            JPUSHARE_SLURM_LOG_DIR=str(self.shared / "logs"),
            JPUSHARE_SLURM_PREFIX=self.prefix,
            **settings,
        )
        return env

    # --- Slurm by hand -----------------------------------------------------------------

    def foreign_job(self, node: str, gres: str, flag: Path) -> str:
        """sbatch a job outside JPU-Share (not its name format) that holds GPUs until flag.

        `--no-requeue`: a node set down ends it instead of queueing it for later."""
        name = f"{self.prefix}f{len(self.foreign)}"
        out = slurm(
            "sbatch",
            "--parsable",
            f"--job-name={name}",
            f"--nodelist={node}",
            f"--gres=gpu:{gres}",
            "--partition=gpu",
            "--no-requeue",
            f"--output={self.shared / (name + '.out')}",
            "--wrap",
            waits_for(flag),
        ).stdout.strip()
        self.foreign.append(name)
        wait_for(lambda: slurm_state(name) == ["RUNNING"], f"foreign job {name} runs")
        return out.split(";")[0]

    def run_names(self) -> list[str]:
        """JPU-Share's Slurm job names of this test (`<prefix>-<job>-<attempt>`)."""
        return slurm_names(f"{self.prefix}-")

    def run_name(self, job_id: int, attempt: int = 1) -> str:
        return f"{self.prefix}-{job_id}-{attempt}"


def make_rig(
    backend: str,
    tmp_path: Path,
    shared: Path,
    *,
    cluster: Path = CLUSTER_FILE,
    gpu_type_to_tier: Mapping[str, str] | None = None,
) -> Iterator[SlurmRig]:
    """A rig on a fresh database of `backend` holding `cluster`; cleans up afterwards."""
    prefix = session_prefix()
    for url in new_database(backend, tmp_path):
        store.upgrade(url)
        engine = store.make_engine(url)
        sessions = store.make_sessionmaker(engine)
        now = store.utc_now()
        me = pwd.getpwuid(os.geteuid()).pw_name
        with sessions.begin() as s:
            load_cluster_spec(s, load_cluster(cluster), now)
            users = {
                # Their jobs run as this test's account (root: sbatch --uid of the owner).
                "alice": store.create_user(s, "alice", "BCG", "student", now, unix_user=me),
                "bob": store.create_user(s, "bob", "KDG", "student", now, unix_user=me),
                "carol": store.create_user(s, "carol", "NLP", "student", now, unix_user=me),
            }
        executor = SlurmExecutor(
            shared / "logs", name_prefix=prefix, gpu_type_to_tier=gpu_type_to_tier
        )
        rig = SlurmRig(
            sessions=sessions,
            users=users,
            executor=executor,
            deps=CycleDeps(sessions, executor),
            tmp=shared,
            db_url=url,
            prefix=prefix,
        )
        try:
            yield rig
        finally:
            cancel_prefixed(prefix)
            if os.geteuid() == 0:
                resume_all()
            engine.dispose()


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A directory the jobs (slurmd, as this user) and the test both use."""
    path = tmp_path / "shared"
    path.mkdir()
    path.chmod(0o777)
    return path


@pytest.fixture
def sqlite_rig(tmp_path: Path, shared: Path) -> Iterator[SlurmRig]:
    yield from make_rig("sqlite", tmp_path, shared)


@pytest.fixture
def postgres_rig(tmp_path: Path, shared: Path) -> Iterator[SlurmRig]:
    yield from make_rig("postgresql", tmp_path, shared)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def rig(request: pytest.FixtureRequest, tmp_path: Path, shared: Path) -> Iterator[SlurmRig]:
    """Both databases (for the cheap scenarios)."""
    yield from make_rig(request.param, tmp_path, shared)
