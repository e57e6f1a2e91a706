"""Request bodies over a limit get 413 before they are read whole, on every route.

An ASGI middleware, outside FastAPI's routing, so nothing (body parsing, authentication)
ever holds more than `limit` bytes of a body: a `Content-Length` over the limit is answered
at once, without reading a byte of the body and with `Connection: close`, so the server
drops the rest instead of reading it; a body without a length (chunked) is counted as it
streams in, and the read that passes the limit raises 413 instead of returning more.
Without it, a 200 MB body was read into memory (~450 MB of server memory) before its 422,
or even its 401.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jpushare.api.errors import ErrorCode, error_response
from jpushare.config import DEFAULT_MAX_BODY_BYTES


class BodyTooLarge(HTTPException):
    """Raised from `receive` when a streamed body passes the limit; an HTTPException, so
    FastAPI's body parsing lets it through and the app's handler renders the 413."""


def too_large_message(limit: int) -> str:
    return f"the request body is larger than this service takes ({limit} bytes)"


class BodyLimit:
    """The middleware (see the module docstring)."""

    def __init__(self, app: ASGIApp, limit: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is None or declared > self.limit:
            message = (
                too_large_message(self.limit)
                if declared is not None
                else "the Content-Length header is not a number"
            )
            status = 413 if declared is not None else 400
            code = (
                ErrorCode.PAYLOAD_TOO_LARGE if declared is not None else ErrorCode.VALIDATION_ERROR
            )
            response = error_response(
                status, code, message, {"limit_bytes": self.limit}, {"Connection": "close"}
            )
            await response(scope, receive, send)
            return
        limit = self.limit
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(413, too_large_message(limit), {"Connection": "close"})
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    """The declared length; 0 when there is none; None when it is not a number."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) <= 20 else None
    return 0
