"""The operator's page (`/operator`, admins only): is the dispatcher working, which nodes are
open, and draining or resuming a node.

Dispatcher health is what `/healthz` judges (`api.health.judge_dispatcher` over
`store.health.load_health` and the lease), with every counter shown: cycles, failures by
kind, executor calls that failed, the lease's holder and epoch, and how long the last cycle
took and the mean (`store.health`'s `cycle_ms`, written by the dispatcher after each cycle:
every API process reads the same).

Drain and resume go through the API's own admin routes (`api.routes.admin.drain_node`,
`.undrain_node`) with the API's admin check (`api.deps.get_admin_user`): one rule, one
store path. Each is a GET confirmation page whose form posts back with the CSRF token
(`web.csrf`); the POST checks the token first and does nothing without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from jpushare.api.deps import ApiContext, ContextDep, SessionDep, get_admin_user
from jpushare.api.errors import ApiError, ErrorCode, store_error
from jpushare.api.health import DispatcherVerdict, judge_dispatcher
from jpushare.api.routes import admin
from jpushare.api.schemas.admin import NodeDrain, NodePublic
from jpushare.api.schemas.common import Name
from jpushare.store.errors import StoreError
from jpushare.store.health import DispatcherHealth, load_health
from jpushare.store.leadership import LeaseRecord, get_lease
from jpushare.web.auth import cookie_user, parse_form
from jpushare.web.csrf import FIELD, check_csrf, csrf_token, refusal
from jpushare.web.page_frame import page_response, to_signin
from jpushare.web.pages import WebConfig

Action = Literal["drain", "resume"]
NodePath = Annotated[Name, Path()]


@dataclass(frozen=True, slots=True)
class DispatcherView:
    """Everything the page says about the dispatcher."""

    verdict: DispatcherVerdict
    health: DispatcherHealth
    lease: LeaseRecord | None
    failed_total: int


def dispatcher_view(session: Session, now: datetime) -> DispatcherView:
    """The dispatcher's records as `/healthz` reads them."""
    health = load_health(session)
    lease = get_lease(session)
    failed = sum(health.cycles_failed.values())
    return DispatcherView(judge_dispatcher(health, lease, now), health, lease, failed)


def build_router(config: WebConfig) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/operator", response_class=HTMLResponse)
    def operator_page(
        request: Request,
        session: SessionDep,
        ctx: ContextDep,
        done: Annotated[str | None, Query(max_length=200)] = None,
    ) -> Response:
        user = cookie_user(session, request)
        if user is None:
            return to_signin(request)
        get_admin_user(user)
        nodes = admin.list_nodes(session=session, admin=user).data
        return page_response(
            request,
            config,
            user,
            "operator",
            "operator.html",
            dispatcher=dispatcher_view(session, ctx.clock()),
            nodes=nodes,
            done=_done_note(done, nodes),
        )

    @router.get("/operator/nodes/{name}/{action}", response_class=HTMLResponse)
    def confirm_page(
        request: Request, session: SessionDep, name: NodePath, action: Action
    ) -> Response:
        user = cookie_user(session, request)
        if user is None:
            return to_signin(request)
        get_admin_user(user)
        node = _find_node(admin.list_nodes(session=session, admin=user).data, name)
        return page_response(
            request,
            config,
            user,
            "operator",
            "operator_confirm.html",
            node=node,
            action=action,
            reload=False,  # a reload would wipe the reason being typed
            csrf_field=FIELD,
            csrf=csrf_token(request),
        )

    @router.post("/operator/nodes/{name}/{action}", response_class=HTMLResponse)
    async def act(
        request: Request, session: SessionDep, ctx: ContextDep, name: NodePath, action: Action
    ) -> Response:
        form = parse_form(await request.body())
        what = f"{action} node {name}"
        refused = check_csrf(request, form, what)
        if refused is not None:
            return refused
        try:
            await run_in_threadpool(_act, request, session, ctx, name, action, form)
        except ApiError as exc:
            return refusal(request, exc.status, exc.code, exc.message, exc.details)
        except StoreError as exc:
            err = store_error(exc)
            return refusal(request, err.status, err.code, err.message, err.details)
        done = "drained" if action == "drain" else "resumed"
        return RedirectResponse(f"/operator?done={done}:{name}", status_code=303)

    return router


def _act(
    request: Request,
    session: Session,
    ctx: ApiContext,
    name: str,
    action: Action,
    form: dict[str, str],
) -> None:
    """Drain or resume `name` as `POST /v1/admin/nodes/{name}/drain|undrain` would."""
    user = cookie_user(session, request)
    if user is None:
        raise ApiError(401, ErrorCode.UNAUTHENTICATED, "sign in again: this browser is signed out")
    get_admin_user(user)
    if action == "resume":
        admin.undrain_node(name=name, session=session, admin=user, ctx=ctx)
        return
    try:
        body = NodeDrain(reason=form.get("reason", "").strip())
    except ValidationError:
        raise ApiError(
            422,
            ErrorCode.VALIDATION_ERROR,
            "say why the node is drained (1 to 1000 characters): people read it on the "
            "placements page",
            {"field": "reason"},
        ) from None
    admin.drain_node(name=name, body=body, session=session, admin=user, ctx=ctx)


def _find_node(nodes: list[NodePublic], name: str) -> NodePublic:
    for node in nodes:
        if node.name == name:
            return node
    raise ApiError(404, ErrorCode.NOT_FOUND, f"No node {name}.", {"node": name})


def _done_note(done: str | None, nodes: list[NodePublic]) -> str | None:
    """ "node-b drained." after a drain's redirect; nothing for a value the page did not make."""
    if not done or ":" not in done:
        return None
    what, _, name = done.partition(":")
    if what not in ("drained", "resumed") or name not in {n.name for n in nodes}:
        return None
    return f"{name} {what}."
