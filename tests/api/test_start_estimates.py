"""Start estimates in the queue and why (README, "Start estimates"), and Slurm time limits."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from jpushare import store
from jpushare.api.deps import ApiContext
from jpushare.time_limits import time_limit_reason
from tests.api.conftest import T0, ApiWorld
from tests.api.test_errors import error


def at(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


def context(api: ApiWorld) -> ApiContext:
    ctx = api.app.state.jpushare
    assert isinstance(ctx, ApiContext)
    return ctx


def fill_with_limited_jobs(api: ApiWorld) -> list[int]:
    """Four 4-GPU jobs dispatched at T0 on the four placements, limits 10, 20, 30, 40 min."""
    jobs = [api.submit("alice", 4, time_limit_s=600.0 * (i + 1)) for i in range(4)]
    api.cycle()
    return jobs


def queue(api: ApiWorld) -> dict[int, dict[str, Any]]:
    r = api.get("/v1/queue")
    assert r.status_code == 200, r.text
    return {e["job_id"]: e for e in r.json()["data"]}


def test_queued_jobs_start_when_the_running_jobs_reach_their_limits(api: ApiWorld) -> None:
    fill_with_limited_jobs(api)
    big = api.submit("alice", 4, time_limit_s=60.0)
    small = api.submit("alice", 2, time_limit="30")  # sbatch's minutes
    entries = queue(api)
    assert at(entries[big]["estimated_start"]) == T0 + timedelta(seconds=600)
    # the big job takes the first GPUs freed (T0+10 min) and runs its minute; the small one,
    # behind it, starts on those GPUs when it ends, before the next limit (T0+20 min)
    assert at(entries[small]["estimated_start"]) == T0 + timedelta(seconds=660)
    assert entries[big]["estimate_basis"] == entries[small]["estimate_basis"] == "time_limit"
    why = api.get(f"/v1/jobs/{big}/why").json()
    assert why["estimated_start"] == entries[big]["estimated_start"]
    assert why["estimate_sentence"].startswith(
        "Estimated to start around 2026-01-05 09:10:00 UTC (in 10m00s), assuming"
    )
    assert why["estimate_basis"] == "time_limit"


def test_one_forecast_serves_every_request_until_a_cycle_has_passed(api: ApiWorld) -> None:
    fill_with_limited_jobs(api)
    first = api.submit("alice", 4, time_limit_s=60.0)
    cache = context(api).start_estimates
    queue(api)
    api.get(f"/v1/jobs/{first}/why")
    queue(api)
    assert cache.forecasts == 1
    api.clock.advance(1)
    late = api.submit("alice", 1, time_limit_s=60.0)
    entries = queue(api)
    assert cache.forecasts == 1  # the state changed, but within the same cycle
    assert entries[late]["estimated_start"] is None
    assert at(entries[first]["estimated_start"]) == T0 + timedelta(seconds=600)
    api.clock.advance(5)
    entries = queue(api)
    assert cache.forecasts == 2
    assert entries[late]["estimated_start"] is not None


def test_a_job_without_a_limit_is_estimated_from_its_users_past_runs(api: ApiWorld) -> None:
    done = api.submit("carol", 2)
    api.cycle()
    with api.sessions.begin() as s:
        store.mark_running(s, done, T0, "r1")
        store.end_job(s, done, store.JobState.COMPLETED, T0 + timedelta(seconds=300))
    api.clock.advance(300)
    fill_with_limited_jobs(api)
    mine = api.submit("carol", 2)
    hers = api.submit("alice", 2)
    newcomer = api.submit("bob", 4)
    entries = queue(api)
    assert entries[mine]["estimate_basis"] == "user_history"
    assert entries[hers]["estimate_basis"] == "lab_history"  # carol's lab, alpha
    assert entries[newcomer]["estimate_basis"] == "default"


def test_time_limit_accepts_slurm_forms_and_refuses_others_naming_them(api: ApiWorld) -> None:
    base = {"workdir": "/tmp", "name": "t", "command": "true", "num_gpus": 1}
    for text, seconds in (("1:30:00", 5400), ("2-00:00:00", 172800), ("1h30m", 5400)):
        r = api.post("/v1/jobs", json={**base, "time_limit": text})
        assert r.status_code == 201, r.text
        assert r.json()["time_limit_s"] == seconds
    body = error(api.post("/v1/jobs", json={**base, "time_limit": "soon"}), 422, "VALIDATION_ERROR")
    assert "1h30m" in str(body) and "2-00:00:00" in str(body)
    both = {**base, "time_limit": "1h", "time_limit_s": 60}
    assert "not both" in str(error(api.post("/v1/jobs", json=both), 422, "VALIDATION_ERROR"))


def test_a_job_its_time_limit_ended_reads_failed_time_limit(api: ApiWorld) -> None:
    job = api.submit("alice", 1, time_limit="1")
    api.cycle()
    with api.sessions.begin() as s:
        store.mark_running(s, job, T0, "r1")
        store.end_job(
            s,
            job,
            store.JobState.FAILED,
            T0 + timedelta(seconds=60),
            reason=time_limit_reason("Slurm TIMEOUT"),
        )
    assert api.get(f"/v1/jobs/{job}").json()["state_label"] == "FAILED (time limit)"
    listed = {j["id"]: j for j in api.get("/v1/jobs").json()["data"]}
    assert listed[job]["state_label"] == "FAILED (time limit)"
    why = api.get(f"/v1/jobs/{job}/why").json()
    assert why["sentence"].startswith("FAILED (time limit): time limit reached (Slurm TIMEOUT)")
