"""The Slurm executor's run records: `<log_dir>/<name>.run.json` remembers where a run's
output and error files are and as whom it ran (for the OOM check and the log, across
restarts). Users may write the log directory, so a record is written without following
anything planted there and read only if this service wrote it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path


class UntrustedRecord(OSError):
    """A run record in the log directory that this service did not write."""


def write_run_record(path: Path, record: Mapping[str, object]) -> None:
    """Written through a new temporary file of a random name (O_EXCL: never a file or
    symlink that a user planted in a log directory they may write) renamed over it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_run_record(path: Path) -> dict[str, object] | None:
    """The run's record; None if there is none. A record this service did not write (a
    symlink, or a file of another owner: users may write the log directory) names files
    and an account the service would read as: UntrustedRecord."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UntrustedRecord(f"{path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise UntrustedRecord(f"{path}: not written by this service")
        try:
            data = json.loads(f.read())
        except (OSError, ValueError) as exc:
            raise UntrustedRecord(f"{path}: {exc}") from exc
    return data if isinstance(data, dict) else None
