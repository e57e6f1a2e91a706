"""Per-user quotas on POST /v1/jobs: 429 QUOTA_EXCEEDED, with the limit and the current
value, and nothing stored; the limits come from `create_app` or the environment."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare.api import create_app
from jpushare.config import (
    DEFAULT_MAX_ACTIVE_JOBS_PER_USER,
    DEFAULT_MAX_JOB_BYTES_PER_USER,
    ConfigError,
    UserQuotas,
    load_settings,
    load_user_quotas,
)
from tests.api.conftest import job_body, make_world
from tests.api.test_errors import error, job_rows


def test_a_user_past_the_active_job_limit_gets_429_and_nothing_is_stored(
    sessions: sessionmaker[Session],
) -> None:
    for api in make_world(sessions, user_quotas=UserQuotas(max_active_jobs=3)):
        first = [api.submit("root", 1) for _ in range(3)]  # admins are held to it too
        before = job_rows(api)
        e = error(api.post("/v1/jobs", "root", json=job_body()), 429, "QUOTA_EXCEEDED")
        assert e["details"] == {
            "limit": "JPUSHARE_MAX_ACTIVE_JOBS_PER_USER",
            "maximum": 3,
            "current": 3,
            "adding": 1,
        }
        assert "root has 3 active jobs" in e["message"] and "nothing was stored" in e["message"]
        assert job_rows(api) == before
        api.submit("bob", 1)  # one user's quota is not another's
        assert api.post(f"/v1/jobs/{first[0]}/cancel", "root").status_code == 200
        api.submit("root", 1)  # an ended job frees its place


def test_the_bytes_of_commands_and_environments_are_bounded(
    sessions: sessionmaker[Session],
) -> None:
    quotas = UserQuotas(max_active_jobs=None, max_job_bytes=250_000)
    for api in make_world(sessions, user_quotas=quotas):
        env = {"A": "x" * 100_000}
        api.submit("alice", 1, environment=env)
        api.submit("alice", 1, environment=env)
        r = api.post("/v1/jobs", "alice", json=job_body(environment=env))
        e = error(r, 429, "QUOTA_EXCEEDED")
        assert e["details"]["limit"] == "JPUSHARE_MAX_JOB_BYTES_PER_USER"
        assert e["details"]["maximum"] == 250_000
        assert 200_000 <= e["details"]["current"] <= 200_100
        assert 100_000 <= e["details"]["adding"] <= 100_020
        api.submit("alice", 1)  # a small job fits in what is left


def test_the_limits_come_from_the_environment_with_sane_defaults(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_user_quotas({}) == UserQuotas(
        DEFAULT_MAX_ACTIVE_JOBS_PER_USER, DEFAULT_MAX_JOB_BYTES_PER_USER
    )
    assert DEFAULT_MAX_ACTIVE_JOBS_PER_USER == 1000
    assert DEFAULT_MAX_JOB_BYTES_PER_USER == 64 * 1024 * 1024
    env = {"JPUSHARE_MAX_ACTIVE_JOBS_PER_USER": "0", "JPUSHARE_MAX_JOB_BYTES_PER_USER": " 5000 "}
    assert load_user_quotas(env) == UserQuotas(None, 5000)
    assert load_settings(env).user_quotas == UserQuotas(None, 5000)
    for bad in ("-1", "lots", "1e3", str(2**63)):
        with pytest.raises(ConfigError, match="JPUSHARE_MAX_ACTIVE_JOBS_PER_USER"):
            load_user_quotas({"JPUSHARE_MAX_ACTIVE_JOBS_PER_USER": bad})
    # create_app without quotas reads them (serve and its API workers build it so)
    monkeypatch.setenv("JPUSHARE_MAX_ACTIVE_JOBS_PER_USER", "7")
    app = create_app(sessions, munge=None)
    assert app.state.user_quotas == UserQuotas(7, DEFAULT_MAX_JOB_BYTES_PER_USER)


def test_a_flood_of_submissions_stops_at_the_limit(sessions: sessionmaker[Session]) -> None:
    for api in make_world(sessions, user_quotas=UserQuotas(max_active_jobs=25)):
        codes = [api.post("/v1/jobs", "bob", json=job_body()).status_code for _ in range(40)]
        assert codes == [201] * 25 + [429] * 15
        assert job_rows(api)[0] == 25
