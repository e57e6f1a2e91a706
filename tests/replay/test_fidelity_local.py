"""Fidelity with the local executor (tests/replay/fidelity.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replay.conftest import Running, serve
from tests.replay.fidelity import LOCAL, replay_and_compare


@pytest.fixture
def local_service(tmp_path: Path) -> Iterator[Running]:
    yield from serve(tmp_path, 0.5)


@pytest.mark.quiet  # a second of delay is 40 trace seconds: not beside other tests
def test_the_simulator_predicts_the_service_with_the_local_executor(
    local_service: Running, tmp_path: Path
) -> None:
    replay_and_compare(local_service, tmp_path, LOCAL)
