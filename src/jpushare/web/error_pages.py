"""Errors as a page for a browser, as JSON for an API client.

The API's error handlers (`api.errors`) answer `{"error": {"code", "message", ...}}`.
`BrowserErrors` turns such an answer into the dashboard's error page when a browser asked
for a page: a GET outside the API (`/v1/`) and `/static/`, whose Accept header names
text/html. The status and the message stay the same; a client that asks for JSON (the
CLI, curl's `*/*`) gets the JSON unchanged. One place, so that `/jobs/abc`, `/nope` and
a page added later all fail the same way.
"""

from __future__ import annotations

import json

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jpushare.web.pages import SECURITY_HEADERS
from jpushare.web.render import render

API_PREFIXES = ("/v1/", "/static/", "/openapi.json")
MAX_ERROR_BODY = 64 * 1024  # an error answer is small; a bigger body is passed on as it is


def wants_page(scope: Scope) -> bool:
    """A browser's GET for a page (not the API's, not a static file's)."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return False
    path: str = scope["path"]
    if path.startswith(API_PREFIXES):
        return False
    accept = Headers(scope=scope).get("accept", "")
    return "text/html" in accept


def error_page(status: int, body: bytes) -> bytes:
    """The error page for an API error answer (its message as the heading)."""
    try:
        error = json.loads(body)["error"]
        message = str(error["message"])
        code = str(error["code"])
    except (ValueError, KeyError, TypeError):
        message, code = "Something went wrong.", "ERROR"
    return render("error.html", user=None, message=message, code=code, status=status).encode()


class BrowserErrors:
    """Rewrites JSON error answers (status >= 400) into the error page for browsers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not wants_page(scope):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def send_page(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = Headers(raw=message["headers"])
                is_json = headers.get("content-type", "").startswith("application/json")
                if message["status"] >= 400 and is_json:
                    start = message  # held until the body is in
                    return
                await send(message)
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            body = b"".join(chunks)
            if message.get("more_body", False):
                if len(body) < MAX_ERROR_BODY:
                    return
                await send(start)  # too big for an error answer: passed on as it is
                await send({"type": "http.response.body", "body": body, "more_body": True})
                start = None
                return
            page = error_page(start["status"], body)
            headers = MutableHeaders(scope=start)
            headers["content-type"] = "text/html; charset=utf-8"
            headers["content-length"] = str(len(page))
            for name, value in SECURITY_HEADERS.items():
                headers[name] = value
            await send(start)
            await send({"type": "http.response.body", "body": page, "more_body": False})
            start = None

        await self.app(scope, receive, send_page)
