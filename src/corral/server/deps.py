"""FastAPI dependencies: the context, services and the caller's credential.

Every dependency that authenticates notes the caller for the audit log
(``corral.server.audit``) in the request scope. They are ``async``: a token this replica
verified recently is answered from the token cache without leaving the event loop; only
a lookup in the database runs in the thread pool.
"""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from corral.errors import AuthenticationError, PermissionDeniedError
from corral.server.audit import note
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.services.auth import JOB_TOKEN_PREFIX, TokenService, parse_job_token

bearer = HTTPBearer(auto_error=False)


async def context(request: Request) -> Context:
    return request.app.state.ctx


def _secret(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials if credentials else None


async def any_token(
    request: Request,
    ctx: Context = Depends(context),
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> TokenRow:
    secret = _secret(credentials)
    if secret and secret.startswith(JOB_TOKEN_PREFIX):
        raise PermissionDeniedError(
            "a job token can only report its job's checkpoints, read its logs and run its steps"
        )
    service = TokenService(ctx)
    row = service.cached(secret)
    if row is None:
        row = await anyio.to_thread.run_sync(service.verify, secret)
    note(request, user=row.user, role=row.role, token_id=row.id)
    return row


def _user(token: TokenRow) -> TokenRow:
    if token.role not in ("admin", "user"):
        raise PermissionDeniedError(f"a {token.role} token cannot use this endpoint")
    return token


async def user(token: TokenRow = Depends(any_token)) -> TokenRow:
    """Any user or admin token."""
    return _user(token)


def owner_of(token: TokenRow) -> str | None:
    """Whose jobs the caller may see and act on: None (everyone's) for an admin."""
    return None if token.role == "admin" else token.user


async def admin(token: TokenRow = Depends(any_token)) -> TokenRow:
    if token.role != "admin":
        raise PermissionDeniedError("this needs an admin token")
    return token


async def joiner(token: TokenRow = Depends(any_token)) -> TokenRow:
    if token.role not in ("join", "admin"):
        raise PermissionDeniedError("registering a node needs the agent join token")
    return token


async def node_agent(token: TokenRow = Depends(any_token)) -> TokenRow:
    if token.role != "node":
        raise PermissionDeniedError("this endpoint is for node agents")
    return token


async def job_caller(
    job_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    request: Request,
    ctx: Context = Depends(context),
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> tuple[int, TokenRow | None]:
    """The job's own token (for its current attempt), or a user or admin token: for the
    routes a job calls itself (checkpoints, logs, steps).

    Returns ``(attempt, None)`` for a job token (the attempt it names) and
    ``(-1, token)`` otherwise; the route checks the attempt and the job's owner."""
    secret = _secret(credentials)
    if secret and secret.startswith(JOB_TOKEN_PREFIX):
        ids = parse_job_token(ctx.job_key, secret)
        if ids is None:
            raise AuthenticationError("invalid job token")
        if ids[0] != job_id:
            raise PermissionDeniedError(f"this job token belongs to job {ids[0]}, not {job_id}")
        note(request, user=f"job:{job_id}", role="job", token_id=None)
        return ids[1], None
    token = _user(await any_token(request, ctx, credentials))
    return -1, token
