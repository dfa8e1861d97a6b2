"""The control loop: leader election, node liveness, time limits, idle GPUs, and
scheduling cycles.

Every replica takes part in the election (``server.leader``): the leader renews its lease
every ``ttl / 4`` seconds, a follower reads it every ``FOLLOWER_POLL`` seconds and takes it
over once it expired.
Only the leader does the state-changing work, each write transaction fenced by its term
(and recording in the lease which nodes' agents should sync, for the other replicas):
a cycle runs when something woke it (a submission, a task exit, a node change, on this
replica or, through the lease row's ``wakes`` counter, on a follower) and at least every
``policy.interval``; liveness and time limits run every second. With node pools, an
autoscaling pass (``services.autoscaling``) follows a cycle at most every second and at
least every five.
Woken cycles are spaced by ``CYCLE_DUTY`` times the last one's duration (at least
``MIN_CYCLE_GAP``), so the loop takes at most about a third of the CPU under a burst. A
database outage is logged and retried, never fatal.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.exc import DBAPIError

from corral.errors import FencedError
from corral.server.context import Context
from corral.server.errors import transient
from corral.server.leader import Leadership, LeaseState, Term, nudges
from corral.server.services.autoscaling import Autoscaling
from corral.server.services.idle import check_idle
from corral.server.services.nodes import NodeService
from corral.server.services.scheduler import enforce_time_limits, run_cycle

log = logging.getLogger("corral.server")
HOUSEKEEPING_PERIOD = 1.0
MIN_CYCLE_GAP = 0.05
WAKE_POLL = 0.1  # how often the leader looks for followers' wake requests
FOLLOWER_POLL = 0.2  # how often a follower reads the lease (expiry, the leader's changes)
# A woken cycle waits at least this many times the last cycle's duration after its start,
# so that a burst of submissions (each waking the loop) leaves the API most of the CPU.
CYCLE_DUTY = 2.0


class ControlLoop:
    """Two threads: the election (take or renew the lease; as a follower, relay the
    leader's changes to the agents watching this replica) and the control work, which runs
    only while this replica holds the lease. Kept apart so that a long cycle never delays a
    renewal (a renewal only waits for the fenced write in flight)."""

    def __init__(self, ctx: Context, leadership: Leadership) -> None:
        self.ctx = ctx
        self.leadership = leadership
        self.nodes = NodeService(ctx)
        self.autoscaling = Autoscaling(ctx)
        self._stop = threading.Event()
        self._last_cycle = self._last_housekeeping = 0.0
        self._next_woken_cycle = 0.0  # time.monotonic(): pacing is real time, whatever the clock
        self._threads = [
            threading.Thread(target=self._elect, name="corral-election", daemon=True),
            threading.Thread(target=self._run, name="corral-control", daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.ctx.wake()
        for thread in reversed(self._threads):
            thread.join(timeout=10)
        try:
            self.leadership.resign()
        except DBAPIError as exc:  # the database may be gone; the lease then simply expires
            log.warning("could not give up the leader lease: %s", _first_line(exc))

    def _elect(self) -> None:
        while not self._stop.is_set():
            was, before = self.leadership.term, self.leadership.last
            try:
                term = self.leadership.step()
                if term is None:
                    self._relay(before)
                elif term != was:
                    self.ctx.wake()  # a new term: catch up at once
            except DBAPIError as exc:  # e.g. the database restarting: try again
                if not transient(exc):
                    log.exception("leader election step failed")
                else:
                    log.warning("leader election: database unavailable (%s)", _first_line(exc))
            except Exception:
                log.exception("leader election step failed")
            period = self.leadership.ttl / 4
            self._stop.wait(period if self.leadership.is_leader else min(period, FOLLOWER_POLL))

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

    def _run(self) -> None:
        seen: Term | None = None
        while not self._stop.is_set():
            poll = WAKE_POLL if self.leadership.is_leader else FOLLOWER_POLL
            limit = min(self.ctx.config.policy.interval, HOUSEKEEPING_PERIOD, poll)
            woke = self.ctx.wake_event.wait(timeout=limit)
            if self._stop.is_set():
                break
            self.ctx.wake_event.clear()
            term = self.leadership.term
            try:
                if term is None:
                    if woke:  # work arrived here: tell the leader (at most once a gap)
                        self.leadership.request_wake()
                else:
                    if term != seen:  # a new term: catch up at once
                        self._last_cycle = self._last_housekeeping = 0.0
                        woke = True
                    self._lead(term, woke)
            except FencedError as exc:
                log.warning("deposed: %s; nothing was applied", exc)
                if term is not None:
                    self.leadership.deposed(term)
            except DBAPIError as exc:  # the database is down: try again next time
                if not transient(exc):
                    log.exception("control loop iteration failed")
                else:
                    log.warning("control loop: database unavailable (%s)", _first_line(exc))
            except Exception:  # a bad cycle must not kill the loop
                log.exception("control loop iteration failed")
            seen = term
            self._stop.wait(MIN_CYCLE_GAP)

    def _lead(self, term: Term, woke: bool) -> None:
        """The leader's work, every write fenced by ``term``."""
        now = self.ctx.clock()
        woke = self.leadership.woken() or woke
        if now - self._last_housekeeping >= HOUSEKEEPING_PERIOD:
            self._last_housekeeping = now
            for name in self.nodes.check_liveness(term):
                log.warning("node %s lost", name)
            if enforce_time_limits(self.ctx, term):
                woke = True
            if check_idle(self.ctx, term):
                woke = True
        if self.autoscaling.due(woke=False):  # pools: a cycle, then a pass, now and then
            woke = True
        interval = self.ctx.config.policy.interval
        too_soon = time.monotonic() < self._next_woken_cycle
        if woke and too_soon and now - self._last_cycle < interval:
            self.ctx.wake_event.set()  # not yet: keep the wake for the next turn
        elif woke or now - self._last_cycle >= interval:
            self._last_cycle = now
            began = time.monotonic()
            result = run_cycle(self.ctx, term)
            took = time.monotonic() - began
            self._next_woken_cycle = began + max(MIN_CYCLE_GAP, CYCLE_DUTY * took)
            self.ctx.metrics.cycle_seconds.observe(result.duration)
            if result.placed:
                log.info("cycle placed %d job(s), %d pending", result.placed, result.pending)
            if self.autoscaling.due(woke=True):
                self.autoscaling.run(term, result.waiting)


def _first_line(exc: DBAPIError) -> str:
    return str(exc.orig or exc).splitlines()[0] if str(exc.orig or exc) else type(exc).__name__
