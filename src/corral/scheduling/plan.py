"""When blocked jobs should start: a forward plan, like Slurm's backfill plan (``squeue --start``).

:func:`estimate_starts` lets the running allocations end in order of their expected ends
(``Allocation.expected_end``; unknown ends never come) and, after each release, starts the
blocked jobs that fit then, in scheduling order, as the cycle would: with strict order a
job that does not fit holds back every job behind it; with ``policy.backfill`` the first
job that does not fit gets a reservation (found by :func:`earliest_start` releasing the
planned work one allocation at a time, as the cycle's EASY backfill finds it), kept until
it starts, and the jobs behind it may start only where, or until when, they do not delay
it. A job that fits at time ``t`` gets the estimate ``t`` and is assumed from then on,
ending at ``t + expected_remaining`` (so its resources come back later in the walk), so the
jobs after it see its planned use. With no arrivals and exact estimates it predicts the
cycle's own starts (strict order exactly; with backfill the cycle may re-choose a
reservation's nodes from cycle to cycle, so later backfills can differ slightly).

It is an estimate: it assumes no new arrivals, no preemption, no quota limits, no node
changes, and that every job runs exactly as long as its ``runtime_estimate`` (else its
``time_limit``). Jobs that do not fit within the walk get no estimate.

After a cycle (``AfterCycle``) the walk keeps to what the cycle decided: every job it left
pending was tried at ``now``, so none starts before the first release; the starts the
cycle set (a backfill reservation, the exit of preempted jobs) are kept as lower bounds,
their jobs planned with the others, so the jobs behind them see their reservations and
planned use; and the allocations of jobs being preempted end ``now``. :func:`wait_of`
plans one pending job behind the jobs ahead of it and names the reservation, if any, that
keeps it off resources free now (for the advice, ``scheduling.advice``).

The work is bounded: the first ``limit`` blocked jobs only, at most ``max_steps`` release
steps (allocations ending at the same time are released together; when there are more
distinct end times than steps, consecutive ones are merged and released at the latest of
them, so estimates err late, never early), and reservation look-aheads of at most
``LOOKAHEAD_FACTOR`` times as many releases as there are ends to come (after that, blocked
jobs get no new reservation). A trial placement is skipped when too few ready nodes have
enough free whole GPUs for it (a cheap count kept as the walk goes). The snapshot is left
exactly as it was found (every change is undone).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sortedcontainers import SortedList

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.core.resources import GpuKind
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.evaluation import NodeEvaluator
from corral.scheduling.framework import (
    NodeRequest,
    Profile,
    Reservation,
    Unresolvable,
    Unschedulable,
)
from corral.scheduling.placement import place_gang
from corral.scheduling.snapshot import NodeView, Snapshot

MAX_JOBS = 100  # blocked jobs planned, the first in scheduling order
MAX_STEPS = 256  # release steps of the forward walk
LOOKAHEAD_FACTOR = 4  # reservation look-aheads release at most this many times the ends

Outcome = Allocation | Unschedulable | Unresolvable
Step = tuple[float, Sequence[Allocation]]  # (time, allocations expected to end by then)
Undo = Callable[[], None]


def one_by_one(allocations: Iterable[Allocation], now: float) -> Iterator[Step]:
    """``allocations`` (sorted by expected end, then job id) in release steps of one, as the
    cycle's EASY backfill releases them (the fewest released, so a reservation favours
    nodes free now); a step's time is never before ``now``."""
    return ((max(now, alloc.expected_end), (alloc,)) for alloc in allocations)


def release_steps(allocations: Iterable[Allocation], now: float, batch: int = 1) -> Iterator[Step]:
    """``allocations`` (sorted by expected end) in release steps of at least ``batch``
    allocations, allocations with the same end always in one step; a step's time is the
    latest end in it, and never before ``now``."""
    group: list[Allocation] = []
    for alloc in allocations:
        if len(group) >= batch and alloc.expected_end != group[-1].expected_end:
            yield max(now, group[-1].expected_end), group
            group = []
        group.append(alloc)
    if group:
        yield max(now, group[-1].expected_end), group


def earliest_start(
    place: Callable[[], Outcome],
    steps: Iterable[Step],
    release: Callable[[Allocation], Undo],
    may_fit: Callable[[], bool] | None = None,
) -> tuple[float, Allocation] | None:
    """The first step after whose releases ``place`` succeeds: ``(time, placement)``.

    Releases each step's allocations in turn (with ``release``, which returns the undo)
    and tries ``place`` after each step (unless ``may_fit`` says it cannot fit yet). None
    when it never fits, or at once when ``place`` answers Unresolvable. Everything released
    is restored before returning; nothing is assumed.
    """
    undo: list[Undo] = []
    try:
        for at, allocations in steps:
            undo += [release(alloc) for alloc in allocations]
            if may_fit is not None and not may_fit():
                continue
            trial = place()
            if isinstance(trial, Allocation):
                return at, trial
            if isinstance(trial, Unresolvable):
                return None
        return None
    finally:
        for step in reversed(undo):
            step()


@dataclass(frozen=True)
class AfterCycle:
    """What a cycle decided about the jobs it left pending, for :func:`estimate_starts`:
    it tried them all at ``now``; ``starts`` it set itself (reservations, preempted jobs'
    exit), by job id; ``freeing``: jobs being preempted (their allocations end now)."""

    starts: Mapping[int, float] = field(default_factory=dict)
    freeing: Collection[int] = frozenset()


def estimate_starts(
    snapshot: Snapshot,
    allocations: Sequence[Allocation],
    blocked: Sequence[Job],
    profile: Profile,
    config: SchedulerConfig,
    now: float,
    limit: int = MAX_JOBS,
    max_steps: int = MAX_STEPS,
    evaluator: NodeEvaluator | None = None,
    after: AfterCycle | None = None,
) -> dict[int, float]:
    """Estimated start times (``>= now``) of ``blocked`` jobs, by job id.

    ``snapshot`` holds ``allocations`` (everything holding resources, with expected ends,
    including this cycle's placements); ``blocked`` are the jobs left pending, in the
    order the cycle tried them. Jobs left out of the result get no estimate: they never
    fit within the walk, wait behind work without an expected end, or are past ``limit``.
    ``evaluator``: the cycle's filter and score index over ``snapshot`` (default: a new
    one). ``after``: called after a cycle, ``blocked`` includes the jobs it gave a start
    (see :class:`AfterCycle`); no estimate is earlier than the cycle's, nor than the first
    release. Pure; ``snapshot`` is restored before returning.
    """
    jobs = list(blocked[: max(0, limit)])
    if not jobs:
        return {}
    walk = _Walk(snapshot, profile, evaluator or NodeEvaluator(profile), now, max(1, max_steps))
    try:
        starts = walk.run(jobs, allocations, config, after)
    finally:
        walk.restore()
    if after is not None:
        for job in jobs:
            decided = after.starts.get(job.id)
            if decided is not None:
                starts[job.id] = max(decided, starts.get(job.id, decided))
    return starts


@dataclass(frozen=True)
class Wait:
    """What the forward plan says of one pending job (:func:`wait_of`)."""

    start: float | None  # its estimated start (None: not within the walk)
    reservation: Reservation | None  # of a job ahead, keeping it off resources free now


def wait_of(
    job: Job,
    ahead: Sequence[Job],
    snapshot: Snapshot,
    allocations: Sequence[Allocation],
    profile: Profile,
    config: SchedulerConfig,
    now: float,
) -> Wait:
    """``job``'s estimated start behind ``ahead`` (the jobs before it in the scheduling
    order that wait for resources; the first ``MAX_JOBS - 1`` are planned), and, with
    backfill, the reservation the plan gives the first of them that cannot start now when
    ``job`` may not use its nodes (it would still run when the reservation starts). Pure;
    ``snapshot`` (holding ``allocations``) is restored before returning."""
    jobs = [*ahead[: MAX_JOBS - 1], job]
    walk = _Walk(snapshot, profile, NodeEvaluator(profile), now, MAX_STEPS)
    try:
        starts = walk.run(jobs, allocations, config)
    finally:
        walk.restore()
    start, first = starts.get(job.id), walk.first_reservation
    if first is None or start == now or not first.applies(job, now + job.expected_remaining):
        return Wait(start, None)
    return Wait(start, Reservation(first.job_id, first.nodes, first.start, first.hold))


@dataclass(frozen=True)
class _Reservation:
    job_id: int
    nodes: frozenset[str]
    start: float
    hold: Allocation | None = None  # what it will take on its nodes (None: the nodes)

    def applies(self, job: Job, ends: float) -> bool:
        """Whether ``job`` must leave it (it would still run when the reservation starts)."""
        return job.id != self.job_id and (ends > self.start or math.isinf(ends))


_NEVER = _Reservation(-1, frozenset(), math.inf)  # the look-ahead found no fit at all


@dataclass
class _Waiting:
    job: Job
    request: NodeRequest
    shape: int  # jobs of one shape (request, nodes, TPU slice) fit or not alike
    tried: bool = False  # tried once for real (so a job that can never run is dropped)


class _Pool:
    """Ready nodes that match a node selector, counted by free whole GPUs of a model: a
    job needing ``g`` of them on each of ``n`` nodes cannot fit while fewer than ``n``
    nodes have ``g`` (a necessary condition, cheap to keep as the walk goes)."""

    def __init__(self, views: Iterable[NodeView], model: str | None, width: int) -> None:
        self.model = model
        self.by_free = [0] * (width + 1)  # nodes by their number of free whole GPUs
        self.free_on: dict[str, int] = {}
        for view in views:
            free = self.free_on[view.name] = self._free(view)
            self.by_free[free] += 1

    def _free(self, view: NodeView) -> int:
        if self.model is None and not any(view.mig_used):
            return view.used_milli.count(0)  # free_whole_count(), faster without MIG
        return view.free_whole_count(self.model)

    def recount(self, view: NodeView) -> None:
        old = self.free_on.get(view.name)
        if old is not None and old != (new := self._free(view)):
            self.by_free[old] -= 1
            self.by_free[new] += 1
            self.free_on[view.name] = new

    def has(self, gpus: int, nodes: int) -> bool:
        return gpus < len(self.by_free) and sum(self.by_free[gpus:]) >= nodes


class _Walk:
    """The forward walk over one snapshot: releases and assumptions with their undos, the
    expected ends still to come, and free whole GPUs counted per node pool."""

    def __init__(
        self,
        snapshot: Snapshot,
        profile: Profile,
        evaluator: NodeEvaluator,
        now: float,
        max_steps: int,
    ) -> None:
        self.snapshot = snapshot
        self.profile = profile
        self.evaluator = evaluator
        self.now = now
        self.max_steps = max_steps
        self.lookahead_left = 0  # releases left for reservation look-aheads (set in run)
        self.undo: list[Undo] = []
        self.ends: SortedList = SortedList()  # (expected end, job id, seq, allocation)
        self.seq = itertools.count()
        self.batch = 1
        self.ready = [v for v in snapshot.views() if v.node.state.schedulable]
        self.width = max((len(v.node.devices) for v in self.ready), default=0)
        self.pools: dict[tuple, _Pool] = {}  # by (node selector, GPU model)
        self.dirty: set[NodeView] = set()  # nodes changed since the pools counted them
        self.views_of: dict[int, list[NodeView]] = {}  # an allocation's nodes, by job id
        self.first_reservation: _Reservation | None = None  # held after the first step

    # -- changes, counted -----------------------------------------------------------

    def _change(self, apply: Callable[[Allocation], Undo], alloc: Allocation) -> Undo:
        """``apply`` (the snapshot's assume or release), its nodes marked for a recount
        (done when the counts are next read)."""
        views = self.views_of.get(alloc.job_id)
        if views is None:
            nodes = self.snapshot.nodes
            views = self.views_of[alloc.job_id] = [nodes[n] for n in alloc.nodes if n in nodes]
        inner = apply(alloc)
        self.dirty.update(views)

        def undo() -> None:
            inner()
            self.dirty.update(views)

        return undo

    def release(self, alloc: Allocation) -> Undo:
        return self._change(self.snapshot.release, alloc)

    def assume(self, alloc: Allocation) -> None:
        self.undo.append(self._change(self.snapshot.assume, alloc))
        if not math.isinf(alloc.expected_end):
            self.ends.add((alloc.expected_end, alloc.job_id, next(self.seq), alloc))

    def restore(self) -> None:
        for step in reversed(self.undo):
            step()
        self.undo.clear()

    def may_fit(self, job: Job, request: NodeRequest) -> bool:
        """False when too few ready nodes that match its selector have the free whole GPUs
        (of its model) one node of it needs."""
        if request.gpus.kind is not GpuKind.WHOLE:
            return True
        if self.dirty:
            for pool in self.pools.values():
                for view in self.dirty:
                    pool.recount(view)
            self.dirty.clear()
        key = (request.selector, request.model)
        pool = self.pools.get(key)
        if pool is None:
            members = (
                v for v in self.ready if all(v.labels.get(k) == x for k, x in request.selector)
            )
            pool = self.pools[key] = _Pool(members, request.model, self.width)
        return pool.has(request.gpus.count, job.spec.nodes)

    # -- the walk -------------------------------------------------------------------

    def run(
        self,
        jobs: list[Job],
        allocations: Sequence[Allocation],
        config: SchedulerConfig,
        after: AfterCycle | None = None,
    ) -> dict[int, float]:
        freeing = after.freeing if after is not None else ()
        for alloc in allocations:
            if alloc.job_id in freeing:  # being preempted: it ends now
                alloc = replace(alloc, expected_end=self.now)
            if not math.isinf(alloc.expected_end):
                self.ends.add((alloc.expected_end, alloc.job_id, next(self.seq), alloc))
        self.batch = max(1, math.ceil(len(self.ends) / self.max_steps))
        self.lookahead_left = LOOKAHEAD_FACTOR * max(len(self.ends), self.max_steps)
        waiting, shapes = [], {}
        for job in jobs:
            request = NodeRequest.of(job.spec, config.queue_placement(job.queue))
            shape = shapes.setdefault((request, job.spec.shape_key), len(shapes))
            waiting.append(_Waiting(job, request, shape))
        backfill = config.policy.backfill
        starts: dict[int, float] = {}
        reservation: _Reservation | None = None
        at = self.now
        for step in range(self.max_steps + 1):
            if step:
                released = self._release_next()
                if released is None:
                    break
                at = released
            elif after is not None:
                continue  # the cycle tried them all at now: none starts before a release
            waiting, reservation = self._start_fitting(at, waiting, reservation, backfill, starts)
            if not step:
                self.first_reservation = reservation
            if not waiting:
                break
        return starts

    def _release_next(self) -> float | None:
        """Release the next step's allocations for good; its time, or None if none is left."""
        step = next(self._steps(), None)
        if step is None:
            return None
        at, allocations = step
        del self.ends[: len(allocations)]
        self.undo += [self.release(alloc) for alloc in allocations]
        return at

    def _ending(self) -> Iterator[Allocation]:
        """The allocations still to end, by expected end (then job id)."""
        return (alloc for *_, alloc in self.ends)

    def _steps(self) -> Iterator[Step]:
        return release_steps(self._ending(), self.now, self.batch)

    def _start_fitting(
        self,
        at: float,
        waiting: list[_Waiting],
        reservation: _Reservation | None,
        backfill: bool,
        starts: dict[int, float],
    ) -> tuple[list[_Waiting], _Reservation | None]:
        """Start, at ``at``, the waiting jobs that fit then; the ones still waiting."""
        still: list[_Waiting] = []
        failed: set[tuple[int, bool]] = set()  # shapes that did not fit at this step
        for item in waiting:
            if still and not backfill:
                still.append(item)  # strict order: behind a job that waits
                continue
            job, request = item.job, item.request
            applies = reservation is not None and reservation.applies(
                job, at + job.expected_remaining
            )
            held: dict[str, int] = {}
            holds: tuple[Allocation, ...] = ()
            if applies and reservation is not None:
                if reservation.hold is not None:
                    holds = (reservation.hold,)
                else:
                    held = dict.fromkeys(reservation.nodes, reservation.job_id)
            shape = (item.shape, applies)
            outcome: Outcome | None = None
            early = (
                reservation is not None and reservation.job_id == job.id and at < reservation.start
            )
            if not item.tried or (not early and shape not in failed and self.may_fit(job, request)):
                item.tried = True
                outcome = place_gang(
                    job, request, self.snapshot, self.profile, self.evaluator, held, at, holds=holds
                )
            if isinstance(outcome, Allocation):
                starts[job.id] = at
                self.assume(outcome)
                if reservation is not None and reservation.job_id == job.id:
                    reservation = None
                    failed.clear()
                continue
            if isinstance(outcome, Unresolvable):
                continue  # never fits: no estimate
            failed.add(shape)
            if backfill and reservation is None:
                reservation = self._reserve(item, at)
                failed.clear()
                if reservation is _NEVER:
                    reservation = None
                    continue  # does not fit even once all running work with an end is gone
            still.append(item)
        return still, reservation

    def _reserve(self, item: _Waiting, at: float) -> _Reservation | None:
        """When and where ``item`` could start as the planned work ends (EASY backfill's
        reservation); None when the look-ahead budget ran out, ``_NEVER`` if never."""
        if self.lookahead_left <= 0:
            return None
        exhausted = True

        def budgeted() -> Iterator[Step]:
            nonlocal exhausted
            for step in one_by_one(self._ending(), self.now):
                if self.lookahead_left <= 0:
                    exhausted = False
                    return
                self.lookahead_left -= 1
                yield step

        job, request = item.job, item.request
        found = earliest_start(
            lambda: place_gang(job, request, self.snapshot, self.profile, self.evaluator, None, at),
            budgeted(),
            self.release,
            lambda: self.may_fit(job, request),
        )
        if found is None:
            return _NEVER if exhausted else None
        return _Reservation(job.id, frozenset(found[1].nodes), found[0], found[1])
