"""A lab's own page (`/labs/{lab}`): each user's usage over 7, 30 or 90 days, what each
holds now and has not been charged for yet (in flight), and their GPUs now.

For the lab's members and head, and admins (`api.permissions.require_read_lab`). The lab's
own figures are the labs route's answer (`api.routes.cluster.labs`, as `GET /v1/labs` and
`jpushare labs`); the users' in-flight figures are the same computation split by user
(`store.aggregates.user_in_flight`), so they add up to the lab's; usage in the window is the
sum of the `charged` events of the users' jobs (`store.usage_history.user_charges`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, Response

from jpushare import store
from jpushare.api.deps import ContextDep, SessionDep
from jpushare.api.errors import ApiError, ErrorCode
from jpushare.api.permissions import require_read_lab
from jpushare.api.routes import cluster
from jpushare.api.schemas.common import Name
from jpushare.store.aggregates import LabInFlight, user_in_flight
from jpushare.store.usage_history import UserCharges, user_charges
from jpushare.web.auth import cookie_user
from jpushare.web.page_frame import page_response, to_signin
from jpushare.web.pages import WebConfig

WINDOWS_DAYS = (7, 30, 90)
DEFAULT_DAYS = 30


@dataclass(frozen=True, slots=True)
class UserRow:
    """One user's line on the lab page."""

    name: str
    role: str | None  # None: no longer in the lab, but their jobs here were charged
    charged: UserCharges
    in_flight: LabInFlight

    @property
    def gpus_now(self) -> int:
        return self.in_flight.running_gpus + self.in_flight.reserved_gpus


def user_rows(
    members: dict[str, str],
    charged: dict[str, UserCharges],
    in_flight: dict[str, LabInFlight],
) -> list[UserRow]:
    """Every member (name -> role), and anyone else whose jobs in the lab were charged in
    the window or hold something now; most usage in the window first, then by name."""
    names = {*members, *charged, *in_flight}
    rows = [
        UserRow(n, members.get(n), charged.get(n, UserCharges()), in_flight.get(n, LabInFlight()))
        for n in names
    ]
    return sorted(rows, key=lambda r: (-r.charged.tflop_s, -r.in_flight.tflop_s, r.name))


def build_router(config: WebConfig) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/labs/{lab}", response_class=HTMLResponse)
    def lab_page(
        request: Request,
        session: SessionDep,
        ctx: ContextDep,
        lab: Annotated[Name, Path()],
        days: Annotated[int, Query(description="7, 30 or 90")] = DEFAULT_DAYS,
    ) -> Response:
        user = cookie_user(session, request)
        if user is None:
            return to_signin(request)
        require_read_lab(user, lab)
        if days not in WINDOWS_DAYS:
            raise ApiError(
                422,
                ErrorCode.VALIDATION_ERROR,
                f"days={days} is not a window of this page: choose 7, 30 or 90",
                {"field": "days", "value": days, "allowed": list(WINDOWS_DAYS)},
            )
        labs = cluster.labs(session=session, user=user, ctx=ctx)
        this = next((one for one in labs.data if one.name == lab), None)
        if this is None:
            raise store.NotFound("lab", lab)
        lab_id = store.get_lab(session, lab).id
        now = ctx.clock()
        since = now - timedelta(days=days)
        charged = user_charges(session, lab_id, since, now)
        members = {u.name: u.role for u in store.list_users(session, lab)}
        rows = user_rows(members, charged, user_in_flight(session, now, lab_id))
        window_total = sum(c.tflop_s for c in charged.values())
        return page_response(
            request,
            config,
            user,
            "lab" if lab == user.lab_name else "labs",
            "lab.html",
            lab=this,
            labs_count=labs.count,
            rows=rows,
            days=days,
            windows=WINDOWS_DAYS,
            window_since=since,
            window_total=window_total,
        )

    return router
