"""Real service processes for the crash and two-dispatcher tests: start, watch, kill.

Each process is `python -m jpushare.service serve --no-api` on the test's database and a
local-executor state dir, with a short cycle. Its output goes to a file the test reads.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from tests.dispatcher.conftest import CLUSTER_YAML, TIMEOUT_S, init_cluster, wait_for

REPO = Path(__file__).resolve().parents[2]


def service_env(db_url: str, state_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")}
    cluster = state_dir / "cluster.yaml"
    state_dir.mkdir(parents=True, exist_ok=True)
    cluster.write_text(CLUSTER_YAML)
    env.update(
        JPUSHARE_DATABASE_URL=db_url,
        JPUSHARE_STATE_DIR=str(state_dir),
        JPUSHARE_CLUSTER=str(cluster),
        JPUSHARE_CYCLE_S="0.2",
        # Longer than a few cycles of a loaded 2-core machine, so a busy leader is not
        # replaced (safe if it were, but the tests count leaders); short enough to wait for.
        JPUSHARE_LEASE_S="3",
    )
    env.update(extra)
    return env


@dataclass
class Service:
    """One `serve` process."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=TIMEOUT_S)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def wait_exit(self, what: str) -> int:
        wait_for(lambda: self.proc.poll() is not None, what)
        code = self.proc.returncode
        assert code is not None
        return code


def start_service(
    name: str,
    env: dict[str, str],
    log_dir: Path,
    *args: str,
    cwd: Path = REPO,
    preexec: Callable[[], None] | None = None,
) -> Service:
    """`preexec`: run in the child before the service starts (e.g. to lower a limit)."""
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jpushare.service", "serve", *args],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=preexec,
        )
    return Service(name, proc, log_path)


def executor_runs(state_dir: Path) -> list[tuple[str, int]]:
    """(job id, attempt) of every run the local executor ever accepted, sorted."""
    out: list[tuple[str, int]] = []
    for path in sorted((state_dir / "executor" / "runs").glob("*.json")):
        data = json.loads(path.read_text())
        out.append((str(data["job_id"]), int(data["attempt"])))
    return sorted(out)


LEADER = "this process is now the dispatcher"


class World:
    """A database with the test cluster, `serve --no-api` processes on it, jobs, events."""

    def __init__(self, sessions: sessionmaker[Session], db_url: str, tmp: Path) -> None:
        self.sessions = sessions
        self.db_url = db_url
        self.tmp = tmp
        self.state = tmp / "state"
        self.users = init_cluster(sessions)
        self.services: list[Service] = []

    def start(self, name: str, db_url: str | None = None, **extra: str) -> Service:
        """A service on the database (through `db_url`, e.g. a proxy, if given)."""
        env = service_env(db_url or self.db_url, self.state, **extra)
        service = start_service(name, env, self.tmp, "--no-api", "--log-level", "INFO")
        self.services.append(service)
        return service

    def submit(self, user: str, num_gpus: int, command: str) -> int:
        with self.sessions.begin() as s:
            return store.submit(
                s,
                user_id=self.users[user].id,
                name=f"{user}-{num_gpus}",
                command=command,
                num_gpus=num_gpus,
                now=store.utc_now(),
            ).job.id

    def job(self, job_id: int) -> store.JobRecord:
        with self.sessions() as s:
            return store.get_job(s, job_id)

    def events(self, job_id: int) -> list[str]:
        with self.sessions() as s:
            return [e.kind for e in store.job_history(s, job_id)]

    def all_done(self, job_ids: list[int]) -> bool:
        with self.sessions() as s:
            return all(store.get_job(s, j).state == "COMPLETED" for j in job_ids)
