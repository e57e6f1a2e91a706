"""The local executor: every job is a cgroup on this one workstation, run as its owner.

For labs whose cluster is one GPU machine, and for running the service without Slurm. A run
gets the lowest free GPU indices of its placement (NVML's and nvidia-smi's indices, PCI bus
order) in JPUSHARE_GPUS, and CUDA_VISIBLE_DEVICES with CUDA_DEVICE_ORDER=PCI_BUS_ID: the same
indices, or 0…N-1 where the devices cgroup leaves the job only its own GPUs (CUDA then sees
no other, as under Slurm's ConstrainDevices); plus JPUSHARE_JOB_ID, JPUSHARE_ATTEMPT,
JPUSHARE_JOB_NAME and JPUSHARE_NODE. Its GPU with index N is taken to be the device node
`/dev/nvidiaN` (the driver's minor numbers, normally in PCI order as the indices are).

Who, where, with what (`LaunchSpec.workdir` set, i.e. jobs from revision 0003 on): when the
service runs as root, the job runs as `LaunchSpec.unix_user` (uid, gid, supplementary
groups; HOME, USER, LOGNAME, SHELL of that account); otherwise as the service's own account.
It runs in its working directory with exactly the environment it was submitted with (never
the service's), its stdout/stderr appended to files the owner creates with umask 077
(default `jpushare-<job>.out` in the working directory). It is pinned to `cpus_per_gpu` x
GPUs CPUs (sched_setaffinity; CPUs are shared only when there are not enough free ones) and
each file it writes may grow to at most `output_max_bytes` (RLIMIT_FSIZE; the process that
writes past it gets SIGXFSZ). Output files are never opened through a symbolic link and
never when they exist and belong to another user (the job ends FAILED with that reason).

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
group are not followed. Never isolated: the network. A job from before revision 0003 runs
as it always did (the executor's directory, the service's environment less its JPUSHARE_*
settings, its output in the state directory), except that under a root service it runs as
its owner with only PATH and the account's variables.

The wrapper that starts a job (`local_run.py`) stays the service's account, like Slurm's
slurmstepd, so it can write the run's files here; the job is its child and has dropped
every privilege before `exec`. A job that cannot start (no such account, working directory
missing or not enterable, output file not writable) ends FAILED with the reason.

Nothing about a run lives only in memory, so a restarted service (or a second executor
instance over the same state directory) finds every run again. The state directory is 0700
and its files 0600 (the jobs cannot read it). Layout of `state_dir/runs/`, one set of files
per run, named by its key `<job id, %-quoted>.<attempt>`, which is also its executor id:

- `<key>.json`: the record — the launch (account, directory, environment, files, limits),
  the GPU indices and CPUs it holds, its cgroup's directories, its process group and its
  leader's start time, a stop request, and the outcome once it ended. Written atomically
  (temporary file, fsync, rename) before the process starts, so a crash between accepting
  and starting cannot hide a run from the next `submit` (idempotent by key).
- `<key>.pid`: written by the run's wrapper as soon as it starts: its pid, which is the
  process group id. Its mtime is the run's `started_at`.
- `<key>.exit`: written by the wrapper when the command ends: the exit code. Its mtime is
  `ended_at`. The wrapper traps TERM/INT/HUP, so it survives a cancel's SIGTERM long enough
  to write the code; any executor instance can read it, parent or not.
- `<key>.error`: why the job could not start, when it could not.
- `<key>.runner`: what the wrapper itself printed (its own failures, never the job's).
- `<key>.log`: the output of a job from before revision 0003.

`state_dir/lock` is flock-ed around every submit, cancel and observation, so two processes
never start one run twice or hand one GPU to two runs. It is opened once, when the executor
starts: a client that exhausts the service's descriptors cannot make an observation fail.

How a run's state is read (`runs`, `find` and `inventory` observe; there is no thread):

1. no process group yet: PENDING. A record that a crashed service accepted but never started
   is started by the next observation or `submit` once `start_grace_s` has passed.
2. its process group (same boot, same leader: see `process_groups`) or its cgroup still
   has a live process: RUNNING. If the command already wrote its exit code, the stragglers
   it left in the background are killed, as Slurm does at the end of a job (the wrapper
   kills its cgroup itself before it writes the code). A cancel or an exceeded time limit
   sends SIGTERM to every process of the run, then SIGKILL after `cancel_grace_s`.
3. all of it is gone: CANCELLED or TIMEOUT when we stopped it; else by exit code — 0
   COMPLETED; non-zero OOM when its memory cgroup saw an OOM kill, or when the output's
   tail (this attempt's part) reports a CUDA out-of-memory (SPEC §5: the reason is a fixed
   sentence, never the job's own words, which may hold anything), else FAILED; no exit
   code at all FAILED (killed from outside), or NODE_FAIL when the machine rebooted under
   it. The outcome is written into the record, the cgroup removed, and neither changes
   again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from jpushare.executors.backfill_servers import backfill_dir, record_yield, stop_servers
from jpushare.executors.base import (
    JOB_VARIABLES,
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
from jpushare.executors.cuda_oom import CUDA_OOM_REASON, OOM_SCAN_BYTES, find_cuda_oom
from jpushare.executors.gpus import DeclaredGpus, LocalGpu, discover_gpus
from jpushare.executors.output_files import (
    OutputUnreadable,
    file_size,
    output_paths,
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
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"  # a job submitted without PATH (--export=NONE)

LOG_TAIL_BYTES = 8 << 20  # log() returns at most the last 8 MiB
_KEY = re.compile(r"^[A-Za-z0-9%._~-]*\.\d+$")
_RECORD_VERSION = 1


@dataclass(slots=True)
class _Record:
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
    def from_json(cls, data: Mapping[str, Any]) -> _Record:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def run_key(job_id: str, attempt: int) -> str:
    """The run's key and executor id: the job id %-quoted (no '/'), a dot, the attempt."""
    return f"{quote(job_id, safe='')}.{attempt}"


def _write_atomic(path: Path, data: bytes) -> None:
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


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None  # absent, or being replaced this instant


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _signal_reason(exit_code: int, fsize_bytes: int | None = None) -> str:
    """Why a run that exited `exit_code` failed; `fsize_bytes`: its output was full."""
    if fsize_bytes:
        return (
            f"a file the job wrote reached the output size limit of {_mib(fsize_bytes)} "
            f"(exit code {exit_code})"
        )
    if exit_code > 128:
        try:
            name = signal.Signals(exit_code - 128).name
        except ValueError:
            name = f"signal {exit_code - 128}"
        if name == "SIGKILL":
            return f"killed by SIGKILL (exit code {exit_code}; perhaps the out-of-memory killer)"
        return f"killed by {name} (exit code {exit_code})"
    return f"exited with code {exit_code}"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


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
        if gpus is None:
            found = discover_gpus(self.node, declared)
            self.gpus: tuple[LocalGpu, ...] = found.gpus
            self.gpu_source: str = found.source
        else:
            self.gpus = tuple(gpus)
            self.gpu_source = "given"
        seen: set[tuple[str, int]] = set()
        for g in self.gpus:
            if (g.node, g.index) in seen:
                raise ValueError(f"GPU index {g.index} appears twice on node {g.node}")
            seen.add((g.node, g.index))
        log.info(
            "local executor: %d GPUs from %s: %s",
            len(self.gpus),
            self.gpu_source,
            ", ".join(f"{g.node}:{g.index}={g.gpu_type}" for g in self.gpus) or "none",
        )
        self.state_dir = Path(state_dir)
        self.runs_dir = self.state_dir / "runs"
        _private_dir(self.state_dir)
        _private_dir(self.runs_dir)
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
            existing = self._load(key)
            if existing is not None:
                self._settle(existing, live_groups(), self._clock())
                return key
            group = [g for g in self.gpus if g.node == spec.node and g.gpu_type == spec.gpu_type]
            if not group:
                raise SubmitRefused(
                    f"this machine has no {spec.gpu_type} GPUs on node {spec.node!r} "
                    f"(it has: {self._describe_groups()})"
                )
            if spec.num_gpus < 1:
                raise SubmitRefused(f"num_gpus must be at least 1, not {spec.num_gpus}")
            held = self._held()
            free = [g.index for g in group if (g.node, g.index) not in held]
            if len(free) < spec.num_gpus:
                raise SubmitRefused(
                    f"{spec.num_gpus} {spec.gpu_type} GPUs asked on {spec.node}, "
                    f"{len(free)} of {len(group)} free"
                )
            rec = _Record(
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
            self._save(rec)  # before the process exists: a crash now is retried, not lost
            try:
                self._spawn(rec)
            except OSError as exc:
                self._paths(key)["json"].unlink(missing_ok=True)
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
            rec = self._load(key)
            return None if rec is None else self._settle(rec, live_groups(), self._clock())

    def cancel(self, executor_id: str) -> None:
        """SIGTERM the run's process group now, SIGKILL after `cancel_grace_s`. Idempotent."""
        if not _KEY.match(executor_id):
            log.warning("cancel: %r is not a local executor id", executor_id)
            return
        with self._locked():
            rec = self._load(executor_id)
            if rec is None:
                return
            if rec.state is not None or rec.stop_reason is not None:
                return
            if self._paths(executor_id)["exit"].exists():
                return  # it already ended on its own; the next observation says how
            self._adopt_pid(rec, live_groups())
            self._request_stop(rec, "cancel", self._clock())

    def log(self, job_id: str, attempt: int) -> str:
        """The run's output (its owner's file, read as the owner), at most the last 8 MiB."""
        key = run_key(job_id, attempt)
        with self._locked():
            rec = self._load(key)
        path, account = str(self._paths(key)["log"]), None
        if rec is not None and rec.launch is not None and not rec.launch["output_by_service"]:
            path, account = rec.launch["output"], _account_of(rec.launch)
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

    def _paths(self, key: str) -> dict[str, Path]:
        base = self.runs_dir / key
        exts = ("json", "log", "pid", "exit", "error", "runner")
        return {ext: base.with_name(f"{key}.{ext}") for ext in exts} | {"prefix": base}

    def _load(self, key: str) -> _Record | None:
        try:
            data = json.loads(self._paths(key)["json"].read_text())
        except FileNotFoundError:
            return None
        return _Record.from_json(data)

    def _save(self, rec: _Record) -> None:
        path = self._paths(run_key(rec.job_id, rec.attempt))["json"]
        _write_atomic(path, json.dumps(asdict(rec), indent=1, sort_keys=True).encode())

    def _keys(self) -> list[str]:
        return sorted(p.name[: -len(".json")] for p in self.runs_dir.glob("*.json"))

    def _describe_groups(self) -> str:
        names = sorted({f"{g.gpu_type} on {g.node}" for g in self.gpus})
        return ", ".join(names) or "no GPUs"

    def _held(self) -> set[tuple[str, int]]:
        """(node, GPU index) of every run that has not ended, started or not."""
        return {(rec.node, i) for rec in self._unended() for i in rec.gpu_indices}

    def _unended(self) -> list[_Record]:
        out = []
        for key in self._keys():
            if key in self._final:
                continue
            rec = self._load(key)
            if rec is None:
                continue
            if rec.state is not None:
                self._cache_final(rec)
            else:
                out.append(rec)
        return out

    def _pick_cpus(self, count: int) -> list[int]:
        """`count` CPUs this process may use, the ones fewest unended runs hold first (so
        runs share CPUs only when there are not enough free ones)."""
        usable = sorted(os.sched_getaffinity(0))
        load = dict.fromkeys(usable, 0)
        for rec in self._unended():
            for cpu in rec.cpus:
                if cpu in load:
                    load[cpu] += 1
        return sorted(sorted(usable, key=lambda c: (load[c], c))[:count])

    def _prepare(self, rec: _Record, spec: LaunchSpec) -> None:
        """Fill the record's launch: who, where, with what (SubmitRefused if no account)."""
        key = run_key(rec.job_id, rec.attempt)
        account: UnixAccount | None = None
        # The dispatcher always names the owner's account; a spec without one (tests, tools)
        # runs as the service's account, as every job does under a service that is not root.
        if self.switch_accounts and spec.unix_user is not None:
            try:
                account = resolve_account(spec.unix_user)
            except UnknownAccount as exc:
                raise SubmitRefused(str(exc)) from exc
        runs_as = account or self._service_account
        # Where the devices cgroup hides the other GPUs, CUDA and NVML number the ones left
        # from 0, as under Slurm's ConstrainDevices: CUDA_VISIBLE_DEVICES counts from 0 too,
        # and JPUSHARE_GPUS keeps the machine's indices.
        visible = range(len(rec.gpu_indices)) if self.cgroups.device_control else rec.gpu_indices
        job_vars = {
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in visible),
            "JPUSHARE_GPUS": ",".join(str(i) for i in rec.gpu_indices),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "JPUSHARE_JOB_ID": rec.job_id,
            "JPUSHARE_ATTEMPT": str(rec.attempt),
            "JPUSHARE_JOB_NAME": rec.name,
            "JPUSHARE_NODE": rec.node,
        }
        assert set(JOB_VARIABLES) <= set(job_vars)
        launch: dict[str, Any] = {
            "command": rec.command,
            "bash": self._bash,
            "account": None if account is None else _account_dict(account),
        }
        if spec.workdir is None:  # before revision 0003: as it always ran
            if account is None:
                env = {k: v for k, v in self._base_env.items() if not k.startswith("JPUSHARE_")}
            else:
                env = {"PATH": _DEFAULT_PATH, **account.login_env()}
            launch |= {
                "workdir": None,  # the wrapper starts in the executor's directory
                "output": str(self._paths(key)["log"]),
                "error": None,
                "output_by_service": True,
            }
        else:
            env = dict(spec.environment or {})
            env.setdefault("PATH", _DEFAULT_PATH)
            env |= runs_as.login_env()
            files = output_paths(spec.workdir, spec.output, spec.error, rec.job_id, rec.attempt)
            launch |= {
                "workdir": spec.workdir,
                "output": files.output,
                "error": files.error,
                "output_by_service": False,
            }
            # Where this attempt's output begins (earlier attempts' output stays above it).
            rec.output_offset = file_size(files.output)
            rec.error_offset = 0 if files.error is None else file_size(files.error)
        launch["env"] = env | job_vars
        if spec.cpus_per_gpu is not None:
            rec.cpus = self._pick_cpus(spec.cpus_per_gpu * spec.num_gpus)
            launch["cpus"] = rec.cpus
        if spec.mem_per_gpu_mb is not None:
            launch["mem_bytes"] = spec.mem_per_gpu_mb * spec.num_gpus << 20
            # A memory cgroup holds all the job's memory together; RLIMIT_DATA only where
            # there is none (it is per process and misses shared memory).
            held = self.cgroups.mode == "v2" or "memory" in self.cgroups.bases
            launch["rlimit_data"] = None if held else launch["mem_bytes"]
        launch["fsize_bytes"] = self.output_max_bytes
        rec.launch = launch

    # --- starting, stopping, observing ---------------------------------------------------

    def _spawn(self, rec: _Record) -> None:
        key = run_key(rec.job_id, rec.attempt)
        paths = self._paths(key)
        if rec.launch is None:  # accepted by a version before the wrapper took a launch
            raise OSError(f"run {key} has no launch record (accepted by an older version)")
        self._yield_backfill(rec)
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
        self._save(rec)
        log.info("started %s (pgid %d) on %s GPUs %s", key, proc.pid, rec.node, rec.gpu_indices)

    def _yield_backfill(self, rec: _Record) -> None:
        """Stop the LLM backfill servers on the run's GPUs (`backfill_servers`): the job
        starts once they are gone, after at most their grace."""
        directory = backfill_dir(self.state_dir)
        done = stop_servers(directory, rec.node, rec.gpu_indices, reason=rec.job_id)
        if done.keys:
            record_yield(directory, done)
            log.info(
                "job %s: backfill on %s GPUs %s yielded in %.2fs%s",
                rec.job_id,
                rec.node,
                rec.gpu_indices,
                done.seconds,
                f" (killed after the grace: {', '.join(done.killed)})" if done.killed else "",
            )

    def planned_gpus(self, spec: LaunchSpec) -> list[int] | None:
        """The GPU indices `submit(spec)` would give now (None: it would refuse): what a
        yield request to the lab's router names."""
        with self._locked():
            held = self._held()
        free = [
            g.index
            for g in self.gpus
            if g.node == spec.node and g.gpu_type == spec.gpu_type and (g.node, g.index) not in held
        ]
        return free[: spec.num_gpus] if len(free) >= spec.num_gpus else None

    @contextlib.contextmanager
    def backfill_slot(self) -> Iterator[list[LocalGpu]]:
        """Under the executor's lock, the GPUs no unended run holds: the backfill keeper
        starts its servers inside this block, so no job is given them meanwhile."""
        with self._locked():
            self._observe_all()
            held = self._held()
            yield [g for g in self.gpus if (g.node, g.index) not in held]

    def _make_cgroup(self, rec: _Record) -> None:
        """The run's cgroup, made and written into its record before the wrapper starts
        (which joins it from the record): a restart finds it there."""
        assert rec.launch is not None
        key = run_key(rec.job_id, rec.attempt)
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
        self._save(rec)

    @staticmethod
    def _cgroup(rec: _Record) -> RunCgroup | None:
        return None if rec.cgroup is None else RunCgroup.from_json(rec.cgroup)

    def _kill(self, rec: _Record) -> None:
        """SIGKILL every process of the run: its cgroup (frozen first), its process group."""
        cgroup = self._cgroup(rec)
        # Briefly: this holds the lock; what is slow to die is killed again at the next look.
        if cgroup is not None and not cgroup.kill(timeout_s=1.0):
            log.warning("%s: processes outlived a kill of its cgroup", rec.job_id)
        if rec.pgid is not None:
            signal_group(rec.pgid, signal.SIGKILL)

    def _request_stop(self, rec: _Record, reason: str, now: float) -> None:
        rec.stop_reason = reason
        rec.stop_requested_at = now
        self._save(rec)
        cgroup = self._cgroup(rec)
        if cgroup is not None:
            cgroup.signal(signal.SIGTERM)
        if rec.pgid is not None and self._alive(rec, live_groups()):
            signal_group(rec.pgid, signal.SIGTERM)
        key = run_key(rec.job_id, rec.attempt)
        timer = threading.Timer(self.cancel_grace_s, self._escalate, args=(key,))
        timer.daemon = True
        timer.start()

    def _escalate(self, key: str) -> None:
        """Timer: observe the run once its grace is over, which SIGKILLs it if still alive."""
        try:
            self.find(*self._parse_key(key))
        except Exception:  # a timer thread has nobody to raise to
            log.exception("escalating the stop of %s failed", key)

    @staticmethod
    def _parse_key(key: str) -> tuple[str, int]:
        quoted, _, attempt = key.rpartition(".")
        return unquote(quoted), int(attempt)

    def _alive(self, rec: _Record, live: set[int] | None) -> bool:
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
        for key in self._keys():
            cached = self._final.get(key)
            if cached is not None:
                out[key] = cached
                continue
            rec = self._load(key)
            if rec is not None:
                out[key] = self._settle(rec, live, now)
        return out

    def _settle(self, rec: _Record, live: set[int] | None, now: float) -> RunInfo:
        """Bring the record up to date with the machine (steps 1–3 of the module doc)."""
        key = run_key(rec.job_id, rec.attempt)
        paths = self._paths(key)
        if rec.state is not None:
            return self._cache_final(rec)
        child = self._children.get(key)
        if child is not None and child.poll() is not None:
            del self._children[key]  # reaped: a zombie would look alive without /proc
        self._adopt_pid(rec, live)
        if rec.pgid is None:
            return self._settle_unstarted(rec, now)
        if rec.started_at is None:
            rec.started_at = _mtime(paths["pid"]) or rec.created_at
            self._save(rec)
        exit_code = _read_int(paths["exit"])
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
                        self._save(rec)
                    self._kill(rec)  # again at each look: a process may have joined late
                    if not self._alive(rec, live_groups()):
                        return self._finish(rec, _read_int(paths["exit"]), now)
            elif rec.time_limit_s is not None and now - rec.started_at > rec.time_limit_s:
                self._request_stop(rec, "timeout", now)
            return self._info(rec, RunState.RUNNING)
        return self._finish(rec, exit_code, now)

    def _adopt_pid(self, rec: _Record, live: set[int] | None) -> None:
        """Take the pid from `<key>.pid` when the record lacks it (a crash hid it)."""
        if rec.pgid is not None:
            return
        rec.pgid = _read_int(self._paths(run_key(rec.job_id, rec.attempt))["pid"])
        if rec.pgid is not None:
            if group_alive(rec.pgid, None, live):
                rec.leader_start_ticks = start_ticks(rec.pgid)
            self._save(rec)

    def _settle_unstarted(self, rec: _Record, now: float) -> RunInfo:
        # Within start_grace_s a wrapper may still be about to write its pid: wait.
        if now - rec.created_at < self.start_grace_s:
            return self._info(rec, RunState.PENDING)
        if rec.stop_reason is not None:
            rec.state, rec.ended_at = RunState.CANCELLED.value, now
            rec.reason = "cancelled before it started"
            return self._store_final(rec)
        key = run_key(rec.job_id, rec.attempt)
        log.warning("%s was accepted but never started (service stopped?): starting", key)
        try:
            self._spawn(rec)
        except OSError as exc:
            rec.state, rec.ended_at = RunState.FAILED.value, now
            rec.reason = f"could not start the job: {exc}"
            return self._store_final(rec)
        return self._info(rec, RunState.RUNNING)

    def _finish(self, rec: _Record, exit_code: int | None, now: float) -> RunInfo:
        """The process group is gone: decide the outcome once and for all."""
        paths = self._paths(run_key(rec.job_id, rec.attempt))
        rec.exit_code = exit_code
        rec.ended_at = _mtime(paths["exit"]) if exit_code is not None else None
        rec.ended_at = rec.ended_at or now
        rebooted = (
            rec.boot_id is not None and self._boot_id is not None and rec.boot_id != self._boot_id
        )
        cgroup = self._cgroup(rec)
        oom_kills = 0 if cgroup is None or rebooted else cgroup.oom_kills()
        launch = rec.launch or {}
        state: RunState
        if rec.stop_reason == "cancel":
            state, rec.reason = RunState.CANCELLED, "cancelled"
        elif rec.stop_reason == "timeout":
            state, rec.reason = RunState.TIMEOUT, f"time limit of {rec.time_limit_s:g} s reached"
        elif exit_code is None and rebooted:
            state, rec.reason = RunState.NODE_FAIL, "the machine restarted while the job ran"
        elif exit_code != 0 and oom_kills and launch.get("mem_bytes"):
            state = RunState.OOM
            rec.reason = (
                f"killed: the job's memory limit of {_mib(launch['mem_bytes'])} was reached"
            )
        elif exit_code is None:
            state = RunState.FAILED
            rec.reason = "the job's processes ended without an exit code (killed from outside?)"
        elif exit_code == 0:
            state, rec.reason = RunState.COMPLETED, None
        elif (not_started := _read_text(paths["error"])) is not None:
            state, rec.reason = RunState.FAILED, not_started[:1000]
        else:
            if find_cuda_oom(self._output_tail(rec)) is not None:
                state, rec.reason = RunState.OOM, CUDA_OOM_REASON  # never the job's words
            else:
                state = RunState.FAILED
                rec.reason = _signal_reason(exit_code, self._output_full(launch, exit_code))
        rec.state = state.value
        return self._store_final(rec)

    @staticmethod
    def _output_full(launch: Mapping[str, Any], exit_code: int) -> int | None:
        """The output size limit, when the run was stopped by it: SIGXFSZ killed it, or it
        failed (a writer that ignores SIGXFSZ, as Python does, gets EFBIG) with an output
        file at the limit. `stat` opens nothing: fine as root."""
        limit = launch.get("fsize_bytes")
        if not limit:
            return None
        files = [launch.get("output"), launch.get("error")]
        if exit_code == 128 + signal.SIGXFSZ or any(
            f is not None and file_size(f) >= limit for f in files
        ):
            return int(limit)
        return None

    def _store_final(self, rec: _Record) -> RunInfo:
        self._save(rec)
        cgroup = self._cgroup(rec)
        if cgroup is not None:
            for problem in cgroup.remove():
                log.warning("removing the cgroup of %s: %s", rec.job_id, problem)
        info = self._cache_final(rec)
        log.info("%s ended: %s (%s)", info.executor_id, info.state, info.reason or "exit 0")
        return info

    def _cache_final(self, rec: _Record) -> RunInfo:
        """An ended run's info, remembered: its record never changes again, so `runs`,
        `find` and `inventory` do not read its file again (a restarted service would
        otherwise parse every run it ever had on every observation)."""
        info = self._info(rec)
        self._final[run_key(rec.job_id, rec.attempt)] = info
        return info

    def _output_tail(self, rec: _Record) -> str:
        """What this attempt wrote at the end of its output and error files (read as the
        job's owner: they are the owner's files)."""
        launch = rec.launch
        if launch is None:  # a run started by a version before launches
            files = [(str(self._paths(run_key(rec.job_id, rec.attempt))["log"]), 0)]
            account = None
        else:
            files = [(launch["output"], rec.output_offset)]
            if launch.get("error") is not None:
                files.append((launch["error"], rec.error_offset))
            account = None if launch["output_by_service"] else _account_of(launch)
        texts = []
        for path, start in files:
            try:
                tail = read_tail(path, account, OOM_SCAN_BYTES, start)
            except OutputUnreadable as exc:
                log.warning("OOM check of %s: %s", path, exc)
                continue
            if tail is not None:
                texts.append(tail.data.decode("utf-8", errors="replace"))
        return "\n".join(texts)

    def _info(self, rec: _Record, state: RunState | None = None) -> RunInfo:
        now_state = RunState(rec.state) if rec.state is not None else state
        assert now_state is not None
        reason = rec.reason
        if not now_state.ended and rec.stop_reason is not None:
            reason = f"stopping ({rec.stop_reason})"
        return RunInfo(
            job_id=rec.job_id,
            attempt=rec.attempt,
            executor_id=run_key(rec.job_id, rec.attempt),
            state=now_state,
            node=rec.node,
            started_at=rec.started_at,
            ended_at=rec.ended_at,
            exit_code=rec.exit_code,
            reason=reason,
        )


def _private_dir(path: Path) -> None:
    """Create `path` for the service alone (0700); tighten it if it is ours and looser."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
        path.chmod(0o700)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _account_dict(account: UnixAccount) -> dict[str, Any]:
    return {
        "name": account.name,
        "uid": account.uid,
        "gid": account.gid,
        "groups": list(account.groups),
        "home": account.home,
        "shell": account.shell,
    }


def _account_of(launch: Mapping[str, Any]) -> UnixAccount | None:
    raw = launch.get("account")
    if raw is None:
        return None
    return UnixAccount(
        raw["name"], raw["uid"], raw["gid"], tuple(raw["groups"]), raw["home"], raw["shell"]
    )
