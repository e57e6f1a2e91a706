"""The bounded types every request body is built of, and the error body every error
response has.

Every string a client sends is bounded and free of NUL characters and every number lies in
a range that makes sense for it (the bounds live here, next to the fields), so bad input is
a 422 VALIDATION_ERROR and never a database error or an absurd job later. Request bodies are
strict: `"2"` or `true` is not a number of GPUs (pydantic's strict mode; a JSON integer is
still a valid float).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from jpushare.policy.fit import MAX_GPUS, MIN_GPUS
from jpushare.unix_accounts import ACCOUNT_NAME

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# The most entries one page of a list answers (GET /v1/jobs; the queue's, GET /v1/queue):
# what one request may make the server hold at once.
MAX_LIST_LIMIT = 1000
MAX_QUEUE_LIMIT = 10_000


def no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _trimmed_name(value: str) -> str:
    value = no_nul(value).strip()
    if not value:
        raise ValueError("must not be empty")
    return value


Name = Annotated[str, Field(min_length=1, max_length=100), AfterValidator(_trimmed_name)]
"""A lab, user, tier or node name (the columns are VARCHAR(100) / TEXT)."""

UnixAccountName = Annotated[
    str, Field(min_length=1, max_length=64, pattern=f"^(?:{ACCOUNT_NAME.pattern})$")
]
"""A Unix account name (`jpushare.unix_accounts.ACCOUNT_NAME`)."""

JobId = Annotated[int, Field(ge=1, le=INT64_MAX)]
GpuCount = Annotated[int, Field(ge=MIN_GPUS, le=MAX_GPUS)]


class StrictIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# Bounds of the numbers a client sends, in one place (the OpenAPI document shows them).
MIN_TIME_LIMIT_S = 1.0
MAX_TIME_LIMIT_S = 365 * 86400.0
TimeLimitS = Annotated[
    float,
    Field(
        ge=MIN_TIME_LIMIT_S,
        le=MAX_TIME_LIMIT_S,
        description="seconds, 1 s to 365 days",
    ),
]
MIN_TFLOPS = 0.001
MAX_TFLOPS = 1e6
Tflops = Annotated[float, Field(ge=MIN_TFLOPS, le=MAX_TFLOPS, description="per GPU")]
SortOrder = Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX)]


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorPublic(BaseModel):
    """Every error response: `{"error": {"code", "message", "details"}}`."""

    error: ErrorBody


Responses = dict[int | str, dict[str, object]]


def error_responses(descriptions: Mapping[int, str]) -> Responses:
    """A route's OpenAPI `responses`: each status code an `ErrorPublic` with its description."""
    return {code: {"model": ErrorPublic, "description": d} for code, d in descriptions.items()}


# What every route that needs a signed-in user may answer.
SIGNED_IN_ERRORS = error_responses({401: "UNAUTHENTICATED", 422: "VALIDATION_ERROR"})
