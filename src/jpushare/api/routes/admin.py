"""/v1/admin: what only role admin may do: tiers, nodes and GPUs, labs, users, tokens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from jpushare import store
from jpushare.api.deps import AdminUser, ContextDep, SessionDep, get_admin_user
from jpushare.api.errors import ApiError, ErrorCode
from jpushare.api.schemas.admin import (
    GpuSchedulable,
    IssuedTokenPublic,
    LabCreate,
    LabPublic,
    NodeDrain,
    NodeGpusUpdate,
    NodePublic,
    NodesPublic,
    RevokedPublic,
    TierCreate,
    TierPublic,
    TierUpdate,
    TokenCreate,
    TokensPublic,
    UserCreate,
    UserPublic,
    UsersPublic,
    lab_public,
    node_public,
    tier_public,
    token_public,
    user_public,
)
from jpushare.api.schemas.common import INT32_MAX, Name, error_responses
from jpushare.unix_accounts import UnknownAccount, resolve_account

router = APIRouter(
    prefix="/v1/admin",
    tags=["admin"],
    dependencies=[Depends(get_admin_user)],
    responses=error_responses(
        {
            401: "UNAUTHENTICATED",
            403: "FORBIDDEN: not an admin",
            404: "NOT_FOUND",
            409: "CONFLICT: exists already",
            422: "VALIDATION_ERROR, UNKNOWN_UNIX_ACCOUNT, ACCOUNT_NOT_SERVED, ROOT_ACCOUNT",
        }
    ),
)

NamePath = Annotated[Name, Path()]


# --- tiers ---------------------------------------------------------------------------------


@router.post("/tiers", status_code=201)
def create_tier(body: TierCreate, session: SessionDep, admin: AdminUser) -> TierPublic:
    """A new GPU tier (SPEC §1); 409 if the name exists."""
    try:
        store.get_tier(session, body.name)
    except store.NotFound:
        pass
    else:
        raise store.AlreadyExists("tier", body.name)
    t = store.upsert_tier(
        session,
        body.name,
        body.tflops,
        body.sort_order,
        max_gpus=body.max_gpus,
        auto_assign=body.auto_assign,
        partition=body.partition,
    )
    return tier_public(t)


@router.patch("/tiers/{name}")
def update_tier(
    name: NamePath, body: TierUpdate, session: SessionDep, admin: AdminUser
) -> TierPublic:
    """Change some of a tier's fields (the others keep their values)."""
    old = store.get_tier(session, name)
    fields = body.model_fields_set
    t = store.upsert_tier(
        session,
        name,
        body.tflops if body.tflops is not None else old.tflops,
        body.sort_order if body.sort_order is not None else old.sort_order,
        max_gpus=body.max_gpus if body.max_gpus is not None else old.max_gpus,
        auto_assign=body.auto_assign if body.auto_assign is not None else old.auto_assign,
        partition=body.partition if "partition" in fields else old.partition,
    )
    return tier_public(t)


# --- nodes and GPUs ------------------------------------------------------------------------


def _node(session: SessionDep, name: str) -> NodePublic:
    for n in store.list_nodes(session):
        if n.name == name:
            return node_public(n)
    raise store.NotFound("node", name)


@router.get("/nodes")
def list_nodes(session: SessionDep, admin: AdminUser) -> NodesPublic:
    data = [node_public(n) for n in store.list_nodes(session)]
    return NodesPublic(data=data, count=len(data))


@router.put("/nodes/{name}/gpus")
def set_node_gpus(
    name: NamePath, body: NodeGpusUpdate, session: SessionDep, admin: AdminUser, ctx: ContextDep
) -> NodePublic:
    """Declare the node's GPUs (tier -> count), creating the node if needed."""
    store.set_node_gpus(session, name, body.gpus, ctx.clock())
    return _node(session, name)


@router.post("/nodes/{name}/drain")
def drain_node(
    name: NamePath, body: NodeDrain, session: SessionDep, admin: AdminUser, ctx: ContextDep
) -> NodePublic:
    """Close the node to new work; the next cycle releases its reservations (R5)."""
    store.drain_node(session, name, body.reason, ctx.clock())
    return _node(session, name)


@router.post("/nodes/{name}/undrain")
def undrain_node(
    name: NamePath, session: SessionDep, admin: AdminUser, ctx: ContextDep
) -> NodePublic:
    store.undrain_node(session, name, ctx.clock())
    return _node(session, name)


@router.delete("/nodes/{name}")
def remove_node(name: NamePath, session: SessionDep, admin: AdminUser) -> NodesPublic:
    """Take the node and its GPUs out of the inventory; returns the nodes left."""
    store.remove_node(session, name)
    data = [node_public(n) for n in store.list_nodes(session)]
    return NodesPublic(data=data, count=len(data))


@router.put("/nodes/{name}/gpus/{tier}/{index}")
def set_gpu_schedulable(
    name: NamePath,
    tier: NamePath,
    index: Annotated[int, Path(ge=0, le=INT32_MAX)],
    body: GpuSchedulable,
    session: SessionDep,
    admin: AdminUser,
) -> NodePublic:
    """Take one GPU out of the capacity (or put it back) without forgetting it."""
    store.set_gpu_schedulable(session, name, tier, index, body.schedulable)
    return _node(session, name)


# --- labs, users, tokens -------------------------------------------------------------------


@router.post("/labs", status_code=201)
def create_lab(
    body: LabCreate, session: SessionDep, admin: AdminUser, ctx: ContextDep
) -> LabPublic:
    return lab_public(store.create_lab(session, body.name, ctx.clock()))


@router.post("/users", status_code=201)
def create_user(
    body: UserCreate, session: SessionDep, admin: AdminUser, ctx: ContextDep
) -> UserPublic:
    """A user of a lab with a role, whose jobs run as the Unix account `unix_user` (default:
    the name), which must exist on this host and not have uid 0 (422 ROOT_ACCOUNT, unless
    `allow_root`); issue a token for them next."""
    user = store.create_user(session, body.name, body.lab, body.role, ctx.clock(), body.unix_user)
    try:  # after the store's checks (lab, name), so their errors come first
        account = resolve_account(user.unix_user)
    except UnknownAccount as exc:  # raising rolls the insert back
        raise ApiError(
            422, ErrorCode.UNKNOWN_UNIX_ACCOUNT, str(exc), {"unix_user": user.unix_user}
        ) from None
    only = ctx.only_unix_user
    if only is not None and user.unix_user != only:
        raise ApiError(
            422,
            ErrorCode.ACCOUNT_NOT_SERVED,
            f"this service runs as the Unix account {only}, not root, so it can run jobs only "
            f"as {only}, not as {user.unix_user}: run it as root to serve other accounts",
            {"unix_user": user.unix_user, "served": only},
        )
    if account.uid == 0 and not body.allow_root:
        raise ApiError(
            422,
            ErrorCode.ROOT_ACCOUNT,
            f"the Unix account {user.unix_user} has uid 0: {user.name}'s jobs would run as "
            "root. Map the user to their own account, or send allow_root: true if that is "
            "really meant",
            {"unix_user": user.unix_user, "uid": 0},
        )
    return user_public(user)


@router.get("/users")
def list_users(
    session: SessionDep, admin: AdminUser, lab: Annotated[Name | None, Query()] = None
) -> UsersPublic:
    data = [user_public(u) for u in store.list_users(session, lab)]
    return UsersPublic(data=data, count=len(data))


@router.post("/users/{name}/tokens", status_code=201)
def issue_token(
    name: NamePath,
    session: SessionDep,
    admin: AdminUser,
    ctx: ContextDep,
    body: TokenCreate | None = None,
) -> IssuedTokenPublic:
    """A new bearer token for the user; the secret is in this response and nowhere else."""
    user = store.get_user(session, name)
    issued = store.issue_token(session, user.id, ctx.clock(), body.label if body else "")
    return IssuedTokenPublic(token=token_public(issued.token), secret=issued.secret)


@router.get("/users/{name}/tokens")
def list_tokens(name: NamePath, session: SessionDep, admin: AdminUser) -> TokensPublic:
    user = store.get_user(session, name)
    data = [token_public(t) for t in store.list_tokens(session, user.id)]
    return TokensPublic(data=data, count=len(data))


@router.post("/tokens/{token_id}/revoke")
def revoke_token(
    token_id: Annotated[int, Path(ge=1, le=INT32_MAX)],
    session: SessionDep,
    admin: AdminUser,
    ctx: ContextDep,
) -> RevokedPublic:
    """Revoke a token at once; `revoked` is False if it was revoked already."""
    revoked = store.revoke_token(session, token_id, ctx.clock())
    return RevokedPublic(token_id=token_id, revoked=revoked)
