"""What the tests on a real Slurm cluster share: the reachability check and clean-up.

The cluster is scripts/slurm/start-fake-cluster.sh's (4 nodes, fake GPUs). Unreachable ->
the tests skip, except under CI=true where they fail: CI must start the cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.missing import missing

# The fake cluster's layout (scripts/slurm/start-fake-cluster.sh): (node, GRES type) -> GPUs,
# and node -> partitions.
LAYOUT = {
    ("node-a", "rtx4090"): 2,
    ("node-b", "rtx5090"): 4,
    ("node-c", "rtx4090"): 4,
    ("node-c", "rtx5090"): 4,
    ("node-d", "rtx3080ti"): 2,
}
PARTITIONS = {
    "node-a": ("gpu",),
    "node-b": ("gpu",),
    "node-c": ("gpu",),
    "node-d": ("gpu", "legacy"),
}
NODES = tuple(PARTITIONS)


def slurm(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a Slurm command as a test's own hand on the cluster (not through the executor)."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=check)


def require_cluster() -> None:
    """Skip (or fail under CI=true) unless `sinfo` answers and shows the fake nodes."""
    problem: str | None = None
    if shutil.which("sinfo") is None:
        problem = "no sinfo on PATH"
    else:
        try:
            out = slurm("sinfo", "-h", "-N", "-o", "%N", check=False)
        except subprocess.TimeoutExpired:
            problem = "sinfo timed out"
        else:
            if out.returncode != 0:
                problem = f"sinfo failed: {out.stderr.strip()}"
            elif not set(NODES) <= set(out.stdout.split()):
                problem = (
                    f"not the fake cluster (nodes: {' '.join(sorted(set(out.stdout.split())))})"
                )
    if problem is None:
        return
    message = (
        f"Slurm cluster unreachable ({problem}); start it: sudo scripts/slurm/start-fake-cluster.sh"
    )
    missing(message)


def require_root() -> None:
    """`scontrol update` needs Slurm's admin (root on the fake cluster)."""
    if os.geteuid() != 0:
        missing("scontrol update needs root")


def session_prefix() -> str:
    """A job-name prefix of this test session's own, so earlier runs' jobs stay invisible."""
    return f"jpt{uuid.uuid4().hex[:6]}"


def shared_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A directory the jobs (run by slurmd, as this user) and the tests both use."""
    path = tmp_path_factory.mktemp(name)
    path.chmod(0o777)
    return path


def cancel_prefixed(prefix: str) -> None:
    """scancel every job of this session (names starting with the prefix)."""
    out = slurm("squeue", "-h", "-o", "%i %j", check=False).stdout
    ids = [
        line.split()[0]
        for line in out.splitlines()
        if line.split()[1:2] and line.split()[1].startswith(prefix)
    ]
    if ids:
        slurm("scancel", *ids, check=False)


def resume_all() -> None:
    """Put every fake node back in service (a test that fails mid-way may leave one down)."""
    out = slurm("sinfo", "-h", "-N", "-t", "down,drain,drng,fail", "-o", "%N", check=False)
    for node in sorted(set(out.stdout.split())):
        slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)


def cluster_guard(prefix: str) -> Iterator[None]:
    """Around a module: cluster reachable before; its jobs cancelled, nodes resumed after."""
    require_cluster()
    yield
    cancel_prefixed(prefix)
    if os.geteuid() == 0:
        resume_all()
