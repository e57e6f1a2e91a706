"""No page of the service may be shown inside another site's frame (clickjacking).

`NoFraming` is a small ASGI middleware around the whole app: every response (the
dashboard's pages, the sign-in form, /docs, JSON and static files alike) says
`X-Frame-Options: DENY` and carries `frame-ancestors 'none'` in its
`Content-Security-Policy`: appended to a policy the route set (the dashboard's), or as the
whole policy where it set none (/docs, whose Swagger UI runs inline scripts that a stricter
policy would stop). One place, so that a page added later cannot forget it.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

FRAME_ANCESTORS = "frame-ancestors 'none'"


def with_frame_ancestors(policy: str | None) -> str:
    """`policy` with `frame-ancestors 'none'` (kept as it is if it names frame-ancestors)."""
    if not policy or not policy.strip():
        return FRAME_ANCESTORS
    if "frame-ancestors" in policy:
        return policy
    return f"{policy.rstrip().rstrip(';')}; {FRAME_ANCESTORS}"


class NoFraming:
    """Adds the two headers above to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Frame-Options"] = "DENY"
                policy = headers.get("content-security-policy")
                headers["Content-Security-Policy"] = with_frame_ancestors(policy)
            await send(message)

        await self.app(scope, receive, send_guarded)
