"""One page in the dashboard's frame (`base.html`): for the page modules outside `pages`.

`web.lab_page` and `web.operator_page` answer through this, so that their pages carry the
same headers, the same reload interval and the same "as of" time as the others.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from jpushare.api.deps import get_context
from jpushare.store.records import UserRecord
from jpushare.web.auth import signin_url
from jpushare.web.pages import SECURITY_HEADERS, WebConfig
from jpushare.web.render import render


def page_response(
    request: Request,
    config: WebConfig,
    user: UserRecord,
    active: str,
    template: str,
    status: int = 200,
    reload: bool = True,
    **data: Any,
) -> Response:
    """`template` rendered for `user`, with `active` marked in the navigation; it reloads
    itself every cycle unless `reload` is False (a page with a form to fill in)."""
    html = render(
        template,
        user=user,
        active=active,
        now=get_context(request).clock(),
        refresh_s=config.refresh_s if reload else None,
        status=status,
        **data,
    )
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def to_signin(request: Request) -> Response:
    """Signed out: to the sign-in form, and back to this page after it."""
    return RedirectResponse(signin_url(request.url.path), status_code=303)
