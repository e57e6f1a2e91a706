"""LLM backfill servers on the local executor's GPUs: their records, and how they are stopped.

The backfill keeper (`jpushare backfill`) starts an inference server on GPUs no research run
holds; the local executor stops exactly the servers on the GPUs it gives a job, before the
job starts. Both processes meet here, in `<executor state dir>/backfill/`, one file per
server, `<key>.json` (written atomically), and under the executor's lock (`state_dir/lock`):
the keeper starts a server only while holding it, on GPUs no unended run holds, and the
executor's `submit` stops the servers on its job's GPUs while holding it. So a job never
starts on a GPU a server holds, and a server never starts on a GPU a job was given.

Each server runs in a cgroup of its own (`cgroups.py`; the executor's namespace, named
`run-backfill-<key>`), else as a process group (no cgroups: not root). Stopping one
(`stop_servers`): its record is marked `stopping` (GET /v1/backfill stops listing it, the
keeper does not restart it), SIGTERM to every process of it, then at most its `grace_s` for
them to exit, then the cgroup is killed (SIGKILL to what is left). Never longer than the
grace plus the kill itself. The record and the cgroup are removed once nothing is left.

Standard library only, like `cgroups.py`.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from jpushare.executors.cgroups import RunCgroup
from jpushare.executors.local_records import write_atomic
from jpushare.executors.process_groups import group_alive, live_groups, signal_group

log = logging.getLogger(__name__)

BACKFILL_DIR = "backfill"  # under the executor's state directory
CGROUP_PREFIX = "backfill-"  # a server's cgroup: run_dir_name(CGROUP_PREFIX + key)
RUNNING = "running"
STOPPING = "stopping"
_POLL_S = 0.01


@dataclass(slots=True)
class ServerRecord:
    """One backfill server: where, on what, since when, and how to find its processes."""

    key: str  # `<node>~<first GPU>-<last GPU>`: one per GPU group
    node: str
    gpu_type: str
    gpu_indices: list[int]
    port: int
    url: str
    command: str
    grace_s: float
    created_at: float
    pgid: int | None = None
    leader_start_ticks: int | None = None
    started_at: float | None = None
    cgroup: dict[str, Any] | None = None  # RunCgroup.to_json()
    state: str = RUNNING
    stop_requested_at: float | None = None
    stopped_for: str | None = None  # the research job it yielded to
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def run_cgroup(self) -> RunCgroup | None:
        return RunCgroup.from_json(self.cgroup) if self.cgroup else None


def server_key(node: str, gpu_indices: Iterable[int]) -> str:
    """A group's key: its node and its first and last GPU (a file and cgroup name)."""
    indices = sorted(gpu_indices)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in node)
    return f"{safe}~{indices[0]}-{indices[-1]}"


def backfill_dir(executor_state_dir: Path | str) -> Path:
    return Path(executor_state_dir) / BACKFILL_DIR


def save(directory: Path, rec: ServerRecord) -> None:
    """Write the record atomically (temporary file, fsync, rename)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(
        directory / f"{rec.key}.json", json.dumps(asdict(rec), indent=1, sort_keys=True).encode()
    )


def load_all(directory: Path) -> list[ServerRecord]:
    """Every server record there (a file being replaced this instant is skipped)."""
    out = []
    for path in sorted(directory.glob("*~*.json")):  # not the totals files
        try:
            out.append(ServerRecord.from_json(json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return out


def forget(directory: Path, rec: ServerRecord) -> None:
    (directory / f"{rec.key}.json").unlink(missing_ok=True)


def alive(rec: ServerRecord, live: set[int] | None = None) -> bool:
    """Whether any process of the server lives (its cgroup's members, or its group)."""
    cgroup = rec.run_cgroup()
    if cgroup is not None and cgroup.members():
        return True
    if rec.pgid is None:
        return False
    return group_alive(rec.pgid, rec.leader_start_ticks, live_groups() if live is None else live)


def _signal(rec: ServerRecord, sig: signal.Signals) -> None:
    cgroup = rec.run_cgroup()
    if cgroup is not None:
        cgroup.signal(sig)
    if rec.pgid is not None and group_alive(rec.pgid, rec.leader_start_ticks, live_groups()):
        signal_group(rec.pgid, sig)


def _kill(rec: ServerRecord) -> None:
    cgroup = rec.run_cgroup()
    if cgroup is not None:
        cgroup.kill()
    deadline = time.monotonic() + 5.0
    while rec.pgid is not None and alive(rec) and time.monotonic() < deadline:
        _signal(rec, signal.SIGKILL)
        time.sleep(_POLL_S)


def _cleanup(directory: Path, rec: ServerRecord) -> None:
    cgroup = rec.run_cgroup()
    if cgroup is not None:
        cgroup.remove()
    forget(directory, rec)


@dataclass(frozen=True, slots=True)
class Yielded:
    """What one `stop_servers` did: the servers stopped, and how long it took."""

    keys: tuple[str, ...] = ()
    gpus: int = 0  # GPUs those servers held
    seconds: float = 0.0  # from the request to the last process gone
    killed: tuple[str, ...] = ()  # of them, those still alive after their grace


def stop_servers(
    directory: Path,
    node: str,
    gpu_indices: Iterable[int] | None,
    *,
    reason: str | None = None,
    clock: Any = time.time,
) -> Yielded:
    """Stop every server on `node` holding one of `gpu_indices` (None: every server there):
    mark it stopping, SIGTERM it, wait at most its grace, kill what is left, remove it.
    The caller holds the executor's lock (module docstring)."""
    if not directory.is_dir():
        return Yielded()
    wanted = None if gpu_indices is None else set(gpu_indices)
    hit = [
        r
        for r in load_all(directory)
        if r.node == node and (wanted is None or wanted & set(r.gpu_indices))
    ]
    if not hit:
        return Yielded()
    t0 = time.monotonic()
    now = clock()
    for rec in hit:
        if rec.state != STOPPING:
            rec.state, rec.stop_requested_at, rec.stopped_for = STOPPING, now, reason
            save(directory, rec)
        _signal(rec, signal.SIGTERM)
    pending = {rec.key: rec for rec in hit}
    killed: list[str] = []
    while pending:
        live = live_groups()
        for key, rec in list(pending.items()):
            if not alive(rec, live):
                _cleanup(directory, rec)
                del pending[key]
            elif time.monotonic() - t0 >= rec.grace_s:
                _kill(rec)
                killed.append(key)
                _cleanup(directory, rec)
                del pending[key]
        if pending:
            time.sleep(_POLL_S)
    return Yielded(
        tuple(r.key for r in hit),
        sum(len(r.gpu_indices) for r in hit),
        time.monotonic() - t0,
        tuple(killed),
    )


def held_by_servers(directory: Path) -> dict[tuple[str, int], ServerRecord]:
    """(node, GPU index) -> the server holding it, stopping ones included."""
    return {(r.node, i): r for r in load_all(directory) for i in r.gpu_indices}


YIELD_STATS = "yields.json"


def record_yield(directory: Path, done: Yielded) -> None:
    """Add one yield to the running totals the metrics read (count, seconds, max, GPUs)."""
    stats = read_yield_stats(directory)
    stats["count"] += 1
    stats["gpus"] += done.gpus
    stats["seconds_sum"] += done.seconds
    stats["seconds_max"] = max(stats["seconds_max"], done.seconds)
    stats["killed"] += len(done.killed)
    write_atomic(directory / YIELD_STATS, json.dumps(stats).encode())


def read_yield_stats(directory: Path | None) -> dict[str, float]:
    """The yield totals so far (zeros when none was recorded)."""
    stats = {"count": 0.0, "gpus": 0.0, "seconds_sum": 0.0, "seconds_max": 0.0, "killed": 0.0}
    if directory is None:
        return stats
    try:
        stored = json.loads((directory / YIELD_STATS).read_text())
    except (OSError, ValueError):
        return stats
    for k in stats:
        if isinstance(stored.get(k), int | float):
            stats[k] = float(stored[k])
    return stats


USAGE_FILE = "usage.json"  # the keeper's GPU-second totals


@dataclass(slots=True)
class Usage:
    """GPU-seconds since `since`: served by backfill on reserved / idle GPUs, idle unserved."""

    backfill_reserved_gpu_s: float = 0.0
    backfill_idle_gpu_s: float = 0.0
    idle_gpu_s: float = 0.0
    since: float | None = None

    def add(self, dt: float, served: int, reserved: int, idle: int) -> None:
        """`dt` seconds of one place: `served` GPUs serving (the first `reserved` of them on
        reserved GPUs), `idle` GPUs unserved."""
        on_reserved = min(reserved, served)
        self.backfill_reserved_gpu_s += on_reserved * dt
        self.backfill_idle_gpu_s += (served - on_reserved) * dt
        self.idle_gpu_s += idle * dt


def write_usage(directory: Path, usage: Usage) -> None:
    """Replace the keeper's totals (`read_usage` reads them)."""
    path = directory / USAGE_FILE
    tmp = path.with_name(f".{USAGE_FILE}.tmp")
    tmp.write_text(json.dumps(asdict(usage)))
    tmp.replace(path)


def read_usage(directory: Path | None) -> Usage:
    if directory is None:
        return Usage()
    try:
        data = json.loads((directory / USAGE_FILE).read_text())
    except (OSError, ValueError):
        return Usage()
    keys = ("backfill_reserved_gpu_s", "backfill_idle_gpu_s", "idle_gpu_s")
    values = {k: float(data.get(k) or 0.0) for k in keys}
    since = data.get("since")
    return Usage(**values, since=float(since) if isinstance(since, int | float) else None)


def yield_gpus(directory: Path, job_id: str, node: str, gpu_indices: Sequence[int]) -> Yielded:
    """Stop the backfill servers on a run's GPUs before it starts (after at most their
    grace) and add the yield to the totals the metrics read."""
    done = stop_servers(directory, node, gpu_indices, reason=job_id)
    if done.keys:
        record_yield(directory, done)
        log.info(
            "job %s: backfill on %s GPUs %s yielded in %.2fs%s",
            job_id,
            node,
            gpu_indices,
            done.seconds,
            f" (killed after the grace: {', '.join(done.killed)})" if done.killed else "",
        )
    return done
