"""What a test does when something it needs is missing (PostgreSQL, Slurm, root, munged, a
browser, promtool): it skips on a developer's machine and fails under CI=true, where the
project's own set-up (`make services`) must have provided it. One rule, written once."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(problem: str, ci_hint: str = "") -> NoReturn:
    """Fail under CI=true (with `ci_hint` saying what should have provided it), else skip."""
    if in_ci():
        pytest.fail(f"{problem} ({ci_hint})" if ci_hint else problem)
    pytest.skip(problem)
