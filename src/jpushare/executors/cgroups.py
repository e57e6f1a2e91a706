"""Each run of the local executor in a cgroup of its own, as Slurm's cgroup plugins do.

A process group is only a convention: `setsid`, `set -m` or `setpgid(0, 0)` leave it, and
an rlimit is per process. A cgroup is the kernel's: every descendant of the job stays in
it, whatever it calls, and its limits bind them all together. So each attempt gets one,
named `jpushare-<hash of the state directory>/run-<run key>` under the service's own
cgroup (two services, or the tests' many executors, never share a name), with

- `memory`: all the job's memory, shared mappings and tmpfs (/dev/shm) pages included, at
  most `mem_per_gpu` x GPUs (and no swap beyond it); the kernel's OOM killer acts inside
  the cgroup, and its count of kills is how a run learns it was killed for memory. (A file
  a job leaves in /dev/shm outlives it, and so does its memory: the machine's tmpfs size
  bounds that, not the job's cgroup);
- `pids`: at most `pids_max` tasks (threads count), so a fork bomb stays in its box;
- `cpuset`: the pinned CPUs (the service's CPUs when not pinned) and the service's memory
  nodes: `sched_setaffinity` (`taskset`) cannot widen it;
- `devices` (v1 only): nothing but the usual character devices (null, zero, full, random,
  urandom, tty, ptmx, pts) and the job's own `/dev/nvidiaN` plus the NVIDIA control nodes
  (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, nvidia-caps/*), as found by
  `stat` in the device directory;
- `freezer` (v1; `cgroup.freeze` / `cgroup.kill` on v2): so that a kill reaches every
  process at once: freeze, SIGKILL every member, thaw, until none is left.

Which hierarchy is used is decided once, at start (`detect`): cgroup v2 where the service's
cgroup has memory, pids and cpuset to give to its children (if the service is the only
process in its cgroup, it moves itself into a `jpushare-service` child first, as v2 asks of
a delegated service); else the v1 per-controller
mounts that exist (each is optional: the run gets what is there); else none (not root,
nothing mounted), and the executor runs jobs as before, as process groups. On v2 device
access is not constrained: that needs an eBPF program, which this module does not load.

Standard library only and importable on its own: the run wrapper (`local_run.py`), which
runs privileged with nothing but the standard library, loads this file by its path to
join the cgroup and to kill what is left in it when the job's main process ends.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import signal
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROC = Path("/proc")
V1_CONTROLLERS = ("memory", "pids", "cpuset", "devices", "freezer")
V2_CONTROLLERS = ("memory", "pids", "cpuset")
UNIFIED = "unified"  # the key of a v2 run's one directory
SERVICE_LEAF = "jpushare-service"  # v2: where the service moves itself (see _into_leaf)
DEFAULT_PIDS_MAX = 4096

# What every job may open (type, major, minor; None: any minor): /dev/null, zero, full,
# random, urandom, tty, ptmx, and the pseudo-terminals /dev/pts/*.
USUAL_DEVICES: tuple[tuple[str, int, int | None], ...] = (
    ("c", 1, 3),
    ("c", 1, 5),
    ("c", 1, 7),
    ("c", 1, 8),
    ("c", 1, 9),
    ("c", 5, 0),
    ("c", 5, 2),
    ("c", 136, None),
)
NVIDIA_CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


def namespace_for(state_dir: Path | str) -> str:
    """The cgroup directory of one executor state directory: `jpushare-<12 hex>`."""
    digest = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()
    return f"jpushare-{digest[:12]}"


def run_dir_name(key: str) -> str:
    """A run's cgroup name: never a controller's file name (those have no `run-` prefix)."""
    return f"run-{key}"


@dataclass(frozen=True, slots=True)
class Limits:
    """What one run's cgroup allows. None: not limited (inherited from the service's)."""

    mem_bytes: int | None = None
    pids_max: int | None = None
    cpus: tuple[int, ...] = ()  # empty: the service's CPUs
    devices: tuple[str, ...] | None = None  # v1 allow rules ("c 195:0 rwm"); None: all


def device_rules(device_dir: Path | str, gpu_indices: list[int]) -> tuple[str, ...]:
    """The devices cgroup's allow rules for a job holding `gpu_indices`: the usual devices,
    its own `nvidiaN` and the NVIDIA control nodes that exist in `device_dir`."""
    rules = [f"{t} {ma}:{'*' if mi is None else mi} rwm" for t, ma, mi in USUAL_DEVICES]
    root = Path(device_dir)
    names = [f"nvidia{i}" for i in gpu_indices] + list(NVIDIA_CONTROL_NODES)
    with contextlib.suppress(OSError):
        names += [f"nvidia-caps/{p.name}" for p in sorted((root / "nvidia-caps").iterdir())]
    for name in names:
        try:
            st = os.stat(root / name)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            rules.append(f"c {os.major(st.st_rdev)}:{os.minor(st.st_rdev)} rwm")
    return tuple(rules)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _count(text: str | None, key: str) -> int:
    """The number after `key` in a `key value` file (memory.events, memory.oom_control)."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


@dataclass(frozen=True, slots=True)
class RunCgroup:
    """One run's cgroup: a directory per v1 controller, or the one v2 directory. Lives in
    the run's record, so a restarted service finds, kills and removes it."""

    mode: str  # "v1" | "v2"
    dirs: dict[str, str]  # controller (v2: "unified") -> directory

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "dirs": dict(self.dirs)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunCgroup:
        return cls(str(data["mode"]), {str(k): str(v) for k, v in data["dirs"].items()})

    def procs_files(self) -> list[str]:
        """What a process writes its pid into to join the run (every hierarchy)."""
        return [str(Path(d) / "cgroup.procs") for d in self.dirs.values()]

    def join(self, pid: int) -> None:
        for path in self.procs_files():
            _write(Path(path), f"{pid}\n")

    def members(self) -> set[int]:
        """Every process in the run's cgroup now (the union over its hierarchies)."""
        pids: set[int] = set()
        for d in self.dirs.values():
            text = _read(Path(d) / "cgroup.procs")
            pids.update(int(x) for x in (text or "").split() if x.isdigit())
        return pids

    def signal(self, sig: signal.Signals) -> None:
        for pid in self.members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def kill(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process of the run, none able to fork meanwhile; True when the
        cgroup is empty (False: something outlived `timeout_s`, e.g. stuck in the kernel)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._kill_once()
            settle = time.monotonic() + 0.5
            while time.monotonic() < min(settle, deadline):
                if not self.members():
                    return True
                time.sleep(0.01)
            if not self.members():
                return True
            if time.monotonic() >= deadline:
                return False

    def _kill_once(self) -> None:
        if self.mode == "v2":
            unified = Path(self.dirs[UNIFIED])
            if (unified / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    _write(unified / "cgroup.kill", "1")
                    return
            self._freeze_and_kill(unified / "cgroup.freeze", "1", "0", None)
            return
        freezer = self.dirs.get("freezer")
        if freezer is None:
            self.signal(signal.SIGKILL)  # no freezer: repeated until none is left
            return
        self._freeze_and_kill(Path(freezer) / "freezer.state", "FROZEN", "THAWED", "FROZEN")

    def _freeze_and_kill(self, control: Path, freeze: str, thaw: str, frozen: str | None) -> None:
        try:
            _write(control, freeze)
        except OSError:
            self.signal(signal.SIGKILL)
            return
        if frozen is not None:  # v1: FREEZING until every task stopped
            until = time.monotonic() + 1.0
            while time.monotonic() < until and (_read(control) or "").strip() != frozen:
                time.sleep(0.005)
        try:
            self.signal(signal.SIGKILL)
        finally:
            with contextlib.suppress(OSError):
                _write(control, thaw)  # a frozen process cannot die

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer killed in the run's memory cgroup."""
        if self.mode == "v2":
            return _count(_read(Path(self.dirs[UNIFIED]) / "memory.events"), "oom_kill")
        memory = self.dirs.get("memory")
        if memory is None:
            return 0
        return _count(_read(Path(memory) / "memory.oom_control"), "oom_kill")

    def remove(self) -> list[str]:
        """Remove the run's directories (and its namespace's, once empty); what could not
        be removed, as sentences (a directory still busy, or gone already is fine)."""
        problems = []
        for d in self.dirs.values():
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError as exc:
                problems.append(f"{d}: {exc.strerror or exc}")
                continue
            with contextlib.suppress(OSError):
                os.rmdir(Path(d).parent)  # ENOTEMPTY / EBUSY while other runs live
        return problems


@dataclass(slots=True)
class Cgroups:
    """How this executor confines its runs: the mode detected at start, and where."""

    mode: str  # "v2" | "v1" | "none"
    namespace: str
    bases: dict[str, Path] = field(default_factory=dict)  # controller -> the service's cgroup
    why: str = ""  # for "none": why not; for the others: what is left out

    @property
    def usable(self) -> bool:
        return self.mode != "none"

    @property
    def device_control(self) -> bool:
        return self.mode == "v1" and "devices" in self.bases

    def describe(self) -> str:
        """The executor's start-up line about containment."""
        if not self.usable:
            return f"containment: no cgroups ({self.why}): jobs run as process groups only"
        if self.mode == "v2":
            where = str(self.bases[UNIFIED] / self.namespace)
            ctrls = ", ".join(V2_CONTROLLERS)
            devices = "devices NOT constrained (v2 needs an eBPF program, not implemented)"
            return f"containment: cgroup v2 at {where} ({ctrls}; kill: cgroup.kill; {devices})"
        ctrls = ", ".join(c for c in V1_CONTROLLERS if c in self.bases)
        missing = [c for c in V1_CONTROLLERS if c not in self.bases]
        line = f"containment: cgroup v1 ({ctrls}) under {self.namespace}"
        if missing:
            line += f"; not mounted or not usable: {', '.join(missing)}"
        if "devices" not in self.bases:
            line += "; devices NOT constrained"
        return line

    def _ns(self, controller: str) -> Path:
        return self.bases[controller] / self.namespace

    def _ensure_namespace(self) -> None:
        """The namespace directories, made (and for cpuset, filled) when missing."""
        for controller, base in self.bases.items():
            ns = base / self.namespace
            with contextlib.suppress(FileExistsError):
                ns.mkdir()
            if self.mode == "v2":
                enabled = set((_read(ns / "cgroup.subtree_control") or "").split())
                if not set(V2_CONTROLLERS) <= enabled:
                    on = " ".join(f"+{c}" for c in V2_CONTROLLERS)
                    _write(ns / "cgroup.subtree_control", on)
            elif controller == "cpuset":  # empty in a new cpuset: no task could join
                for name in ("cpuset.cpus", "cpuset.mems"):
                    if not (_read(ns / name) or "").strip():
                        _write(ns / name, (_read(base / name) or "").strip() or "\n")

    def create(self, name: str, limits: Limits) -> RunCgroup:
        """The run's cgroup with its limits (existing already: limits written again)."""
        assert self.usable
        self._ensure_namespace()
        made: dict[str, str] = {}
        try:
            for controller in self.bases:
                d = self._ns(controller) / name
                with contextlib.suppress(FileExistsError):
                    d.mkdir()
                made[controller] = str(d)
                self._limit(controller, d, limits)
        except OSError:
            RunCgroup(self.mode, made).remove()
            raise
        return RunCgroup(self.mode, made)

    def _limit(self, controller: str, d: Path, limits: Limits) -> None:
        ns = d.parent
        cpus = ",".join(str(c) for c in limits.cpus)
        if self.mode == "v2":
            if limits.mem_bytes is not None:
                _write(d / "memory.max", str(limits.mem_bytes))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
            if limits.pids_max is not None:
                _write(d / "pids.max", str(limits.pids_max))
            if cpus:
                _write(d / "cpuset.cpus", cpus)
            return
        if controller == "memory" and limits.mem_bytes is not None:
            _write(d / "memory.limit_in_bytes", str(limits.mem_bytes))
            if (d / "memory.memsw.limit_in_bytes").exists():  # memory + swap: no swap
                _write(d / "memory.memsw.limit_in_bytes", str(limits.mem_bytes))
        elif controller == "pids" and limits.pids_max is not None:
            _write(d / "pids.max", str(limits.pids_max))
        elif controller == "cpuset":
            _write(d / "cpuset.cpus", cpus or (_read(ns / "cpuset.cpus") or "").strip())
            _write(d / "cpuset.mems", (_read(ns / "cpuset.mems") or "").strip())
        elif controller == "devices" and limits.devices is not None:
            _write(d / "devices.deny", "a")
            for rule in limits.devices:
                _write(d / "devices.allow", rule)

    def prune(self) -> None:
        """Remove the namespace directories that hold no run."""
        for controller in self.bases:
            with contextlib.suppress(OSError):
                os.rmdir(self._ns(controller))


# --- detection -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Mount:
    point: Path
    root: str  # the hierarchy's path mounted there
    fstype: str
    options: frozenset[str]


def _mounts(proc: Path) -> list[_Mount]:
    out = []
    for line in (_read(proc / "self/mountinfo") or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        point = fields[4].replace("\\040", " ")
        out.append(_Mount(Path(point), fields[3], tail[0], frozenset(tail[2].split(","))))
    return out


def _own_cgroups(proc: Path) -> dict[str, str]:
    """This process's cgroup per v1 controller, and "" -> its v2 cgroup."""
    out: dict[str, str] = {}
    for line in (_read(proc / "self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            out[controller] = parts[2]
    return out


def _under(mount: _Mount, path: str) -> Path | None:
    """Where cgroup `path` of the mount's hierarchy is in the file system (None: not under
    what is mounted there, e.g. in another cgroup namespace)."""
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return mount.point / path[len(root) :].lstrip("/")


def detect(state_dir: Path | str, proc: Path = PROC, euid: int | None = None) -> Cgroups:
    """The cgroups this service can give its runs (see the module docstring)."""
    namespace = namespace_for(state_dir)
    if (os.geteuid() if euid is None else euid) != 0:
        return Cgroups("none", namespace, why="the service is not root")
    mounts, own = _mounts(proc), _own_cgroups(proc)
    v2_why = _try_v2(mounts, own, namespace)
    if isinstance(v2_why, Cgroups):
        return v2_why
    bases: dict[str, Path] = {}
    failures: list[str] = []
    for controller in V1_CONTROLLERS:
        mount = next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)
        base = None if mount is None else _under(mount, own.get(controller, "/"))
        if base is None or not base.is_dir():
            continue
        probe = Cgroups("v1", namespace, {controller: base})
        try:
            probe._ensure_namespace()
        except OSError as exc:
            failures.append(f"{controller}: {exc.strerror or exc}")
            continue
        bases[controller] = base
    if not bases:
        why = "; ".join([v2_why, *failures]) if failures else v2_why
        return Cgroups("none", namespace, why=why)
    found = Cgroups("v1", namespace, bases, why="; ".join(failures))
    found.prune()  # made again with a run's cgroup: nothing is left when no run lives
    return found


def _try_v2(mounts: list[_Mount], own: dict[str, str], namespace: str) -> Cgroups | str:
    """A v2 Cgroups, or why v2 is not used (a sentence)."""
    mount = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if mount is None:
        return "no cgroup v2 mount"
    base = _under(mount, own.get("", "/"))
    if base is None:
        return "this process's cgroup v2 is not under the mount"
    if base.name == SERVICE_LEAF:  # moved there by an earlier executor of this process
        base = base.parent
    have = set((_read(base / "cgroup.controllers") or "").split())
    lacking = [c for c in V2_CONTROLLERS if c not in have]
    if lacking:
        return f"cgroup v2 at {base} lacks {', '.join(lacking)}"
    enabled = set((_read(base / "cgroup.subtree_control") or "").split())
    on = " ".join(f"+{c}" for c in V2_CONTROLLERS)
    try:
        if not set(V2_CONTROLLERS) <= enabled:
            try:
                _write(base / "cgroup.subtree_control", on)
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                _into_leaf(base)
                _write(base / "cgroup.subtree_control", on)
        found = Cgroups("v2", namespace, {UNIFIED: base})
        found._ensure_namespace()
    except OSError as exc:
        why = exc.strerror or str(exc)
        return f"cgroup v2 at {base} cannot give its controllers to children: {why}"
    found.prune()
    return found


def _into_leaf(base: Path) -> None:
    """Move this process into `base/jpushare-service`: on v2 a cgroup that holds processes
    cannot give controllers to its children, and a service systemd started with
    `Delegate=yes` is in such a cgroup. Only when this process is the only one there: the
    processes of a login session are not ours to move."""
    here = {int(x) for x in (_read(base / "cgroup.procs") or "").split() if x.isdigit()}
    others = here - {os.getpid()}
    if others:
        raise OSError(
            errno.EBUSY,
            f"it holds {len(others)} other process(es), and a v2 cgroup with processes "
            "cannot give controllers to children (run the service alone in a delegated "
            "cgroup, e.g. systemd Delegate=yes)",
        )
    leaf = base / SERVICE_LEAF
    with contextlib.suppress(FileExistsError):
        leaf.mkdir()
    _write(leaf / "cgroup.procs", f"{os.getpid()}\n")
