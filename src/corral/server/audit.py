"""ASGI middleware: the audit log of state-changing calls, and the request size limit.

Each audited call's entry is queued for the batched writer (``services/audit.py``) just
before its response starts; reading the log waits for the queue, so a caller that has its
answer finds its call in ``corral audit`` on this replica.

Audited: every POST, PUT, PATCH and DELETE under ``/api/v1`` (whatever its outcome, also
refused and unauthenticated ones), except the agents' high-rate ``/api/v1/agent/sync``
protocol (registration is audited). Routes name the caller with :func:`note`; the
target is the route's path parameter (job id, node name, token id) or what the route
noted (the id of a submitted job).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import Request

from corral.server.context import Context

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

API = "/api/v1/"
AUDITED_METHODS = ("POST", "PUT", "PATCH", "DELETE")
NOT_AUDITED = ("/api/v1/agent/sync",)
SCOPE_KEY = "corral.audit"


def api_write(scope: Scope) -> bool:
    """Whether ``scope`` is an HTTP call that may change state (POST, PUT, PATCH, DELETE)
    under ``/api/v1``."""
    return (
        scope["type"] == "http"
        and scope["method"] in AUDITED_METHODS
        and scope.get("path", "").startswith(API)
    )


def note(request: Request, **fields: Any) -> None:
    """Record facts about this call (user, role, token_id, target) for its audit entry."""
    entry = request.scope.get(SCOPE_KEY)
    if entry is not None:
        entry.update(fields)


class AuditMiddleware:
    def __init__(self, app: ASGIApp, ctx: Context) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if not api_write(scope) or path in NOT_AUDITED:
            await self.app(scope, receive, send)
            return
        entry: dict[str, Any] = {"status": 500}
        scope[SCOPE_KEY] = entry
        queued = False

        def queue_entry() -> None:
            """Hand the entry to the batched writer (``services/audit.py``), once."""
            nonlocal queued
            if queued:
                return
            queued = True
            params = scope.get("path_params") or {}
            target = entry.get("target", next(iter(params.values()), None))
            self.ctx.audit.put(
                {
                    "at": self.ctx.clock(),
                    "user": entry.get("user"),
                    "role": entry.get("role"),
                    "token_id": entry.get("token_id"),
                    "method": scope["method"],
                    "path": _printable(path)[:1024],
                    "target": None if target is None else _printable(str(target))[:253],
                    "status": entry["status"],
                }
            )

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                entry["status"] = message["status"]
                queue_entry()  # before the caller can see the answer
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            queue_entry()


def _printable(text: str) -> str:
    """``text`` without NUL characters (PostgreSQL refuses them; a path may carry one)."""
    return text.replace("\0", "\\x00")


class BodyLimitMiddleware:
    """Refuse user API request bodies past ``limits.max_request_bytes`` with 413 (agent
    protocol requests carry logs and are not limited here)."""

    def __init__(self, app: ASGIApp, ctx: Context) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not api_write(scope) or scope["path"].startswith(API + "agent/"):
            await self.app(scope, receive, send)
            return
        limit = self.ctx.config.limits.max_request_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _too_large(send, limit)
            return
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > limit:
                await _too_large(send, limit)
                return
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps(
        {"code": "too_large", "message": f"request body larger than {limit} bytes"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": body})
