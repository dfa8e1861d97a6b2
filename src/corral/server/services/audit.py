"""The audit log: written in batches by a background thread, read by ``corral audit``.

Entries come from ``corral.server.audit.AuditMiddleware``, which queues one per audited
call before the call's response starts. :class:`AuditWriter` inserts what is queued in
one transaction per batch; a batch gathers entries for up to ``LINGER`` after its first,
so a burst of calls costs a few transactions, not one each. Reading (:func:`list_audit`)
first waits until everything this replica queued so far is stored (ending the gathering
at once), so a caller always sees its own calls. Shutdown (:meth:`AuditWriter.close`, at
the end of the server's lifespan) stores what is left. A crash of the server process
(SIGKILL, power loss) loses what was queued and not yet stored: the calls of the last
``LINGER`` or so. While the database is unavailable a batch that cannot be stored is
dropped with one warning line in the log.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from corral.schemas.api import AuditList, AuditOut
from corral.server.db.models import AuditRow
from corral.server.errors import transient

if TYPE_CHECKING:
    from corral.server.context import Context

log = logging.getLogger("corral.server")
MAX_QUEUED = 10_000  # entries; a full queue makes callers wait (no entry is dropped)
MAX_BATCH = 500  # entries per transaction
LINGER = 0.02  # seconds a batch waits for more entries after its first (unless flushed)


class _Flush:
    """A marker in the queue: set once everything queued before it is stored."""

    def __init__(self) -> None:
        self.done = threading.Event()


class AuditWriter:
    """Stores audit entries (``AuditRow`` column values) from a bounded queue in batches;
    the thread starts with the first entry."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self._queue: queue.Queue[dict[str, Any] | _Flush | None] = queue.Queue(MAX_QUEUED)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def put(self, entry: dict[str, Any]) -> None:
        """Queue one entry; after :meth:`close`, store it at once."""
        if self._closed:
            self._store([entry])
            return
        self._ensure_thread()
        self._queue.put(entry)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every entry queued before this call is stored (or dropped)."""
        if self._thread is None or self._closed:
            return
        marker = _Flush()
        self._queue.put(marker)
        marker.done.wait(timeout)

    def close(self) -> None:
        """Store what is queued and stop the thread (later entries are stored at once)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()
        left = []  # queued while closing, after the thread's last batch
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, dict):
                left.append(item)
            elif isinstance(item, _Flush):
                item.done.set()
        if left:
            self._store(left)

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="audit", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        stop = False
        while not stop:
            items = [self._queue.get()]
            deadline = time.monotonic() + LINGER
            while len(items) < MAX_BATCH and isinstance(items[-1], dict):
                try:  # one transaction per burst rather than per call
                    items.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            entries = [i for i in items if isinstance(i, dict)]
            if entries:
                self._store(entries)
            for item in items:
                if isinstance(item, _Flush):
                    item.done.set()
                stop = stop or item is None

    def _store(self, entries: list[dict[str, Any]]) -> None:
        """Insert ``entries`` in one transaction; never raises."""
        try:
            with self.sessions.begin() as session:
                session.execute(insert(AuditRow), entries)
            return
        except DBAPIError as exc:
            if transient(exc):  # the calls themselves were refused (503) or answered
                log.warning("audit: %d entries not recorded: database unavailable", len(entries))
                return
            if len(entries) == 1:
                log.error(
                    "audit: %s %s not recorded: %s",
                    entries[0]["method"],
                    entries[0]["path"],
                    str(exc.orig or exc).splitlines()[0],
                )
                return
        except Exception:
            log.exception("audit: %d entries not recorded", len(entries))
            return
        for entry in entries:  # one entry the database refused: store the others
            self._store([entry])


def audit_page(
    ctx: Context,
    user: str | None = None,
    since: float | None = None,
    limit: int = 100,
    before: int | None = None,
) -> AuditList:
    """:func:`list_audit`'s entries, saying whether older ones exist (``has_more``) and
    the cursor that asks for them (``next``: pass it as ``before``)."""
    found = list_audit(ctx, user, since, limit + 1, before)
    more = len(found) > limit
    found = found[1:] if more else found
    return AuditList(entries=found, has_more=more, next=found[0].id if more else None)


def list_audit(
    ctx: Context,
    user: str | None = None,
    since: float | None = None,
    limit: int = 100,
    before: int | None = None,
) -> list[AuditOut]:
    """The newest ``limit`` entries (with an id below ``before``), oldest first;
    optionally only ``user``'s, at or after ``since``. Includes every call this replica
    answered before."""
    ctx.audit.flush()
    query = select(AuditRow)
    if user is not None:
        query = query.where(AuditRow.user == user)
    if since is not None:
        query = query.where(AuditRow.at >= since)
    if before is not None:
        query = query.where(AuditRow.id < before)
    query = query.order_by(AuditRow.id.desc()).limit(limit)
    with ctx.sessions() as session:
        rows = list(session.scalars(query))
    return [
        AuditOut(
            id=r.id,
            at=r.at,
            user=r.user,
            role=r.role,
            token_id=r.token_id,
            method=r.method,
            path=r.path,
            target=r.target,
            status=r.status,
        )
        for r in reversed(rows)
    ]
