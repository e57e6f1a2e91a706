"""A student's job, run by the local executor under a root service, tries what an attacker
would: redirect its output onto files it may not write, reach its root wrapper (environ,
fds, signals, the state directory its command line names), another user's running job,
and smuggle loader variables or bad names into the privileged start. Every try fails and
the service is unharmed. Root only (CI=true: never skipped).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jpushare.executors.base import RunInfo, RunState
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from tests.executors.cgroup_cleanup import remove_cgroups
from tests.security.owner_spec import NODE, owner_spec
from tests.unix_accounts import MadeAccount, made_accounts, require_root

WAIT_S = 30.0
SECRET = f"secret-{uuid.uuid4().hex}"


@dataclass
class Setup:
    executor: LocalExecutor
    state_dir: Path
    a: MadeAccount
    b: MadeAccount


@pytest.fixture
def setup() -> Iterator[Setup]:
    require_root("jobs run as their owners only under a root service")
    top = Path("/tmp") / f"jpst-attack-{uuid.uuid4().hex[:8]}"
    top.mkdir(mode=0o755)
    old_umask = os.umask(0o077)  # what `jpushare serve` sets
    try:
        with made_accounts("a", "b") as accounts:
            state = top / "state"
            ex = LocalExecutor(
                state, gpus=[LocalGpu(NODE, i, "rtx4090") for i in range(8)], cancel_grace_s=1
            )
            yield Setup(ex, state, accounts["a"], accounts["b"])
            for info in ex.runs():  # nothing of theirs outlives the accounts
                if not info.state.ended:
                    ex.cancel(info.executor_id)
            remove_cgroups(state)
    finally:
        os.umask(old_umask)
        shutil.rmtree(top, ignore_errors=True)


def _wait_end(ex: LocalExecutor, job_id: str) -> RunInfo:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        info = ex.find(job_id, 1)
        if info is not None and info.state.ended:
            return info
        time.sleep(0.05)
    pytest.fail(f"{job_id} did not end in {WAIT_S} s")


def _a_private_file(a: MadeAccount) -> Path:
    path = Path(a.home) / "private.out"
    path.write_text(SECRET)
    os.chown(path, a.uid, a.gid)
    path.chmod(0o600)
    return path


def test_output_paths_cannot_write_what_the_owner_may_not(setup: Setup) -> None:
    ex, a, b = setup.executor, setup.a, setup.b
    a_file = _a_private_file(a)
    link = Path(b.home) / "to-a"
    os.symlink(a_file, link)
    os.lchown(link, b.uid, b.gid)
    fifo = Path(b.home) / "fifo"
    os.mkfifo(fifo)
    os.chown(fifo, b.uid, b.gid)
    targets = {
        "shadow": "/etc/shadow",
        "afile": str(a_file),
        "alink": "to-a",  # relative: B's symlink in B's directory, to A's file
        "state": str(setup.state_dir / "runs" / "planted"),
        "aerr": None,
    }
    for job_id, target in targets.items():
        if target is None:  # stderr onto A's file, stdout fine
            ex.submit(owner_spec(job_id, b, f"echo {SECRET}-err >&2", error=str(a_file)))
        else:
            ex.submit(owner_spec(job_id, b, "echo pwned", output=target))
    for job_id in targets:
        info = _wait_end(ex, job_id)
        assert info.state is RunState.FAILED, (job_id, info)
        # A symbolic link is not followed at all, whoever's; the rest are the kernel's no.
        why = "is a symbolic link: not followed" if job_id == "alink" else "Permission denied"
        assert why in (info.reason or ""), (job_id, info.reason)
    # Not a digest: tests on other workers add and remove accounts in /etc/shadow meanwhile.
    shadow = Path("/etc/shadow").read_text()
    assert "pwned" not in shadow and shadow.startswith("root:")
    assert a_file.read_text() == SECRET
    assert not (setup.state_dir / "runs" / "planted").exists()
    # A FIFO as output: the job (B's own) waits for a reader; the service reads it without
    # blocking and never as anything but a regular file.
    ex.submit(owner_spec("fifo", b, "echo hi", output=str(fifo)))
    time.sleep(0.5)
    assert ex.find("fifo", 1) is not None
    ex.cancel("fifo.1")
    assert _wait_end(ex, "fifo").state is RunState.CANCELLED


def test_the_job_cannot_reach_its_root_wrapper_or_another_users_job(setup: Setup) -> None:
    ex, a, b = setup.executor, setup.a, setup.b
    ex.submit(owner_spec("a-job", a, "exec sleep 60"))
    deadline = time.monotonic() + WAIT_S
    a_pid = None
    while a_pid is None and time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    st = proc.stat()
                    comm = (proc / "comm").read_text().strip()
                except OSError:
                    continue
                if st.st_uid == a.uid and comm == "sleep":
                    a_pid = int(proc.name)
        time.sleep(0.05)
    assert a_pid is not None
    report = Path(b.home) / "report"
    probes = [
        "w=$PPID",
        'try() { if eval "$2" >/dev/null 2>&1; then echo "$1 OPEN"; else echo "$1 closed"; fi; }',
        "try environ 'cat /proc/$w/environ'",
        "try fds 'ls /proc/$w/fd'",
        "try mem 'head -c1 /proc/$w/mem'",
        "try term 'kill -TERM $w'",
        "try kill 'kill -KILL $w'",
        f"try other 'kill -KILL {a_pid}'",
        # The wrapper's command line (world-readable) names the run's files: use them.
        "prefix=$(tr '\\0' '\\n' < /proc/$w/cmdline | tail -1)",
        'echo "prefix=$prefix"',
        "try record 'cat $prefix.json'",
        "try exitfile 'echo 0 > $prefix.exit'",
        "try statedir 'ls $(dirname $prefix)'",
        # What the job itself holds: only its standard streams.
        'for fd in /proc/self/fd/*; do echo "fd $fd $(readlink $fd)"; done',
        f"sleep 0.2; echo done > {report}.done",
    ]
    ex.submit(owner_spec("b-job", b, "\n".join(probes), output=str(report)))
    info = _wait_end(ex, "b-job")
    text = report.read_text()
    assert info.state is RunState.COMPLETED, (info, text)
    assert "OPEN" not in text, text
    assert "prefix=/" in text  # it did find the run's files, and could do nothing with them
    state = str(setup.state_dir)
    fd_lines = [line for line in text.splitlines() if line.startswith("fd ")]
    assert fd_lines and not any(state in line for line in fd_lines), fd_lines
    assert ex.find("a-job", 1).state is RunState.RUNNING  # type: ignore[union-attr]


def test_loader_variables_reach_the_job_only_and_bad_names_fail_only_it(setup: Setup) -> None:
    ex, b = setup.executor, setup.b
    marker = Path("/tmp") / f"jpst-preload-{uuid.uuid4().hex[:8]}"
    env = {
        "PATH": "/usr/bin:/bin",
        "LD_PRELOAD": "/nonexistent/evil.so",
        "BASH_ENV": str(marker),  # were root's bash to read it, it would run this file
        "PYTHONPATH": "/nonexistent",
        "PYTHONSTARTUP": str(marker),
    }
    marker.write_text(f"touch {marker}.ran-as-$(id -u)\n")
    try:
        ex.submit(owner_spec("env", b, "true", environment=env))
        info = _wait_end(ex, "env")
        assert info.state is RunState.COMPLETED, info
        ran = sorted(p.name for p in marker.parent.glob(f"{marker.name}.ran-as-*"))
        assert ran in ([], [f"{marker.name}.ran-as-{b.uid}"])  # B's own bash, never root's
    finally:
        for p in marker.parent.glob(f"{marker.name}*"):
            p.unlink()
    # A NUL or '=' in a name gets past no API; should it reach the executor, only the job
    # fails, with a reason, and the service goes on.
    for job_id, bad in (("nul", {"X": "a\x00b"}), ("eq", {"A=B": "c"})):
        ex.submit(owner_spec(job_id, b, "true", environment=bad))
        info = _wait_end(ex, job_id)
        assert info.state is RunState.FAILED and info.reason, info
    ex.submit(owner_spec("after", b, "true"))
    assert _wait_end(ex, "after").state is RunState.COMPLETED
