"""The local executor's state directory: one set of files per run, and how they are read.

Nothing about a run lives only in memory, so a restarted service (or a second executor
instance over the same state directory) finds every run again. The state directory is 0700
and its files 0600 (the jobs cannot read it). Layout of `state_dir/runs/`, one set of files
per run, named by its key `<job id, %-quoted>.<attempt>`, which is also its executor id:

- `<key>.json`: the record (`RunRecord`) — the launch (account, directory, environment,
  files, limits), the GPU indices and CPUs it holds, its cgroup's directories, its process
  group and its leader's start time, a stop request, and the outcome once it ended. Written
  atomically (temporary file, fsync, rename) before the process starts, so a crash between
  accepting and starting cannot hide a run from the next `submit` (idempotent by key).
- `<key>.pid`: written by the run's wrapper as soon as it starts: its pid, which is the
  process group id. Its mtime is the run's `started_at`.
- `<key>.exit`: written by the wrapper when the command ends: the exit code. Its mtime is
  `ended_at`. The wrapper traps TERM/INT/HUP, so it survives a cancel's SIGTERM long enough
  to write the code; any executor instance can read it, parent or not.
- `<key>.error`: why the job could not start, when it could not.
- `<key>.runner`: what the wrapper itself printed (its own failures, never the job's).
- `<key>.log`: the output of a job from before revision 0003.

`state_dir/lock` is flock-ed around every submit, cancel and observation (`LocalExecutor`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from jpushare.executors.base import RunInfo, RunState
from jpushare.unix_accounts import UnixAccount

_KEY = re.compile(r"^[A-Za-z0-9%._~-]*\.\d+$")
_RECORD_VERSION = 1
_EXTENSIONS = ("json", "log", "pid", "exit", "error", "runner")


@dataclass(slots=True)
class RunRecord:
    """What `<key>.json` holds: one run, from acceptance to outcome."""

    job_id: str
    attempt: int
    name: str
    command: str
    node: str
    gpu_type: str
    gpu_indices: list[int]
    created_at: float
    boot_id: str | None
    user: str | None = None
    time_limit_s: float | None = None
    # What the wrapper needs (local_run.py): account, directory, env, files, limits.
    launch: dict[str, Any] | None = None
    cpus: list[int] = field(default_factory=list)
    output_offset: int = 0  # the output file's size when this attempt started (OOM scan)
    error_offset: int = 0
    pgid: int | None = None
    leader_start_ticks: int | None = None
    started_at: float | None = None
    stop_reason: str | None = None  # "cancel" | "timeout"
    stop_requested_at: float | None = None
    killed_at: float | None = None  # when SIGKILL followed the SIGTERM
    cgroup: dict[str, Any] | None = None  # RunCgroup.to_json(): where its processes are
    state: str | None = None  # the final RunState, once ended
    ended_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    version: int = field(default=_RECORD_VERSION)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def key(self) -> str:
        return run_key(self.job_id, self.attempt)

    def info(self, state: RunState | None = None) -> RunInfo:
        """The run as the executor reports it: its final state, else `state`."""
        now_state = RunState(self.state) if self.state is not None else state
        assert now_state is not None
        reason = self.reason
        if not now_state.ended and self.stop_reason is not None:
            reason = f"stopping ({self.stop_reason})"
        return RunInfo(
            job_id=self.job_id,
            attempt=self.attempt,
            executor_id=self.key,
            state=now_state,
            node=self.node,
            started_at=self.started_at,
            ended_at=self.ended_at,
            exit_code=self.exit_code,
            reason=reason,
        )


def run_key(job_id: str, attempt: int) -> str:
    """The run's key and executor id: the job id %-quoted (no '/'), a dot, the attempt."""
    return f"{quote(job_id, safe='')}.{attempt}"


def parse_key(key: str) -> tuple[str, int]:
    """(job id, attempt) of a run key."""
    quoted, _, attempt = key.rpartition(".")
    return unquote(quoted), int(attempt)


def is_run_key(text: str) -> bool:
    """Whether `text` can be a local executor id (nothing else is looked up as a file)."""
    return _KEY.match(text) is not None


@dataclass(frozen=True, slots=True)
class RunFiles:
    """The runs' files under `runs_dir` (the module docstring's layout)."""

    runs_dir: Path

    def paths(self, key: str) -> dict[str, Path]:
        base = self.runs_dir / key
        return {ext: base.with_name(f"{key}.{ext}") for ext in _EXTENSIONS} | {"prefix": base}

    def load(self, key: str) -> RunRecord | None:
        try:
            data = json.loads(self.paths(key)["json"].read_text())
        except FileNotFoundError:
            return None
        return RunRecord.from_json(data)

    def save(self, rec: RunRecord) -> None:
        path = self.paths(rec.key)["json"]
        write_atomic(path, json.dumps(asdict(rec), indent=1, sort_keys=True).encode())

    def run_keys(self) -> list[str]:
        return sorted(p.name[: -len(".json")] for p in self.runs_dir.glob("*.json"))


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all (temporary file, fsync, rename)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None  # absent, or being replaced this instant


def mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def private_dir(path: Path) -> None:
    """Create `path` for the service alone (0700); tighten it if it is ours and looser."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
        path.chmod(0o700)


def account_dict(account: UnixAccount) -> dict[str, Any]:
    """An account as the launch record (and the wrapper) holds it."""
    return {
        "name": account.name,
        "uid": account.uid,
        "gid": account.gid,
        "groups": list(account.groups),
        "home": account.home,
        "shell": account.shell,
    }


def account_of(launch: dict[str, Any]) -> UnixAccount | None:
    """The account a launch record runs as (None: the service's own)."""
    raw = launch.get("account")
    if raw is None:
        return None
    return UnixAccount(
        raw["name"], raw["uid"], raw["gid"], tuple(raw["groups"]), raw["home"], raw["shell"]
    )
