"""The control loop: leader election, node liveness, time limits, and scheduling cycles.

One background thread per replica. Every replica takes part in the election
(``server.leader``): the leader renews its lease every ``ttl / 4`` seconds, a follower
checks every ``FOLLOWER_POLL`` seconds whether the lease expired and takes it over if so.
Only the leader does the state-changing work, each write transaction fenced by its term
(and recording in the lease which nodes' agents should sync, for the other replicas):
a cycle runs when something woke it (a submission, a task exit, a node change, on this
replica or, through the lease row's ``wakes`` counter, on a follower) and at least every
``policy.interval``; liveness and time limits run every second.
"""

from __future__ import annotations

import logging
import threading

from corral.errors import FencedError
from corral.server.context import Context
from corral.server.leader import Leadership, LeaseState, Term, nudges
from corral.server.services.nodes import NodeService
from corral.server.services.scheduler import enforce_time_limits, run_cycle

log = logging.getLogger("corral.server")
HOUSEKEEPING_PERIOD = 1.0
MIN_CYCLE_GAP = 0.05
WAKE_POLL = 0.1  # how often the leader looks for followers' wake requests
FOLLOWER_POLL = 0.2  # how often a follower reads the lease (expiry, the leader's changes)


class ControlLoop:
    def __init__(self, ctx: Context, leadership: Leadership) -> None:
        self.ctx = ctx
        self.leadership = leadership
        self.nodes = NodeService(ctx)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corral-control", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.ctx.wake()
        self._thread.join(timeout=10)
        try:
            self.leadership.resign()
        except Exception:  # the database may be gone; the lease then simply expires
            log.exception("could not give up the leader lease")

    def _run(self) -> None:
        interval = self.ctx.config.policy.interval
        last_cycle = last_housekeeping = last_lease = 0.0
        term: Term | None = None
        while not self._stop.is_set():
            poll = WAKE_POLL if term else min(FOLLOWER_POLL, self.leadership.ttl / 4)
            woke = self.ctx.wake_event.wait(timeout=min(interval, HOUSEKEEPING_PERIOD, poll))
            if self._stop.is_set():
                break
            self.ctx.wake_event.clear()
            now = self.ctx.clock()
            try:
                if term is None or now - last_lease >= self.leadership.ttl / 4:
                    last_lease = now
                    was, before = term, self.leadership.last
                    term = self.leadership.step()
                    if term is not None and term != was:  # a new term: catch up at once
                        woke, last_housekeeping = True, 0.0
                    if term is None:
                        self._relay(before)
                if term is None:
                    if woke:  # work arrived here: tell the leader
                        self.leadership.request_wake()
                    continue
                woke = self.leadership.woken() or woke
                if now - last_housekeeping >= HOUSEKEEPING_PERIOD:
                    last_housekeeping = now
                    for name in self.nodes.check_liveness(term):
                        log.warning("node %s lost", name)
                    if enforce_time_limits(self.ctx, term):
                        woke = True
                if woke or now - last_cycle >= interval:
                    last_cycle = now
                    result = run_cycle(self.ctx, term)
                    if result.placed:
                        log.info(
                            "cycle placed %d job(s), %d pending", result.placed, result.pending
                        )
            except FencedError as exc:
                log.warning("deposed: %s; nothing was applied", exc)
                self.leadership.term = term = None
            except Exception:  # a bad cycle (or a database outage) must not kill the loop
                log.exception("control loop iteration failed")
            self._stop.wait(MIN_CYCLE_GAP)

    def _relay(self, before: LeaseState | None) -> None:
        """As a follower: nudge the agents watching this replica whose nodes the leader's
        last writes changed."""
        after = self.leadership.last
        if before is None or after is None:
            return
        nodes = nudges(before, after)
        if nodes is None:
            self.ctx.watch.bump_all()
        else:
            self.ctx.watch.bump(nodes)
