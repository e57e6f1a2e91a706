"""Request bodies are strict and every number bounded; the OpenAPI says so."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import ApiWorld
from tests.api.test_errors import error

JOB = {"workdir": "/tmp", "name": "a", "command": "true", "num_gpus": 1}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_gpus", "2"),  # a string is not a number of GPUs
        ("num_gpus", True),  # nor is a boolean
        ("num_gpus", 2.0),  # nor a float
        ("time_limit_s", 1e-300),  # below 1 s
        ("time_limit_s", 0.5),
        ("time_limit_s", 366 * 86400),  # above 365 days
        ("time_limit_s", "3600"),
        ("cpus_per_gpu", "4"),
        ("mem_per_gpu_mb", True),
    ],
)
def test_a_job_with_a_coerced_or_absurd_number_is_422(
    api: ApiWorld, field: str, value: Any
) -> None:
    e = error(api.post("/v1/jobs", json={**JOB, field: value}), 422, "VALIDATION_ERROR")
    assert field in e["message"]


def test_what_the_cli_sends_is_still_accepted(api: ApiWorld) -> None:
    # Integers for float fields (a JSON 3600 is a valid time limit), bounds inclusive.
    for limit in (3600, 1, 365 * 86400, 90.5):
        r = api.post("/v1/jobs", json={**JOB, "time_limit_s": limit, "cpus_per_gpu": 2})
        assert r.status_code == 201, r.text
        assert r.json()["time_limit_s"] == limit


@pytest.mark.parametrize(
    "body",
    [
        {"name": "h1", "tflops": 1e-300, "sort_order": 1},
        {"name": "h1", "tflops": 2e6, "sort_order": 1},
        {"name": "h1", "tflops": "80", "sort_order": 1},
        {"name": "h1", "tflops": 80, "sort_order": "1"},
        {"name": "h1", "tflops": 80, "sort_order": 1, "auto_assign": "yes"},
    ],
)
def test_a_tier_with_a_coerced_or_absurd_number_is_422(api: ApiWorld, body: Any) -> None:
    error(api.post("/v1/admin/tiers", "root", json=body), 422, "VALIDATION_ERROR")


def test_a_body_that_cannot_be_parsed_is_400_and_documented(api: ApiWorld) -> None:
    r = api.client.post(
        "/v1/jobs",
        content=b'{"command\xff": 1}',
        headers={**api.auth("alice"), "Content-Type": "application/json"},
    )
    error(r, 400, "VALIDATION_ERROR")
    spec = api.client.get("/openapi.json").json()
    responses = spec["paths"]["/v1/jobs"]["post"]["responses"]
    for status in ("400", "413", "422", "503"):
        assert status in responses, status
        assert responses[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorPublic"
        }
    assert "DATABASE_UNAVAILABLE" in responses["503"]["description"]
    time_limit = spec["components"]["schemas"]["JobCreate"]["properties"]["time_limit_s"]
    bounds = time_limit["anyOf"][0]
    assert (bounds["minimum"], bounds["maximum"]) == (1, 365 * 86400)
