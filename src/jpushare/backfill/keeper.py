"""The backfill keeper: an LLM inference server on every idle or reserved GPU group.

`jpushare backfill` runs one `Keeper` beside `serve`, over the local executor's state
directory. Each tick (`tick`), under the executor's lock (`LocalExecutor.backfill_slot`):

1. what it left: a server record whose processes are all gone (the server crashed or
   exited) is cleaned up (its cgroup killed and removed) and its group waits its backoff;
   a record the executor removed (it yielded the GPUs to a research job) counts the same;
   a server that runs the command the keeper would start now is adopted, one that runs
   another command is stopped; a `stopping` server the executor never finished with (it
   crashed mid-yield) is killed once its grace is over; a backfill cgroup without a record
   (the keeper died between making it and writing the record) is killed and removed;
2. each group of `gpus_per_server` GPUs (fixed blocks of a node's GPUs of one type, in
   index order; a last block smaller than that is never served) whose GPUs no run holds
   and whose backoff is over gets a server: the operator's command, `{port}`, `{node}`,
   `{gpus}` filled in, `CUDA_VISIBLE_DEVICES` set, in its own cgroup
   (`backfill_servers`), its output in `backfill/<key>.log`.

Backoff: a group whose server ended waits `backoff_s` x 2^(ends in a row) (at most
`backoff_max_s`) before it gets a new one; a server that ran `backoff_max_s` or longer
resets the count. So a flapping GPU is not restarted every cycle.

Nothing here is a job: no row in the database, nothing charged to any lab (SPEC §1: GPUs a
backfill server holds are idle for the policy). The keeper also integrates, per tick, the
GPU-seconds served on reserved GPUs, served on idle ones, and idle with nothing running
(`backfill/usage.json`), which /metrics and the watch-list read.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from jpushare.backfill.ticking import run_ticks
from jpushare.config import BackfillSettings
from jpushare.executors.backfill_servers import (
    CGROUP_PREFIX,
    STOPPING,
    ServerRecord,
    alive,
    backfill_dir,
    forget,
    load_all,
    read_usage,
    save,
    server_key,
    stop_servers,
    write_usage,
)
from jpushare.executors.cgroups import Limits, RunCgroup, device_rules, run_dir_name
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from jpushare.executors.process_groups import start_ticks

log = logging.getLogger(__name__)

ReservedGpus = Callable[[], Mapping[tuple[str, str], int]]  # (node, tier) -> GPUs reserved


@dataclass(slots=True)
class _Group:
    node: str
    gpu_type: str
    indices: tuple[int, ...]
    port: int
    ends_in_a_row: int = 0
    next_start_at: float = 0.0

    @property
    def key(self) -> str:
        return server_key(self.node, self.indices)


@dataclass(frozen=True, slots=True)
class TickReport:
    started: tuple[str, ...] = ()
    ended: tuple[str, ...] = ()  # crashed, exited or yielded since the last tick
    adopted: tuple[str, ...] = ()
    running: tuple[str, ...] = ()


class Keeper:
    """Keeps the backfill servers of one local executor (module docstring)."""

    def __init__(
        self,
        executor: LocalExecutor,
        settings: BackfillSettings,
        *,
        reserved: ReservedGpus | None = None,
        clock: Callable[[], float] = time.time,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.executor = executor
        self.settings = settings
        self.dir = backfill_dir(executor.state_dir)
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._reserved = reserved or (lambda: {})
        self._clock = clock
        self._env = dict(os.environ if base_env is None else base_env)
        self._bash = shutil.which("bash") or "/bin/bash"
        self.groups = _groups(executor.gpus, settings)
        self._running: dict[str, float] = {}  # key -> started_at, of the servers we track
        self._usage = read_usage(self.dir)
        self._last_tick: float | None = None

    # --- one tick --------------------------------------------------------------------------

    def tick(self) -> TickReport:
        now = self._clock()
        started: list[str] = []
        ended: list[str] = []
        adopted: list[str] = []
        with self.executor.backfill_slot() as free_gpus:
            free = {(g.node, g.index) for g in free_gpus}
            records = {r.key: r for r in load_all(self.dir)}
            for key, rec in records.items():
                outcome = self._settle(rec, now)
                if outcome == "ended":
                    ended.append(key)
                elif outcome == "adopted":
                    adopted.append(key)
            for key in list(self._running):
                if key not in records:  # the executor stopped it for a research job
                    self._ended(key, now)
                    ended.append(key)
            self._clean_orphan_cgroups({r.key for r in load_all(self.dir)})
            for group in self.groups:
                if group.key in self._running or now < group.next_start_at:
                    continue
                if all((group.node, i) in free for i in group.indices):
                    self._start(group, now)
                    started.append(group.key)
            self._account(now, free)
        return TickReport(tuple(started), tuple(ended), tuple(adopted), tuple(self._running))

    def _settle(self, rec: ServerRecord, now: float) -> str:
        """One record as the machine has it: 'running', 'adopted', 'ended', 'stopping'."""
        if rec.state == STOPPING:
            overdue = now - (rec.stop_requested_at or now) >= rec.grace_s
            if overdue:  # the executor crashed mid-yield: finish its stop
                stop_servers(self.dir, rec.node, rec.gpu_indices, reason=rec.stopped_for)
            return "stopping"
        if not alive(rec):
            log.warning(
                "backfill server %s on %s GPUs %s ended", rec.key, rec.node, rec.gpu_indices
            )
            self._cleanup(rec)
            self._ended(rec.key, now)
            return "ended"
        if rec.key in self._running:
            return "running"
        group = next((g for g in self.groups if g.key == rec.key), None)
        if group is None or rec.command != self._command(group):
            log.info("backfill server %s runs another command than ours now: stopping", rec.key)
            stop_servers(self.dir, rec.node, rec.gpu_indices, reason="keeper")
            return "ended"
        log.info("backfill server %s (pgid %s) adopted", rec.key, rec.pgid)
        self._running[rec.key] = rec.started_at or rec.created_at
        return "adopted"

    def _ended(self, key: str, now: float) -> None:
        since = self._running.pop(key, None)
        group = next((g for g in self.groups if g.key == key), None)
        if group is None:
            return
        if since is not None and now - since >= self.settings.backoff_max_s:
            group.ends_in_a_row = 0
        delay = min(self.settings.backoff_s * 2**group.ends_in_a_row, self.settings.backoff_max_s)
        group.ends_in_a_row += 1
        group.next_start_at = now + delay

    def _cleanup(self, rec: ServerRecord) -> None:
        cgroup = rec.run_cgroup()
        if cgroup is not None:
            cgroup.kill()
            cgroup.remove()
        forget(self.dir, rec)

    def _clean_orphan_cgroups(self, keys: set[str]) -> None:
        """Kill and remove backfill cgroups that no record names (a crash between the
        cgroup and the record)."""
        cgroups = self.executor.cgroups
        if not cgroups.usable:
            return
        prefix = run_dir_name(CGROUP_PREFIX)
        orphans: dict[str, dict[str, str]] = {}
        for controller, base in cgroups.bases.items():
            ns = base / cgroups.namespace
            with contextlib.suppress(OSError):
                for d in ns.iterdir():
                    name = d.name
                    if d.is_dir() and name.startswith(prefix) and name[len(prefix) :] not in keys:
                        orphans.setdefault(name, {})[controller] = str(d)
        for name, dirs in orphans.items():
            log.warning("backfill cgroup %s has no server record: killing it", name)
            cgroup = RunCgroup(cgroups.mode, dirs)
            cgroup.kill()
            cgroup.remove()

    # --- starting --------------------------------------------------------------------------

    def _command(self, group: _Group) -> str:
        gpus = ",".join(str(i) for i in group.indices)
        return self.settings.command.format(port=group.port, node=group.node, gpus=gpus)

    def _start(self, group: _Group, now: float) -> None:
        command = self._command(group)
        gpus = ",".join(str(i) for i in group.indices)
        rec = ServerRecord(
            key=group.key,
            node=group.node,
            gpu_type=group.gpu_type,
            gpu_indices=list(group.indices),
            port=group.port,
            url=f"http://{self.settings.host}:{group.port}",
            command=command,
            grace_s=self.settings.grace_s,
            created_at=now,
        )
        cgroups = self.executor.cgroups
        procs: list[str] = []
        if cgroups.usable:
            limits = Limits(
                pids_max=self.settings.pids_max,
                devices=device_rules(self.executor.device_dir, list(group.indices)),
            )
            cgroup = cgroups.create(run_dir_name(CGROUP_PREFIX + group.key), limits)
            rec.cgroup = cgroup.to_json()
            procs = cgroup.procs_files()
        save(self.dir, rec)  # before the process: a restart finds the cgroup through it
        env = self._env | {
            "CUDA_VISIBLE_DEVICES": gpus,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "JPUSHARE_GPUS": gpus,
            "JPUSHARE_NODE": group.node,
            "JPUSHARE_BACKFILL_PORT": str(group.port),
            "JPUSHARE_BACKFILL_CMD": command,
        }
        if cgroups.device_control:  # only its own GPUs are visible: CUDA numbers them 0…N-1
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(group.indices)))
        # The shell joins the cgroup first, then becomes the server: all it forks stays in.
        join = 'for f in "$@"; do echo $$ > "$f"; done; exec "$0" -c "$JPUSHARE_BACKFILL_CMD"'
        out = os.open(self.dir / f"{group.key}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(
                [self._bash, "-c", join, self._bash, *procs],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            log.error("backfill server %s could not start: %s", group.key, exc)
            self._cleanup(rec)
            self._running[group.key] = now
            self._ended(group.key, now)
            return
        finally:
            os.close(out)
        threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
        rec.pgid, rec.leader_start_ticks, rec.started_at = proc.pid, start_ticks(proc.pid), now
        save(self.dir, rec)
        self._running[group.key] = now
        log.info(
            "backfill server %s started on %s GPUs %s: %s", group.key, group.node, gpus, rec.url
        )

    # --- accounting and shutdown -----------------------------------------------------------

    def _account(self, now: float, free: set[tuple[str, int]]) -> None:
        """Integrate GPU-seconds since the last tick (the first tick only starts the clock)."""
        if self._usage.since is None:
            self._usage.since = now
        if self._last_tick is not None and now > self._last_tick:
            dt = now - self._last_tick
            served: dict[tuple[str, str], int] = {}
            idle: dict[tuple[str, str], int] = {}
            held = {(r.node, i) for r in load_all(self.dir) for i in r.gpu_indices}
            for g in self.executor.gpus:
                if (g.node, g.index) not in free:
                    continue  # a research run holds it
                bucket = served if (g.node, g.index) in held else idle
                bucket[(g.node, g.gpu_type)] = bucket.get((g.node, g.gpu_type), 0) + 1
            reserved = self._reserved()
            for place in set(served) | set(idle):
                n_served, n_idle = served.get(place, 0), idle.get(place, 0)
                self._usage.add(dt, n_served, reserved.get(place, 0), n_idle)
            write_usage(self.dir, self._usage)
        self._last_tick = now

    def stop_all(self) -> None:
        """Stop every server (the keeper is shutting down): SIGTERM, grace, kill."""
        with self.executor.backfill_slot():
            for node in sorted({g.node for g in self.groups}):
                stop_servers(self.dir, node, None, reason="keeper stopped")
        self._running.clear()

    def run(self, interval_s: float, stop: threading.Event) -> None:
        """Tick every `interval_s` until `stop` is set; then stop every server."""
        run_ticks(log, self._tick_logged, interval_s, stop, self.stop_all)

    def _tick_logged(self) -> None:
        report = self.tick()
        if report.started or report.ended or report.adopted:
            log.info(
                "backfill: started %s, ended %s, adopted %s, running %d",
                list(report.started),
                list(report.ended),
                list(report.adopted),
                len(report.running),
            )


def _groups(gpus: tuple[LocalGpu, ...], settings: BackfillSettings) -> list[_Group]:
    """Fixed blocks of `gpus_per_server` GPUs per (node, type), each with its own port."""
    by_place: dict[tuple[str, str], list[int]] = {}
    for g in gpus:
        by_place.setdefault((g.node, g.gpu_type), []).append(g.index)
    out: list[_Group] = []
    k = settings.gpus_per_server
    for (node, gpu_type), indices in sorted(by_place.items()):
        indices.sort()
        for i in range(0, len(indices) - k + 1, k):
            out.append(_Group(node, gpu_type, tuple(indices[i : i + k]), 0))
    for n, group in enumerate(out):
        group.port = settings.port_base + n
    return out


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM / SIGINT set `stop` (the keeper then stops its servers and exits)."""
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
