"""Victims of preemption, node by node: pure helpers of ``plugins/preemption.py``.

Work lost, the cost of a victim set, the cheapest victims that free one node for a
request (on a scratch copy of the node: the snapshot is untouched), and the cheapest
nodes of a domain for a gang counting shared victims once.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from corral.core.allocation import Allocation
from corral.scheduling.framework import Filter, NodeRequest
from corral.scheduling.plugins.filters import (
    NodeSelectorFilter,
    NodeStateFilter,
    ResourceFitFilter,
)
from corral.scheduling.plugins.topology import NvlinkDomainFilter
from corral.scheduling.quota import EPSILON, QuotaBook
from corral.scheduling.snapshot import NodeView

DEFAULT_FILTERS: tuple[Filter, ...] = (
    NodeStateFilter(),
    NodeSelectorFilter(),
    ResourceFitFilter(),
    NvlinkDomainFilter(),
)


def work_lost(alloc: Allocation, now: float) -> float:
    """GPU-seconds lost if ``alloc`` stopped now: its GPUs x the time since its last
    checkpoint, or since its start when it never checkpointed (0 when that is unknown)."""
    since = alloc.last_checkpoint if alloc.last_checkpoint is not None else alloc.started_at
    if since is None:
        return 0.0
    return alloc.gpus * max(0.0, now - since)


@dataclass(frozen=True)
class Victim:
    """A running allocation that may be preempted, with the work it would lose."""

    alloc: Allocation
    loss: float  # GPU-seconds, see work_lost
    reclaim: bool = False  # eligible only as reclaim of borrowed quota
    for_jct: bool = False  # eligible only as preemption for job completion time (jct.py)
    job_id: int = field(init=False)
    priority: int = field(init=False)

    def __post_init__(self) -> None:  # plain fields: read in the search's inner loops
        object.__setattr__(self, "job_id", self.alloc.job_id)
        object.__setattr__(self, "priority", self.alloc.priority)


def victim_order(victim: Victim) -> tuple:
    """Who goes first: lowest priority, then least work lost, then lowest id."""
    return (victim.priority, victim.loss, victim.job_id)


def prune_order(victim: Victim) -> tuple:
    """Who is tried back first when minimizing: largest loss, then highest priority."""
    return (-victim.loss, -victim.priority, -victim.job_id)


Cost = tuple[float, float, int]


def cost_of(victims: Sequence[Victim]) -> Cost:
    """(highest victim priority, work lost, number of victims): lower is cheaper."""
    if not victims:
        return (-math.inf, 0.0, 0)
    return (max(v.priority for v in victims), sum(v.loss for v in victims), len(victims))


@dataclass(frozen=True)
class Plan:
    """Victims to preempt, and where the job would then run; for the victims' events, how
    it was chosen: among ``candidates`` victim sets ranked by cost, after ``passed`` cheaper
    ones that did not let the job start, ahead of one costing ``runner_up`` (None: none)."""

    victims: tuple[Victim, ...]
    nodes: tuple[str, ...]
    candidates: int = 1
    passed: int = 0
    runner_up: Cost | None = None

    @property
    def cost(self) -> Cost:
        return cost_of(self.victims)

    @property
    def job_ids(self) -> tuple[int, ...]:
        return tuple(sorted(v.job_id for v in self.victims))


def scratch_copy(view: NodeView) -> NodeView:
    """A private copy of one node's free capacity, to release victims on."""
    copy = NodeView(view.node)
    copy.free_cpus = view.free_cpus
    copy.free_memory = view.free_memory
    copy.used_milli = list(view.used_milli)
    copy.shared = list(view.shared)
    copy.mig_used = [list(m) for m in view.mig_used]
    copy.labels = view.labels
    return copy


def fits(filters: Sequence[Filter], request: NodeRequest, view: NodeView) -> bool:
    return all(f.filter(request, view) is None for f in filters)


class Borrowing:
    """What reclaim victims chosen so far give back, to stop once a queue stops borrowing."""

    def __init__(self, book: QuotaBook | None) -> None:
        self.book = book
        self.given: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def still_borrows(self, victim: Victim) -> bool:
        if self.book is None:
            return False
        given = self.given[victim.alloc.queue]
        return any(
            amount - given[key] > EPSILON
            for key, amount in self.book.borrowing(victim.alloc.queue).items()
        )

    def take(self, victim: Victim) -> None:
        if self.book is not None:
            given = self.given[victim.alloc.queue]
            for key, amount in self.book.amounts(victim.alloc).items():
                given[key] += amount


def node_victims(
    view: NodeView,
    request: NodeRequest,
    victims: Sequence[Victim],
    filters: Sequence[Filter] = DEFAULT_FILTERS,
    book: QuotaBook | None = None,
    released: Sequence[Victim] = (),
) -> tuple[Victim, ...] | None:
    """The cheapest victims (of ``victims``, in order) whose release lets ``view`` host one
    node's share of the request, once ``released`` are gone: () if it fits without more,
    None if even all of them would not do. Works on a copy: the snapshot is untouched."""
    scratch = scratch_copy(view) if released else view
    for victim in released:
        scratch._apply(victim.alloc, -1)  # the snapshot's own release, on the copy
    if fits(filters, request, scratch):
        return ()
    gone = {v.job_id for v in released}
    victims = [v for v in victims if v.job_id not in gone]
    if not victims:
        return None
    if scratch is view:
        scratch = scratch_copy(view)
    borrowing = Borrowing(book)
    for victim in released:
        borrowing.take(victim)
    chosen: list[Victim] = []
    for victim in victims:
        if victim.reclaim and not borrowing.still_borrows(victim):
            continue
        scratch._apply(victim.alloc, -1)
        chosen.append(victim)
        borrowing.take(victim)
        if fits(filters, request, scratch):
            break
    else:
        return None
    for victim in sorted(chosen, key=prune_order):
        scratch._apply(victim.alloc, +1)
        if fits(filters, request, scratch):
            chosen.remove(victim)
        else:
            scratch._apply(victim.alloc, -1)
    return tuple(sorted(chosen, key=victim_order))


def cheapest_nodes(
    members: list[str],
    plans: dict[str, tuple[Victim, ...]],
    want: int,
    taken: dict[int, Victim],
    seeded: list[str],
) -> tuple[tuple[str, ...], tuple[Victim, ...]] | None:
    """``want`` nodes of ``members``: ``seeded`` first, then the cheapest by marginal cost
    (victims already taken are free), with a lazy heap."""
    taken = dict(taken)
    chosen = list(seeded)
    chosen_set = set(chosen)
    holders: dict[int, list[str]] = defaultdict(list)
    for name in members:
        for victim in plans[name]:
            holders[victim.job_id].append(name)

    def marginal(name: str) -> Cost:
        return cost_of([v for v in plans[name] if v.job_id not in taken])

    current = {n: marginal(n) for n in members if n not in chosen_set}
    heap = [(c, n) for n, c in current.items()]
    heapq.heapify(heap)
    while heap and len(chosen) < want:
        cost, name = heapq.heappop(heap)
        if name in chosen_set or current[name] != cost:
            continue
        chosen.append(name)
        chosen_set.add(name)
        touched = set()
        for victim in plans[name]:
            if victim.job_id not in taken:
                taken[victim.job_id] = victim
                touched.update(holders[victim.job_id])
        for other in touched - chosen_set:
            current[other] = marginal(other)
            heapq.heappush(heap, (current[other], other))
    if len(chosen) < want:
        return None
    return tuple(chosen), tuple(sorted(taken.values(), key=victim_order))
