"""The transition history as a feed: pages by id, and a server-sent-events stream.

Stream format (``text/event-stream``): each event is ``id: N`` and ``data: <EventItem
JSON>`` followed by a blank line, in id order; a comment line (``: keep-alive``) is sent
after ``sse_keepalive`` seconds without events. A client that reconnects with the
``Last-Event-ID`` header (or ``since_id``) gets every event after that id, none twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from sqlalchemy import String, cast, or_, select

from corral.schemas.api import EventItem
from corral.server.context import Context
from corral.server.db.models import EventRow, JobRow

POLL_SECONDS = 0.25
STREAM_BATCH = 500


def list_events(
    ctx: Context,
    since_id: int = 0,
    limit: int = 100,
    entity: str | None = None,
    entity_id: str | None = None,
    latest: bool = False,
    owner: str | None = None,
) -> list[EventItem]:
    """Events with an id above ``since_id``, oldest first, at most ``limit``: the first
    ones, or with ``latest`` the last ones. With ``owner``, job events only of that user's
    jobs (node events are everyone's)."""
    query = select(EventRow).where(EventRow.id > since_id)
    if owner is not None:
        own_jobs = select(cast(JobRow.id, String)).where(JobRow.user == owner)
        query = query.where(
            or_(EventRow.entity != "job", EventRow.entity_id.in_(own_jobs.scalar_subquery()))
        )
    if entity:
        query = query.where(EventRow.entity == entity)
    if entity_id:
        query = query.where(EventRow.entity_id == entity_id)
    with ctx.sessions() as session:
        order = EventRow.id.desc() if latest else EventRow.id
        rows = list(session.scalars(query.order_by(order).limit(limit)))
        if latest:
            rows.reverse()
        return [
            EventItem(
                id=r.id,
                at=r.at,
                entity=r.entity,
                entity_id=r.entity_id,
                attempt=r.attempt,
                from_state=r.from_state,
                to_state=r.to_state,
                reason=r.reason,
            )
            for r in rows
        ]


def last_event_id(ctx: Context) -> int:
    with ctx.sessions() as session:
        return session.scalar(select(EventRow.id).order_by(EventRow.id.desc()).limit(1)) or 0


async def event_stream(
    ctx: Context,
    since_id: int,
    disconnected: Callable[[], Awaitable[bool]],
    entity: str | None = None,
    entity_id: str | None = None,
    owner: str | None = None,
) -> AsyncIterator[str]:
    """Server-sent events after ``since_id`` until the client leaves or the server stops."""
    last, quiet = since_id, 0.0
    yield "retry: 2000\n\n"
    while not ctx.watch.closed and not await disconnected():
        events = await asyncio.to_thread(
            list_events, ctx, last, STREAM_BATCH, entity, entity_id, False, owner
        )
        for event in events:
            last = event.id
            yield f"id: {event.id}\ndata: {event.model_dump_json()}\n\n"
        if events:
            quiet = 0.0
            continue
        await asyncio.sleep(POLL_SECONDS)
        quiet += POLL_SECONDS
        if quiet >= ctx.settings.sse_keepalive:
            quiet = 0.0
            yield ": keep-alive\n\n"
