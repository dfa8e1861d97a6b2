"""FastAPI dependencies: the context, services and the caller's credential."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from corral.errors import PermissionDeniedError
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.services.auth import TokenService

bearer = HTTPBearer(auto_error=False)


def context(request: Request) -> Context:
    return request.app.state.ctx


def _token(
    ctx: Context = Depends(context),
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> TokenRow:
    return TokenService(ctx).verify(credentials.credentials if credentials else None)


def user(token: TokenRow = Depends(_token)) -> TokenRow:
    """Any user or admin token."""
    if token.role not in ("admin", "user"):
        raise PermissionDeniedError(f"a {token.role} token cannot use this endpoint")
    return token


def admin(token: TokenRow = Depends(_token)) -> TokenRow:
    if token.role != "admin":
        raise PermissionDeniedError("this needs an admin token")
    return token


def joiner(token: TokenRow = Depends(_token)) -> TokenRow:
    if token.role not in ("join", "admin"):
        raise PermissionDeniedError("registering a node needs the agent join token")
    return token


def node_agent(token: TokenRow = Depends(_token)) -> TokenRow:
    if token.role != "node":
        raise PermissionDeniedError("this endpoint is for node agents")
    return token
