"""One scheduling cycle: ``state + pending + config + now -> Decisions``.

The recipe (:func:`schedule`): take the snapshot (the caller's, kept between cycles, or
one built from the nodes and allocations) and the caller's memo, order the pending jobs
(the profile's queue sort, or fair share between queues), then for each job in order:

1. **admit**: its queue's quota (a refusal blocks nobody);
2. **place**: filter and score the nodes, choose the gang's nodes and devices, all or
   nothing (``placement.place_gang``), off the nodes reserved for jobs ahead of it; the
   quota checks the exact amounts once the GPU models are known;
3. **wait for freeing**: a job that fits once jobs being preempted exit claims them, and
   the nodes it will start on are held for it;
4. **post-filter**: preemption, then backfill (a reservation for the first blocked job);
5. **record**: the placement (assumed in the snapshot), or the reason it waits. A job
   waiting for busy resources blocks the jobs behind it (strict priority order) unless a
   post-filter lets others pass; one that the ready nodes could not host even if they
   were empty (Unresolvable) blocks nobody.

Every job left pending gets a human reason and, when asked, an estimated start from the
forward plan (``scheduling.plan``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.core.node import Node
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.fairshare import Capacity, UsageLedger, fair_order, queue_shares
from corral.scheduling.framework import (
    CycleContext,
    NodeRequest,
    PostFilterResult,
    Profile,
    Reservation,
    Reservations,
    Unresolvable,
    Unschedulable,
)
from corral.scheduling.memo import SchedulingMemo
from corral.scheduling.placement import place_gang
from corral.scheduling.plan import AfterCycle, estimate_starts
from corral.scheduling.quota import QuotaBook, has_quotas
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot

Outcome = Allocation | Unschedulable | Unresolvable


@dataclass(frozen=True)
class ClusterState:
    """What the scheduler is given: nodes, and every allocation that holds resources.

    ``snapshot``, when given, is a caller-maintained working copy of the same state (kept
    in step between cycles with ``assume``/``release``/``set_node``) used instead of
    building one from ``nodes`` and ``allocations``; the cycle assumes its placements in
    it, so a caller that applies every placement can keep using it. ``memo``, when given,
    is the caller's :class:`SchedulingMemo`, kept between cycles (with the snapshot, when
    it keeps one): caches only, so a fresh one decides alike.
    """

    nodes: tuple[Node, ...]
    allocations: tuple[Allocation, ...] = ()
    snapshot: Snapshot | None = field(default=None, compare=False)
    preempting: frozenset[int] = frozenset()  # jobs signalled to stop, still holding resources
    usage: UsageLedger | None = None  # decayed usage per queue, for fair share (None: none)
    memo: SchedulingMemo | None = field(default=None, compare=False)  # None: a fresh one


@dataclass(frozen=True)
class PendingReason:
    reason: str
    position: int  # 1-based place in the scheduling order
    unresolvable: bool = False  # no change in load would let it start
    estimated_start: float | None = None  # from the backfill plan; None: not estimated


@dataclass(frozen=True)
class Decisions:
    placements: tuple[Allocation, ...] = ()
    pending: Mapping[int, PendingReason] = field(default_factory=dict)
    preemptions: tuple[tuple[int, str], ...] = ()  # (job id, reason)


def schedule(
    state: ClusterState,
    pending: Sequence[Job],
    config: SchedulerConfig,
    now: float,
    profile: Profile | None = None,
    estimate: bool = True,
    defer: bool | None = None,
) -> Decisions:
    """Decide which pending jobs start now and where. Pure: no I/O, no clock but ``now``.

    The recipe of the module docstring: order the jobs, run phases 1-5 for each until one
    blocks the rest, then estimate the starts of the jobs left waiting. ``estimate``: fill
    in every waiting job's estimated start from the forward plan (the control plane shows
    them). Without it (the simulator, which runs a cycle per event, wants decisions only)
    a post-filter may defer its result (``PostFilterResult.deferred``): the cycle resolves
    it once a decision could depend on it, so placements and preemptions are the same,
    and a reservation nothing needed is never searched for (its job's reason says so).
    ``defer`` (default: ``not estimate``) says whether post-filters may defer: the control
    plane skips the estimates of most cycles but keeps every cycle's reasons alike.
    """
    profile = profile or build_profile(config)
    cycle = _Cycle(state, config, now, profile, defer=not estimate if defer is None else defer)
    order = _order(pending, state, config, profile, cycle.book, now)
    behind: str | None = None  # the reason of the jobs behind one that blocks them
    for position, job in enumerate(order, start=1):
        if behind is not None:
            cycle.reasons[job.id] = PendingReason(behind, position)
        elif cycle.run(job, position):
            behind = f"waiting behind job {job.id} (ahead in priority order)"
    if estimate:
        _estimate(cycle, order)
    if cycle.deferring is not None:
        cycle.note_unresolved()
    cycle.close()
    return Decisions(tuple(cycle.placements), cycle.reasons, tuple(cycle.preemptions))


class _Cycle:
    """The working state of one cycle: the snapshot and quota book with this cycle's
    placements assumed, reservations, victims, and each pending job's reason."""

    def __init__(
        self,
        state: ClusterState,
        config: SchedulerConfig,
        now: float,
        profile: Profile,
        defer: bool = False,
    ) -> None:
        self.state, self.config, self.now, self.profile = state, config, now, profile
        self.snapshot = state.snapshot or Snapshot.build(state.nodes, state.allocations)
        self.memo = state.memo or SchedulingMemo()
        self.memo.start_cycle(self.snapshot, profile)
        # the filter/score index, and trials that failed (in the snapshot's current state)
        self.trials = self.memo.placement(profile, self.snapshot)
        self.evaluator = self.trials.evaluator
        self.book = (
            QuotaBook.build(config, state.allocations, state.nodes) if has_quotas(config) else None
        )
        self.placements: list[Allocation] = []
        self.reasons: dict[int, PendingReason] = {}
        self.preemptions: list[tuple[int, str]] = []
        self.reservations: list[Reservation] = []
        self.preempting = state.preempting  # and the victims chosen so far this cycle
        # jobs being preempted (signalled, still holding resources), not yet claimed this
        # cycle by a job ahead in the order that will start on what they free
        self.freeing = (
            {a.job_id: a for a in state.allocations if a.job_id in state.preempting}
            if state.preempting
            else {}
        )
        # reserved nodes by the reservations that apply, and by expected run time (see
        # held_for; jobs holding a reservation are not in the latter)
        self.held: dict[tuple, _Held] = {}
        self.held_by_runtime: dict[float, tuple[tuple, _Held]] = {}
        self.owners: set[int] = set()  # jobs holding a reservation
        self.context: CycleContext | None = None  # None: to build again (see _context)
        self.deferring = _Deferring(self) if defer else None

    def run(self, job: Job, position: int) -> bool:
        """Phases 1-5 for ``job``; True if it blocks the jobs behind it."""
        request, shape = self.memo.requests.of(job, self.config.queue_placement(job.queue))
        refusal = self.admit(job)
        if refusal is not None:
            outcome: Outcome = Unschedulable(f"quota: {refusal}")
        else:
            outcome, refusal = self.place_admitted(job, request, shape)
            if isinstance(outcome, Allocation):
                self.record_placement(outcome)
                return False
            if refusal is None and self.wait_for_freeing(job, request, outcome, position):
                return False
        reason, allow_others, estimate, deferred = self.post_filter(job, request, outcome.reason)
        blocks = self.record_pending(
            job, position, outcome, refusal, reason, allow_others, estimate
        )
        if deferred is not None and self.deferring is not None:
            self.deferring.add(job.id, deferred)
        return blocks

    # -- 1. admit --------------------------------------------------------------------

    def admit(self, job: Job) -> str | None:
        """Phase 1: why its queue's quota refuses ``job`` (its demand), or None."""
        book = self.book
        return book.admit(job, book.demand(job.spec)) if book is not None else None

    # -- 2. place --------------------------------------------------------------------

    def place_admitted(
        self, job: Job, request: NodeRequest, shape: int
    ) -> tuple[Outcome, str | None]:
        """Phase 2: a trial placement, and its quota refusal once the GPU models it got
        are known (a refused placement is answered as Unschedulable)."""
        outcome = self.trial(job, request, shape)
        book = self.book
        if not isinstance(outcome, Allocation) or book is None:
            return outcome, None
        refusal = book.admit(job, book.amounts(outcome))  # exact, now the models are known
        return (Unschedulable(f"quota: {refusal}"), refusal) if refusal else (outcome, None)

    def place(self, job: Job, request: NodeRequest) -> Outcome:
        """A trial placement of ``job`` as asked (``CycleContext.place``; nothing assumed)."""
        interned = self.memo.requests.of(job, self.config.queue_placement(job.queue))
        same = interned.request is request or interned.request == request
        return self.trial(job, request, interned.shape if same else None)

    def trial(self, job: Job, request: NodeRequest, shape: int | None) -> Outcome:
        """A trial placement (nothing assumed), off the nodes reserved for other jobs. A
        failure is remembered (in the memo, across cycles) by shape and reserved nodes
        while the snapshot stays in that state; ``shape`` None: not remembered. A job that
        fits while a reservation is deferred has it resolved first, and is tried again off
        its nodes (one that does not fit without it would not fit with it)."""
        outcome = self._trial(job, request, shape)
        deferring = self.deferring
        if deferring is not None and deferring.waiting and isinstance(outcome, Allocation):
            deferring.resolve()
            outcome = self._trial(job, request, shape)
        return outcome

    def _trial(self, job: Job, request: NodeRequest, shape: int | None) -> Outcome:
        held_key, (held, holds) = self.held_for(job)
        key = (shape, held_key)
        if shape is not None:
            seen = self.trials.failure(key, self.snapshot)
            if seen is not None:
                return seen
        outcome = place_gang(
            job, request, self.snapshot, self.profile, self.evaluator, held, self.now, holds=holds
        )
        if shape is not None and not isinstance(outcome, Allocation):
            self.trials.remember(key, self.snapshot, outcome)
        return outcome

    def held_for(self, job: Job) -> tuple[tuple, _Held]:
        """What is reserved for other jobs that ``job`` must leave, and a key naming it
        (the reservations that apply, as values): the nodes it may not use, mapped to the
        job each is held for, and the planned placements (``Reservation.hold``) whose
        devices, CPUs and memory it must leave on nodes it may share. Reservations apply
        to all but their own job and jobs known to end before they start."""
        if not self.reservations:
            return (), _NONE_HELD
        runtime = job.expected_remaining
        owner = job.id in self.owners
        found = None if owner else self.held_by_runtime.get(runtime)
        if found is None:
            ends = self.now + runtime
            applying = tuple(
                (r.job_id, r.nodes, r.hold)
                for r in self.reservations
                if r.job_id != job.id and (ends > r.start or math.isinf(ends))
            )
            held = self.held.get(applying)
            if held is None:
                held = self.held[applying] = (
                    {n: j for j, nodes, hold in applying if hold is None for n in nodes},
                    tuple(hold for *_, hold in applying if hold is not None),
                )
            found = (applying, held)
            if not owner:
                self.held_by_runtime[runtime] = found
        return found

    # -- 3. wait for freeing -----------------------------------------------------------

    def wait_for_freeing(
        self, job: Job, request: NodeRequest, outcome: Outcome, position: int
    ) -> bool:
        """Phase 3: whether ``job`` starts once jobs being preempted (not yet claimed by a
        job ahead of it) exit; if so it claims them, and the nodes it will start on are
        held for it from now (a job behind it taking the free part would make it preempt
        again once these exit)."""
        if not self.freeing:
            return False
        if self.deferring is not None:  # not while the trial below releases what is freeing
            self.deferring.resolve()
        awaited, nodes = _awaited(job, request, self.snapshot, self.freeing, self.place)
        if not awaited:
            return False
        for job_id in awaited:
            del self.freeing[job_id]
        self.reserve(Reservation(job.id, nodes, self.now))
        ids = ", ".join(map(str, awaited))
        why = f"starts when job{'s' if len(awaited) > 1 else ''} {ids} (preempted) exit"
        self.reasons[job.id] = PendingReason(f"{why}; {outcome.reason}", position, False, self.now)
        return True

    # -- 4. post-filter ----------------------------------------------------------------

    def post_filter(
        self, job: Job, request: NodeRequest, reason: str
    ) -> tuple[str, bool, float | None, Callable[[], PostFilterResult] | None]:
        """Phase 4: the post-filters (preemption, then backfill) for a job that cannot
        start: ``(reason, allow_others, estimated start, deferred result)``; only the
        last post-filter's result may stay deferred (the others' is resolved at once)."""
        allow_others, estimate = False, None
        post_filters = self.profile.post_filters
        if not post_filters:
            return reason, allow_others, estimate, None
        context = self._context()
        for plugin in post_filters:
            result = plugin.post_filter(job, request, context)
            if result.deferred is not None:
                if plugin is post_filters[-1] and self.deferring is not None:
                    return reason, allow_others or result.allow_others, estimate, result.deferred
                result = result.deferred()
            reason = f"{result.reason}; {reason}" if result.reason else reason
            allow_others = allow_others or result.allow_others
            if result.preempt:
                why = dict(result.explanations)
                self.preemptions += [
                    (v, why.get(v, f"preempted for job {job.id}")) for v in result.preempt
                ]
                # the victims still hold their resources this cycle, so nothing else can
                # take them; once they exit, this job (earlier in the order) claims them
                self.preempting = self.preempting | set(result.preempt)
                self.context = None
                return reason, allow_others, self.now, None
            if result.reservation is not None:
                self.reserve(result.reservation)
                start = result.reservation.start
                return reason, allow_others, None if math.isinf(start) else start, None
        return reason, allow_others, estimate, None

    def reserve(self, reservation: Reservation) -> None:
        self.reservations.append(reservation)
        self.owners.add(reservation.job_id)
        self.held_by_runtime.clear()
        self.context = None

    def _context(self) -> CycleContext:
        """What the post-filters see: built again after a placement, a reservation or a
        preemption."""
        if self.context is None:
            deferring = self.deferring
            self.context = CycleContext(
                self.snapshot,
                self.state.allocations + tuple(self.placements),
                Reservations(
                    self.reservations,
                    deferring.resolved if deferring is not None and deferring.waiting else None,
                ),
                self.now,
                self.place,
                preempting=self.preempting,
                quota=self.book,
                memo=self.memo,
                defer=deferring is not None,
            )
        return self.context

    def close(self) -> None:
        """Drop what refers back to the cycle (the context's ``place``, deferred results),
        so that it is freed at once rather than by the garbage collector: a simulator runs
        a cycle per event, and cyclic garbage of every cycle makes each collection slower."""
        if self.deferring is not None:
            self.deferring.waiting.clear()
            self.deferring = None
        self.context = None

    def note_unresolved(self) -> None:
        """The reason of the first job whose deferred result nothing needed."""
        job_id = self.deferring.first() if self.deferring is not None else None
        if job_id is not None:
            pend = self.reasons[job_id]
            self.reasons[job_id] = replace(pend, reason=f"{_UNRESOLVED}; {pend.reason}")

    # -- 5. record -----------------------------------------------------------------------

    def record_placement(self, alloc: Allocation) -> None:
        """Phase 5 for a job that starts: assumed in the snapshot and the quota book."""
        self.snapshot.assume(alloc)
        if self.book is not None:
            self.book.assume_allocation(alloc)
        self.placements.append(alloc)
        self.context = None

    def record_pending(
        self,
        job: Job,
        position: int,
        outcome: Unschedulable | Unresolvable,
        refusal: str | None,
        reason: str,
        allow_others: bool,
        estimate: float | None,
    ) -> bool:
        """Phase 5 for a job that waits: its reason; True if it blocks the jobs behind it
        (it waits for busy resources, and no post-filter lets others pass)."""
        unresolvable = isinstance(outcome, Unresolvable)
        self.reasons[job.id] = PendingReason(reason, position, unresolvable, estimate)
        return not (allow_others or refusal is not None or unresolvable)


_Held = tuple[Mapping[str, int], tuple[Allocation, ...]]  # (whole nodes held, holds)
_NONE_HELD: _Held = ({}, ())
_UNRESOLVED = "first to wait: backfill reserves for it once a job behind could take resources"


class _Deferring:
    """Post-filter results the cycle deferred (``PostFilterResult.deferred``: EASY
    backfill's reservation), in order, resolved together once a decision could depend on
    them: a job behind fits, a post-filter reads the reservations, a preempted job's exit
    is awaited. Nothing is placed while one waits, so the snapshot is as it was when each
    was deferred, and resolving gives what the cycle would have decided at once."""

    def __init__(self, cycle: _Cycle) -> None:
        self.cycle = cycle
        self.waiting: list[tuple[int, Callable[[], PostFilterResult], int]] = []
        self.resolving = False

    def add(self, job_id: int, deferred: Callable[[], PostFilterResult]) -> None:
        if not self.waiting:
            self.cycle.context = None  # its reservations are now deferred
        self.waiting.append((job_id, deferred, self.cycle.snapshot.state))

    def first(self) -> int | None:
        """The job whose deferred result comes first (None: nothing waits)."""
        return self.waiting[0][0] if self.waiting else None

    def resolved(self) -> tuple[Reservation, ...]:
        """Resolve what waits; the cycle's reservations then."""
        self.resolve()
        return tuple(self.cycle.reservations)

    def resolve(self) -> None:
        if self.resolving or not self.waiting:
            return
        cycle, waiting = self.cycle, self.waiting
        self.resolving, self.waiting = True, []
        try:
            for job_id, deferred, state in waiting:
                if cycle.snapshot.state != state:
                    raise RuntimeError("deferred post-filter result resolved on a changed snapshot")
                result = deferred()
                if result.preempt:
                    raise ValueError("a deferred post-filter result may reserve, not preempt")
                if result.reservation is None:
                    continue
                cycle.reserve(result.reservation)
                start = result.reservation.start
                pend = cycle.reasons[job_id]
                why = f"{result.reason}; {pend.reason}" if result.reason else pend.reason
                cycle.reasons[job_id] = replace(
                    pend, reason=why, estimated_start=None if math.isinf(start) else start
                )
        finally:
            self.resolving = False
            cycle.context = None


def _estimate(cycle: _Cycle, order: Sequence[Job]) -> None:
    """Fill in estimated starts from the forward plan (``scheduling.plan``) for the jobs
    waiting for resources (not those held by quota): the plan walks them all, so that the
    jobs behind a reservation respect it; the starts the cycle set itself (reservations,
    preempted jobs' exits) are kept as lower bounds (``AfterCycle``)."""
    reasons = cycle.reasons
    blocked = [
        job
        for job in order
        if (pend := reasons.get(job.id)) is not None
        and not pend.unresolvable
        and not pend.reason.startswith("quota:")
    ]
    if not blocked:
        return
    decided = {j.id: s for j in blocked if (s := reasons[j.id].estimated_start) is not None}
    held_now = cycle.state.allocations + tuple(cycle.placements)
    starts = estimate_starts(
        cycle.snapshot,
        held_now,
        blocked,
        cycle.profile,
        cycle.config,
        cycle.now,
        evaluator=cycle.evaluator,
        after=AfterCycle(decided, cycle.preempting),
    )
    for job_id, start in starts.items():
        reasons[job_id] = replace(reasons[job_id], estimated_start=start)


def _awaited(
    job: Job,
    request: NodeRequest,
    snapshot: Snapshot,
    freeing: Mapping[int, Allocation],
    trial: Callable[[Job, NodeRequest], Outcome],
) -> tuple[list[int], frozenset[str]]:
    """The jobs being preempted whose exit lets ``job`` start (those on the nodes a trial
    placement uses once they are gone) and those nodes, or ([], {}) if their exit would
    not be enough."""
    undo = [snapshot.release(alloc) for alloc in freeing.values()]
    try:
        outcome = trial(job, request)
    finally:
        for step in reversed(undo):
            step()
    if not isinstance(outcome, Allocation):
        return [], frozenset()
    used = frozenset(outcome.nodes)
    return sorted(job_id for job_id, alloc in freeing.items() if used & set(alloc.nodes)), used


def _borrows(book: QuotaBook, job: Job) -> bool:
    """Whether ``job`` would need its cohort's quota (its queue's own would not do)."""
    if not book.nominal(job.queue) or book.cohort(job.queue) is None:
        return False  # unlimited, or nothing to borrow from
    return not book.within_nominal(job.queue, book.demand(job.spec))


def _order(
    pending: Sequence[Job],
    state: ClusterState,
    config: SchedulerConfig,
    profile: Profile,
    book: QuotaBook | None,
    now: float,
) -> list[Job]:
    """The order jobs are tried in: the profile's queue sort, or fair share between queues
    (priority, then each queue's weighted dominant share, ``queue_shares``, then the
    order within a queue: submission for ``fair-share``, the ``jct`` order's key at
    ``now`` for ``jct``); with quotas, within a priority the jobs that would borrow go
    after the rest."""
    key_at = getattr(profile.queue_sort, "key_at", None)
    within = key_at(now) if key_at is not None else None  # the jct order: its key at now
    shared = config.policy.order in ("fair-share", "jct")
    if not shared or len({job.queue for job in pending}) < 2:  # one queue: nothing to share
        if within is not None:
            order = sorted(pending, key=lambda job: (-job.priority, within(job)))
        else:
            order = sorted(pending, key=profile.queue_sort.sort_key)
    else:
        capacity = Capacity.of(state.nodes)
        shares = queue_shares(state.usage, state.allocations, capacity)
        weights = {q.name: q.weight for q in config.queues}
        order = fair_order(pending, shares, weights, capacity, within)
    if book is not None:
        order.sort(key=lambda j: (-j.priority, _borrows(book, j)))
    return order
