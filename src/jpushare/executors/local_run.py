"""The local executor's run wrapper: starts one job as its owner and writes down how it ended.

Run by the service as `python -I -S local_run.py <run prefix>`, with an empty environment,
as the service's account (root when jobs run as their owners). It stays that account, like
Slurm's slurmstepd, so that it can write the run's files in the service's private state
directory; the job itself is a child that has given up every privilege before `exec`:

1. write `<prefix>.pid` (its pid is the run's process group id);
2. fork; the child joins the run's cgroup (while still root: the wrapper itself stays
   outside it, so killing the cgroup never kills what writes the exit code), sets the
   owner's groups, gid and uid (root's capabilities go with the uid), umask 077, CPU
   affinity, memory limit (RLIMIT_DATA, only where no memory cgroup holds it) and output
   size limit (RLIMIT_FSIZE), enters the working directory, opens its output files as the
   owner (never through a symbolic link, never a file of another user) and execs
   `bash -c COMMAND` with the job's environment. What fails before the exec goes back
   through a close-on-exec pipe as a sentence;
3. wait for the child, through a SIGTERM to the group (trapped here, so the exit code is
   always written), kill whatever the job left in its cgroup (double forks, `setsid`: the
   job has ended), then write `<prefix>.error` (if the job could not start) and
   `<prefix>.exit`.

Standard library only, and nothing read from the job's environment: it runs privileged.
The cgroup code (`cgroups.py`, standard library only too) is loaded by its path.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import resource
import signal
import stat
import sys
from types import ModuleType
from typing import Any

NOT_STARTED = 127  # the exit code of a job that never reached its command (as bash's)
_CGROUPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cgroups.py")


def _cgroups_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_jpushare_run_cgroups", _CGROUPS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class Refused(Exception):
    """An output file the job must not write to (a sentence for its owner)."""


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _open_output(path: str) -> int:
    """`path` opened for appending as this process (the owner, by now): never through a
    symbolic link, and never someone else's file (a world-writable file another user put
    where the job's output goes). Character devices (/dev/null) are anyone's."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOCTTY | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{path} is a symbolic link: not followed") from None
        raise
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() and not stat.S_ISCHR(st.st_mode):
        os.close(fd)
        raise Refused(f"{path} belongs to another user (uid {st.st_uid}): not written")
    return fd


def _child(launch: dict[str, Any], report: int, service_out: int | None) -> None:
    """In the forked child: become the owner, set up, exec. Never returns."""
    step = "joining the job's cgroup"
    try:
        for path in launch.get("cgroup_procs") or ():
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"%d\n" % os.getpid())
            finally:
                os.close(fd)
        step = "switching to the job's account"
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        account = launch.get("account")
        if account is not None:
            os.setgroups(account["groups"])
            os.setresgid(account["gid"], account["gid"], account["gid"])
            os.setresuid(account["uid"], account["uid"], account["uid"])
        os.umask(0o077)
        if launch.get("cpus"):
            step = "setting the CPU affinity"
            os.sched_setaffinity(0, launch["cpus"])
        data_limit = launch.get("rlimit_data", launch.get("mem_bytes"))
        if data_limit:
            step = "setting the memory limit"
            resource.setrlimit(resource.RLIMIT_DATA, (int(data_limit), int(data_limit)))
        if launch.get("fsize_bytes"):
            step = "setting the output size limit"
            size = int(launch["fsize_bytes"])
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        workdir = launch.get("workdir")
        if workdir is not None:
            step = "the working directory"
            os.chdir(workdir)
        if service_out is not None:
            out = service_out
        else:
            step = "the output file"
            out = _open_output(launch["output"])
        err = out
        if launch.get("error") is not None:
            step = "the error file"
            err = _open_output(launch["error"])
        os.dup2(out, 1)
        os.dup2(err, 2)
        step = f"running {launch['bash']}"
        os.execve(launch["bash"], ["bash", "-c", launch["command"]], launch["env"])
    except OSError as exc:
        message = f"{step}: {exc.strerror or exc}"
    except BaseException as exc:  # anything at all: say it, never run on
        message = f"{step}: {exc}"
    try:
        os.write(report, message.encode(errors="replace")[:4000])
    finally:
        os._exit(NOT_STARTED)


def main(prefix: str) -> int:
    with open(f"{prefix}.json") as f:
        launch: dict[str, Any] = json.load(f)["launch"]
    _write_atomic(f"{prefix}.pid", f"{os.getpid()}\n")
    # A handler, unlike SIG_IGN, is reset by exec: the job still gets the SIGTERM.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    service_out = None
    if launch.get("output_by_service"):  # jobs from before revision 0003: the state dir
        service_out = _open_output(launch["output"])
    read_end, write_end = os.pipe()  # both close-on-exec
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _child(launch, write_end, service_out)
    os.close(write_end)
    if service_out is not None:
        os.close(service_out)
    chunks = []
    while chunk := os.read(read_end, 4096):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code  # killed by signal N: 128+N, as bash says it
    if launch.get("cgroup") is not None:  # what the job left behind ends with it
        try:
            if not _cgroups_module().RunCgroup.from_json(launch["cgroup"]).kill():
                print("processes of the job outlived its kill", file=sys.stderr)
        except Exception as exc:  # the exit code is written whatever happens here
            print(f"killing the job's cgroup: {exc}", file=sys.stderr)
    if chunks:
        _write_atomic(f"{prefix}.error", b"".join(chunks).decode(errors="replace"))
    _write_atomic(f"{prefix}.exit", f"{code}\n")
    return code


if __name__ == "__main__":
    # Gone the moment the exit code is written: an observer that sees `.exit` then finds
    # the process group ended, not an interpreter still tearing down.
    os._exit(main(sys.argv[1]) & 0xFF)
