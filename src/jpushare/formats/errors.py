"""The error every input-file parser raises: where, and a human sentence.

A `FormatError` is a `ValueError`, so callers that only care "was the input bad?" can catch
that; the CLI prints `str(error)` as one line and exits 2.
"""

from __future__ import annotations


class FormatError(ValueError):
    """A bad input file: `source` (a path or a name), `line` (1-based, 0 = whole file)."""

    def __init__(self, source: str, line: int, message: str) -> None:
        self.source = source
        self.line = line
        self.message = message
        where = f"{source}:{line}" if line > 0 else source
        super().__init__(f"{where}: {message}")


class ClusterFileError(FormatError):
    """A bad CLUSTER.yaml."""


class TraceFileError(FormatError):
    """A bad TRACE.csv."""
