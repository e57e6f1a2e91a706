"""Memory sizes as sbatch writes them (`16G`, `512M`, `512` = MiB, `1T`), in MiB.

Shared by the CLI (`--mem-per-gpu`), `admin tier set` and the cluster file. Pure.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"(\d+)\s*([KMGT]?)(?:i?B)?", re.IGNORECASE)
_KIB_PER_UNIT = {"K": 1, "": 1024, "M": 1024, "G": 1024**2, "T": 1024**3}


def parse_mem_mb(text: str | int) -> int:
    """The size in MiB (rounded up; a bare number is MiB, as for sbatch). ValueError if it
    is not a size."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 1:
            raise ValueError(f"not a size: {text!r}")
        return text
    m = _SIZE.fullmatch(str(text).strip())
    if m is None or int(m.group(1)) < 1:
        raise ValueError(f"not a size: {text!r} (e.g. 16G, 512M)")
    kib = int(m.group(1)) * _KIB_PER_UNIT[m.group(2).upper()]
    return -(-kib // 1024)


def format_mem_mb(mb: int) -> str:
    """The shortest exact sbatch form: 16384 -> 16G, 1536 -> 1536M."""
    for unit, size in (("T", 1024**2), ("G", 1024)):
        if mb % size == 0:
            return f"{mb // size}{unit}"
    return f"{mb}M"
