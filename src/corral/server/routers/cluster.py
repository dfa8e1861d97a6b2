"""Nodes, queues, tokens, the caller, the audit log and health."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from sqlalchemy.exc import SQLAlchemyError

import corral
from corral.schemas.api import (
    AuditList,
    Health,
    NodeList,
    NodeOut,
    NoticeIn,
    NoticeOut,
    PoolList,
    QueueList,
    TokenCreate,
    TokenList,
    TokenOut,
    WhoAmI,
)
from corral.schemas.common import SafeStr
from corral.server.audit import note
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.deps import admin, any_token, context, owner_of, user
from corral.server.openapi import AUTH, errors
from corral.server.services.audit import audit_page
from corral.server.services.auth import TokenService
from corral.server.services.nodes import NodeService
from corral.server.services.notices import give_notice
from corral.server.services.pools import list_pools as read_pools
from corral.server.services.queues import list_queues as read_queues

router = APIRouter()


@router.get("/health", response_model=Health, tags=["health"])
def get_health(ctx: Context = Depends(context)) -> Health:
    """Liveness, and who leads: this replica, and the lease as stored."""
    now = time.time()
    leadership = ctx.leadership
    if leadership is None:
        return Health(status="ok", version=corral.__version__, time=now)
    try:
        lease = leadership.read()
    except SQLAlchemyError:
        return Health(
            status="degraded", version=corral.__version__, time=now, replica=leadership.replica_id
        )
    live = lease.holder is not None and lease.expires_at >= now
    return Health(
        status="ok",
        version=corral.__version__,
        time=now,
        replica=leadership.replica_id,
        leader=leadership.is_leader and lease.holder == leadership.replica_id,
        leader_address=lease.address if live else None,
        leader_epoch=lease.epoch if live else None,
        leader_since=lease.acquired_at if live else None,
    )


NodeName = Annotated[SafeStr, Path(max_length=253, description="the node's name")]


@router.get("/nodes", response_model=NodeList, tags=["nodes"], responses=errors(*AUTH))
def list_nodes(ctx: Context = Depends(context), token: TokenRow = Depends(user)) -> NodeList:
    """Every node; the jobs on them are named to their owners (and admins) only."""
    return NodeList(nodes=NodeService(ctx).list(owner_of(token)))


@router.get(
    "/nodes/{name}", response_model=NodeOut, tags=["nodes"], responses=errors(*AUTH, 404, 422)
)
def get_node(
    name: NodeName, ctx: Context = Depends(context), token: TokenRow = Depends(user)
) -> NodeOut:
    """One node; the jobs on it are named to their owners (and admins) only."""
    return NodeService(ctx).get(name, owner_of(token))


@router.post(
    "/nodes/{name}/drain",
    response_model=NodeOut,
    tags=["nodes"],
    responses=errors(*AUTH, 404, 409, 413, 422),
)
def drain_node(
    name: NodeName, ctx: Context = Depends(context), _: TokenRow = Depends(admin)
) -> NodeOut:
    return NodeService(ctx).set_draining(name, True)


@router.post(
    "/nodes/{name}/undrain",
    response_model=NodeOut,
    tags=["nodes"],
    responses=errors(*AUTH, 404, 409, 413, 422),
)
def undrain_node(
    name: NodeName, ctx: Context = Depends(context), _: TokenRow = Depends(admin)
) -> NodeOut:
    return NodeService(ctx).set_draining(name, False)


@router.post(
    "/nodes/{name}/reset",
    response_model=NodeOut,
    tags=["nodes"],
    responses=errors(*AUTH, 404, 413, 422),
)
def reset_node(
    name: NodeName, ctx: Context = Depends(context), _: TokenRow = Depends(admin)
) -> NodeOut:
    """Free the node's name for a new agent (a reinstalled host): its node credential is
    forgotten, its node token revoked, its live tasks lost (requeued or failed), and it
    stays lost until an agent registers the name, which then receives a new credential."""
    return NodeService(ctx).reset(name)


@router.post(
    "/nodes/{name}/notice",
    response_model=NoticeOut,
    tags=["nodes"],
    responses=errors(*AUTH, 400, 404, 409, 413, 422),
)
def give_node_notice(
    name: NodeName, body: NoticeIn, ctx: Context = Depends(context), _: TokenRow = Depends(admin)
) -> NoticeOut:
    """A spot termination notice: the node (with the rest of its pool unit) is drained,
    its jobs are preempted so that they end within ``deadline`` seconds and requeued, and
    a pool's unit is deleted once empty (a fixed node stays drained)."""
    leave_at = ctx.clock() + body.deadline
    return NoticeOut(nodes=give_notice(ctx, name, body.deadline), leave_at=leave_at)


@router.get("/pools", response_model=PoolList, tags=["pools"], responses=errors(*AUTH))
def list_pools(ctx: Context = Depends(context), _: TokenRow = Depends(user)) -> PoolList:
    """Each node pool: its units, desired size, provisioning in flight and cost now."""
    return PoolList(pools=read_pools(ctx))


@router.get("/queues", response_model=QueueList, tags=["queues"], responses=errors(*AUTH))
def list_queues(ctx: Context = Depends(context), _: TokenRow = Depends(user)) -> QueueList:
    return QueueList(queues=read_queues(ctx))


@router.post(
    "/tokens",
    response_model=TokenOut,
    status_code=201,
    tags=["tokens"],
    responses=errors(*AUTH, 400, 413, 422),
)
def create_token(
    body: TokenCreate,
    request: Request,
    ctx: Context = Depends(context),
    _: TokenRow = Depends(admin),
) -> TokenOut:
    row, secret = TokenService(ctx).create(body.user, body.role, unix_user=body.unix_user)
    note(request, target=row.id)
    return _token_out(row, secret)


@router.get("/tokens", response_model=TokenList, tags=["tokens"], responses=errors(*AUTH))
def list_tokens(ctx: Context = Depends(context), token: TokenRow = Depends(user)) -> TokenList:
    """Every user, admin and join token (for a user: their own user and admin tokens)."""
    owner = None if token.role == "admin" else token.user
    return TokenList(tokens=[_token_out(r) for r in TokenService(ctx).list(owner)])


@router.delete(
    "/tokens/{token_id}",
    response_model=TokenOut,
    tags=["tokens"],
    responses=errors(*AUTH, 404, 413, 422),
)
def revoke_token(
    token_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    ctx: Context = Depends(context),
    token: TokenRow = Depends(user),
) -> TokenOut:
    """Revoke a token (a user: one of their own)."""
    owner = None if token.role == "admin" else token.user
    return _token_out(TokenService(ctx).revoke(token_id, owner))


@router.get("/whoami", response_model=WhoAmI, tags=["tokens"], responses=errors(*AUTH))
def who_am_i(token: TokenRow = Depends(any_token)) -> WhoAmI:
    """Who the presented token belongs to (any live token)."""
    return WhoAmI(user=token.user, role=token.role, token_id=token.id, node=token.node)


@router.get("/audit", response_model=AuditList, tags=["audit"], responses=errors(*AUTH, 422))
def list_audit(
    user: SafeStr | None = Query(None, max_length=128, description="only this user's calls"),
    since: float | None = Query(None, description="only calls at or after (Unix time)"),
    limit: int = Query(100, ge=1, le=10_000, description="page size: the newest this many"),
    before: int | None = Query(
        None, ge=1, le=2**63 - 1, description="the cursor: only entries with a lower id"
    ),
    ctx: Context = Depends(context),
    _: TokenRow = Depends(admin),
) -> AuditList:
    """State-changing API calls, oldest first (admins): the newest ``limit`` below
    ``before``; while ``has_more``, pass ``next`` as ``before`` for older ones."""
    return audit_page(ctx, user, since, limit, before)


def _token_out(row: TokenRow, secret: str | None = None) -> TokenOut:
    return TokenOut(
        id=row.id,
        user=row.user,
        role=row.role,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        token=secret,
        unix_user=row.unix_user,
    )
