"""Nodes, queues, tokens and health."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends
from sqlalchemy.exc import SQLAlchemyError

import corral
from corral.schemas.api import (
    Health,
    NodeList,
    NodeOut,
    QueueList,
    TokenCreate,
    TokenList,
    TokenOut,
)
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.deps import admin, context, user
from corral.server.services.auth import TokenService
from corral.server.services.nodes import NodeService
from corral.server.services.queues import list_queues

router = APIRouter()


@router.get("/health", response_model=Health, tags=["health"])
def health(ctx: Context = Depends(context)) -> Health:
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


@router.get("/nodes", response_model=NodeList, tags=["nodes"])
def nodes(ctx: Context = Depends(context), _: TokenRow = Depends(user)) -> NodeList:
    return NodeList(nodes=NodeService(ctx).list())


@router.get("/nodes/{name}", response_model=NodeOut, tags=["nodes"])
def node(name: str, ctx: Context = Depends(context), _: TokenRow = Depends(user)) -> NodeOut:
    return NodeService(ctx).get(name)


@router.post("/nodes/{name}/drain", response_model=NodeOut, tags=["nodes"])
def drain(name: str, ctx: Context = Depends(context), _: TokenRow = Depends(admin)) -> NodeOut:
    return NodeService(ctx).set_draining(name, True)


@router.post("/nodes/{name}/undrain", response_model=NodeOut, tags=["nodes"])
def undrain(name: str, ctx: Context = Depends(context), _: TokenRow = Depends(admin)) -> NodeOut:
    return NodeService(ctx).set_draining(name, False)


@router.get("/queues", response_model=QueueList, tags=["queues"])
def queues(ctx: Context = Depends(context), _: TokenRow = Depends(user)) -> QueueList:
    return QueueList(queues=list_queues(ctx))


@router.post("/tokens", response_model=TokenOut, status_code=201, tags=["tokens"])
def create_token(
    body: TokenCreate, ctx: Context = Depends(context), _: TokenRow = Depends(admin)
) -> TokenOut:
    row, secret = TokenService(ctx).create(body.user, body.role)
    return _token_out(row, secret)


@router.get("/tokens", response_model=TokenList, tags=["tokens"])
def list_tokens(ctx: Context = Depends(context), _: TokenRow = Depends(admin)) -> TokenList:
    return TokenList(tokens=[_token_out(r) for r in TokenService(ctx).list()])


@router.delete("/tokens/{token_id}", response_model=TokenOut, tags=["tokens"])
def revoke_token(
    token_id: int, ctx: Context = Depends(context), _: TokenRow = Depends(admin)
) -> TokenOut:
    return _token_out(TokenService(ctx).revoke(token_id))


def _token_out(row: TokenRow, secret: str | None = None) -> TokenOut:
    return TokenOut(
        id=row.id,
        user=row.user,
        role=row.role,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        token=secret,
    )
