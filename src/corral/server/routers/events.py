"""The job and node transition history: a page by id, or a live server-sent-events stream."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse

from corral.errors import ValidationError
from corral.schemas.api import EventList
from corral.schemas.common import SafeStr
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.deps import context, owner_of, user
from corral.server.openapi import AUTH, errors, event_stream_response
from corral.server.services.events import event_page, event_stream, last_event_id

router = APIRouter(prefix="/events", tags=["events"])
Entity = Literal["job", "node"]
MAX_ID = 2**63 - 1  # what the database stores


@router.get("", response_model=EventList, responses=errors(*AUTH, 422))
def list_events(
    since_id: int | None = Query(None, ge=0, le=MAX_ID, description="events after this id"),
    limit: int = Query(100, ge=1, le=10_000),
    entity: Entity | None = None,
    entity_id: SafeStr | None = Query(None, max_length=253),
    ctx: Context = Depends(context),
    token: TokenRow = Depends(user),
) -> EventList:
    """Events after ``since_id`` (oldest first); without it, the latest ``limit``. A user
    sees node events and their own jobs' events; an admin, all. ``has_more``: more match
    past this page (read on with ``since_id``: the last id here)."""
    latest = since_id is None
    owner = owner_of(token)
    return event_page(ctx, since_id or 0, limit, entity, entity_id, latest, owner)


@router.get(
    "/stream",
    response_class=StreamingResponse,
    responses={200: event_stream_response("EventItem"), **errors(*AUTH, 422)},
)
async def stream_events(
    request: Request,
    since_id: int | None = Query(None, ge=0, le=MAX_ID, description="replay events after this id"),
    entity: Entity | None = None,
    entity_id: SafeStr | None = Query(None, max_length=253),
    last_event_header: str | None = Header(None, alias="Last-Event-ID"),
    ctx: Context = Depends(context),
    token: TokenRow = Depends(user),
) -> StreamingResponse:
    """Server-sent events: every transition from now on (or after ``Last-Event-ID`` /
    ``since_id``), with keep-alive comments."""
    start = since_id
    if last_event_header:
        try:
            start = int(last_event_header)
            if not 0 <= start <= MAX_ID:
                raise ValueError
        except ValueError:
            raise ValidationError(
                f"Last-Event-ID: expected an event id, got {last_event_header!r}"
            ) from None
    if start is None:
        start = last_event_id(ctx)
    return StreamingResponse(
        event_stream(ctx, start, request.is_disconnected, entity, entity_id, owner_of(token)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
