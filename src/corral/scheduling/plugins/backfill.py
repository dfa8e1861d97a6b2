"""EASY backfill (as in Slurm's backfill scheduler with one reservation).

The first job in priority order that cannot start gets a reservation: the earliest time
enough resources free up for it, found by letting the running jobs end in order of their
expected ends (start + ``runtime_estimate``, else ``time_limit``) until a trial placement
succeeds, and the nodes that placement used. Jobs behind it may then start now, but a job
expected to run past the reserved start may not use the reserved nodes, so backfilling
never delays the first blocked job. Jobs without estimates are expected to run forever:
they can backfill only outside the reservation.
"""

from __future__ import annotations

import math

from corral.core.job import Job
from corral.core.units import format_duration
from corral.scheduling.framework import (
    CycleContext,
    NodeRequest,
    PostFilterResult,
    Reservation,
)
from corral.scheduling.plan import earliest_start, one_by_one


def reserve(job: Job, request: NodeRequest, ctx: CycleContext) -> Reservation | None:
    """When and where ``job`` could start as running work ends; None if never."""
    running = sorted(ctx.allocations, key=lambda a: (a.expected_end, a.job_id))
    steps = one_by_one(running, ctx.now)
    found = earliest_start(lambda: ctx.place(job, request), steps, ctx.snapshot.release)
    return None if found is None else Reservation(job.id, frozenset(found[1].nodes), found[0])


class EasyBackfill:
    name = "easy-backfill"

    def post_filter(self, job: Job, request: NodeRequest, ctx: CycleContext) -> PostFilterResult:
        if ctx.reservations:  # EASY: one reservation, for the first blocked job
            return PostFilterResult(allow_others=True)
        found = reserve(job, request, ctx)
        if found is None:
            return PostFilterResult(allow_others=True)
        nodes = ", ".join(sorted(found.nodes))
        when = (
            "when running jobs without estimates end"
            if math.isinf(found.start)
            else f"expected in {format_duration(found.start - ctx.now)}"
        )
        return PostFilterResult(
            allow_others=True,
            reservation=found,
            reason=f"next to start: {nodes} reserved for it, {when}",
        )
