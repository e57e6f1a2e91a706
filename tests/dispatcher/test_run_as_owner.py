"""A job's attack on other users and the service, replayed through the real dispatcher and
local executor as root: a student's job tries to read another lab's output, the service's
environment, its state directory and database, and to make itself an admin. Every try
fails; the job is its submitter's in account, directory and environment. Root only
(CI=true: never skipped)."""

from __future__ import annotations

import os
import shlex
import sqlite3
import stat
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.dispatcher.cycle import CycleDeps, run_cycle
from jpushare.executors.local import LocalExecutor
from jpushare.formats.cluster_file import parse_cluster
from jpushare.run_settings import JobRun
from jpushare.store.cluster_setup import load_cluster_spec
from tests.dispatcher.conftest import CLUSTER_YAML, GPUS, TIMEOUT_S
from tests.unix_accounts import MadeAccount, made_accounts, require_root

SECRET = f"secret-{uuid.uuid4().hex}"
DB_URL_SECRET = f"postgresql://svc:{uuid.uuid4().hex}@db/jpushare"


@dataclass
class Service:
    """A service as root: its state directory (0700) in a world-traversable place, its
    SQLite database there, the dispatcher and local executor in this process."""

    root: Path
    state_dir: Path
    db_file: Path
    sessions: sessionmaker[Session]
    executor: LocalExecutor
    users: dict[str, store.UserRecord]
    accounts: dict[str, MadeAccount]

    def submit(self, user: str, command: str, workdir: str, env: dict[str, str]) -> int:
        with self.sessions.begin() as s:
            return store.submit(
                s,
                user_id=self.users[user].id,
                name=f"{user}-job",
                command=command,
                num_gpus=1,
                now=store.utc_now(),
                run=JobRun(workdir=workdir, environment=env),
            ).job.id

    def run_to_end(self, job_id: int) -> store.JobRecord:
        deps = CycleDeps(self.sessions, self.executor)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            run_cycle(deps)
            with self.sessions() as s:
                job = store.get_job(s, job_id)
            if job.state in ("COMPLETED", "FAILED", "CANCELLED"):
                return job
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} did not end in {TIMEOUT_S} s: {job.state}")
            time.sleep(0.05)


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    require_root("jobs run as their owners only under a root service")
    # The service's own secret setting, as `jpushare serve` would have it.
    monkeypatch.setenv("JPUSHARE_DATABASE_URL", DB_URL_SECRET)
    root = Path("/tmp") / f"jpst-service-{uuid.uuid4().hex[:8]}"
    root.mkdir(mode=0o755)
    root.chmod(0o755)  # anyone may pass through: only the state dir's own mode protects it
    state_dir = root / "state"
    db_file = state_dir / "jpushare.sqlite"
    old_umask = os.umask(0o077)  # what `jpushare serve` sets
    try:
        state_dir.mkdir(mode=0o700)
        url = store.sqlite_url(db_file)
        store.upgrade(url)
        engine = store.make_engine(url)
        sessions = store.make_sessionmaker(engine)
        executor = LocalExecutor(state_dir / "executor", gpus=GPUS, cancel_grace_s=2.0)
        with made_accounts("a", "b") as accounts:
            now = store.utc_now()
            with sessions.begin() as s:
                load_cluster_spec(s, parse_cluster(CLUSTER_YAML), now)
                users = {
                    "a": store.create_user(
                        s, "lab-a-user", "alpha", "student", now, unix_user=accounts["a"].name
                    ),
                    "b": store.create_user(
                        s, "lab-b-student", "beta", "student", now, unix_user=accounts["b"].name
                    ),
                }
            yield Service(root, state_dir, db_file, sessions, executor, users, accounts)
            for run in executor.runs():
                if not run.state.ended:
                    executor.cancel(run.executor_id)
        engine.dispose()
    finally:
        os.umask(old_umask)
        for path in sorted(root.rglob("*"), reverse=True):
            path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
        root.rmdir()


def _probe(label: str, command: str) -> str:
    """A shell line that prints `label: ALLOWED` if `command` succeeds, else DENIED."""
    return (
        f"if {command} >/dev/null 2>&1; then echo {label}: ALLOWED; else echo {label}: DENIED; fi"
    )


def test_a_students_job_cannot_read_another_lab_the_service_or_its_database(
    service: Service,
) -> None:
    a, b = service.accounts["a"], service.accounts["b"]
    # Lab A's job writes a secret into its own output file (its default name).
    job_a = service.submit("a", f"echo {SECRET}", a.home, {"PATH": "/usr/bin:/bin"})
    assert service.run_to_end(job_a).state == "COMPLETED"
    a_output = Path(a.home) / f"jpushare-{job_a}.out"
    assert SECRET in a_output.read_text()
    st = a_output.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (a.uid, 0o600)

    db = str(service.db_file)
    probes = [
        # Controls: the same probes succeed where B may look (they can say ALLOWED).
        _probe("own_home", f"ls {shlex.quote(b.home)}"),
        _probe("own_environ", "cat /proc/self/environ"),
        _probe("a_output", f"cat {shlex.quote(str(a_output))}"),
        _probe("service_environ", f"cat /proc/{os.getpid()}/environ"),
        _probe("state_dir", f"ls {shlex.quote(str(service.state_dir))}"),
        _probe("runs_dir", f"ls {shlex.quote(str(service.state_dir / 'executor' / 'runs'))}"),
        _probe("sqlite_file", f"cat {shlex.quote(db)}"),
        _probe(
            "database",
            f"{sys.executable} -I -c "
            + shlex.quote(
                "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]);"
                " c.execute(\"UPDATE users SET role='admin'\"); c.commit()"
            )
            + f" {shlex.quote(db)}",
        ),
    ]
    job_b = service.submit("b", "\n".join(probes), b.home, {"PATH": "/usr/bin:/bin"})
    assert service.run_to_end(job_b).state == "COMPLETED"
    report = (Path(b.home) / f"jpushare-{job_b}.out").read_text()
    assert SECRET not in report
    assert "own_home: ALLOWED" in report and "own_environ: ALLOWED" in report, report
    for label in ("a_output", "service_environ", "state_dir", "runs_dir", "sqlite_file"):
        assert f"{label}: DENIED" in report, report
    assert "database: DENIED" in report, report
    assert DB_URL_SECRET not in report

    # B is still a student, by the database itself.
    with sqlite3.connect(db) as c:
        roles = dict(c.execute("SELECT name, role FROM users").fetchall())
    assert roles == {"lab-a-user": "student", "lab-b-student": "student"}
    st = service.state_dir.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert stat.S_IMODE(service.db_file.stat().st_mode) & 0o077 == 0


def test_the_job_is_its_submitters_in_account_directory_and_environment(
    service: Service,
) -> None:
    b = service.accounts["b"]
    workdir = Path(b.home) / "proj"
    workdir.mkdir()
    os.chown(workdir, b.uid, b.gid)
    command = (
        'echo "uid=$(id -u) groups=$(id -G) home=$HOME user=$USER logname=$LOGNAME '
        'pwd=$(pwd) myvar=$MYVAR dburl=${JPUSHARE_DATABASE_URL-unset} job=$JPUSHARE_JOB_ID"'
    )
    env = {"PATH": "/usr/bin:/bin", "MYVAR": "hello world", "HOME": "/elsewhere"}
    job = service.submit("b", command, str(workdir), env)
    assert service.run_to_end(job).state == "COMPLETED"
    out = workdir / f"jpushare-{job}.out"
    assert out.stat().st_uid == b.uid
    line = out.read_text().strip()
    assert line == (
        f"uid={b.uid} groups={b.gid} home={b.home} user={b.name} logname={b.name} "
        f"pwd={workdir} myvar=hello world dburl=unset job={job}"
    )


def test_a_missing_working_directory_fails_the_job_with_the_reason(service: Service) -> None:
    b = service.accounts["b"]
    missing = f"{b.home}/no-such-dir"
    job = service.submit("b", "true", missing, {})
    ended = service.run_to_end(job)
    assert ended.state == "FAILED"
    assert ended.reason is not None
    assert "the working directory: No such file or directory" in ended.reason


def test_a_directory_the_owner_cannot_enter_fails_the_job(service: Service) -> None:
    a = service.accounts["a"]
    private = Path(a.home) / "private"
    private.mkdir(mode=0o700)
    os.chown(private, a.uid, a.gid)
    job = service.submit("b", "true", str(private), {})
    ended = service.run_to_end(job)
    assert ended.state == "FAILED"
    assert ended.reason is not None and "Permission denied" in ended.reason


def test_an_account_missing_at_dispatch_fails_the_job(service: Service) -> None:
    with service.sessions.begin() as s:
        ghost = store.create_user(
            s, "ghost", "beta", "student", store.utc_now(), unix_user="jpst-nobody-here"
        )
    service.users["ghost"] = ghost
    job = service.submit("ghost", "true", "/tmp", {})
    ended = service.run_to_end(job)
    assert ended.state == "FAILED"
    assert ended.reason is not None and "no Unix account 'jpst-nobody-here'" in ended.reason


def test_the_oom_check_and_the_log_read_the_owners_private_file(service: Service) -> None:
    b = service.accounts["b"]
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    job = service.submit("b", f"echo {shlex.quote(oom)}; exit 1", b.home, {"PATH": "/bin"})
    deps = CycleDeps(service.sessions, service.executor)
    deadline = time.monotonic() + TIMEOUT_S
    while (run := service.executor.find(str(job), 1)) is None or not run.state.ended:
        assert time.monotonic() < deadline, "the run did not end"
        run_cycle(deps)
        time.sleep(0.05)
    output = Path(b.home) / f"jpushare-{job}.out"
    assert stat.S_IMODE(output.stat().st_mode) == 0o600 and output.stat().st_uid == b.uid
    assert run.state.value == "OOM", run  # SPEC §5: the service saw the owner's output
    assert oom in service.executor.log(str(job), 1)
