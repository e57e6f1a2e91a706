"""A job's output files: where they are (`%j`, `%a`, relative to its directory) and how the
service reads them without reading anything else.

The files live where the job's owner can write, so the owner controls what their path
names: a symlink to /etc/shadow, a FIFO, a device whose open has effects. A service that
runs as root therefore never opens them as root: it reads them as the owner, in a child
process that has the owner's uid, gid and groups and nothing more.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import PurePosixPath

from jpushare.ledger.job_arrays import expand_percent
from jpushare.unix_accounts import UnixAccount

DEFAULT_OUTPUT = "jpushare-%j.out"  # Slurm's slurm-%j.out habit
LOG_TAIL_BYTES = 8 << 20  # a log read returns at most the last 8 MiB (executors and the API)


def expand_pattern(pattern: str, job_id: str, attempt: int) -> str:
    """`%j` -> job id, `%a` -> attempt, `%%` -> `%`; any other `%x` stays as written."""
    return expand_percent(pattern, {"j": job_id, "a": str(attempt), "%": "%"})


@dataclass(frozen=True, slots=True)
class OutputPaths:
    """Where one attempt's stdout and stderr go (stderr None: with stdout)."""

    output: str
    error: str | None


def output_paths(
    workdir: str, output: str | None, error: str | None, job_id: str, attempt: int
) -> OutputPaths:
    """The files of attempt `attempt`: patterns expanded, relative ones under `workdir`."""

    def place(pattern: str) -> str:
        return str(PurePosixPath(workdir) / expand_pattern(pattern, job_id, attempt))

    return OutputPaths(place(output or DEFAULT_OUTPUT), None if error is None else place(error))


# Started as the service (root: the interpreter may be where only root can read), it
# becomes the owner (groups, gid, uid) before it touches anything of theirs.
_AS_OWNER = r"""
import os, stat, sys
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([int(g) for g in sys.argv[3].split(",") if g])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)
args = sys.argv[4:]
"""

# As the owner: print the file's size on one line, then its bytes from the offset.
# O_NONBLOCK: a FIFO does not hang it; only regular files are read.
_READER = r"""
path, start, limit = args[0], int(args[1]), int(args[2])
try:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
except FileNotFoundError:
    sys.exit(3)
except OSError as e:
    sys.stderr.write(e.strerror or str(e)); sys.exit(4)
st = os.fstat(fd)
if not stat.S_ISREG(st.st_mode):
    sys.stderr.write("not a regular file"); sys.exit(4)
size = st.st_size
begin = max(start, size - limit)
os.lseek(fd, begin, os.SEEK_SET)
out = sys.stdout.buffer
out.write(b"%d\n" % size)
left = size - begin
while left > 0:
    chunk = os.read(fd, min(left, 1 << 20))
    if not chunk:
        break
    out.write(chunk); left -= len(chunk)
"""


class OutputUnreadable(OSError):
    """The file exists but cannot be read as its owner (a message for people)."""


@dataclass(frozen=True, slots=True)
class Tail:
    """The end of a file: its bytes from `begin` (at most the limit asked), and its size."""

    data: bytes
    begin: int
    size: int


def read_tail(
    path: str, account: UnixAccount | None, limit: int, start: int = 0, timeout_s: float = 10.0
) -> Tail | None:
    """The last `limit` bytes of `path` from byte `start` on, read as `account` (None: as
    this process); None if the file does not exist. Raises OutputUnreadable."""
    if account is None or not _can_become(account):
        return _read_here(path, limit, start)
    try:
        proc = _run_as(account, _READER, [path, str(start), str(limit)], timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise OutputUnreadable(f"{path}: reading it took over {timeout_s:g} s") from exc
    if proc.returncode == 3:
        return None
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip() or f"exit {proc.returncode}"
        raise OutputUnreadable(f"{path}: {why}")
    head, _, data = proc.stdout.partition(b"\n")
    size = int(head)
    return Tail(data, size - len(data), size)


def _read_here(path: str, limit: int, start: int) -> Tail | None:
    # As root (a file with no owner to read it as: a job's output in the Slurm log
    # directory, which users may write), a symlink or a second hard link is a user's
    # pointer to a file they could not read: refused.
    as_root = os.geteuid() == 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (os.O_NOFOLLOW * as_root))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OutputUnreadable(f"{path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OutputUnreadable(f"{path}: not a regular file")
        if as_root and st.st_nlink > 1:
            raise OutputUnreadable(f"{path}: a file with several links is not read as root")
        begin = max(start, st.st_size - limit)
        f.seek(begin)
        data = f.read(max(0, st.st_size - begin))
    return Tail(data, begin, begin + len(data))


def file_size(path: str) -> int:
    """The size of `path` now (0 if absent). `stat` opens nothing, so root may call it."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


_ENTER = r"""
try:
    os.chdir(args[0])
except OSError as e:
    sys.stderr.write(e.strerror or str(e)); sys.exit(1)
"""


def cannot_enter(workdir: str, account: UnixAccount | None, timeout_s: float = 10.0) -> str | None:
    """Why `account` (None: this process) cannot enter `workdir`, or None if it can: the
    sentence a job that could not start there ends with."""
    if account is None or not _can_become(account):
        try:
            st = os.stat(workdir)
        except OSError as exc:
            return f"the working directory: {exc.strerror or exc}"
        if not stat.S_ISDIR(st.st_mode):
            return "the working directory: Not a directory"
        if not os.access(workdir, os.X_OK, effective_ids=os.access in os.supports_effective_ids):
            return "the working directory: Permission denied"
        return None
    try:
        proc = _run_as(account, _ENTER, [workdir], timeout_s)
    except subprocess.TimeoutExpired:
        return f"the working directory: no answer within {timeout_s:g} s"
    if proc.returncode == 0:
        return None
    return f"the working directory: {proc.stderr.decode(errors='replace').strip()}"


def _can_become(account: UnixAccount) -> bool:
    """Whether reading as `account` means another process: another uid, and we are root
    (a service that is not root, e.g. Slurm's SlurmUser, reads as itself)."""
    return account.uid != os.geteuid() and os.geteuid() == 0


def _run_as(
    account: UnixAccount, body: str, args: list[str], timeout_s: float
) -> subprocess.CompletedProcess[bytes]:
    """`body` (Python, stdlib) run as `account`, with `args`; its output captured."""
    groups = ",".join(str(g) for g in account.groups)
    argv = [sys.executable, "-I", "-S", "-c", _AS_OWNER + body]
    argv += [str(account.uid), str(account.gid), groups, *args]
    return subprocess.run(
        argv, capture_output=True, env={}, timeout=timeout_s, check=False, cwd="/"
    )
