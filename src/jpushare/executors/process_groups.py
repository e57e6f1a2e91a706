"""Facts about process groups on this machine, read from /proc: alive, and still ours.

The local executor runs each job as its own process group and must recognise it again after
a service restart, when it is no longer the group's parent. A process group id alone is not
an identity: after a reboot, or once the whole group is gone, the number can be reused. So a
run records the boot id and its leader's start time, and a group counts as the run's only if
the boot is the same and any process that now carries the leader's pid started at the same
tick. (While any member of a group lives, Linux does not hand its id to a new process.)

Linux is the target. Without /proc, liveness falls back to `killpg(pgid, 0)`, which cannot
tell an unreaped zombie from a live process and cannot check identity.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

PROC = Path("/proc")


def boot_id() -> str | None:
    """This boot's id (changes at every reboot), or None without /proc."""
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _stat_fields(pid: int | str) -> list[str] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, pgrp, …]; None if gone."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain ") ", so cut at the last one.
    return raw[raw.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot; None if it is gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None  # stat field 22


def live_groups() -> set[int] | None:
    """Ids of every process group with at least one process that is not a zombie.

    None when /proc cannot be read (not Linux): callers then ask `group_alive` one by one.
    """
    if not PROC.is_dir():
        return None
    groups: set[int] = set()
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry.name)
        if fields and len(fields) > 2 and fields[0] not in ("Z", "X", "x"):
            groups.add(int(fields[2]))
    return groups


def group_alive(pgid: int, leader_start_ticks: int | None, live: set[int] | None) -> bool:
    """Whether the process group a run started as `pgid` still has a live process.

    `live` comes from one `live_groups()` scan, shared by every run of one observation.
    """
    if live is None:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # exists, owned by someone else: cannot be ours, but do not guess
        return True
    if pgid not in live:
        return False
    if leader_start_ticks is not None:
        now = start_ticks(pgid)
        if now is not None and now != leader_start_ticks:
            return False  # the pid was reused by a newer process: our group is gone
    return True


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send `sig` to every process of the group; False if the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True
