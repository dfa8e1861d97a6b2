"""Leader election through the database, with fencing.

Every replica serves the API; only the holder of the ``scheduler`` lease (a row of the
``leases`` table) runs the control loop's background writes. The lease is taken and
renewed with compare-and-swap updates, which work alike on PostgreSQL and on a SQLite
file shared by replicas on one host:

- take over: ``holder := me, epoch := epoch + 1, expires_at := now + ttl`` where the lease
  is free or expired;
- renew: ``expires_at := now + ttl`` where ``holder = me and epoch = mine``.

A :class:`Term` is one holder's tenure (its epoch). Fencing: every background write
transaction first calls :meth:`Term.fence`, an ``UPDATE`` of the lease row guarded by
holder and epoch. It fails (``FencedError``, the transaction rolls back) once another
replica took over, and otherwise it locks the row until the transaction ends (a row lock
on PostgreSQL, the write lock on SQLite), so a takeover waits for the write to commit.
On PostgreSQL a fenced transaction left idle for a TTL (its process paused) is ended by the
server, so a frozen leader cannot keep the lease locked; on SQLite a paused writer stalls
every writer until it resumes (SIGKILL is fine: the OS drops its locks).
A deposed leader (paused, partitioned, slow) therefore never applies a decision, however
late it wakes up; clocks only decide *when* a lease counts as expired, never safety.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session, sessionmaker

from corral.errors import FencedError
from corral.server.db.models import LeaseRow

log = logging.getLogger("corral.server")
LEASE = "scheduler"
DEFAULT_TTL = 4.0  # seconds a lease lasts without renewal


@dataclass(frozen=True)
class LeaseState:
    """The lease as stored; ``holder`` is None before anyone took it."""

    holder: str | None
    address: str | None
    epoch: int
    acquired_at: float
    expires_at: float
    changes: int = 0
    changed_nodes: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Term:
    """One replica's tenure as leader: the lease holder and epoch it acquired."""

    holder: str
    epoch: int
    hold_limit: float = DEFAULT_TTL  # seconds a fenced transaction may sit idle

    def fence(self, session: Session) -> None:
        """Verify, inside the caller's transaction and before its first write, that this
        term still holds the lease, and lock the lease until that transaction ends.

        Raises ``FencedError`` when another replica took the lease over. On PostgreSQL the
        transaction is also ended by the server if it sits idle for ``hold_limit`` seconds
        (this process paused or stuck), so a frozen leader cannot hold the lease locked.
        """
        if session.get_bind().dialect.name == "postgresql":
            limit = max(1, int(self.hold_limit * 1000))
            session.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = {limit}"))
        result = session.execute(
            update(LeaseRow)
            .where(
                LeaseRow.name == LEASE, LeaseRow.holder == self.holder, LeaseRow.epoch == self.epoch
            )
            .values(epoch=LeaseRow.epoch)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:
            raise FencedError(f"leader epoch {self.epoch} was taken over by another replica")

    def announce(self, session: Session, nodes: Collection[str] | None) -> None:
        """Record, in the caller's fenced transaction, that what ``nodes`` (None: any node)
        should run changed, so that the other replicas nudge the agents watching them."""
        session.execute(
            update(LeaseRow)
            .where(LeaseRow.name == LEASE, LeaseRow.epoch == self.epoch)
            .values(
                changes=LeaseRow.changes + 1,
                changed_nodes=None if nodes is None else sorted(nodes),
            )
            .execution_options(synchronize_session=False)
        )


def nudges(before: LeaseState, after: LeaseState) -> frozenset[str] | None:
    """The nodes whose agents should sync, given two reads of the lease: none, those the
    one change between them names, or None for any node (several changes, or unnamed)."""
    if after.changes == before.changes:
        return frozenset()
    if after.changes == before.changes + 1 and after.changed_nodes is not None:
        return frozenset(after.changed_nodes)
    return None


class Leadership:
    """This replica's side of the election: take, renew, and give up the lease."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        address: str,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.time,
        replica_id: str | None = None,
    ) -> None:
        self.sessions = sessions
        self.address = address
        self.ttl = ttl
        self.clock = clock
        self.replica_id = replica_id or f"{address}#{uuid.uuid4().hex[:8]}"
        self.term: Term | None = None
        self.last: LeaseState | None = None  # as the last step() read it (followers)
        self._seen_wakes: int | None = None

    @property
    def is_leader(self) -> bool:
        return self.term is not None

    def step(self) -> Term | None:
        """Renew the lease if this replica holds it, else take it if it is free or expired.

        Returns the current term (None while another replica leads). Logs every change.
        """
        now = self.clock()
        if self.term is not None:
            with self.sessions.begin() as session:
                renewed = session.execute(
                    update(LeaseRow)
                    .where(
                        LeaseRow.name == LEASE,
                        LeaseRow.holder == self.term.holder,
                        LeaseRow.epoch == self.term.epoch,
                    )
                    .values(expires_at=now + self.ttl)
                    .execution_options(synchronize_session=False)
                ).rowcount
            if renewed == 1:
                return self.term
            log.warning("lost the leader lease (epoch %d); now a follower", self.term.epoch)
            self.term = None
        state = self.last = self.read()
        if state.holder is not None and state.expires_at >= now:
            return None
        with self.sessions.begin() as session:
            taken = session.execute(
                update(LeaseRow)
                .where(
                    LeaseRow.name == LEASE,
                    LeaseRow.epoch == state.epoch,  # nobody took it since we read it
                    LeaseRow.expires_at < now,
                )
                .values(
                    holder=self.replica_id,
                    address=self.address,
                    epoch=state.epoch + 1,
                    acquired_at=now,
                    expires_at=now + self.ttl,
                )
                .execution_options(synchronize_session=False)
            ).rowcount
        if taken != 1:
            return None
        self.term = Term(self.replica_id, state.epoch + 1, self.ttl)
        if state.holder is None or state.expires_at <= 0:  # never held, or given up
            how = "the lease was free"
        else:
            how = f"took over from {state.holder} {now - state.expires_at:.1f}s after it expired"
        log.warning("became the scheduler leader (epoch %d; %s)", self.term.epoch, how)
        return self.term

    def deposed(self, term: Term) -> None:
        """``term`` was fenced off: stop acting as leader (unless a newer term began)."""
        if self.term == term:
            self.term = None

    def resign(self) -> None:
        """Give the lease up at once (a clean shutdown), so another replica need not wait
        for it to expire."""
        if self.term is None:
            return
        with self.sessions.begin() as session:
            session.execute(
                update(LeaseRow)
                .where(
                    LeaseRow.name == LEASE,
                    LeaseRow.holder == self.term.holder,
                    LeaseRow.epoch == self.term.epoch,
                )
                .values(expires_at=0.0)
                .execution_options(synchronize_session=False)
            )
        log.info("gave up the leader lease (epoch %d)", self.term.epoch)
        self.term = None

    def read(self) -> LeaseState:
        with self.sessions() as session:
            row = session.scalars(select(LeaseRow).where(LeaseRow.name == LEASE)).one()
            nodes = None if row.changed_nodes is None else tuple(row.changed_nodes)
            return LeaseState(
                row.holder,
                row.address,
                row.epoch,
                row.acquired_at,
                row.expires_at,
                row.changes,
                nodes,
            )

    # -- wakes: a follower asks the leader for a scheduling cycle soon -----------------

    def request_wake(self) -> None:
        """Ask whichever replica leads for a cycle soon (called by followers)."""
        with self.sessions.begin() as session:
            session.execute(
                update(LeaseRow)
                .where(LeaseRow.name == LEASE)
                .values(wakes=LeaseRow.wakes + 1)
                .execution_options(synchronize_session=False)
            )

    def woken(self) -> bool:
        """Whether a follower asked for a cycle since the last call (polled by the leader)."""
        with self.sessions() as session:
            wakes = session.scalar(select(LeaseRow.wakes).where(LeaseRow.name == LEASE))
        seen, self._seen_wakes = self._seen_wakes, wakes
        return seen is not None and wakes != seen
