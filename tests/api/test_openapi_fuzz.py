"""Schemathesis against the OpenAPI document: no 5xx, every response as documented.

Every operation of `/openapi.json` gets generated requests, valid and invalid, sent to
the ASGI app in process as an admin (so admin routes are reached past their 403s):
the service must never answer 5xx, and every answer's status code, content type, headers
and body must be what the document says. Bounded (`MAX_EXAMPLES` per operation, no
shrinking) so the whole run stays under a minute on the CI machine; one database (SQLite)
serves all of it, as the store's behaviour on both backends has its own tests.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode, checks
from schemathesis.core.result import Err

from jpushare import store
from jpushare.api import create_app
from tests.api.conftest import Clock, build_world

MAX_EXAMPLES = 25

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
]


@pytest.fixture(scope="module")
def fuzzed_api() -> Iterator[tuple[Any, str]]:
    """The app on a fresh SQLite database with the test cluster, and an admin's token."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'fuzz.sqlite'}"
        store.upgrade(url)
        engine = store.make_engine(url)
        sessions = store.make_sessionmaker(engine)
        clock = Clock()
        tokens, _ = build_world(sessions, clock)
        app = create_app(sessions, clock=clock, munge=None)
        try:
            yield app, tokens["root"]
        finally:
            engine.dispose()


def test_every_operation_answers_as_documented(fuzzed_api: tuple[Any, str]) -> None:
    app, token = fuzzed_api
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        assert not isinstance(result, Err), result  # an operation the document gets wrong
        operation = result.ok()
        operations += 1
        cases = operation.as_strategy(generation_mode=GenerationMode.POSITIVE) | (
            operation.as_strategy(generation_mode=GenerationMode.NEGATIVE)
        )

        @given(case=cases)
        @settings(
            max_examples=MAX_EXAMPLES,
            phases=[Phase.explicit, Phase.generate],
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def fuzz(case: Any) -> None:
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            fuzz()
        except Exception as exc:  # one operation's failure must not hide the others'
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)
    assert operations >= 25  # every route is in the document (jobs, cluster, admin, ...)
