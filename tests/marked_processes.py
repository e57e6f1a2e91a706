"""Processes found by a marker in their command line: how the containment tests see a job's
escaped children (`sleep 1001.<tag>`, a number `sleep` takes, unique to the test) without
knowing their pids, whichever session or process group they moved to."""

from __future__ import annotations

from pathlib import Path


def live_with_marker(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line holds `marker`."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if marker.encode() in cmdline and stat[stat.rfind(")") + 2] not in "ZX":
            out.append(int(proc.name))
    return out
