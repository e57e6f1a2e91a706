"""The local executor: every job is a cgroup on this one workstation, run as its owner.

For labs whose cluster is one GPU machine, and for running the service without Slurm. A run
gets the lowest free GPU indices of its placement (NVML's and nvidia-smi's indices, PCI bus
order; the variables that name them: `local_launch`).

Who, where, with what (`local_launch`): the job runs as its owner (where the service may
switch accounts), in its working directory, with exactly the environment it was submitted
with, its output in files the owner creates with umask 077. It is pinned to `cpus_per_gpu` x
GPUs CPUs and each file it writes may grow to at most `output_max_bytes` (RLIMIT_FSIZE).
Output files are never opened through a symbolic link and never when they exist and belong
to another user (the job ends FAILED with that reason).

Containment (`cgroups`, detected at start and logged): under a root service with cgroups
mounted, each attempt runs in its own cgroup, as Slurm's proctrack/task/cgroup and
ConstrainDevices do: all its memory together (shared mappings and /dev/shm included) at
most `mem_per_gpu_mb` x GPUs, at most `pids_max` tasks, its cpuset the pinned CPUs (so
`taskset` cannot widen it) and, on cgroup v1, no device but the usual ones and its own
`/dev/nvidiaN` (plus NVIDIA's control nodes). Its cgroup, not its process group, is what
the executor watches and kills: `setsid`, `set -m`, `setpgid` and double forks stay in it,
a cancel, a time limit and the end of the main process kill every process in it (freeze,
SIGKILL, thaw; `cgroup.kill` on v2), and a run is not reported ended while any of them
lives, so its GPUs are free when it reads ended. A run the kernel's OOM killer hit ends OOM
with "killed: the job's memory limit of N MiB was reached". Without cgroups (not root,
nothing mounted) the executor says so at start and runs jobs as process groups: each
process may then hold `mem_per_gpu_mb` x GPUs of data (RLIMIT_DATA: CUDA reserves far more
address space than memory, so RLIMIT_AS would break it), and processes that leave the
group are not followed. Never isolated: the network. Pre-0003 jobs: `local_launch`.

The wrapper that starts a job (`local_run.py`) stays the service's account, like Slurm's
slurmstepd, so it can write the run's files here; the job is its child and has dropped
every privilege before `exec`. A job that cannot start (no such account, working directory
missing or not enterable, output file not writable) ends FAILED with the reason.

Every run is a set of files in the state directory (0700; `local_records`), so a restarted
service or a second executor over it finds every run again. `state_dir/lock` (opened once,
so descriptor exhaustion cannot fail an observation) is flock-ed around every submit, cancel
and observation: no run starts twice, no GPU goes to two runs. A run's GPUs are first freed
of LLM backfill servers (`backfill_servers`: SIGTERM, their grace, then their cgroup killed).

How a run's state is read (`runs`, `find` and `inventory` observe; there is no thread):

1. no process group yet: PENDING. A record that a crashed service accepted but never started
   is started by the next observation or `submit` once `start_grace_s` has passed.
2. its process group (same boot, same leader: see `process_groups`) or its cgroup still
   has a live process: RUNNING. If the command already wrote its exit code, the stragglers
   it left in the background are killed, as Slurm does at the end of a job (the wrapper
   kills its cgroup itself before it writes the code). A cancel or an exceeded time limit
   sends SIGTERM to every process of the run, then SIGKILL after `cancel_grace_s`.
3. all of it is gone: the outcome `local_outcome` names, written into the record for good
   (the cgroup removed).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from jpushare.executors.backfill_servers import backfill_dir, yield_gpus
from jpushare.executors.base import (
    GpuGroup,
    LaunchSpec,
    NodeState,
    RunInfo,
    RunState,
    SubmitRefused,
)
from jpushare.executors.cgroups import (
    DEFAULT_PIDS_MAX,
    Cgroups,
    Limits,
    RunCgroup,
    detect,
    device_rules,
    run_dir_name,
)
from jpushare.executors.gpus import DeclaredGpus, LocalGpu, executor_gpus
from jpushare.executors.local_launch import LaunchSetting, fill_launch, least_loaded_cpus
from jpushare.executors.local_outcome import attempt_tail, run_outcome
from jpushare.executors.local_records import (
    RunFiles,
    RunRecord,
    account_of,
    is_run_key,
    mtime,
    parse_key,
    private_dir,
    read_int,
    read_text,
    run_key,
)
from jpushare.executors.output_files import (
    LOG_TAIL_BYTES,
    OutputUnreadable,
    read_tail,
)
from jpushare.executors.process_groups import (
    boot_id,
    group_alive,
    live_groups,
    signal_group,
    start_ticks,
)
from jpushare.unix_accounts import (
    UnixAccount,
    UnknownAccount,
    can_switch_accounts,
    resolve_account,
    service_account,
)

log = logging.getLogger(__name__)

_RUNNER = Path(__file__).with_name("local_run.py")
# What the wrapper itself runs with (it is privileged: nothing of the job's or service's).
_RUNNER_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


class LocalExecutor:
    """Runs jobs as cgroups (else process groups) on this machine; see the module docstring.

    `gpus` fixes the GPUs (tests); otherwise they are discovered: NVML, else nvidia-smi,
    else `declared` (the cluster file's (node, gpu_type, count) entries). Real GPUs belong
    to `node` (default: this machine's hostname); declared ones keep their own nodes.
    `cgroups` fixes the containment (tests; default: detected); `device_dir` is where the
    NVIDIA device nodes are read from (tests make fake ones); `pids_max` and
    `output_max_bytes` (None: no limit) bound every run.
    """

    def __init__(
        self,
        state_dir: Path | str,
        *,
        declared: Iterable[DeclaredGpus | tuple[str, str, int]] = (),
        gpus: Iterable[LocalGpu] | None = None,
        node: str | None = None,
        cancel_grace_s: float = 10.0,
        start_grace_s: float = 5.0,
        workdir: Path | str | None = None,
        base_env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        pids_max: int | None = DEFAULT_PIDS_MAX,
        output_max_bytes: int | None = None,
        device_dir: Path | str = "/dev",
        cgroups: Cgroups | None = None,
    ) -> None:
        self.node = node or socket.gethostname()
        found = executor_gpus(self.node, declared, gpus)
        self.gpus: tuple[LocalGpu, ...] = found.gpus
        self.gpu_source: str = found.source
        self.state_dir = Path(state_dir)
        self.runs_dir = self.state_dir / "runs"
        private_dir(self.state_dir)
        private_dir(self.runs_dir)
        self._files = RunFiles(self.runs_dir)
        self.switch_accounts = can_switch_accounts()
        self._bash = shutil.which("bash") or "/bin/bash"
        self.cancel_grace_s = cancel_grace_s
        self.start_grace_s = start_grace_s
        self.workdir = Path(workdir) if workdir is not None else None
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._service_account = service_account()
        self._clock = clock
        self._boot_id = boot_id()
        self._mutex = threading.RLock()
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._final: dict[str, RunInfo] = {}  # ended runs never change: no re-read
        self.pids_max = pids_max
        self.output_max_bytes = output_max_bytes
        self.device_dir = Path(device_dir)
        # Opened once and kept: an observation never needs a new descriptor for it.
        self._lock_fd = os.open(
            self.state_dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        weakref.finalize(self, os.close, self._lock_fd)
        with self._locked():
            self.cgroups = cgroups if cgroups is not None else detect(self.state_dir)
        log.info("local executor: %s", self.cgroups.describe())

    # --- the Executor protocol -----------------------------------------------------------

    def inventory(self) -> list[GpuGroup]:
        """Every (node, gpu_type) group; `used` = GPUs held by runs that have not ended."""
        with self._locked():
            self._observe_all()
            held = self._held()
        totals: dict[tuple[str, str], int] = {}
        used: dict[tuple[str, str], int] = {}
        for g in self.gpus:
            k = (g.node, g.gpu_type)
            totals[k] = totals.get(k, 0) + 1
            used[k] = used.get(k, 0) + ((g.node, g.index) in held)
        return [
            GpuGroup(node, gpu_type, total, used[(node, gpu_type)], NodeState.UP)
            for (node, gpu_type), total in sorted(totals.items())
        ]

    def submit(self, spec: LaunchSpec) -> str:
        """Start the run on free GPUs of (spec.node, spec.gpu_type); idempotent by key.

        Refused (SubmitRefused) for a placement this machine does not have, fewer free GPUs
        than asked (the local executor does not queue), or a command that cannot start.
        """
        key = run_key(spec.job_id, spec.attempt)
        with self._locked():
            existing = self._files.load(key)
            if existing is not None:
                self._settle(existing, live_groups(), self._clock())
                return key
            group = [g for g in self.gpus if g.node == spec.node and g.gpu_type == spec.gpu_type]
            if not group:
                has = sorted({f"{g.gpu_type} on {g.node}" for g in self.gpus})
                raise SubmitRefused(
                    f"this machine has no {spec.gpu_type} GPUs on node {spec.node!r} "
                    f"(it has: {', '.join(has) or 'no GPUs'})"
                )
            if spec.num_gpus < 1:
                raise SubmitRefused(f"num_gpus must be at least 1, not {spec.num_gpus}")
            free = self._free_indices(spec)
            if len(free) < spec.num_gpus:
                raise SubmitRefused(
                    f"{spec.num_gpus} {spec.gpu_type} GPUs asked on {spec.node}, "
                    f"{len(free)} of {len(group)} free"
                )
            rec = RunRecord(
                job_id=spec.job_id,
                attempt=spec.attempt,
                name=spec.name,
                command=spec.command,
                node=spec.node,
                gpu_type=spec.gpu_type,
                gpu_indices=free[: spec.num_gpus],
                created_at=self._clock(),
                boot_id=self._boot_id,
                user=spec.user,
                time_limit_s=spec.time_limit_s,
            )
            self._prepare(rec, spec)
            self._files.save(rec)  # before the process exists: a crash now is retried, not lost
            try:
                self._spawn(rec)
            except OSError as exc:
                self._files.paths(key)["json"].unlink(missing_ok=True)
                raise SubmitRefused(f"could not start the job: {exc}") from exc
            return key

    def runs(self) -> list[RunInfo]:
        with self._locked():
            infos = self._observe_all()
        return sorted(infos.values(), key=lambda r: (r.job_id, r.attempt))

    def find(self, job_id: str, attempt: int) -> RunInfo | None:
        key = run_key(job_id, attempt)
        with self._locked():
            cached = self._final.get(key)
            if cached is not None:
                return cached
            rec = self._files.load(key)
            return None if rec is None else self._settle(rec, live_groups(), self._clock())

    def cancel(self, executor_id: str) -> None:
        """SIGTERM the run's process group now, SIGKILL after `cancel_grace_s`. Idempotent."""
        if not is_run_key(executor_id):
            log.warning("cancel: %r is not a local executor id", executor_id)
            return
        with self._locked():
            rec = self._files.load(executor_id)
            if rec is None:
                return
            if rec.state is not None or rec.stop_reason is not None:
                return
            if self._files.paths(executor_id)["exit"].exists():
                return  # it already ended on its own; the next observation says how
            self._adopt_pid(rec, live_groups())
            self._request_stop(rec, "cancel", self._clock())

    def log(self, job_id: str, attempt: int) -> str:
        """The run's output (its owner's file, read as the owner), at most the last 8 MiB."""
        key = run_key(job_id, attempt)
        with self._locked():
            rec = self._files.load(key)
        path, account = str(self._files.paths(key)["log"]), None
        if rec is not None and rec.launch is not None and not rec.launch["output_by_service"]:
            path, account = rec.launch["output"], account_of(rec.launch)
        try:
            tail = read_tail(path, account, LOG_TAIL_BYTES)
        except OutputUnreadable as exc:
            return f"[the output cannot be read: {exc}]\n"
        if tail is None:
            return ""
        text = tail.data.decode("utf-8", errors="replace")
        if tail.begin > 0:
            text = f"[… {tail.begin} earlier bytes not shown]\n" + text
        return text

    # --- files and locking ---------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._mutex:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _held(self) -> set[tuple[str, int]]:
        """(node, GPU index) of every run that has not ended, started or not."""
        return {(rec.node, i) for rec in self._unended() for i in rec.gpu_indices}

    def _unended(self) -> list[RunRecord]:
        out = []
        for key in self._files.run_keys():
            if key in self._final:
                continue
            rec = self._files.load(key)
            if rec is None:
                continue
            if rec.state is not None:
                self._cache_final(rec)
            else:
                out.append(rec)
        return out

    def _prepare(self, rec: RunRecord, spec: LaunchSpec) -> None:
        """Fill the record's launch: who, where, with what (SubmitRefused if no account)."""
        account: UnixAccount | None = None
        # The dispatcher always names the owner's account; a spec without one (tests, tools)
        # runs as the service's account, as every job does under a service that is not root.
        if self.switch_accounts and spec.unix_user is not None:
            try:
                account = resolve_account(spec.unix_user)
            except UnknownAccount as exc:
                raise SubmitRefused(str(exc)) from exc
        fill_launch(
            rec,
            spec,
            LaunchSetting(
                bash=self._bash,
                base_env=self._base_env,
                service_account=self._service_account,
                device_control=self.cgroups.device_control,
                memory_cgroup=self.cgroups.mode == "v2" or "memory" in self.cgroups.bases,
                output_max_bytes=self.output_max_bytes,
                old_log=self._files.paths(rec.key)["log"],
            ),
            account,
            lambda n: least_loaded_cpus([r.cpus for r in self._unended()], n),
        )

    # --- starting, stopping, observing ---------------------------------------------------

    def _spawn(self, rec: RunRecord) -> None:
        key = rec.key
        paths = self._files.paths(key)
        if rec.launch is None:  # accepted by a version before the wrapper took a launch
            raise OSError(f"run {key} has no launch record (accepted by an older version)")
        yield_gpus(backfill_dir(self.state_dir), rec.job_id, rec.node, rec.gpu_indices)
        if self.cgroups.usable:
            self._make_cgroup(rec)
        try:
            runner_fd = os.open(paths["runner"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(runner_fd, "ab") as runner_log:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", str(_RUNNER), str(paths["prefix"])],
                    stdin=subprocess.DEVNULL,
                    stdout=runner_log,
                    stderr=subprocess.STDOUT,
                    env=_RUNNER_ENV,
                    cwd=self.workdir if rec.launch["workdir"] is None else None,
                    start_new_session=True,  # its own session and process group: pgid == pid
                )
        except OSError:
            cgroup = self._cgroup(rec)
            if cgroup is not None:
                cgroup.remove()
            raise
        self._children[key] = proc
        rec.pgid = proc.pid
        rec.leader_start_ticks = start_ticks(proc.pid)
        self._files.save(rec)
        log.info("started %s (pgid %d) on %s GPUs %s", key, proc.pid, rec.node, rec.gpu_indices)

    def planned_gpus(self, spec: LaunchSpec) -> list[int] | None:
        """The GPUs `submit(spec)` would give now (None: none), named in a router's yield."""
        with self._locked():
            free = self._free_indices(spec)
        return free[: spec.num_gpus] if len(free) >= spec.num_gpus else None

    def _free_indices(self, spec: LaunchSpec) -> list[int]:
        """The free GPUs of the spec's placement, lowest index first: a run gets the first."""
        held = self._held()
        return [
            g.index
            for g in self.gpus
            if (g.node, g.gpu_type) == (spec.node, spec.gpu_type) and (g.node, g.index) not in held
        ]

    @contextlib.contextmanager
    def backfill_slot(self) -> Iterator[list[LocalGpu]]:
        """Under the executor's lock, the GPUs no unended run holds: the backfill keeper
        starts its servers inside this block, so no job is given them meanwhile."""
        with self._locked():
            self._observe_all()
            held = self._held()
            yield [g for g in self.gpus if (g.node, g.index) not in held]

    def _make_cgroup(self, rec: RunRecord) -> None:
        """The run's cgroup, made and written into its record before the wrapper starts
        (which joins it from the record): a restart finds it there."""
        assert rec.launch is not None
        key = rec.key
        limits = Limits(
            mem_bytes=rec.launch.get("mem_bytes"),
            pids_max=self.pids_max,
            cpus=tuple(rec.cpus),
            devices=device_rules(self.device_dir, rec.gpu_indices),
        )
        cgroup = self.cgroups.create(run_dir_name(key), limits)
        rec.cgroup = cgroup.to_json()
        rec.launch["cgroup"] = rec.cgroup
        rec.launch["cgroup_procs"] = cgroup.procs_files()
        self._files.save(rec)

    @staticmethod
    def _cgroup(rec: RunRecord) -> RunCgroup | None:
        return None if rec.cgroup is None else RunCgroup.from_json(rec.cgroup)

    def _kill(self, rec: RunRecord) -> None:
        """SIGKILL every process of the run: its cgroup (frozen first), its process group."""
        cgroup = self._cgroup(rec)
        # Briefly: this holds the lock; what is slow to die is killed again at the next look.
        if cgroup is not None and not cgroup.kill(timeout_s=1.0):
            log.warning("%s: processes outlived a kill of its cgroup", rec.job_id)
        if rec.pgid is not None:
            signal_group(rec.pgid, signal.SIGKILL)

    def _request_stop(self, rec: RunRecord, reason: str, now: float) -> None:
        rec.stop_reason = reason
        rec.stop_requested_at = now
        self._files.save(rec)
        cgroup = self._cgroup(rec)
        if cgroup is not None:
            cgroup.signal(signal.SIGTERM)
        if rec.pgid is not None and self._alive(rec, live_groups()):
            signal_group(rec.pgid, signal.SIGTERM)
        key = rec.key
        timer = threading.Timer(self.cancel_grace_s, self._escalate, args=(key,))
        timer.daemon = True
        timer.start()

    def _escalate(self, key: str) -> None:
        """Timer: observe the run once its grace is over, which SIGKILLs it if still alive."""
        try:
            self.find(*parse_key(key))
        except Exception:  # a timer thread has nobody to raise to
            log.exception("escalating the stop of %s failed", key)

    def _alive(self, rec: RunRecord, live: set[int] | None) -> bool:
        if rec.pgid is None:
            return False
        if rec.boot_id is not None and self._boot_id is not None and rec.boot_id != self._boot_id:
            return False  # pids of an earlier boot mean nothing now
        if group_alive(rec.pgid, rec.leader_start_ticks, live):
            return True
        cgroup = self._cgroup(rec)
        return cgroup is not None and bool(cgroup.members())

    def _observe_all(self) -> dict[str, RunInfo]:
        live = live_groups()
        now = self._clock()
        out: dict[str, RunInfo] = {}
        for key in self._files.run_keys():
            cached = self._final.get(key)
            if cached is not None:
                out[key] = cached
                continue
            rec = self._files.load(key)
            if rec is not None:
                out[key] = self._settle(rec, live, now)
        return out

    def _settle(self, rec: RunRecord, live: set[int] | None, now: float) -> RunInfo:
        """Bring the record up to date with the machine (steps 1–3 of the module doc)."""
        key = rec.key
        paths = self._files.paths(key)
        if rec.state is not None:
            return self._cache_final(rec)
        child = self._children.get(key)
        if child is not None and child.poll() is not None:
            del self._children[key]  # reaped: a zombie would look alive without /proc
        self._adopt_pid(rec, live)
        if rec.pgid is None:
            return self._settle_unstarted(rec, now)
        if rec.started_at is None:
            rec.started_at = mtime(paths["pid"]) or rec.created_at
            self._files.save(rec)
        exit_code = read_int(paths["exit"])
        if self._alive(rec, live):
            if exit_code is not None:
                # The command ended; what it left running in the background goes too.
                self._kill(rec)
                if not self._alive(rec, live_groups()):
                    return self._finish(rec, exit_code, now)
            elif rec.stop_reason is not None:
                overdue = now - (rec.stop_requested_at or now) >= self.cancel_grace_s
                if overdue:
                    if rec.killed_at is None:
                        log.info("%s ignored SIGTERM for %.1fs: SIGKILL", key, self.cancel_grace_s)
                        rec.killed_at = now
                        self._files.save(rec)
                    self._kill(rec)  # again at each look: a process may have joined late
                    if not self._alive(rec, live_groups()):
                        return self._finish(rec, read_int(paths["exit"]), now)
            elif rec.time_limit_s is not None and now - rec.started_at > rec.time_limit_s:
                self._request_stop(rec, "timeout", now)
            return rec.info(RunState.RUNNING)
        return self._finish(rec, exit_code, now)

    def _adopt_pid(self, rec: RunRecord, live: set[int] | None) -> None:
        """Take the pid from `<key>.pid` when the record lacks it (a crash hid it)."""
        if rec.pgid is not None:
            return
        rec.pgid = read_int(self._files.paths(rec.key)["pid"])
        if rec.pgid is not None:
            if group_alive(rec.pgid, None, live):
                rec.leader_start_ticks = start_ticks(rec.pgid)
            self._files.save(rec)

    def _settle_unstarted(self, rec: RunRecord, now: float) -> RunInfo:
        # Within start_grace_s a wrapper may still be about to write its pid: wait.
        if now - rec.created_at < self.start_grace_s:
            return rec.info(RunState.PENDING)
        if rec.stop_reason is not None:
            rec.state, rec.ended_at = RunState.CANCELLED.value, now
            rec.reason = "cancelled before it started"
            return self._store_final(rec)
        key = rec.key
        log.warning("%s was accepted but never started (service stopped?): starting", key)
        try:
            self._spawn(rec)
        except OSError as exc:
            rec.state, rec.ended_at = RunState.FAILED.value, now
            rec.reason = f"could not start the job: {exc}"
            return self._store_final(rec)
        return rec.info(RunState.RUNNING)

    def _finish(self, rec: RunRecord, exit_code: int | None, now: float) -> RunInfo:
        """The process group is gone: decide the outcome once and for all."""
        paths = self._files.paths(rec.key)
        rec.exit_code = exit_code
        rec.ended_at = mtime(paths["exit"]) if exit_code is not None else None
        rec.ended_at = rec.ended_at or now
        rebooted = (
            rec.boot_id is not None and self._boot_id is not None and rec.boot_id != self._boot_id
        )
        cgroup = self._cgroup(rec)
        oom_kills = 0 if cgroup is None or rebooted else cgroup.oom_kills()
        state, rec.reason = run_outcome(
            rec.stop_reason,
            rec.time_limit_s,
            exit_code,
            rec.launch or {},
            rebooted=rebooted,
            oom_kills=oom_kills,
            not_started=lambda: read_text(paths["error"]),
            output_tail=lambda: attempt_tail(rec, paths["log"]),
        )
        rec.state = state.value
        return self._store_final(rec)

    def _store_final(self, rec: RunRecord) -> RunInfo:
        self._files.save(rec)
        cgroup = self._cgroup(rec)
        if cgroup is not None:
            for problem in cgroup.remove():
                log.warning("removing the cgroup of %s: %s", rec.job_id, problem)
        info = self._cache_final(rec)
        log.info("%s ended: %s (%s)", info.executor_id, info.state, info.reason or "exit 0")
        return info

    def _cache_final(self, rec: RunRecord) -> RunInfo:
        """An ended run's info, remembered: its record never changes again, so `runs`,
        `find` and `inventory` do not read its file again (a restarted service would
        otherwise parse every run it ever had on every observation)."""
        info = rec.info()
        self._final[rec.key] = info
        return info
