"""The state the preemption plugin's searches share within one cycle
(``plugins/preemption.py``): the victim index per node, the memoized per-node victim
sets, the searches that found nothing, and the candidates of preemption for completion
time (``plugins/jct.py``). Kept in ``SchedulingMemo.cycle`` while ``now`` and the running
allocations stay the same. Pure."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from operator import attrgetter

from corral.core.allocation import Allocation
from corral.scheduling.config import JctPolicy
from corral.scheduling.framework import CycleContext
from corral.scheduling.plugins.jct import remaining_size
from corral.scheduling.plugins.victims import Cost, Victim, victim_order, work_lost

_PRIORITY, _PREEMPTIBLE = attrgetter("priority"), attrgetter("preemptible")


@dataclass
class PreemptionState:
    """What one cycle's searches share (see the module docstring): built from the running
    allocations of ``ctx.allocations`` (not those placed this cycle) at ``now``."""

    now: float
    allocations: tuple[Allocation, ...]  # ctx.allocations when built (later ones: placed now)
    floor: float  # the lowest priority of a preemptible one, those placed now included
    # (request, priority, reclaim) -> node -> (its version, its victims or None, their cost)
    plans: dict[tuple, dict[str, tuple[int, tuple[Victim, ...] | None, Cost]]] = field(
        default_factory=dict
    )
    preempting: frozenset[int] = frozenset()  # victims the plans know to be taken
    fruitless: dict[tuple, int] = field(default_factory=dict)  # key -> highest priority
    searches: int = 0
    _lowest: float | None = None
    _by_node: dict[str, list[Victim]] | None = None
    _holders: dict[int, Allocation] = field(default_factory=dict)
    # (queue, priority) -> (the largest expected remaining GPU-time of a running job that
    # passes jct_victim's other tests, the nodes such jobs run on); built on first use
    _jct: dict[tuple[str, int], tuple[float, list[Allocation]]] | None = None

    def jct_candidates(
        self, queue: str, priority: int, policy: JctPolicy
    ) -> tuple[float, set[str]]:
        """What preemption for completion time could take from ``queue`` at ``priority``:
        the largest remaining size among its checkpointed, preemptible jobs that have run
        ``policy.min_run``, and their nodes ((0, {}) if none): a job needing more than
        ``policy.margin`` times less than that largest size finds no victim, unsearched."""
        found = self.jct_sizes(policy).get((queue, priority))
        if found is None:
            return 0.0, set()
        return found[0], {name for alloc in found[1] for name in alloc.nodes}

    def jct_largest(self, queue: str, priority: int, policy: JctPolicy) -> float:
        """``jct_candidates``' largest size alone (asked of every pending job: cheaper)."""
        found = self.jct_sizes(policy).get((queue, priority))
        return 0.0 if found is None else found[0]

    def jct_sizes(self, policy: JctPolicy) -> dict[tuple[str, int], tuple[float, list]]:
        """(queue, priority) -> (the largest remaining size, the allocations) of the
        running jobs preemption for completion time may take; counted once per cycle."""
        if self._jct is None:
            found: dict[tuple[str, int], tuple[float, list]] = {}
            now, min_run = self.now, policy.min_run
            for alloc in self.allocations:
                started = alloc.started_at
                if (
                    started is None
                    or now - started < min_run
                    or alloc.last_checkpoint is None
                    or not alloc.preemptible
                    or not alloc.requeue
                ):
                    continue
                key = (alloc.queue, alloc.priority)
                size = remaining_size(alloc, now)
                kept = found.get(key)
                if kept is None:
                    found[key] = (size, [alloc])
                else:
                    kept[1].append(alloc)
                    if size > kept[0]:
                        found[key] = (size, kept[1])
            self._jct = found
        return self._jct

    @classmethod
    def of(cls, ctx: CycleContext) -> PreemptionState:
        allocs, memo = ctx.allocations, ctx.memo
        kept = memo.preemption_floor if memo is not None else None
        if kept is not None and kept[0] is allocs:
            floor = kept[1]  # the same allocations as a cycle before (when none started)
        else:
            floor = min(map(_PRIORITY, filter(_PREEMPTIBLE, allocs)), default=math.inf)
            if memo is not None:
                memo.preemption_floor = (allocs, floor)
        return cls(ctx.now, allocs, floor)

    def nothing_below(self, priority: int) -> bool:
        """Whether no preemptible allocation placed before this cycle has a priority below
        ``priority`` (asked of every job that cannot start, so the floor, counted at C
        speed, answers first; the exact lowest is counted only when it cannot)."""
        return priority <= self.floor or priority <= self.lowest

    @property
    def lowest(self) -> float:
        """The lowest priority of a preemptible allocation placed before this cycle."""
        if self._lowest is None:
            now = self.now
            self._lowest = min(
                (
                    a.priority
                    for a in self.allocations
                    if a.preemptible and (a.started_at is None or a.started_at < now)
                ),
                default=math.inf,
            )
        return self._lowest

    @property
    def by_node(self) -> dict[str, list[Victim]]:
        """Every victim-able allocation, per node it touches, cheapest first (built on
        first use: a cycle where no job can preempt never needs it)."""
        if self._by_node is None:
            self._build()
            assert self._by_node is not None
        return self._by_node

    def nodes_of(self, job_id: int) -> tuple[str, ...]:
        alloc = self._holders.get(job_id) if self.by_node else None
        return alloc.nodes if alloc is not None else ()

    def _build(self) -> None:
        by_node: dict[str, list[Victim]] = defaultdict(list)
        for alloc in self.allocations:
            if alloc.started_at is not None and alloc.started_at >= self.now:
                continue  # placed in this cycle
            self._holders[alloc.job_id] = alloc
            victim = Victim(alloc, work_lost(alloc, self.now))
            for name in alloc.nodes:
                by_node[name].append(victim)
        for victims in by_node.values():
            victims.sort(key=victim_order)
        self._by_node = dict(by_node)


def cycle_state(ctx: CycleContext) -> PreemptionState:
    """The cycle's shared state, kept in ``ctx.memo.cycle`` (without a memo, per search)."""
    memo = ctx.memo
    kept = memo.cycle.preemption if memo is not None else None
    if kept is not None and kept.now == ctx.now and len(kept.allocations) <= len(ctx.allocations):
        return kept
    fresh = PreemptionState.of(ctx)
    if memo is not None:
        memo.cycle.preemption = fresh
    return fresh
