"""The control loop: node liveness, time limits, and scheduling cycles.

One background thread. A cycle runs when something woke it (a submission, a task exit, a
node change) and at least every ``policy.interval``; liveness runs every second. Woken
cycles are spaced by ``CYCLE_DUTY`` times the last one's duration (at least
``MIN_CYCLE_GAP``), so the loop takes at most about a third of the CPU under a burst.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.exc import DBAPIError

from corral.server.context import Context
from corral.server.errors import transient
from corral.server.services.nodes import NodeService
from corral.server.services.scheduler import enforce_time_limits, run_cycle

log = logging.getLogger("corral.server")
HOUSEKEEPING_PERIOD = 1.0
MIN_CYCLE_GAP = 0.05
# A woken cycle waits at least this many times the last cycle's duration after its start,
# so that a burst of submissions (each waking the loop) leaves the API most of the CPU.
CYCLE_DUTY = 3.0


class ControlLoop:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.nodes = NodeService(ctx)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corral-control", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.ctx.wake()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        interval = self.ctx.config.policy.interval
        last_cycle = 0.0
        last_housekeeping = 0.0
        next_woken_cycle = 0.0  # time.monotonic(): pacing is real time, whatever the clock
        while not self._stop.is_set():
            woke = self.ctx.wake_event.wait(timeout=min(interval, HOUSEKEEPING_PERIOD))
            if self._stop.is_set():
                break
            self.ctx.wake_event.clear()
            now = self.ctx.clock()
            try:
                if now - last_housekeeping >= HOUSEKEEPING_PERIOD:
                    last_housekeeping = now
                    for name in self.nodes.check_liveness():
                        log.warning("node %s lost", name)
                    if enforce_time_limits(self.ctx):
                        woke = True
                too_soon = time.monotonic() < next_woken_cycle
                if woke and too_soon and now - last_cycle < interval:
                    self.ctx.wake_event.set()  # not yet: keep the wake for the next turn
                elif woke or now - last_cycle >= interval:
                    last_cycle = now
                    began = time.monotonic()
                    result = run_cycle(self.ctx)
                    took = time.monotonic() - began
                    next_woken_cycle = began + max(MIN_CYCLE_GAP, CYCLE_DUTY * took)
                    if result.placed:
                        log.info(
                            "cycle placed %d job(s), %d pending", result.placed, result.pending
                        )
            except DBAPIError as exc:  # the database is down: try again next time
                if not transient(exc):
                    log.exception("control loop iteration failed")
                else:
                    log.warning("control loop: database unavailable (%s)", _first_line(exc))
            except Exception:  # a bad cycle must not kill the loop
                log.exception("control loop iteration failed")
            self._stop.wait(MIN_CYCLE_GAP)


def _first_line(exc: DBAPIError) -> str:
    return str(exc.orig or exc).splitlines()[0] if str(exc.orig or exc) else type(exc).__name__
