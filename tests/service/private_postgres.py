"""A PostgreSQL server of the test's own, to stop and start under a running service.

`PrivatePostgres.create()` runs `initdb` in a fresh directory and starts the server on a
free port of 127.0.0.1 (trust authentication, fsync off: a throw-away); `stop()` and
`start()` are `pg_ctl`'s, waiting until they are done; `destroy()` stops it and removes the
directory. As root, the server runs as the `postgres` system user (it refuses root).
Without PostgreSQL's server binaries (`/usr/lib/postgresql/*/bin`) the tests that need it
are skipped, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.missing import missing
from tests.service.demo_service import free_port


def _bin_dir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: p.parts)
    return found[-1].parent if found else None


@dataclass
class PrivatePostgres:
    bin_dir: Path
    root: Path
    port: int
    user: str | None  # run the server as this user (we are root), else as ourselves

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    def create(cls) -> PrivatePostgres:
        bin_dir = _bin_dir()
        if bin_dir is None:
            missing("no PostgreSQL server binaries under /usr/lib/postgresql")
        user = "postgres" if os.geteuid() == 0 else None
        root = Path(tempfile.mkdtemp(prefix="jpushare-pg-"))
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        server = cls(bin_dir, root, free_port(), user)
        server._run(
            "initdb",
            "-D",
            str(root / "data"),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        server.start()
        return server

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.root / "data"),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.root / "data"), "-m", mode, "-w", "-t", "60", "stop")

    def destroy(self) -> None:
        try:
            if (self.root / "data" / "postmaster.pid").exists():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        result = subprocess.run(
            [str(self.bin_dir / program), *args],
            user=self.user,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{program} {' '.join(args)}: {result.stderr}{result.stdout}{tail}")
