"""The API's error envelope and the handlers that map every failure onto it.

Every error the API returns is `{"error": {"code": ..., "message": ..., "details": {...}}}`
with one of the codes below, whatever raised it: a route (`ApiError`), the store's typed
errors, FastAPI's request validation, Starlette's routing (unknown path, wrong method), a
database that cannot be reached (503 DATABASE_UNAVAILABLE with `Retry-After`: it is down,
restarting or out of connections; one log line, no traceback: the request was fine and
may be sent again, and nothing of it was committed), or an unexpected exception (500
INTERNAL: logged with its traceback, never sent to the client).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from enum import StrEnum
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from jpushare.store.errors import (
    AlreadyExists,
    InvalidRequest,
    InvalidTransition,
    NoFitPlacement,
    NotFound,
    StoreError,
)
from jpushare.store.quotas import QuotaExceeded

log = logging.getLogger(__name__)


class ErrorCode(StrEnum):
    VALIDATION_ERROR = "VALIDATION_ERROR"  # 422: the request's body, query or path is wrong;
    # 400: the body cannot be parsed at all (not UTF-8), or Content-Length is not a number
    NO_FIT_PLACEMENT = "NO_FIT_PLACEMENT"  # 422: SPEC §2, nothing could ever hold the job
    UNKNOWN_UNIX_ACCOUNT = "UNKNOWN_UNIX_ACCOUNT"  # 422: a user's Unix account is not on the host
    ACCOUNT_NOT_SERVED = "ACCOUNT_NOT_SERVED"  # 422: a service that is not root serves 1 account
    UNAUTHENTICATED = "UNAUTHENTICATED"  # 401: no, malformed, unknown or revoked token
    FORBIDDEN = "FORBIDDEN"  # 403: authenticated, but the role does not allow it
    NOT_FOUND = "NOT_FOUND"  # 404: no such job, lab, user, node, tier, token or path
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"  # 405
    CONFLICT = "CONFLICT"  # 409: e.g. cancelling an ended job, a name that exists
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"  # 408: headers or body not sent whole in time
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"  # 413: a request body over the service's limit
    INTERNAL = "INTERNAL"  # 500: a bug; details are in the server log only
    UNAVAILABLE = "UNAVAILABLE"  # 503: e.g. the log asked of a process without an executor
    DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"  # 503: the database cannot be reached now
    TOO_MANY_CONNECTIONS = "TOO_MANY_CONNECTIONS"  # 503: this client address holds enough
    # What one account may not do to the others: too many jobs or bytes, a user mapped to
    # uid 0, a form posted from another site.
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"  # 429: a per-user limit on active jobs or their bytes
    ROOT_ACCOUNT = "ROOT_ACCOUNT"  # 422: a user mapped to an account with uid 0 (root)
    CROSS_SITE_REQUEST = "CROSS_SITE_REQUEST"  # 403: a dashboard form posted from another site
    CSRF_TOKEN_INVALID = "CSRF_TOKEN_INVALID"  # 403: a dashboard form without its page's token


class ApiError(Exception):
    """An error a route raises on purpose; rendered as the envelope with `status`."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = dict(details or {})


def error_response(
    status: int,
    code: ErrorCode,
    message: str,
    details: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"code": code.value, "message": message, "details": dict(details or {})}}
    return JSONResponse(jsonable_encoder(body), status_code=status, headers=dict(headers or {}))


def store_error(exc: StoreError) -> ApiError:
    """The API error for one of the store's typed errors."""
    if isinstance(exc, NoFitPlacement):
        report = exc.report
        return ApiError(
            422,
            ErrorCode.NO_FIT_PLACEMENT,
            report.message,
            {
                "num_gpus": report.num_gpus,
                "min_tier": report.min_tier,
                "largest_fit": report.largest_fit,
                "alternatives": [asdict(a) for a in report.alternatives],
            },
        )
    if isinstance(exc, QuotaExceeded):
        return ApiError(
            429,
            ErrorCode.QUOTA_EXCEEDED,
            str(exc),
            {
                "limit": QUOTA_SETTINGS[exc.limit],
                "maximum": exc.maximum,
                "current": exc.current,
                "adding": exc.adding,
            },
        )
    if isinstance(exc, NotFound):
        return ApiError(404, ErrorCode.NOT_FOUND, str(exc), {"kind": exc.kind, "key": exc.key})
    if isinstance(exc, AlreadyExists):
        return ApiError(409, ErrorCode.CONFLICT, str(exc), {"kind": exc.kind, "key": exc.key})
    if isinstance(exc, InvalidTransition):
        return ApiError(
            409,
            ErrorCode.CONFLICT,
            str(exc),
            {"job_id": exc.job_id, "state": exc.state, "wanted": exc.wanted},
        )
    if isinstance(exc, InvalidRequest):
        return ApiError(422, ErrorCode.VALIDATION_ERROR, str(exc))
    # ConcurrentUpdate and anything new: the request was fine, the server was not.
    return ApiError(500, ErrorCode.INTERNAL, "internal error")


# A quota's setting, by the store's name for it: what `details.limit` of a 429 names.
QUOTA_SETTINGS = {
    "active_jobs": "JPUSHARE_MAX_ACTIVE_JOBS_PER_USER",
    "job_bytes": "JPUSHARE_MAX_JOB_BYTES_PER_USER",
}


def _validation_details(errors: Sequence[Any]) -> dict[str, Any]:
    fields = []
    for e in errors:
        loc = [str(part) for part in e.get("loc", ())]
        fields.append({"loc": loc, "msg": e.get("msg", ""), "type": e.get("type", "")})
    return {"errors": fields}


def _validation_message(errors: Sequence[Any]) -> str:
    parts = []
    for e in errors[:3]:
        loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path")]
        where = ".".join(loc) or "request"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(parts) + more if parts else "invalid request"


# What SQLAlchemy raises when the database is down, restarting, refusing connections or
# out of them (the pool waited `pool_timeout`): the server's trouble, not the request's.
DATABASE_DOWN: tuple[type[Exception], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
)
RETRY_AFTER_S = 5


def database_unavailable() -> ApiError:
    """The 503 for a database that cannot be reached."""
    return ApiError(
        503,
        ErrorCode.DATABASE_UNAVAILABLE,
        "the database cannot be reached now; nothing was changed, try again in a few seconds",
        {"retry_after_s": RETRY_AFTER_S},
    )


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (a database error's is several lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_HTTP_CODES = {
    401: ErrorCode.UNAUTHENTICATED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    409: ErrorCode.CONFLICT,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
    422: ErrorCode.VALIDATION_ERROR,
}


def install_error_handlers(app: FastAPI) -> None:
    """Replace FastAPI's default handlers (their bodies are `{"detail": ...}`) with ours."""

    async def on_api_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        headers = {"WWW-Authenticate": "Bearer, MUNGE"} if exc.status == 401 else None
        return error_response(exc.status, exc.code, exc.message, exc.details, headers)

    async def on_store_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StoreError)
        api = store_error(exc)
        if api.status >= 500:
            log.error("%s %s: store error", request.method, request.url.path, exc_info=exc)
        return await on_api_error(request, api)

    async def on_validation(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        return error_response(
            422,
            ErrorCode.VALIDATION_ERROR,
            _validation_message(errors),
            _validation_details(errors),
        )

    async def on_http(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _HTTP_CODES.get(exc.status_code)
        if code is None:
            code = (
                ErrorCode.UNAVAILABLE
                if exc.status_code == 503
                else (ErrorCode.INTERNAL if exc.status_code >= 500 else ErrorCode.VALIDATION_ERROR)
            )
        message = exc.detail if isinstance(exc.detail, str) else code.value.lower()
        return error_response(exc.status_code, code, message, headers=exc.headers)

    async def on_database_down(request: Request, exc: Exception) -> JSONResponse:
        log.warning(
            "%s %s: database unavailable: %s", request.method, request.url.path, first_line(exc)
        )
        api = database_unavailable()
        return error_response(
            api.status, api.code, api.message, api.details, {"Retry-After": str(RETRY_AFTER_S)}
        )

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s: unhandled error", request.method, request.url.path, exc_info=exc)
        return error_response(500, ErrorCode.INTERNAL, "internal error; see the server log")

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(StoreError, on_store_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    for kind in DATABASE_DOWN:
        app.add_exception_handler(kind, on_database_down)
    app.add_exception_handler(Exception, on_unexpected)
