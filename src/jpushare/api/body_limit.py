"""A request's body is read whole, within a size limit and a deadline, before the app runs.

An ASGI middleware, outside FastAPI's routing, so nothing behind it (authentication, a
database session slot, body parsing) ever waits on a client or holds more than `limit`
bytes of a body:

- a `Content-Length` over the limit is answered 413 at once, without reading a byte of
  the body, with `Connection: close`, so the server drops the rest instead of reading it
  (without it, a 200 MB body was read into memory, ~450 MB of server memory, before its
  422 or even its 401);
- every other body (chunked ones too) is read here, counted as it streams in: the read
  that passes the limit is answered 413; a body that has not arrived whole within
  `timeout_s` of the headers is answered 408 REQUEST_TIMEOUT with `Connection: close`;
- then the app gets the body as one message, and after it the client's own `receive`
  (which reports a disconnect).

Before it, authentication ran first and MUNGE's read the body inside a database session:
a client that declared a `Content-Length` and never sent it held SQLite's one write slot
for as long as it kept the socket open, and ten such clients stopped every read.
A slow client's headers are the HTTP server's business (`service.http_server`).
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jpushare.api.errors import ErrorCode, error_response
from jpushare.config import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES


def too_large_message(limit: int) -> str:
    return f"the request body is larger than this service takes ({limit} bytes)"


def too_slow_message(timeout_s: float) -> str:
    return f"the request body did not arrive whole within {timeout_s:g} s; send it at once"


class _TooLarge(Exception):
    pass


class BodyLimit:
    """The middleware (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int = DEFAULT_MAX_BODY_BYTES,
        timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.limit = limit
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is None:
            await self._refuse(
                scope,
                receive,
                send,
                400,
                ErrorCode.VALIDATION_ERROR,
                "the Content-Length header is not a number",
            )
            return
        if declared > self.limit:
            await self._too_large(scope, receive, send)
            return
        try:
            with anyio.fail_after(self.timeout_s):
                body = await _read_body(receive, self.limit)
        except TimeoutError:
            await self._refuse(
                scope,
                receive,
                send,
                408,
                ErrorCode.REQUEST_TIMEOUT,
                too_slow_message(self.timeout_s),
                {"timeout_s": self.timeout_s},
            )
            return
        except _TooLarge:
            await self._too_large(scope, receive, send)
            return
        if body is None:
            return  # the client went away: nobody to answer
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._refuse(
            scope,
            receive,
            send,
            413,
            ErrorCode.PAYLOAD_TOO_LARGE,
            too_large_message(self.limit),
            {"limit_bytes": self.limit},
        )

    @staticmethod
    async def _refuse(
        scope: Scope,
        receive: Receive,
        send: Send,
        status: int,
        code: ErrorCode,
        message: str,
        details: dict[str, object] | None = None,
    ) -> None:
        response = error_response(status, code, message, details, {"Connection": "close"})
        await response(scope, receive, send)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body; None if the client disconnected first; _TooLarge past `limit`."""
    parts: list[bytes] = []
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        part = message.get("body", b"")
        received += len(part)
        if received > limit:
            raise _TooLarge
        if part:
            parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


def _content_length(scope: Scope) -> int | None:
    """The declared length; 0 when there is none; None when it is not a number."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) <= 20 else None
    return 0
