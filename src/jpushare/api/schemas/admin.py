"""Labs, tiers, nodes, users and tokens: what an admin sends, what anyone reads back, and
the `*_public` functions that turn store records into them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from jpushare.api.schemas.common import (
    GpuCount,
    Name,
    SortOrder,
    StrictIn,
    Tflops,
    UnixAccountName,
    no_nul,
)
from jpushare.store.records import LabRecord, NodeRecord, TierRecord, TokenRecord, UserRecord
from jpushare.vocabulary import NodeState


class LabCreate(StrictIn):
    name: Name


class LabPublic(BaseModel):
    name: str
    usage_tflop_s: float
    queued_jobs: int = 0
    running_jobs: int = 0
    created_at: datetime
    rank: int = Field(default=0, description="1 = served first (least usage)")
    share: float | None = Field(default=None, description="usage ÷ every lab's usage")
    in_flight_tflop_s: float = Field(
        default=0.0,
        description="held but not yet charged (charging is lazy): running jobs' GPU time and "
        "reservations' since they were last charged, × TFLOPS",
    )
    running_gpus: int = 0
    reserved_gpus: int = 0


class LabsPublic(BaseModel):
    data: list[LabPublic]
    count: int


class TierCreate(StrictIn):
    name: Name
    tflops: Tflops
    sort_order: SortOrder
    max_gpus: GpuCount = 8
    auto_assign: bool = True
    partition: Annotated[str, Field(max_length=200), AfterValidator(no_nul)] | None = None


class TierUpdate(StrictIn):
    tflops: Tflops | None = None
    sort_order: SortOrder | None = None
    max_gpus: GpuCount | None = None
    auto_assign: bool | None = None
    partition: Annotated[str, Field(max_length=200), AfterValidator(no_nul)] | None = None


class TierPublic(BaseModel):
    name: str
    tflops: float
    sort_order: int
    max_gpus: int
    auto_assign: bool
    partition: str | None


class TiersPublic(BaseModel):
    data: list[TierPublic]
    count: int


class NodeGpusUpdate(StrictIn):
    """The node's GPUs, tier name -> count; tiers not named lose theirs."""

    gpus: dict[Name, Annotated[int, Field(ge=0, le=1024)]]


class NodeDrain(StrictIn):
    reason: Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(no_nul)]


class GpuSchedulable(StrictIn):
    schedulable: bool


class NodePublic(BaseModel):
    name: str
    state: NodeState
    state_reason: str | None
    drained: bool
    drain_reason: str | None
    schedulable: bool
    observed_at: datetime | None
    updated_at: datetime
    gpus: dict[str, int]


class NodesPublic(BaseModel):
    data: list[NodePublic]
    count: int


class UserCreate(StrictIn):
    name: Name
    lab: Name
    role: Literal["student", "pi", "admin"] = "student"
    unix_user: UnixAccountName | None = Field(
        default=None,
        description="the Unix account the user's jobs run as and MUNGE sign-in maps to; "
        "default: the user's name. It must exist on the service's host (422 "
        "UNKNOWN_UNIX_ACCOUNT otherwise)",
    )
    allow_root: bool = Field(
        default=False,
        description="map the user to an account with uid 0 (root): refused (422 "
        "ROOT_ACCOUNT) unless true, since such a user's jobs would run as root",
    )


class UserPublic(BaseModel):
    id: int
    name: str
    lab: str
    role: str
    unix_user: str = Field(description="the Unix account the user's jobs run as")
    created_at: datetime


class UsersPublic(BaseModel):
    data: list[UserPublic]
    count: int


class TokenCreate(StrictIn):
    label: Annotated[str, Field(max_length=200), AfterValidator(no_nul)] = ""


class TokenPublic(BaseModel):
    id: int
    user_id: int
    label: str
    created_at: datetime
    revoked_at: datetime | None


class TokensPublic(BaseModel):
    data: list[TokenPublic]
    count: int


class IssuedTokenPublic(BaseModel):
    """A new token. `secret` is shown this once; only its hash is stored."""

    token: TokenPublic
    secret: str


class RevokedPublic(BaseModel):
    token_id: int
    revoked: bool = Field(description="False if it was revoked already")


def lab_public(lab: LabRecord, counts: dict[str, int] | None = None) -> LabPublic:
    c = counts or {}
    return LabPublic(
        name=lab.name,
        usage_tflop_s=lab.cumulative_usage,
        queued_jobs=c.get("queued", 0),
        running_jobs=c.get("running", 0),
        created_at=lab.created_at,
    )


def tier_public(t: TierRecord) -> TierPublic:
    return TierPublic.model_validate(t, from_attributes=True)  # the same names


def node_public(n: NodeRecord) -> NodePublic:
    return NodePublic(
        name=n.name,
        state=n.state,
        state_reason=n.state_reason,
        drained=n.admin_drained,
        drain_reason=n.drain_reason,
        schedulable=n.schedulable,
        observed_at=n.observed_at,
        updated_at=n.updated_at,
        gpus=dict(n.gpus),
    )


def user_public(u: UserRecord) -> UserPublic:
    return UserPublic(
        id=u.id,
        name=u.name,
        lab=u.lab_name,
        role=u.role,
        unix_user=u.unix_user,
        created_at=u.created_at,
    )


def token_public(t: TokenRecord) -> TokenPublic:
    return TokenPublic.model_validate(t, from_attributes=True)  # the same names
