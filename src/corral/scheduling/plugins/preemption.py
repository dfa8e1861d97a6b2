"""Preemption: a minimal, topology-aware set of victims for a job that cannot start.

Victims of a pending job may be:

- (a) running allocations of lower priority that are preemptible;
- (j) for job completion time (``policy.order: jct`` with ``policy.jct.preempt``):
  running jobs of the job's own queue and equal priority that checkpoint and have far
  more work left than the job (``plugins/jct.py``, :func:`jct_victim`);
- (b) reclaim: when the job's queue has a nominal quota and the job fits within it
  (``QuotaBook.within_nominal``), allocations of the other queues of its cohort while they
  borrow (``QuotaBook.reclaimable``), whatever their priority and even when not
  preemptible, as Kueue's reclaim: lent quota always comes back (a job that must never
  be preempted should run within its queue's nominal quota). A lender stops being a
  target as soon as the victims chosen so far bring it back to its nominal quota.

Never: equal or higher priority (but for reclaim), non-preemptible (idem), jobs already
being preempted (``CycleContext.preempting``), allocations placed this cycle
(``started_at >= now``), nodes reserved for another job.

The search (:func:`find_victims`):

1. **Per node**, on a scratch copy of the node: release its eligible victims in order of
   lowest priority, then least work lost, until the filters say one node's share of the
   job fits; then put back each victim not needed (largest loss first).
2. **Groups**: a single-node job's are single nodes. A gang's are ``nodes`` nodes inside
   one domain: the required topology domain, else each leaf, spine, zone and the whole
   cluster; per domain the cheapest nodes by marginal cost (a victim spanning several
   nodes counts once), and the same seeded with each of the cheapest multi-node victims,
   so one gang victim freeing whole nodes beats many small jobs on as many nodes.
3. **Rank** by cost: highest victim priority, then work lost, then number of victims
   (``preferred`` topology: the tighter level right after the priority). Work lost is
   GPUs x the time since the last checkpoint (since the start when it never checkpointed;
   nothing when the start is unknown).
4. **Confirm** the best groups in order: release the victims in the snapshot, trial-place
   the job (``ctx.place``) and check its quota (``ctx.quota``; victims of its own queue and
   reclaimed ones count as freed; when it fits but its quota does not, lower-priority jobs
   of its own queue are added), drop victims the trial does not need, undo everything.
   The first that works wins; its placement's nodes are reserved for the job from ``now``.

Bounds (``Limits``; 1,000 nodes x 8 GPUs, 20,000 pending): per-node victim sets are
memoized for the cycle per (request shape, priority, reclaim set) and recomputed only on
nodes whose ``NodeView.version`` moved or whose victims are now being preempted; at most
``max_victims_per_node`` victims per node, ``max_groups`` groups confirmed (each one trial
placement, plus at most ``max_prune`` and ``max_quota_victims``), ``max_seeds`` seeds per
domain; a search that finds nothing answers later jobs of the same shape (and queue,
with quotas) and no higher priority at once; at most ``max_searches`` searches a cycle.
What the searches share within a cycle (:class:`PreemptionState`) lives in the cycle's
memo (``ctx.memo.cycle.preemption``); the victim index is built at the first search of a
cycle that needs one.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from corral.core.allocation import Allocation
from corral.core.job import Job, TopologyLevel, TopologyMode
from corral.scheduling.config import JctPolicy
from corral.scheduling.framework import (
    CycleContext,
    Filter,
    NodeRequest,
    PostFilterResult,
    Reservation,
)
from corral.scheduling.plugins.jct import expected_size, jct_victim
from corral.scheduling.plugins.preemption_reasons import explanations
from corral.scheduling.plugins.preemption_state import PreemptionState, cycle_state
from corral.scheduling.plugins.victims import (
    DEFAULT_FILTERS,
    Borrowing,
    Cost,
    Plan,
    Victim,
    cheapest_nodes,
    cost_of,
    node_victims,
    prune_order,
    victim_order,
)
from corral.scheduling.snapshot import NodeView

L = TopologyLevel
LEVEL_DEPTH = {L.LEAF: 3, L.SPINE: 2, L.ZONE: 1, L.ANY: 0}
LEVELS = (L.LEAF, L.SPINE, L.ZONE, L.ANY)  # tight to loose
_NO_PLAN = PostFilterResult()  # (the usual answer: one object, not one per pending job)


@dataclass(frozen=True)
class Limits:
    """Bounds of one search (see the module docstring)."""

    max_groups: int = 8  # candidate groups confirmed by a trial placement, per job
    max_victims_per_node: int = 32  # victims tried per node, cheapest first
    max_prune: int = 16  # trial placements to drop unneeded victims
    max_quota_victims: int = 32  # own-queue victims added to fit the quota
    max_seeds: int = 4  # multi-node victims tried as seeds of a gang's group, per domain
    max_searches: int = 32  # searches per cycle (the rest wait for the next cycle)


@dataclass(frozen=True)
class _Group:
    rank: tuple
    nodes: tuple[str, ...]
    victims: tuple[Victim, ...]
    pruned: bool  # victims already minimal (single node, pruned by the filters)


def _domain(view: NodeView, depth: int) -> tuple[str, ...] | None:
    if depth == 0:
        return ()
    network = view.node.network
    return tuple(network[:depth]) if len(network) >= depth else None


class _WhatIf:
    """Victims released in the cycle's snapshot (and quota book), all put back by close()."""

    def __init__(self, ctx: CycleContext, book_counts: set[int]) -> None:
        self.ctx = ctx
        self.book_counts = book_counts  # victims whose release frees the job's quota
        self.out: dict[int, Victim] = {}

    def drop(self, victim: Victim) -> None:
        self.ctx.snapshot.release(victim.alloc)
        if self.ctx.quota is not None and victim.job_id in self.book_counts:
            self.ctx.quota.release(victim.alloc)
        self.out[victim.job_id] = victim

    def restore(self, victim: Victim) -> None:
        self.ctx.snapshot.assume(victim.alloc)
        if self.ctx.quota is not None and victim.job_id in self.book_counts:
            self.ctx.quota.assume_allocation(victim.alloc)
        del self.out[victim.job_id]

    def close(self) -> None:
        for victim in reversed(list(self.out.values())):
            self.restore(victim)


def find_victims(
    job: Job,
    request: NodeRequest,
    ctx: CycleContext,
    filters: Sequence[Filter] = DEFAULT_FILTERS,
    limits: Limits = Limits(),
    jct: JctPolicy | None = None,
) -> Plan | None:
    """The cheapest minimal victim set that lets ``job`` start, or None (module docstring).
    Leaves ``ctx.snapshot`` and ``ctx.quota`` as they were."""
    cycle = cycle_state(ctx)
    if cycle.searches >= limits.max_searches:
        return None
    if jct is not None and jct.preempt:
        size = expected_size(job)
        if math.isinf(size):
            jct = None  # unsized: nothing to compare
        else:
            largest = cycle.jct_largest(job.queue, job.priority, jct)
            if largest < jct.margin * 2.0 ** _tier(job, size):
                jct = None  # no running job of its queue has margin times its work left
    else:
        jct = None
    if cycle.nothing_below(job.priority) and ctx.quota is None and jct is None:
        return None  # nothing of lower priority runs, and no quota to reclaim
    return _Search(job, request, ctx, filters, limits, cycle, jct).run()


def _tier(job: Job, size: float | None = None) -> int:
    """The job's expected size (``size``, if known) rounded up to a power of two (its
    exponent): jobs of one tier share the memoized victim sets of preemption for
    completion time."""
    size = expected_size(job) if size is None else size
    return math.ceil(math.log2(max(size, 1.0)))


class _Search:
    def __init__(
        self,
        job: Job,
        request: NodeRequest,
        ctx: CycleContext,
        filters: Sequence[Filter],
        limits: Limits,
        cycle: PreemptionState,
        jct: JctPolicy | None = None,
    ) -> None:
        self.job, self.request, self.ctx = job, request, ctx
        self.jct = jct
        # the JCT test is made against the job's size rounded up to a power of two, so
        # that jobs of similar sizes share the memoized victim sets
        self.jct_tier = _tier(job) if jct else None
        self.filters, self.limits, self.cycle = filters, limits, cycle
        self.book = ctx.quota
        self.reserved: set[str] = set()
        self.reclaim: frozenset[int] = frozenset()
        book = self.book
        if book is not None and book.within_nominal(job.queue, book.demand(job.spec)):
            self.reclaim = frozenset(book.reclaimable(job.queue))

    def run(self) -> Plan | None:
        job, cycle, book, ctx = self.job, self.cycle, self.book, self.ctx
        if cycle.nothing_below(job.priority) and not self.reclaim and self.jct is None:
            return None  # nothing of lower priority runs, nothing to reclaim
        key = (
            self.request,
            self.reclaim,
            job.queue if book is not None or self.jct else None,
            self.jct_tier,
        )
        if cycle.fruitless.get(key, -math.inf) >= job.priority:
            return None  # no job of this shape and higher priority found any this cycle
        if cycle.searches >= self.limits.max_searches:
            return None
        cycle.searches += 1
        self.reserved = {n for r in ctx.reservations if r.job_id != job.id for n in r.nodes}
        self._forget_taken()
        plans = self._node_plans()
        groups = sorted(
            self._single(plans) if job.spec.nodes <= 1 else self._gangs(plans),
            key=lambda g: g.rank,
        )
        book_counts: set[int] = set(self.reclaim)  # victims whose release frees its quota
        if book is not None:
            book_counts.update(
                v.job_id for vs in cycle.by_node.values() for v in vs if v.alloc.queue == job.queue
            )
            if book.admit(job, book.demand(job.spec)) is not None:
                # refused by its quota: first try freeing quota alone (lower-priority
                # jobs of its own queue), wherever the job would then be placed
                groups.insert(0, _Group((), (), (), False))
        for index, group in enumerate(groups[: self.limits.max_groups]):
            plan = self._confirm(group, book_counts)
            if plan is not None:
                return _ranked(plan, groups, index)
        cycle.fruitless[key] = max(cycle.fruitless.get(key, -math.inf), job.priority)
        return None

    # --- per node ------------------------------------------------------------------------

    def _eligible(self, name: str) -> list[Victim]:
        job, preempting = self.job, self.ctx.preempting
        out = []
        for victim in self.cycle.by_node.get(name, ()):
            alloc = victim.alloc
            if alloc.job_id in preempting or alloc.job_id == job.id:
                continue
            if alloc.preemptible and alloc.priority < job.priority:
                out.append(victim)
            elif alloc.job_id in self.reclaim:
                out.append(Victim(alloc, victim.loss, reclaim=True))
            elif self.jct_tier is not None and self._jct_victim(alloc):
                out.append(Victim(alloc, victim.loss, for_jct=True))
            if len(out) >= self.limits.max_victims_per_node:
                break
        return out

    def _forget_taken(self) -> None:
        """Drop memoized plans of nodes whose victims are now being preempted."""
        cycle, preempting = self.cycle, self.ctx.preempting
        if preempting == cycle.preempting:
            return
        stale = {
            name for job_id in preempting - cycle.preempting for name in cycle.nodes_of(job_id)
        }
        if not cycle.preempting <= preempting:  # shrank: forget everything
            cycle.plans.clear()
        for memo in cycle.plans.values():
            for name in stale:
                memo.pop(name, None)
        cycle.preempting = preempting

    def _node_plans(self) -> dict[str, tuple[tuple[Victim, ...], Cost]]:
        """Node -> its cheapest victim set for the request and its cost (nodes that cannot
        be freed, and nodes reserved for other jobs, are left out). Memoized for the cycle
        (by node version; see _forget_taken)."""
        key = (self.request, self.job.priority, self.reclaim, self.jct_tier, self._jct_queue())
        memo = self.cycle.plans.setdefault(key, {})
        gang = self.job.spec.nodes > 1
        by_node, reserved = self.cycle.by_node, self.reserved
        only = self._jct_only_nodes() if not gang else None
        out: dict[str, tuple[tuple[Victim, ...], Cost]] = {}
        for name, view in self.ctx.snapshot.nodes.items():
            if name in reserved or (not gang and name not in by_node):
                continue
            if only is not None and name not in only:
                continue  # no victim of any kind there
            entry = memo.get(name)
            if entry is None or entry[0] != view.version:
                found = node_victims(
                    view, self.request, self._eligible(name), self.filters, self.book
                )
                cost = cost_of(found) if found is not None else (math.inf, math.inf, 0)
                entry = memo[name] = (view.version, found, cost)
            if entry[1] is not None:
                out[name] = (entry[1], entry[2])
        return out

    def _jct_victim(self, alloc: Allocation) -> bool:
        """:func:`jct_victim` for a job of the search's size tier (see __init__)."""
        assert self.jct is not None and self.jct_tier is not None
        return jct_victim(self.job, alloc, self.ctx.now, self.jct, size=2.0**self.jct_tier)

    def _jct_only_nodes(self) -> set[str] | None:
        """When completion time is the only reason it may preempt: the nodes its JCT
        candidates run on (None: any node may have a victim)."""
        if self.jct is None or self.reclaim or not self.cycle.nothing_below(self.job.priority):
            return None
        return self.cycle.jct_candidates(self.job.queue, self.job.priority, self.jct)[1]

    def _jct_queue(self) -> str | None:
        return self.job.queue if self.jct_tier is not None else None

    # --- groups --------------------------------------------------------------------------

    def _single(self, plans: dict[str, tuple[tuple[Victim, ...], Cost]]) -> list[_Group]:
        best = heapq.nsmallest(
            self.limits.max_groups,
            ((cost, name) for name, (victims, cost) in plans.items() if victims),
        )  # a node that fits without victims did not help before either
        return [_Group((*cost, name), (name,), plans[name][0], True) for cost, name in best]

    def _gangs(self, with_costs: dict[str, tuple[tuple[Victim, ...], Cost]]) -> list[_Group]:
        """Per domain of each level the job may use: its ``nodes`` cheapest nodes, counting
        a victim shared by several nodes once (greedy by marginal cost), and the same
        seeded with each of the cheapest multi-node victims (so one gang victim that frees
        whole nodes beats many small ones)."""
        plans = {name: victims for name, (victims, _) in with_costs.items()}
        want = self.job.spec.nodes
        topology = self.job.spec.topology
        level = topology.level if topology else L.ANY
        preferred = topology is not None and topology.mode is TopologyMode.PREFERRED
        if level not in LEVEL_DEPTH:
            levels: tuple[TopologyLevel, ...] = LEVELS
        elif topology is not None and not preferred:
            levels = (level,)
        else:
            levels = LEVELS[LEVELS.index(level) :]
        views = self.ctx.snapshot.nodes
        best: dict[frozenset[str], _Group] = {}  # the same nodes at several levels: once
        for tightness, lvl in enumerate(levels):
            domains: dict[tuple[str, ...], list[str]] = defaultdict(list)
            for name in plans:
                key = _domain(views[name], LEVEL_DEPTH[lvl])
                if key is not None:
                    domains[key].append(name)
            for members in domains.values():
                if len(members) < want:
                    continue
                for nodes, victims in self._picks(members, plans, want):
                    if not victims:
                        continue  # fits without victims: the placement failed otherwise
                    cost = cost_of(victims)
                    rank = (cost[0], tightness, *cost[1:]) if preferred else (*cost, tightness)
                    group = _Group((*rank, nodes), nodes, victims, False)
                    seen = best.get(frozenset(nodes))
                    if seen is None or group.rank < seen.rank:
                        best[frozenset(nodes)] = group
        return list(best.values())

    def _picks(
        self, members: list[str], plans: dict[str, tuple[Victim, ...]], want: int
    ) -> list[tuple[tuple[str, ...], tuple[Victim, ...]]]:
        member_set = set(members)
        seeds: dict[int, Victim] = {}
        for name in members:
            for victim in plans[name]:
                if len(victim.alloc.nodes) > 1:
                    seeds.setdefault(victim.job_id, victim)
        cheapest = sorted(seeds.values(), key=victim_order)[: self.limits.max_seeds]
        picks = [cheapest_nodes(members, plans, want, {}, [])]
        for seed in cheapest:
            nodes = [n for n in seed.alloc.nodes if n in member_set][:want]
            taken = {seed.job_id: seed}
            extra_ok = True
            for name in nodes:  # what else the seed's nodes need once it is gone
                more = node_victims(
                    self.ctx.snapshot.nodes[name],
                    self.request,
                    self._eligible(name),
                    self.filters,
                    self.book,
                    released=[seed],
                )
                if more is None:
                    extra_ok = False
                    break
                for victim in more:
                    taken.setdefault(victim.job_id, victim)
            if extra_ok:
                picks.append(cheapest_nodes(members, plans, want, taken, nodes))
        return [p for p in picks if p is not None]

    # --- confirmation --------------------------------------------------------------------

    def _trial(self) -> tuple[Allocation | None, bool]:
        """The trial placement if it avoids other jobs' reserved nodes (else None), and
        whether the quota admits it."""
        trial = self.ctx.place(self.job, self.request)
        if not isinstance(trial, Allocation) or self.reserved.intersection(trial.nodes):
            return None, False
        book = self.book
        return trial, book is None or book.admit(self.job, book.amounts(trial)) is None

    def _attempt(self) -> Allocation | None:
        trial, admitted = self._trial()
        return trial if admitted else None

    def _confirm(self, group: _Group, book_counts: set[int]) -> Plan | None:
        """Trial-place the job with the group's victims released: the minimal plan or
        None. Everything is put back."""
        borrowing = Borrowing(self.book)  # the union of nodes' victims may over-reclaim
        for victim in group.victims:
            if victim.reclaim and not borrowing.still_borrows(victim):
                return None
            borrowing.take(victim)
        what_if = _WhatIf(self.ctx, book_counts)
        try:
            for victim in group.victims:
                what_if.drop(victim)
            trial, admitted = self._trial()
            if trial is None:
                return None
            pruned = group.pruned
            if not admitted:  # it fits, but its quota does not
                trial = self._add_quota_victims(what_if)
                if trial is None:
                    return None
                pruned = False
            if not pruned:
                for victim in sorted(what_if.out.values(), key=prune_order)[
                    : self.limits.max_prune
                ]:
                    what_if.restore(victim)
                    better = self._attempt()
                    if better is None:
                        what_if.drop(victim)
                    else:
                        trial = better
            victims = tuple(sorted(what_if.out.values(), key=victim_order))
            return Plan(victims, trial.nodes) if victims else None
        finally:
            what_if.close()

    def _add_quota_victims(self, what_if: _WhatIf) -> Allocation | None:
        """The placement fits but the quota does not: release lower-priority jobs of the
        job's own queue (cheapest first) until it does."""
        job, preempting = self.job, self.ctx.preempting
        extra = sorted(
            {
                v.job_id: v
                for victims in self.cycle.by_node.values()
                for v in victims
                if v.alloc.queue == job.queue
                and v.alloc.preemptible
                and v.priority < job.priority
                and v.job_id not in preempting
                and v.job_id not in what_if.out
            }.values(),
            key=victim_order,
        )
        for victim in extra[: self.limits.max_quota_victims]:
            what_if.drop(victim)
            trial = self._attempt()
            if trial is not None:
                return trial
        return None


def _ranked(plan: Plan, groups: Sequence[_Group], index: int) -> Plan:
    """``plan`` (from ``groups[index]``) with how it ranked, for the victims' events."""
    later = next((g for g in groups[index + 1 :] if g.victims), None)
    runner_up = cost_of(later.victims) if later is not None else None
    return replace(plan, candidates=len(groups), passed=index, runner_up=runner_up)


def describe(plan: Plan) -> str:
    """``preempting jobs 7, 9 (lower priority) to start on n3``."""
    ids = plan.job_ids
    noun = "job" if len(ids) == 1 else "jobs"
    why = []
    if any(not v.reclaim for v in plan.victims):
        why.append("lower priority")
    lenders = sorted({v.alloc.queue for v in plan.victims if v.reclaim})
    if lenders:
        why.append(f"reclaiming quota lent to queue {', '.join(lenders)}")
    nodes = ", ".join(sorted(plan.nodes))
    return f"preempting {noun} {', '.join(map(str, ids))} ({'; '.join(why)}) to start on {nodes}"


class Preemption:
    """PostFilter: preempt a minimal set of victims and nominate the job to the freed
    nodes (a reservation from ``now``). Other jobs may still be placed this cycle when it
    preempts (the reservation keeps them off its nodes); when it finds nothing, the job
    blocks the ones behind it as before.

    ``filters``: the per-node checks (pass the profile's filters; default: the built-in
    ones); ``limits``: the search bounds."""

    name = "preemption"

    def __init__(
        self,
        filters: Sequence[Filter] | None = None,
        limits: Limits | None = None,
        jct: JctPolicy | None = None,
    ):
        self.filters = tuple(filters) if filters is not None else DEFAULT_FILTERS
        self.limits = limits or Limits()
        self.jct = jct  # preemption for job completion time too (None: priority only)

    def post_filter(self, job: Job, request: NodeRequest, ctx: CycleContext) -> PostFilterResult:
        plan = find_victims(job, request, ctx, self.filters, self.limits, jct=self.jct)
        if plan is None:
            return _NO_PLAN
        return PostFilterResult(
            preempt=plan.job_ids,
            reason=describe(plan),
            allow_others=True,
            reservation=Reservation(job.id, frozenset(plan.nodes), ctx.now),
            explanations=explanations(job, plan, ctx.now),
        )
