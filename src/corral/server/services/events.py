"""The transition history as a feed: pages by id, and a server-sent-events stream.

Stream format (``text/event-stream``): each event is ``id: N`` and ``data: <EventItem
JSON>`` followed by a blank line, in id order; a comment line (``: keep-alive``) is sent
after ``sse_keepalive`` seconds without events. A client that reconnects with the
``Last-Event-ID`` header (or ``since_id``) gets every event after that id, none twice.

Ids are given out when a row is inserted, not when its transaction commits: on
PostgreSQL, event 11 may be visible while event 10 is still being written. A stream
therefore never passes a missing id until ``ServerSettings.event_gap_wait`` seconds
after it first saw the hole (a rolled-back insert leaves one for good); so it delivers
every event, in id order, at the price of that delay after a rollback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from sqlalchemy import String, cast, or_, select

from corral.schemas.api import EventItem, EventList
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
    until_id: int | None = None,
) -> list[EventItem]:
    """Events with an id above ``since_id`` (and at most ``until_id``), oldest first, at
    most ``limit``: the first ones, or with ``latest`` the last ones. With ``owner``, job
    events only of that user's jobs (node events are everyone's)."""
    query = select(EventRow).where(EventRow.id > since_id)
    if until_id is not None:
        query = query.where(EventRow.id <= until_id)
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


def event_page(
    ctx: Context,
    since_id: int = 0,
    limit: int = 100,
    entity: str | None = None,
    entity_id: str | None = None,
    latest: bool = False,
    owner: str | None = None,
) -> EventList:
    """:func:`list_events`' events, saying whether more match past them (``has_more``:
    after the last one, or with ``latest`` before the first)."""
    found = list_events(ctx, since_id, limit + 1, entity, entity_id, latest, owner)
    more = len(found) > limit
    if more:
        found = found[1:] if latest else found[:limit]
    return EventList(events=found, has_more=more)


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
    holes = IdHoles(ctx.settings.event_gap_wait)
    yield "retry: 2000\n\n"
    while not ctx.watch.closed and not await disconnected():
        events, last, more = await asyncio.to_thread(
            next_events, ctx, last, holes, entity, entity_id, owner
        )
        if more:
            quiet = 0.0  # more may be there already: read on at once
            for event in events:
                yield f"id: {event.id}\ndata: {event.model_dump_json()}\n\n"
            continue
        await asyncio.sleep(POLL_SECONDS)
        quiet += POLL_SECONDS
        if quiet >= ctx.settings.sse_keepalive:
            quiet = 0.0
            yield ": keep-alive\n\n"


def next_events(
    ctx: Context,
    last: int,
    holes: IdHoles,
    entity: str | None = None,
    entity_id: str | None = None,
    owner: str | None = None,
) -> tuple[list[EventItem], int, bool]:
    """One read of a stream (SSE here, gRPC's ``WatchEvents``): the events after ``last``
    that may be passed (see ``IdHoles``), the id to read on from, and whether to read
    again at once (more may be there) rather than after ``POLL_SECONDS``."""
    ids = _ids_after(ctx, last)
    safe = holes.safe(last, ids, time.monotonic())
    if safe <= last:
        return [], last, False
    events = list_events(ctx, last, STREAM_BATCH, entity, entity_id, False, owner, safe)
    after = events[-1].id if len(events) == STREAM_BATCH else safe
    return events, after, bool(events) or len(ids) == STREAM_BATCH


def _ids_after(ctx: Context, last: int) -> list[int]:
    """The next ids of the whole history (no filter: holes are holes for every reader)."""
    query = select(EventRow.id).where(EventRow.id > last).order_by(EventRow.id)
    with ctx.sessions() as session:
        return list(session.scalars(query.limit(STREAM_BATCH)))


class IdHoles:
    """Which ids a reader may pass: the ones it has read, and missing ones it first saw
    missing at least ``wait`` seconds ago (their insert was rolled back)."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self._first_seen: dict[int, float] = {}

    def safe(self, last: int, ids: list[int], now: float) -> int:
        """The highest id up to which every id after ``last`` is read or given up on,
        given the ``ids`` (ascending) found after ``last`` now. A hole is known by its
        first missing id and timed from the first read that showed it."""
        safe, blocked, before = last, False, last
        for present in ids:
            if present > before + 1:  # before + 1 .. present - 1 are missing
                seen = self._first_seen.setdefault(before + 1, now)
                blocked = blocked or now - seen < self.wait
            if not blocked:
                safe = present
            before = present
        self._first_seen = {i: t for i, t in self._first_seen.items() if i > safe}
        return safe
