"""The agent protocol: register with the join token, then sync with the node token."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request

from corral.errors import PermissionDeniedError
from corral.schemas.agent import (
    RegisterRequest,
    RegisterResponse,
    SyncRequest,
    SyncResponse,
    WatchResponse,
)
from corral.schemas.common import SafeStr
from corral.server.audit import note
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.deps import context, joiner, node_agent
from corral.server.openapi import AUTH, errors
from corral.server.services.auth import TokenService
from corral.server.services.nodes import NodeService

router = APIRouter(prefix="/agent", tags=["agent"])


@router.post("/register", response_model=RegisterResponse, responses=errors(*AUTH, 400, 422))
def register_node(
    body: RegisterRequest,
    request: Request,
    ctx: Context = Depends(context),
    _: TokenRow = Depends(joiner),
) -> RegisterResponse:
    """Register a node (its name is bound to the node credential its first registration
    returns: later ones must present it); answers with a new node token."""
    note(request, target=body.name)
    credential = NodeService(ctx).register(body)
    _, secret = TokenService(ctx).create(f"node:{body.name}", "node", node=body.name)
    return RegisterResponse(
        node=body.name,
        node_token=secret,
        sync_interval=ctx.settings.sync_interval,
        credential=credential,
        log_cap=ctx.settings.log_cap,
    )


@router.post("/sync", response_model=SyncResponse, responses=errors(*AUTH, 400, 404, 409, 422))
def sync_node(
    body: SyncRequest, ctx: Context = Depends(context), token: TokenRow = Depends(node_agent)
) -> SyncResponse:
    if token.node != body.node:
        raise PermissionDeniedError(f"this node token belongs to {token.node}, not {body.node}")
    return NodeService(ctx).sync(body)


@router.get("/watch", response_model=WatchResponse, responses=errors(*AUTH, 422))
async def watch_node(
    node: SafeStr,
    since: int = Query(-1, description="the version the agent last saw"),
    timeout: float = Query(30.0, ge=0, le=300),
    ctx: Context = Depends(context),
    token: TokenRow = Depends(node_agent),
) -> WatchResponse:
    """Long-poll: returns once the node's work may have changed (then sync), or at timeout."""
    if token.node != node:
        raise PermissionDeniedError(f"this node token belongs to {token.node}, not {node}")
    return WatchResponse(version=await ctx.watch.wait(node, since, timeout))
