"""A student's job, run by the local executor under a root service with cgroups, tries to
leave its box: processes that leave its process group (setsid, `set -m`, setpgid, a double
fork) to outlive a cancel, a time limit or its own end; shared memory and /dev/shm past its
memory limit; a fork bomb; widening its CPU set; opening another GPU's device node; output
files planted by another user; unbounded output; secrets in an OOM reason. Every try fails.
Root and real cgroups only (CI=true: never skipped).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jpushare.executors.base import RunInfo, RunState
from jpushare.executors.cgroups import RunCgroup
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from tests.executors.cgroup_cleanup import remove_cgroups
from tests.marked_processes import live_with_marker
from tests.missing import missing
from tests.security.owner_spec import NODE, owner_spec
from tests.unix_accounts import MadeAccount, made_accounts, require_root

WAIT_S = 30.0
NVIDIA_MAJOR = 195


@dataclass
class Setup:
    top: Path
    state_dir: Path
    devices: Path  # fake /dev: nvidia0..7 and nvidiactl, character devices without a driver
    a: MadeAccount
    b: MadeAccount
    executors: list[LocalExecutor]

    def executor(self, **options: object) -> LocalExecutor:
        options.setdefault("cancel_grace_s", 1.0)
        ex = LocalExecutor(
            self.state_dir,
            gpus=[LocalGpu(NODE, i, "rtx4090") for i in range(8)],
            device_dir=self.devices,
            **options,  # type: ignore[arg-type]
        )
        if not ex.cgroups.usable:
            missing(f"no cgroups to contain jobs: {ex.cgroups.why}", "CI runs as root")
        self.executors.append(ex)
        return ex


@pytest.fixture
def setup() -> Iterator[Setup]:
    require_root("jobs run as their owners and in cgroups only under a root service")
    top = Path("/tmp") / f"jpst-box-{uuid.uuid4().hex[:8]}"
    top.mkdir(mode=0o755)
    devices = top / "dev"
    devices.mkdir(mode=0o755)
    for i in range(8):
        os.mknod(devices / f"nvidia{i}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, i))
    os.mknod(devices / "nvidiactl", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, 255))
    for node in devices.iterdir():
        node.chmod(0o666)  # as the driver makes them: the cgroup alone tells them apart
    old_umask = os.umask(0o077)  # what `jpushare serve` sets
    try:
        with made_accounts("a", "b") as accounts:
            made = Setup(top, top / "state", devices, accounts["a"], accounts["b"], [])
            yield made
            for ex in made.executors:
                for info in ex.runs():
                    if not info.state.ended:
                        ex.cancel(info.executor_id)
            remove_cgroups(made.state_dir)
    finally:
        os.umask(old_umask)
        shutil.rmtree(top, ignore_errors=True)


def _wait(what: str, probe: object, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if probe():  # type: ignore[operator]
            return
        time.sleep(0.05)
    pytest.fail(f"{what}: not within {timeout_s} s")


def _wait_end(ex: LocalExecutor, job_id: str) -> RunInfo:
    found: list[RunInfo] = []

    def ended() -> bool:
        info = ex.find(job_id, 1)
        if info is not None and info.state.ended:
            found.append(info)
        return bool(found)

    _wait(f"{job_id} to end", ended)
    return found[0]


def _output(owner: MadeAccount, job_id: str) -> str:
    path = Path(owner.home) / f"jpushare-{job_id}.out"
    return path.read_text() if path.exists() else ""


# Each way out of a process group, as a job would write it: a `sleep` with a unique
# argument that says it started, by appending its pid to `started`.
def _escapes(marker: str, started: str) -> dict[str, str]:
    body = f"echo $$ >> {started}; exec sleep {marker}"
    return {
        "setsid": f"setsid sh -c '{body}' &",
        "set-m": f"set -m; sh -c '{body}' &",
        "setpgid": (
            "python3 -c 'import os, sys; os.setpgid(0, 0); "
            f'os.execvp("sh", ["sh", "-c", sys.argv[1]])\' "{body}" &'
        ),
        "double-fork": f"( (setsid sh -c '{body}' &) & )",
    }


@pytest.mark.parametrize("end", ["cancel", "timeout", "completed"])
def test_no_process_of_a_job_outlives_its_end(setup: Setup, end: str) -> None:
    ex, b = setup.executor(), setup.b
    tag = str(secrets.randbelow(10**9))
    started = Path(b.home) / f"started-{tag}"
    escapes = _escapes(f"1001.{tag}", str(started))
    wait_all = (
        f'until [ "$(wc -l < {started} 2>/dev/null)" -ge {len(escapes)} ]; do sleep 0.05; done'
    )
    tail = "exit 0" if end == "completed" else "sleep 120"
    command = "\n".join([*escapes.values(), wait_all, "echo all-started", tail])
    ex.submit(owner_spec("escape", b, command, time_limit_s=2.0 if end == "timeout" else None))
    if end != "completed":
        _wait("every escape to start", lambda: "all-started" in _output(b, "escape"))
        assert len(live_with_marker(f"1001.{tag}")) == len(escapes)
    if end == "cancel":
        ex.cancel("escape.1")

    info = _wait_end(ex, "escape")

    expected = {
        "cancel": RunState.CANCELLED,
        "timeout": RunState.TIMEOUT,
        "completed": RunState.COMPLETED,
    }
    assert info.state is expected[end], info
    # Ended means ended: no process of the job runs any more, and its cgroup is gone.
    assert live_with_marker(f"1001.{tag}") == []
    assert len(started.read_text().split()) == len(escapes)  # they did all start
    cgroup = json.loads((setup.state_dir / "runs" / "escape.1.json").read_text())["cgroup"]
    assert not any(Path(d).exists() for d in RunCgroup.from_json(cgroup).dirs.values())


def test_a_restarted_service_still_kills_the_whole_job(setup: Setup) -> None:
    b = setup.b
    tag = str(secrets.randbelow(10**9))
    started = Path(b.home) / f"started-{tag}"
    escapes = _escapes(f"1002.{tag}", str(started))
    first = setup.executor()
    first.submit(owner_spec("restart", b, "\n".join([*escapes.values(), "sleep 120"])))
    _wait("the escapes to start", lambda: len(live_with_marker(f"1002.{tag}")) == len(escapes))

    second = setup.executor()  # a new service over the same state directory
    second.cancel("restart.1")

    assert _wait_end(second, "restart").state is RunState.CANCELLED
    assert live_with_marker(f"1002.{tag}") == []


MIB = 1 << 20
SHARED_MMAP = (
    "python3 -c 'import mmap\n"
    "m = mmap.mmap(-1, 256 << 20, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)\n"
    'chunk = b"x" * (1 << 20)\n'
    "for i in range(256):\n"
    "    m[i << 20 : (i + 1) << 20] = chunk\n"
    'print("wrote 256 MiB")\''
)


@pytest.mark.parametrize("how", ["mmap", "dev-shm"])
def test_shared_memory_and_tmpfs_count_against_the_memory_limit(setup: Setup, how: str) -> None:
    ex, b = setup.executor(), setup.b
    shm = Path("/dev/shm") / f"jpst-{uuid.uuid4().hex[:8]}"
    command = {
        "mmap": SHARED_MMAP,
        "dev-shm": f"dd if=/dev/zero of={shm} bs=1M count=256 && echo wrote 256 MiB",
    }[how]
    try:
        ex.submit(owner_spec(how, b, command, mem_per_gpu_mb=64))
        info = _wait_end(ex, how)
        assert info.state is RunState.OOM, (info, _output(b, how))
        assert info.reason == "killed: the job's memory limit of 64 MiB was reached"
        assert "wrote 256 MiB" not in _output(b, how)
    finally:
        shm.unlink(missing_ok=True)


FORK_BOMB = (
    "python3 -c 'import os, time\n"
    "n = 0\n"
    "for i in range(300):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError:\n"
    "        continue\n"
    "    if pid == 0:\n"
    "        time.sleep(1000)\n"
    "        os._exit(0)\n"
    "    n += 1\n"
    'print("forked", n, flush=True)\n'
    "time.sleep(1000)'"
)


def test_a_fork_bomb_is_capped_and_the_executor_goes_on(setup: Setup) -> None:
    ex, b = setup.executor(pids_max=64), setup.b
    ex.submit(owner_spec("bomb", b, FORK_BOMB))
    _wait("the bomb to fork", lambda: "forked" in _output(b, "bomb"))
    forked = int(_output(b, "bomb").split()[-1])
    assert forked < 64, forked  # bash and python count too

    ex.submit(owner_spec("after", b, "echo fine"))  # the executor still starts and ends jobs
    assert _wait_end(ex, "after").state is RunState.COMPLETED
    ex.cancel("bomb.1")
    assert _wait_end(ex, "bomb").state is RunState.CANCELLED
    cgroup = json.loads((setup.state_dir / "runs" / "bomb.1.json").read_text())["cgroup"]
    assert RunCgroup.from_json(cgroup).members() == set()


WIDEN = (
    "python3 -c 'import os\n"
    "mine = sorted(os.sched_getaffinity(0))\n"
    "try:\n"
    "    os.sched_setaffinity(0, range(os.cpu_count()))\n"
    "except OSError as e:\n"
    '    print("widen refused", e.errno)\n'
    "other = [c for c in range(os.cpu_count()) if c not in mine]\n"
    "try:\n"
    "    os.sched_setaffinity(0, other)\n"
    '    print("moved")\n'
    "except OSError as e:\n"
    '    print("move refused", e.errno)\n'
    'print("now", sorted(os.sched_getaffinity(0)), "was", mine)\''
)


def test_a_job_cannot_widen_its_cpu_set(setup: Setup) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        missing("needs two CPUs to tell a pinned job from a widened one")
    ex, b = setup.executor(), setup.b
    ex.submit(owner_spec("cpus", b, WIDEN, cpus_per_gpu=1))
    assert _wait_end(ex, "cpus").state is RunState.COMPLETED
    text = _output(b, "cpus")
    now, _, was = text.split("now ", 1)[1].partition(" was ")
    assert now.strip() == was.strip() and len(json.loads(was)) == 1, text
    assert "moved" not in text, text


OPEN_GPUS = (
    "python3 -c 'import os, sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        os.close(os.open(name, os.O_RDWR))\n"
    '        print(name, "opened")\n'
    "    except OSError as e:\n"
    "        print(name, os.strerror(e.errno))' "
)


def test_a_job_opens_only_its_own_gpu_device(setup: Setup) -> None:
    ex, b = setup.executor(), setup.b
    dev = setup.devices
    names = [dev / "nvidia0", dev / "nvidiactl", dev / "nvidia1", dev / "nvidia7"]
    ex.submit(owner_spec("gpu", b, OPEN_GPUS + " ".join(map(str, names))))
    assert _wait_end(ex, "gpu").state is RunState.COMPLETED
    seen = {}
    for line in _output(b, "gpu").splitlines():
        name, _, why = line.partition(" ")
        seen[Path(name).name] = why
    # Its own GPU and the control node pass the cgroup (no driver here: ENXIO); the others
    # are refused by it (EPERM) before any driver is asked.
    assert seen == {
        "nvidia0": os.strerror(6),
        "nvidiactl": os.strerror(6),
        "nvidia1": os.strerror(1),
        "nvidia7": os.strerror(1),
    }, seen


def test_output_through_another_users_symlink_or_file_is_refused(setup: Setup) -> None:
    ex, a, b = setup.executor(), setup.a, setup.b
    shared = setup.top / "shared"  # world-writable, not sticky: anyone may plant files
    shared.mkdir()
    shared.chmod(0o777)
    notes = Path(b.home) / "notes"
    notes.write_text("B's own notes\n")
    os.chown(notes, b.uid, b.gid)
    link = shared / "x.out"
    os.symlink(notes, link)
    os.lchown(link, a.uid, a.gid)  # A's pointer to B's file
    planted = shared / "y.out"
    planted.write_text("A's file\n")
    os.chown(planted, a.uid, a.gid)
    planted.chmod(0o666)  # so that B may write it

    ex.submit(owner_spec("link", b, "echo into-the-link", output=str(link)))
    ex.submit(owner_spec("planted", b, "echo into-the-planted-file", output=str(planted)))

    info = _wait_end(ex, "link")
    assert info.state is RunState.FAILED
    assert "is a symbolic link: not followed" in (info.reason or ""), info.reason
    info = _wait_end(ex, "planted")
    assert info.state is RunState.FAILED
    assert "belongs to another user" in (info.reason or ""), info.reason
    assert notes.read_text() == "B's own notes\n"
    assert planted.read_text() == "A's file\n"


def test_output_is_capped_by_the_output_size_limit(setup: Setup) -> None:
    ex, b = setup.executor(output_max_bytes=MIB), setup.b
    ex.submit(owner_spec("big", b, "head -c 3000000 /dev/zero; echo not-here"))
    info = _wait_end(ex, "big")
    assert info.state is RunState.FAILED, info
    assert info.reason is not None and "output size limit of 1 MiB" in info.reason
    assert (Path(b.home) / "jpushare-big.out").stat().st_size <= MIB


def test_an_oom_reason_never_carries_the_jobs_output(setup: Setup) -> None:
    ex, b = setup.executor(), setup.b
    secret = f"db_password={uuid.uuid4().hex}"
    ex.submit(
        owner_spec("oom", b, f"echo 'torch.OutOfMemoryError: CUDA out of memory {secret}'; exit 1")
    )
    info = _wait_end(ex, "oom")
    assert info.state is RunState.OOM
    assert info.reason == "CUDA out of memory (reported in the job's output)"
