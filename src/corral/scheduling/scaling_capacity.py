"""The capacity a pending job could get without new units, for ``queue-demand``.

A :class:`Capacity` is a scratch snapshot (``snapshot``) that starts nearly empty and
grows as jobs need it. The cluster's capacity is sorted into **groups** of alike members
(a member: one unit's nodes, or one fixed node):

- ``partial``: busy nodes that still have room, by kind of node and free whole devices
  (tightest first, as packing would choose); their allocations come with them;
- ``fresh``: idle ready units of a pool, idle fixed nodes of one likeness;
- ``coming``: units in flight or granted earlier this pass, soonest first, their nodes
  taken as empty and ready.

:meth:`Capacity.ensure` adds members of the groups that could host a job (a selector and
capacity check on one empty member, cached per request and kind of node) until they
offer its node count; a count of nodes per free whole devices, kept for the members in
and out of the snapshot, rules out hopeless trials first (:meth:`Capacity.may_fit`). So a
pass places jobs on a few hundred nodes, not on a snapshot of the whole cluster. Busy TPU
slices and fixed TPU hosts go in at once (a slice needs its pod's free hosts together).

The pools' groups come from the index (``scheduling.scaling_index``), which keeps each
pool's ready units sorted so (fresh; partial by free devices; full) and its units in
flight by request time: sorting costs a few lookups per pool, and a group's members are
looked up as they are added (``scaling_index.Coming`` makes the coming ones as read).
The fixed nodes are read one by one.

Nodes of pools lose their pool and unit labels in the snapshot (unless a pending job
selects by them), so that the evaluator shares verdicts between alike nodes.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from corral.core.allocation import Allocation
from corral.core.node import Node, NodeState
from corral.core.pools import POOL_LABEL, UNIT_LABEL, Pool, Unit
from corral.core.resources import GpuKind
from corral.core.tpu import POD_LABEL
from corral.scheduling.feasibility import NodeShapes, node_shapes
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.filters import NodeSelectorFilter, fits_capacity
from corral.scheduling.scaling_index import (
    CROWDED,
    FLYING,
    FRESH,
    FULL,
    ROOMY,
    Coming,
    Entry,
    ScalingIndex,
    UnitList,
)
from corral.scheduling.scaling_policies import ScalingView
from corral.scheduling.scaling_usage import NodeUsage
from corral.scheduling.snapshot import NodeView, Snapshot, node_likeness

READY, COMING, NEW = 0, 1, 2  # ready now; in flight or granted earlier; added by the walk
POOL_LABELS = frozenset({POOL_LABEL, UNIT_LABEL, POD_LABEL})
SELECTOR = NodeSelectorFilter()


@dataclass(eq=False)
class Member:
    """Capacity in the snapshot: one unit's nodes, or one fixed node (``unit`` empty)."""

    nodes: tuple[Node, ...]
    kind: int
    pool: Pool | None = None
    unit: str = ""
    eta: float = 0.0  # seconds until ready (coming, new)
    planned: bool = False  # granted earlier this pass (its jobs go on the Provision)
    group: Group | None = None
    untouched: bool = True  # no work assumed on it by this walk
    holding: bool = False  # its allocations come into the snapshot (else: a partial group's)


@dataclass(eq=False)
class Group:
    """Alike members of one kind; ``entries[:added]`` are in the snapshot. ``alike``:
    what a member looks like to filters (kind of pool, or fixed nodes' likeness);
    ``named``: the same, for requests whose selectors name pools. ``free``: free whole
    devices of a partial group's nodes (None: fresh or coming). ``estimate``: each host's
    free devices, as counted while out of the snapshot."""

    alike: Hashable
    named: Hashable
    kind: int
    pool: Pool | None
    sample: Node
    estimate: tuple[int, ...]
    free: int | None = None
    entries: Sequence[Entry | Unit] = ()  # (read as members are added; never changed)
    added: int = 0
    spare: int = 0  # added members still untouched

    def __post_init__(self) -> None:
        self.size, self.hosts = len(self.entries), len(self.estimate)
        self.ids: tuple[int, int] = (-1, -1)  # numbers of ``alike`` and ``named``
        self.order: tuple = ()  # where it sorts (``_order``)

    @property
    def remaining(self) -> int:
        return self.size - self.added


class Likeness(tuple):
    """A node's ``node_likeness`` that keeps its hash (hashed as it goes into a snapshot,
    pass after pass); equal to the plain tuple, and hashed alike."""

    def __new__(cls, items: tuple) -> Likeness:
        made = super().__new__(cls, items)
        made.hashed = tuple.__hash__(made)
        return made

    def __hash__(self) -> int:
        return self.hashed


class ScratchSnapshot(Snapshot):
    """A snapshot that nodes can be added to: each addition is logged as a change, so the
    evaluator's indexes pick it up as they do any other."""

    def add(self, node: Node, likeness: tuple | None = None) -> NodeView:
        """Add ``node`` (``likeness``: its ``node_likeness``, when known)."""
        view = NodeView(node)
        if likeness is None:
            likeness = node_likeness(node)
        view.kind = self._kinds.setdefault(likeness, len(self._kinds))
        self.nodes[node.name] = view
        self._views.append(view)
        self._changed(node.name)
        self._state = next(self._states)
        return view


def free_devices(node: Node) -> int:
    """Devices of an empty ``node`` that a whole-device request could take."""
    return sum(1 for d in node.devices if not d.mig)


def free_now(view: NodeView) -> int:
    """``view.free_whole_count()``, faster without MIG."""
    return view.free_whole_count() if any(view.mig_used) else view.used_milli.count(0)


def names_pools(request: NodeRequest) -> bool:
    """Whether the request's node selector names pools or units (by their labels)."""
    return any(key in POOL_LABELS for key, _ in request.selector)


def pool_kind(pool: Pool) -> Hashable:
    """What placements on ``pool``'s units depend on: its template less the pool's own
    labels (pools alike but for name, cost and limits share trials and checks)."""
    return tuple(
        (
            node.devices,
            node.cpus,
            node.memory,
            node.network,
            tuple(kv for kv in node.labels if kv[0] not in POOL_LABELS),
            node.attributes,
        )
        for node in pool.template
    )


class Capacity:
    """The scratch snapshot, its groups, and what each node in it is (module docstring)."""

    def __init__(self, view: ScalingView) -> None:
        self.view = view
        self.index: ScalingIndex = view.index
        self.usage: NodeUsage = view.usage
        inp = view.inp
        selected = {key for job in inp.pending for part in job.spec.parts
                    for key, _ in part.node_selector}  # fmt: skip
        self.dropped = frozenset({POOL_LABEL, UNIT_LABEL} - selected)
        self._scrubs: dict[str, tuple[Node, Node, tuple]] = self.index.derived(
            ("scrubbed", self.dropped), dict
        )
        self.snapshot = ScratchSnapshot(())
        self.groups: list[Group] = []
        self.member_of: dict[str, Member] = {}  # snapshot node -> its member
        self.slot: dict[str, tuple[int, int]] = {}  # visible node -> (kind, free devices)
        self.hist: tuple[Counter[int], Counter[int]] = (Counter(), Counter())  # ready, all
        self.not_ready: dict[str, int] = {}  # coming and new nodes
        self.kinds: dict[str, int] = self.index.derived("kinds", lambda: _kinds(view.pools))
        self._hosts: dict[NodeRequest, dict[int, bool]] = {}  # request -> alike's id -> ?
        self._ids: dict[Hashable, int] = {}
        self._compatible: dict[tuple[NodeRequest, bool, int], list[Group]] = {}
        self.by_name: Mapping[str, Node] = self.index.nodes
        self._sort()

    @cached_property
    def fixed(self) -> NodeShapes:
        """The fixed ready nodes' shapes (for ``wait_for_busy`` and sizing TPU jobs)."""
        return node_shapes(self.index.fixed_ready())

    # --- sorting the cluster into groups ----------------------------------------------

    def _sort(self) -> None:
        """The groups, from the index: the fixed ready nodes are read one by one, each
        pool's units by class."""
        view, usage = self.view, self.usage
        held = usage.held
        cpu_jobs = [
            j.spec.cpus or 0.0
            for j in view.inp.pending
            if j.spec.gpus.kind is GpuKind.NONE and not j.spec.tpu
        ]
        self._least_cpus = min(cpu_jobs, default=None)
        groups: dict[Hashable, Group] = {}
        direct: list[Member] = []
        fixed: dict[Hashable, tuple[Node, list[Entry], int | None]] = {}
        for node in self.index.fixed_ready():
            entry: Entry = ("", (node.name,), 0.0, False)
            if node.tpu_chips:
                direct.append(Member((node,), READY, holding=True))
            elif node.name not in held:
                key = ("fixed", node_likeness(node))
                fixed.setdefault((key, None), (node, [], None))[1].append(entry)
            elif self._room(node):
                key, free = ("fixed", node_likeness(node)), self._free_on(node)
                fixed.setdefault((key, free), (node, [], free))[1].append(entry)
        for (key, _), (node, entries, free) in fixed.items():
            self._group(groups, key, READY, None, node, entries, free)
        for pool in view.pools:
            direct += self._sort_pool(pool, groups)
        self.groups = sorted(groups.values(), key=_order)
        for member in direct:
            self.show(member)

    def _sort_pool(self, pool: Pool, groups: dict[Hashable, Group]) -> list[Member]:
        """Sort ``pool``'s units into groups (from the index's classes); the busy slices
        with room, to add now."""
        view, by_name, index = self.view, self.by_name, self.index
        sorted_ = index.pool(pool.name)
        units = index.units
        alike = ("pool", self.kind(pool))
        direct: list[Member] = []
        least = self._least_cpus
        if pool.hosts_per_unit == 1:
            fresh = sorted_.of(FRESH)
            if fresh:
                sample = by_name[index.unit_nodes(fresh[0])[0]]
                self._group(groups, alike, READY, pool, sample, fresh)
            partial = sorted_.partial()
            if least is not None:  # full nodes with CPUs left count as partial too
                roomy = [k for k in sorted_.keys(FULL) if self._room(self._node_of(units[k[1]]))]
                if roomy:
                    partial[0] = sorted(itertools.chain(partial.get(0, ()), roomy))
            for free, keys in partial.items():
                entries = UnitList(keys, units)
                node = by_name[index.unit_nodes(entries[0])[0]]
                self._group(groups, alike, READY, pool, node, entries, free)
        else:
            fresh = sorted_.of(FRESH)
            sample = next(
                (by_name[n] for u in fresh if (n := index.unit_nodes(u)[0]) in by_name), None
            )
            if fresh and sample is not None:
                self._group(groups, alike, READY, pool, sample, fresh)
            busy: Sequence[tuple[Any, str]] = sorted_.keys(ROOMY)
            if least is not None:  # slices with CPUs left on a host count too
                more = [k for k in sorted_.keys(CROWDED) if self._slice_room(units[k[1]])]
                if more:
                    busy = sorted(itertools.chain(busy, more))
            for _, name in busy:  # a busy slice with room: its hosts go in now
                member = self._resolve(READY, pool, units[name])
                if member is not None:
                    member.holding = True
                    direct.append(member)
        # (their nodes are the pool's template's, named when they go in)
        state = view.state(pool.name)
        coming = Coming(sorted_.keys(FLYING), state.late, state.planned, pool, view.now)
        if coming:
            template = index.template(pool)[0]
            self._group(groups, ("coming", alike), COMING, pool, template, coming)
        return direct

    def _node_of(self, unit: Unit) -> Node:
        return self.by_name[self.index.unit_nodes(unit)[0]]

    def _slice_room(self, unit: Unit) -> bool:
        by_name = self.by_name
        return any(n in by_name and self._room(by_name[n]) for n in self.index.unit_nodes(unit))

    def _group(
        self,
        groups: dict[Hashable, Group],
        alike: Hashable,
        kind: int,
        pool: Pool | None,
        sample: Node,
        entries: Sequence[Entry | Unit],
        free: int | None = None,
    ) -> None:
        """A group of ``entries`` (one per key: taken as they are, not copied)."""
        key = (alike, kind, free, pool.name if pool else None)
        assert key not in groups
        if free is not None:
            estimate: tuple[int, ...] = (free,)
        elif pool is not None:
            estimate = self.index.derived(
                ("estimate", pool.name), lambda: tuple(free_devices(n) for n in pool.template)
            )
        else:
            estimate = (free_devices(sample),)
        named = ("pool", pool.name, kind) if pool is not None else alike
        group = groups[key] = Group(alike, named, kind, pool, sample, estimate, free, entries)
        group.ids = (self._id(alike), self._id(named))
        group.order = (
            (0, free, self._repr(alike)) if free is not None else (1 + kind, 0, self._repr(named))
        )
        for free_here in estimate:
            self.count(kind, free_here, group.size)

    def _id(self, alike: Hashable) -> int:
        """A number per ``alike`` (or ``named``) of a group, for cheap cache keys."""
        return self._ids.setdefault(alike, len(self._ids))

    def _repr(self, alike: Hashable) -> str:
        """``repr(alike)``, made once (groups are sorted by it)."""
        made: dict[Hashable, str] = self.index.derived("reprs", dict)
        found = made.get(alike)
        if found is None:
            found = made[alike] = repr(alike)
        return found

    def _room(self, node: Node) -> bool:
        """Whether a busy node could still take some pending job: a device not wholly
        held (or shared), or CPUs left when CPU-only jobs are pending."""
        usage, name = self.usage, node.name
        if name in usage.shared or usage.held.get(name, 0) < len(node.devices):
            return True
        least = self._least_cpus
        return least is not None and node.cpus - usage.cpus.get(name, 0.0) + 1e-9 >= least

    def _free_on(self, node: Node) -> int:
        return max(0, free_devices(node) - self.usage.held.get(node.name, 0))

    def kind(self, pool: Pool) -> int:
        """A number per kind of pool (``pool_kind``), for cheap cache keys: the pools
        numbered by name (made once per index: they depend on the pools only)."""
        return self.kinds[pool.name]

    # --- adding to the snapshot -----------------------------------------------------------

    def _resolve(self, kind: int, pool: Pool | None, entry: Entry | Unit) -> Member | None:
        """The member of ``entry``: its registered nodes that are ready (the pool's
        template for nodes of a coming unit not registered yet)."""
        if isinstance(entry, Unit):
            unit, names, eta, planned = entry.name, self.view.unit_nodes(entry), 0.0, False
        else:
            unit, names, eta, planned = entry
        by_name, ready = self.by_name, NodeState.READY
        if kind == COMING:
            assert pool is not None
            found = [by_name.get(n.name, n) for n in self.index.unit_template(pool, unit)]
        else:
            found = [by_name[name] for name in names if name in by_name]
        nodes = tuple(n for n in found if n.state is ready)
        if not nodes:
            return None
        return Member(nodes, kind, pool, unit, eta, planned)

    def add(self, group: Group) -> bool:
        """Add ``group``'s next member to the snapshot; whether it had any ready node."""
        entry = group.entries[group.added]
        group.added += 1
        for free in group.estimate:
            self.count(group.kind, free, -1)  # counted as it is, from now on
        member = self._resolve(group.kind, group.pool, entry)
        if member is None:
            return False
        member.group = group
        self.show(member)
        group.spare += 1
        return True

    def show(self, member: Member) -> None:
        """Put ``member``'s nodes in the snapshot with what they hold, and count them."""
        usage, snapshot = self.usage, self.snapshot
        holding = member.holding or (member.group is not None and member.group.free is not None)
        for node in member.nodes:
            view = snapshot.add(*self.scrubbed(node))
            for alloc in usage.on(node.name) if holding else ():  # (its tasks on this node)
                if len(alloc.by_node) > 1:
                    alloc = Allocation(alloc.job_id, alloc.attempt, alloc.by_node[node.name])
                snapshot.assume(alloc)
            self.member_of[node.name] = member
            self.place(node.name, member.kind, free_now(view))

    def place(self, name: str, kind: int, free: int) -> None:
        """Count visible node ``name`` (of ``kind``, ``free`` whole devices)."""
        self.slot[name] = (kind, free)
        self.count(kind, free, +1)
        if kind != READY:
            self.not_ready[name] = 0

    def count(self, kind: int, free: int, sign: int) -> None:
        self.hist[1][free] += sign
        if kind == READY:
            self.hist[0][free] += sign

    def scrub(self, node: Node) -> Node:
        """``node`` without its pool and unit labels, unless a pending job selects by
        them: the nodes of alike pools then look alike to the evaluator, which shares
        their verdicts (filters and scores read labels only through selectors)."""
        dropped = self.dropped
        if not dropped or not any(key in dropped for key, _ in node.labels):
            return node
        return replace(node, labels=tuple(kv for kv in node.labels if kv[0] not in dropped))

    def scrubbed(self, node: Node) -> tuple[Node, tuple]:
        """``scrub(node)`` and its likeness, kept on the index from pass to pass (while
        the node is the same)."""
        found = self._scrubs.get(node.name)
        if found is None or found[0] is not node:
            scrubbed = self.scrub(node)
            likeness = Likeness(node_likeness(scrubbed))
            found = self._scrubs[node.name] = (node, scrubbed, likeness)
        return found[1], found[2]

    def assume(self, alloc: Allocation) -> list[Member]:
        """Take ``alloc`` in the snapshot; the members it lands on."""
        self.snapshot.assume(alloc)
        used: dict[int, Member] = {}
        for name in alloc.nodes:
            kind, free = self.slot[name]
            now_free = free_now(self.snapshot.nodes[name])
            self.count(kind, free, -1)
            self.count(kind, now_free, +1)
            self.slot[name] = (kind, now_free)
            member = self.member_of.get(name)
            if member is None:
                continue
            used[id(member)] = member
            if member.untouched:
                member.untouched = False
                if member.group is not None:
                    member.group.spare -= 1
        return list(used.values())

    # --- what a job could use ---------------------------------------------------------

    def may_fit(self, nodes: int, request: NodeRequest, upto: int, roles: bool) -> bool:
        """False when too few nodes (ready ones, or ready and coming: ``upto``) have the
        free whole GPUs ``request`` asks for on each of ``nodes`` (a necessary condition)."""
        if roles or request.gpus.kind is not GpuKind.WHOLE:
            return True
        need = request.gpus.count
        hist = self.hist[0 if upto == READY else 1]
        return sum(n for free, n in hist.items() if free >= need) >= nodes

    def ensure(
        self, request: NodeRequest, roles: bool, upto: int, need: int, everything: bool
    ) -> bool:
        """Add members of the groups that could host ``request``, in order, until they
        offer ``need`` nodes untouched by this walk (``everything``: that many from each
        group); whether any were added."""
        groups = self.compatible(request, roles, upto)
        first = 0  # (spent groups offer nothing, and never will again: the first go now)
        while first < len(groups) and not groups[first].spare and groups[first].remaining <= 0:
            first += 1
        if first:
            del groups[:first]
        added, have, spent = False, 0, 0
        for group in groups:
            if everything:
                have = 0
            have += group.spare * group.hosts
            while have < need and group.added < group.size:
                if self.add(group):
                    added = True
                    have += group.hosts
            if not group.spare and group.added >= group.size:
                spent += 1
            elif have >= need and not everything:
                break
        if spent * 2 > len(groups):  # spent groups leave the cached list for good
            groups[:] = [g for g in groups if g.spare or g.added < g.size]
        return added

    def compatible(self, request: NodeRequest, roles: bool, upto: int) -> list[Group]:
        """The groups (of kinds up to ``upto``) whose empty member passes the request's
        selector and capacity (any, for a job with roles), and whose free devices suffice
        (partial groups)."""
        key = (request, roles, upto)
        found = self._compatible.get(key)
        if found is None:
            whole = request.gpus.count if request.gpus.kind is GpuKind.WHOLE else 1
            any_free = request.gpus.kind is GpuKind.NONE
            by = 1 if names_pools(request) else 0
            hosts = self._hosts.setdefault(request, {})
            found = self._compatible[key] = []
            for g in self.groups:
                if g.kind > upto or (g.free is not None and g.free < whole and not any_free):
                    continue
                if not roles:
                    could = hosts.get(g.ids[by])
                    if could is None:
                        could = self.could_host(request, g.alike, g.named, g.sample)
                    if not could:
                        continue
                found.append(g)
        return found

    def could_host(
        self, request: NodeRequest, alike: Hashable, named: Hashable, node: Node
    ) -> bool:
        """Whether an empty ``node`` passes the request's selector and capacity (the same
        for every node ``alike``)."""
        hosts = self._hosts.setdefault(request, {})
        key = self._id(named if names_pools(request) else alike)
        found = hosts.get(key)
        if found is None:
            view = NodeView(node)
            found = SELECTOR.filter(request, view) is None and not fits_capacity(request, view)
            hosts[key] = found
        return found

    def ready_only(self, alloc: Allocation) -> bool:
        slot = self.slot
        return all(slot[name][0] == READY for name in alloc.nodes)


def _kinds(pools: Sequence[Pool]) -> dict[str, int]:
    """Each pool's kind, numbered in the pools' order."""
    ids: dict[Hashable, int] = {}
    return {pool.name: ids.setdefault(pool_kind(pool), len(ids)) for pool in pools}


def _order(group: Group) -> tuple:
    """Partial groups first, tightest first (as packing would choose), then fresh, then
    coming ones (``Group.order``, made with the group)."""
    return group.order
