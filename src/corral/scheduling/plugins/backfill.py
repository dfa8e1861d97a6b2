"""EASY backfill (as in Slurm's backfill scheduler with one reservation).

The first job in priority order that cannot start gets a reservation: the earliest time
enough resources free up for it, found by letting the running jobs end in order of their
expected ends (start + ``runtime_estimate``, else ``time_limit``) until a trial placement
succeeds, and what that placement takes (``Reservation.hold``: its devices, MIG instances,
CPUs and memory on its nodes). Jobs behind it may then start now, but a job expected to
run past the reserved start must leave what is held (it may use the rest of a reserved
node: another MIG profile, the other GPUs), so backfilling never delays the first blocked
job. Jobs without estimates are expected to run forever: they backfill only around what
is held.

The search is kept cheap without changing its answer: a trial placement is skipped while
too few ready nodes have the free whole GPUs the job needs (``snapshot.FreeWholeGpus``),
and the answer is kept in the caller's memo (``SchedulingMemo.reservation``) and given
again while the snapshot stays in the same state, for the same job, request and running
work (the next cycle, when only a job arrived, say). A caller that wants decisions only
(``CycleContext.defer``: the simulator) gets the reservation deferred: the cycle searches
for it only once a job behind could take resources (or a preemption search needs to
know the reserved nodes), which in a busy cluster is seldom, and decides alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.core.resources import GpuKind
from corral.core.units import format_duration
from corral.scheduling.framework import (
    CycleContext,
    NodeRequest,
    PostFilterResult,
    Reservation,
)
from corral.scheduling.plan import Step, earliest_start, one_by_one

_JOB_ID, _EXPECTED_END = attrgetter("job_id"), attrgetter("expected_end")

_PASS = PostFilterResult(allow_others=True)  # jobs behind it may start (nothing reserved)


@dataclass(frozen=True)
class KeptReservation:
    """A reservation search and what its answer depends on (kept in the memo): the
    snapshot's state (``Snapshot.state``; the search puts back what it tried), the job's
    shape (its request, gang size and TPU slice: EASY searches only while no node is
    reserved, so nothing else of the job matters; under the ``jct`` order the first
    blocked job changes often, its shape much less), and the running work in order (the
    releases it tries)."""

    state: int
    job: Job
    request: NodeRequest
    allocations: tuple[Allocation, ...]  # ctx.allocations: what it releases, in this order
    # (expected end it starts after, nodes, the planned placement: of a job of its shape)
    found: tuple[float, frozenset[str], Allocation] | None

    def answers(self, job: Job, request: NodeRequest, ctx: CycleContext) -> bool:
        kept = self.job
        return (
            self.state == ctx.snapshot.state
            and (kept is job or kept.spec.shape_key == job.spec.shape_key)
            and (self.request is request or self.request == request)
            # the same allocations (the same objects, usually: fast), else the same ends
            and (
                self.allocations == ctx.allocations
                or _ends(self.allocations) == _ends(ctx.allocations)
            )
        )


def reserve(job: Job, request: NodeRequest, ctx: CycleContext) -> Reservation | None:
    """When and where ``job`` could start as running work ends; None if never."""
    memo = ctx.memo
    kept = memo.reservation if memo is not None else None
    if kept is None or not kept.answers(job, request, ctx):
        found = _search(job, request, ctx)
        kept = KeptReservation(ctx.snapshot.state, job, request, ctx.allocations, found)
        if memo is not None:
            memo.reservation = kept
    if kept.found is None:
        return None
    end, nodes, hold = kept.found
    if hold.job_id != job.id:  # found for another job of its shape
        hold = replace(hold, job_id=job.id)
    return Reservation(job.id, nodes, max(ctx.now, end), hold)


def _search(
    job: Job, request: NodeRequest, ctx: CycleContext
) -> tuple[float, frozenset[str], Allocation] | None:
    # by expected end, then job id (sorted by the second key, then stably by the first:
    # much faster than comparing pairs)
    running = sorted(sorted(ctx.allocations, key=_JOB_ID), key=_EXPECTED_END)
    last_end = [math.nan]  # the expected end of the last allocation released

    def steps() -> Iterator[Step]:
        for step in one_by_one(running, ctx.now):
            last_end[0] = step[1][0].expected_end
            yield step

    found = earliest_start(
        lambda: ctx.place(job, request), steps(), ctx.snapshot.release, _may_fit(job, request, ctx)
    )
    return None if found is None else (last_end[0], frozenset(found[1].nodes), found[1])


def _may_fit(job: Job, request: NodeRequest, ctx: CycleContext) -> Callable[[], bool] | None:
    """False while too few ready nodes have the free whole GPUs one node of ``job`` needs
    (None when there is no such count: not a whole-GPU request, or no memo to keep it)."""
    if request.gpus.kind is not GpuKind.WHOLE or ctx.memo is None:
        return None
    pool = ctx.memo.free_gpus(request.selector, request.model, ctx.snapshot)
    gpus, nodes, snapshot = request.gpus.count, job.spec.nodes, ctx.snapshot
    return lambda: pool.has(snapshot, gpus, nodes)


def _ends(allocations: Sequence[Allocation]) -> list[tuple[float, int]]:
    return [(a.expected_end, a.job_id) for a in allocations]


class EasyBackfill:
    name = "easy-backfill"

    def post_filter(self, job: Job, request: NodeRequest, ctx: CycleContext) -> PostFilterResult:
        reservations = ctx.reservations
        if not reservations.deferred and reservations:  # EASY: one, for the first blocked job
            return _PASS
        if ctx.defer:  # searched only once a decision needs it (the cycle resolves it)
            if ctx.memo is not None:
                # one of its shape deferred in this very state answers first and alike: a
                # reservation (so this one's would be refused), or none (nor this one).
                # (Keyed by the request's identity: the cycle's are interned, one object
                # per value; the entry keeps the object, so its id is not reused.)
                deferred, state = ctx.memo.cycle.deferred_shapes, ctx.snapshot.state
                shape = (id(request), job.spec.shape_key)
                found = deferred.get(shape)
                if found is not None and found[0] == state and found[1] is request:
                    return _PASS
                deferred[shape] = (state, request)
            return self._deferred(job, request, ctx)
        return self._reserve(job, request, ctx)

    def _deferred(self, job: Job, request: NodeRequest, ctx: CycleContext) -> PostFilterResult:
        later = lambda: self._reserve(job, request, ctx)  # noqa: E731
        return PostFilterResult(allow_others=True, deferred=later)

    def _reserve(self, job: Job, request: NodeRequest, ctx: CycleContext) -> PostFilterResult:
        if ctx.reservations:
            return _PASS
        found = reserve(job, request, ctx)
        if found is None:
            return _PASS
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
