"""One page in the dashboard's frame (`base.html`): for the page modules outside `pages`.

`web.lab_page` and `web.operator_page` answer through this, so that their pages carry the
same headers, the same reload interval and the same "as of" time as the others.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from jpushare.store.records import UserRecord
from jpushare.web import pages
from jpushare.web.pages import WebConfig, to_signin

__all__ = ["page_response", "to_signin"]


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
    refresh_s = config.refresh_s if reload else None
    return pages.page_response(request, user, active, template, refresh_s, status=status, **data)
