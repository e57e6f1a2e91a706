"""How `make test` runs the suite on several workers (pytest-xdist, `-n`).

Every test makes its own database (a SQLite file or a PostgreSQL schema), state folder,
ports and Unix accounts, so most can run side by side. The tests on a live Slurm cluster
cannot: they share its nodes and expect its GPUs idle when they start. So every test file
that uses the fake cluster runs whole, one test after another, on one worker (group
"slurm"); the peer cluster's files, which have their own nodes, on another ("slurm-peer").
Those groups are handed out first, because the Slurm tests are the longest chain.

The scheduler sees only test ids, so a file's group is read from its text (`SLURM_WORDS`).
Each worker checks that every test marked `slurm` is in a file so grouped: a Slurm test
in a file the rule misses stops the run instead of racing other Slurm tests.
(xdist's own `--dist loadgroup` cannot be used: it renames test ids, which pytest 9
no longer allows.)
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

ROOT = Path(__file__).resolve().parent.parent
SLURM_GROUP = "slurm"
PEER_GROUP = "slurm-peer"
PEER_FOLDER = "slurm_peer"
# A test file that holds one of these uses a live cluster.
SLURM_WORDS = ("pytest.mark.slurm", "require_cluster")


@cache
def file_group(path: Path) -> str | None:
    """The group of the test file at `path`, or None."""
    if not any(word in path.read_text(encoding="utf-8") for word in SLURM_WORDS):
        return None
    return PEER_GROUP if path.parent.name == PEER_FOLDER else SLURM_GROUP


def scope_of(nodeid: str, root: Path = ROOT) -> str:
    """The unit of work a test goes out in: its file's group, or the test alone."""
    return file_group(root / nodeid.split("::", 1)[0]) or nodeid


class SlurmAwareScheduling(LoadScopeScheduling):
    """xdist's load scheduling, one test at a time, except that a Slurm group is one unit
    (xdist's default scope reordering, largest unit first, sends it out first)."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid, self.config.rootpath)


def pytest_xdist_make_scheduler(
    config: pytest.Config, log: Producer
) -> SlurmAwareScheduling | None:
    """Ours for `-n N` (xdist's default `--dist load`); another `--dist` asked for is xdist's."""
    if config.getoption("dist") != "load":
        return None
    return SlurmAwareScheduling(config, log)


def pytest_itemcollected(item: pytest.Item) -> None:
    if item.get_closest_marker("slurm") is None:
        return
    if file_group(item.path) is None:
        raise pytest.UsageError(
            f"{item.nodeid} is marked slurm but its file holds none of {SLURM_WORDS}: "
            "mark the file (pytestmark = pytest.mark.slurm) so its tests share one worker"
        )
