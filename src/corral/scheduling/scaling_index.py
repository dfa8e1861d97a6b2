"""What the autoscaler looks up instead of reading the whole cluster on every pass.

A pass (``scheduling.autoscaler.autoscale``) of a large cluster cannot afford to read every
unit, node and allocation: at 100 pools of 1,000 nodes, one plain loop over them costs
more than the whole pass may. A :class:`ScalingIndex` sorts them, as they change, into
what a pass reads: each pool's units by phase, the ready ones by how long they have been
idle, the ready ones by what a pending job could get on them (nothing held; some devices
free; full) and those a consolidation could empty, the draining ones to look at (empty,
or given a notice), the fixed nodes, and what the allocations hold on each node
(:class:`NodeUsage`). A pass then costs what matters: pending jobs, units in flight, units
idle past ``scale_down_idle``, the nodes placements try.

The keeper (the control plane's leader, the simulator) builds one with
:meth:`ScalingIndex.of` and keeps it as its records change (:meth:`~ScalingIndex.put_unit`,
:meth:`~ScalingIndex.drop_unit`, :meth:`~ScalingIndex.put_node`,
:meth:`~ScalingIndex.drop_node`, :meth:`~ScalingIndex.hold`,
:meth:`~ScalingIndex.release`: each sorts again the few units naming the node), then
hands it in ``AutoscaleInput.index``. Without one, a pass builds one from the input (the
same answers, at the cost of reading everything). What a pass needs once made (each
pool's template, consolidation's free rooms) is kept on the index too
(:meth:`~ScalingIndex.derived`), the latter following every change (:meth:`~ScalingIndex.watch`).

**Order.** Units, nodes and allocations keep the order they were first put in, as a
``dict`` does: one put again (changed) keeps its place, one dropped and put again goes
last. Answers are those of a pass given them in that order.

Pure data, no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any, overload

from sortedcontainers import SortedList

from corral.core.allocation import Allocation
from corral.core.node import Node, NodeState
from corral.core.pools import POOL_LABEL, Pool, Unit, UnitPhase
from corral.core.resources import MILLI
from corral.scheduling.scaling_usage import NodeUsage

# What a pool's units are sorted into. Each class is a sorted sequence (a list as built, a
# SortedList once it changes) of (seq, unit name), seq being the unit's place in the
# keeper's order; but IDLE's is of (idle_since, unit name), FLYING's (requested_at, name).
READY = "ready"
IDLE = "idle"  # ready, with an idle_since
PROVISIONING = "provisioning"
FLYING = "flying"  # provisioning, by (requested_at, unit name)
DRAINING = "draining"
SETTLE = "settle"  # draining, and empty or given a notice: to delete when due
FAILED = "failed"
DELETING = "deleting"
# ready units of declared pools, by what a pending job could get on them
FRESH = "fresh"  # nothing held on its nodes (a one-node unit: its node registered)
PARTIAL = "partial"  # (PARTIAL, free devices): one ready node, busy, a device free or shared
FULL = "full"  # one node, ready, busy, every device held (CPUs may be left)
ROOMY = "roomy"  # a slice, busy, a registered host with a device not held
CROWDED = "crowded"  # a slice, busy, registered hosts with every device held
LIGHT = "light"  # busy, a registered node with a device not wholly held: may consolidate
MOVABLE = "movable"  # light, and each of its jobs might move (``movable``)
PHASES = (READY, PROVISIONING, DRAINING, FAILED, DELETING)  # every unit is in one of them
PHASE_CLASS = {
    UnitPhase.READY: READY,
    UnitPhase.PROVISIONING: PROVISIONING,
    UnitPhase.DRAINING: DRAINING,
    UnitPhase.FAILED: FAILED,
    UnitPhase.DELETING: DELETING,
}

Key = tuple[Any, str]
# (unit name, node names, seconds until ready, granted earlier this pass); a fixed node's
# unit name is empty. A ready unit stands for its own entry (its nodes, 0, False).
Entry = tuple[str, tuple[str, ...], float, bool]
_BULK = (READY, IDLE, FRESH, LIGHT, FULL, PROVISIONING, FLYING, DRAINING, SETTLE)  # (``of``)
_MISSING = object()
_EMPTY: tuple[Key, ...] = ()


class UnitList(Sequence[Unit]):
    """The units of one class, in its order, looked up as they are read."""

    __slots__ = ("_items", "_units")

    def __init__(self, items: Sequence[tuple[Any, str]], units: dict[str, Unit]) -> None:
        self._items, self._units = items, units

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> Unit: ...
    @overload
    def __getitem__(self, i: slice) -> list[Unit]: ...
    def __getitem__(self, i: int | slice) -> Unit | list[Unit]:
        if isinstance(i, slice):
            return [self._units[name] for _, name in self._items[i]]
        return self._units[self._items[i][1]]

    def __iter__(self) -> Iterator[Unit]:
        units = self._units
        return (units[name] for _, name in self._items)


class PoolUnits:
    """One pool's units, sorted into classes (see the module)."""

    def __init__(self, index: ScalingIndex, classes: dict[Hashable, Sequence[Key]]) -> None:
        self._index, self._classes = index, classes

    def of(self, name: Hashable) -> UnitList:
        return UnitList(self._classes.get(name, _EMPTY), self._index.units)

    def keys(self, name: Hashable) -> Sequence[Key]:
        """The (seq, unit name) of class ``name`` (read only)."""
        return self._classes.get(name, _EMPTY)

    def all(self) -> UnitList:
        """Every unit, whatever its phase, in order."""
        return UnitList(self.all_keys(), self._index.units)

    def all_keys(self) -> list[tuple[int, str]]:
        found = self._classes
        return sorted(itertools.chain.from_iterable(found.get(p, ()) for p in PHASES))

    def classes(self) -> dict[Hashable, list[str]]:
        """Each class it has units in, with their names in order (to look at it)."""
        return {c: [name for _, name in keys] for c, keys in self._classes.items() if keys}

    def partial(self) -> dict[int, Sequence[Key]]:
        """PARTIAL's (seq, unit name) per count of free devices."""
        return {k[1]: v for k, v in self._classes.items() if type(k) is tuple and v}

    def idle_until(self, due: Callable[[float], bool]) -> list[Unit]:
        """The ready units idle the longest, while ``due(idle_since)`` holds (it must hold
        for all idle since earlier than one it holds for), by idle_since then name."""
        items, units = self._classes.get(IDLE, _EMPTY), self._index.units
        return [units[name] for _, name in items[: prefix(items, due)]]


def prefix(items: Sequence[Key], holds: Callable[[Any], bool]) -> int:
    """How many of ``items`` from the first ``holds(item[0])`` for (it holds for a first
    part of them, and then no more)."""
    low, high = 0, len(items)
    while low < high:
        mid = (low + high) // 2
        if holds(items[mid][0]):
            low = mid + 1
        else:
            high = mid
    return low


class Coming(Sequence[Entry]):
    """A pool's coming entries, soonest first then by name: its units in flight (``keys``:
    FLYING's, the first ``late`` given up) and those granted earlier this pass
    (``planned``, expected in the pool's provisioning time); made as they are read."""

    def __init__(
        self, keys: Sequence[Key], late: int, planned: Sequence[str], pool: Pool, now: float
    ) -> None:
        self._keys, self._next, self._now = keys, late, now
        self._time = pool.provisioning_time
        self._planned = sorted(planned)
        self._made: list[Entry] = []
        self._len = len(keys) - late + len(planned)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...
    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._len))]
        if not 0 <= i < self._len:
            raise IndexError(i)
        while len(self._made) <= i:
            self._more()
        return self._made[i]

    def _more(self) -> None:
        """The next entries expected at one time (a unit's eta: ``view.eta``)."""
        keys, now, time = self._keys, self._now, self._time
        planned = [(name, (), time, True) for name in self._planned]
        if self._next >= len(keys):
            self._made += planned
            self._planned = []
            return
        eta = max(0.0, keys[self._next][0] + time - now)
        run: list[Entry] = []
        while self._next < len(keys):  # (etas grow with the request time)
            requested_at, name = keys[self._next]
            if max(0.0, requested_at + time - now) != eta:
                break
            run.append((name, (), eta, False))
            self._next += 1
        if planned and time <= eta:
            if time < eta:
                self._made += planned
            else:
                run += planned
            self._planned = []
        run.sort(key=itemgetter(0))
        self._made += run


class ScalingIndex:
    """The units, nodes and allocations of a cluster, sorted for the autoscaler (see the
    module). ``pools``: the declared pools (those of ``AutoscaleInput.pools``)."""

    def __init__(self, pools: Sequence[Pool]) -> None:
        self.pools = tuple(pools)
        self._pools = {p.name: p for p in self.pools}
        self.units: dict[str, Unit] = {}  # in the keeper's order (read only: put and drop)
        self.nodes: dict[str, Node] = {}  # in the keeper's order (read only)
        self.usage = NodeUsage()
        self._classes: dict[str, dict[Hashable, Sequence[tuple[Any, str]]]] = {}
        # (kept from the first change on:) each unit's place, and the units naming a node
        self._seq: dict[str, int] | None = None
        self._next = itertools.count(1)
        self._owners: dict[str, list[str]] | None = None
        # the nodes of no pool, in order (None: to find), and those of them ready
        self._fixed: dict[str, None] | None = None
        self._fixed_ready: list[Node] | None = None
        self._derived: dict[Hashable, Any] = {}
        self._watchers: list[Callable[[str], None]] = []

    @classmethod
    def of(
        cls,
        pools: Sequence[Pool],
        units: Iterable[Unit] = (),
        nodes: Iterable[Node] = (),
        allocations: Iterable[Allocation] = (),
    ) -> ScalingIndex:
        """An index of these, in this order (the keeper's). One read of each: the usual
        case, a ready unit of a one-node pool, is sorted here as :meth:`_classify` would."""
        index = cls(pools)
        nodes = nodes if isinstance(nodes, Sequence) else tuple(nodes)
        by_name = index.nodes = {node.name: node for node in nodes}
        fixed = index._fixed = {}
        for node in by_name.values() if len(by_name) != len(nodes) else nodes:
            for key, _ in node.labels:  # (``_in_pool``, inline: nodes are many)
                if key == POOL_LABEL:
                    break
            else:
                fixed[node.name] = None
        usage = index.usage = NodeUsage.of(allocations)
        held, shared = usage.held, usage.shared
        units = units if isinstance(units, Sequence) else tuple(units)
        by_unit = index.units = {unit.name: unit for unit in units}
        declared, classify = index._pools, index._classify
        found: dict[str, dict[Hashable, list[Key]]] = {}
        adders: dict[str, tuple[Any, ...]] = {}
        classes: dict[Hashable, list[Key]]
        ready, node_ready = UnitPhase.READY, NodeState.READY
        provisioning, draining = UnitPhase.PROVISIONING, UnitPhase.DRAINING
        idle_nodes = held.keys().isdisjoint
        last: str | None = None
        single, classes = False, {}  # (set at the first unit, with ``add``)
        add: tuple[Callable[[Key], None], ...] = ()
        for seq, unit in enumerate(units, 1):
            if unit.pool != last:
                last = unit.pool
                adding = adders.get(last)
                if adding is None:
                    classes = found[last] = {c: [] for c in _BULK}
                    pool = declared.get(last)
                    adding = adders[last] = (
                        classes,
                        pool is not None and pool.hosts_per_unit == 1,
                        tuple(classes[c].append for c in _BULK),
                    )
                classes, single, add = adding
            on, phase = unit.nodes, unit.phase
            if phase is ready and single and len(on) == 1:  # (most units)
                key = (seq, unit.name)
                add[0](key)  # READY
                if unit.idle_since is not None:
                    add[1]((unit.idle_since, unit.name))  # IDLE
                first = on[0]
                busy, node = held.get(first), by_name.get(first)
                if busy is None:
                    if node is not None:
                        add[2](key)  # FRESH
                elif node is not None:
                    devices = len(node.devices)
                    if first in shared or busy < devices:
                        add[3](key)  # LIGHT
                        if all(movable(a) for a in usage.on(first)):
                            classes.setdefault(MOVABLE, []).append(key)
                        if node.state is node_ready:
                            classes.setdefault((PARTIAL, max(0, devices - busy)), []).append(key)
                    elif node.state is node_ready:
                        add[4](key)  # FULL
            elif phase is provisioning:
                add[5]((seq, unit.name))  # PROVISIONING
                add[6]((unit.requested_at, unit.name))  # FLYING
            elif phase is draining and on:
                key = (seq, unit.name)
                add[7](key)  # DRAINING
                if unit.deadline is not None or idle_nodes(on):
                    add[8](key)  # SETTLE
            else:
                for cls_, item in classify(unit, seq):
                    classes.setdefault(cls_, []).append(item)
        if len(by_unit) != len(units):  # a unit listed twice: its first place, last record
            found = {}
            for seq, unit in enumerate(by_unit.values(), 1):
                for cls_, item in classify(unit, seq):
                    found.setdefault(unit.pool, {}).setdefault(cls_, []).append(item)
        for listed in found.values():
            for by_time in (IDLE, FLYING):
                listed.get(by_time, []).sort()
        # (sorted lists: each becomes a SortedList when it first changes)
        index._classes = {
            pool: {c: items for c, items in listed.items() if items}
            for pool, listed in found.items()
        }
        return index

    # --- what a pass reads ----------------------------------------------------------------

    def pool(self, name: str) -> PoolUnits:
        return PoolUnits(self, self._classes.get(name, {}))

    def unit_pools(self) -> list[str]:
        """The pools that have had units (declared or not)."""
        return list(self._classes)

    def unit_nodes(self, unit: Unit) -> tuple[str, ...]:
        """The node names of ``unit`` (its pool's naming when the record lists none; none
        for a pool not declared)."""
        if unit.nodes:
            return unit.nodes
        pool = self._pools.get(unit.pool)
        return pool.unit_node_names(unit.name) if pool is not None else ()

    def template(self, pool: Pool) -> tuple[Node, ...]:
        """The nodes of unit 0 of a declared pool (its template named and labelled)."""
        return self.unit_template(pool, pool.unit_name(0))

    def unit_template(self, pool: Pool, unit: str) -> tuple[Node, ...]:
        """``pool.unit_nodes(unit)`` of a declared pool, made once."""
        made: dict[str, tuple[Node, ...]] = self.derived(("unit nodes", pool.name), dict)
        found = made.get(unit)
        if found is None:
            found = made[unit] = pool.unit_nodes(unit)
        return found

    def derived(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """What ``make()`` gives, made once and kept: what depends on the declared pools
        only (they are the index's for good), what keeps itself up to date
        (:meth:`watch`), or caches that check what they keep."""
        found = self._derived.get(key, _MISSING)
        if found is _MISSING:
            found = self._derived[key] = make()
        return found

    def watch(self, changed: Callable[[str], None]) -> None:
        """Call ``changed(node)`` after each change of a node or of what it holds."""
        self._watchers.append(changed)

    def busy(self, names: Iterable[str]) -> bool:
        return not self.usage.held.keys().isdisjoint(names)

    def fixed_ready(self) -> list[Node]:
        """The ready nodes of no pool (without the pool label), in order."""
        found = self._fixed_ready
        if found is None:
            nodes, ready = self.nodes, NodeState.READY
            if self._fixed is None:
                self._fixed = {n: None for n, node in nodes.items() if not _in_pool(node)}
            found = self._fixed_ready = [
                node for n in self._fixed if (node := nodes[n]).state is ready
            ]
        return found

    # --- keeping it ---------------------------------------------------------------------------

    def put_unit(self, unit: Unit) -> None:
        """A unit recorded or changed."""
        seqs, name = self._seqs(), unit.name
        old = self.units.get(name)
        if old is not None:
            self._unplace(old)
            self._own(old, -1)
        else:
            seqs[name] = next(self._next)
        self.units[name] = unit
        self._own(unit, +1)
        self._place(unit)

    def drop_unit(self, name: str) -> None:
        """A unit no longer recorded."""
        seqs = self._seqs()
        old = self.units.get(name)
        if old is not None:
            self._unplace(old)
            self._own(old, -1)
            del self.units[name], seqs[name]

    def put_node(self, node: Node) -> None:
        """A node registered or changed."""
        name = node.name
        affected = self._around([name])
        known = name in self.nodes
        self.nodes[name] = node
        fixed, pooled = self._fixed, _in_pool(node)
        if fixed is not None:
            was = name in fixed
            if was and pooled:
                del fixed[name]
            elif not was and not pooled:
                if known:  # (a pool's node no longer labelled so: find them again)
                    self._fixed = None
                else:
                    fixed[name] = None
            if was or not pooled:
                self._fixed_ready = None
        self._replace(affected, [name])

    def drop_node(self, name: str) -> None:
        """A node gone."""
        if name not in self.nodes:
            return
        affected = self._around([name])
        del self.nodes[name]
        if self._fixed is not None and name in self._fixed:
            del self._fixed[name]
            self._fixed_ready = None
        self._replace(affected, [name])

    def hold(self, alloc: Allocation) -> None:
        """An allocation (not held yet) holds its devices now, after those held already."""
        affected = self._around(alloc.by_node)
        self.usage.add(alloc)
        self._replace(affected, alloc.by_node)

    def release(self, alloc: Allocation) -> None:
        """An allocation (the same job and attempt) holds nothing any more."""
        affected = self._around(alloc.by_node)
        self.usage.remove(alloc)
        self._replace(affected, alloc.by_node)

    def _seqs(self) -> dict[str, int]:
        if self._seq is None:
            self._seq = {name: seq for seq, name in enumerate(self.units, 1)}
            self._next = itertools.count(len(self._seq) + 1)
        return self._seq

    def _around(self, nodes: Iterable[str]) -> list[Unit]:
        """The units naming these nodes, taken out of their classes (to sort again)."""
        owners = self._owners
        if owners is None:
            owners = self._owners = {}
            for unit in self.units.values():
                for name in self.unit_nodes(unit):
                    owners.setdefault(name, []).append(unit.name)
        found = {u: None for n in nodes for u in owners.get(n, ())}
        units = [self.units[u] for u in found]
        for unit in units:
            self._unplace(unit)
        return units

    def _replace(self, units: list[Unit], nodes: Iterable[str]) -> None:
        for unit in units:
            self._place(unit)
        for changed in self._watchers:
            for name in nodes:
                changed(name)

    def _own(self, unit: Unit, sign: int) -> None:
        owners = self._owners
        if owners is None:
            return
        for name in self.unit_nodes(unit):
            if sign > 0:
                owners.setdefault(name, []).append(unit.name)
            else:
                listed = owners[name]
                listed.remove(unit.name)
                if not listed:
                    del owners[name]

    def _place(self, unit: Unit) -> None:
        classes = self._classes.setdefault(unit.pool, {})
        for name, item in self._classify(unit, self._seqs()[unit.name]):
            found = classes.get(name)
            if type(found) is not SortedList:
                found = classes[name] = SortedList(found or ())
            found.add(item)

    def _unplace(self, unit: Unit) -> None:
        classes = self._classes[unit.pool]
        for name, item in self._classify(unit, self._seqs()[unit.name]):
            found = classes[name]
            if type(found) is not SortedList:
                found = classes[name] = SortedList(found)
            found.remove(item)

    # --- sorting a unit -------------------------------------------------------------------

    def _classify(self, unit: Unit, seq: int) -> list[tuple[Hashable, tuple[Any, str]]]:
        """The classes ``unit`` is in now, with its item in each."""
        key = (seq, unit.name)
        phase = unit.phase
        if phase is UnitPhase.READY:
            found: list[tuple[Hashable, tuple[Any, str]]] = [(READY, key)]
            if unit.idle_since is not None:
                found.append((IDLE, (unit.idle_since, unit.name)))
            pool = self._pools.get(unit.pool)
            if pool is not None:
                names = unit.nodes or pool.unit_node_names(unit.name)
                kind, light = self._capacity(pool, names)
                if kind is not None:
                    found.append((kind, key))
                if light:
                    found.append((LIGHT, key))
                    usage = self.usage
                    if all(movable(a) for n in names for a in usage.on(n)):
                        found.append((MOVABLE, key))
            return found
        if phase is UnitPhase.DRAINING:
            found = [(DRAINING, key)]
            if unit.deadline is not None or not self.busy(self.unit_nodes(unit)):
                found.append((SETTLE, key))
            return found
        if phase is UnitPhase.PROVISIONING:
            return [(PROVISIONING, key), (FLYING, (unit.requested_at, unit.name))]
        return [(PHASE_CLASS[phase], key)]

    def _capacity(self, pool: Pool, names: Sequence[str]) -> tuple[Hashable | None, bool]:
        """What a pending job could get on a ready unit of ``pool`` with these nodes (as
        ``scaling_capacity`` sorts it), and whether consolidation might empty it (LIGHT: a
        registered node of it with a device not wholly held; only such a unit can be less
        than wholly used)."""
        usage, nodes = self.usage, self.nodes
        held, shared = usage.held, usage.shared
        idle = held.keys().isdisjoint(names)
        light = not idle and any(
            n in nodes and (n in shared or held.get(n, 0) < len(nodes[n].devices)) for n in names
        )
        if pool.hosts_per_unit != 1:
            if idle:
                return FRESH, False
            if light:
                return ROOMY, True
            return (CROWDED if any(n in nodes for n in names) else None), False
        name = names[0]
        busy, node = held.get(name), nodes.get(name)
        if busy is None:
            return (FRESH if node is not None else None), light
        if node is None or node.state is not NodeState.READY:
            return None, light
        devices = len(node.devices)
        if busy < devices or name in shared:
            return (PARTIAL, max(0, devices - busy)), light
        return FULL, light


def movable(alloc: Allocation) -> bool:
    """Whether consolidation might move it: on one node, preemptible and requeued, with
    a checkpoint, holding whole GPUs (what ``scaling_consolidate`` asks but how long ago
    the checkpoint was and the GPUs' model)."""
    return (
        alloc.last_checkpoint is not None
        and alloc.preemptible
        and alloc.requeue
        and len(alloc.by_node) == 1
        and all(t.gpu_milli == MILLI and not t.mig_slots for t in alloc.tasks)
        and any(t.gpus for t in alloc.tasks)
    )


def _in_pool(node: Node) -> bool:
    """Whether ``node`` has the pool label (a pool's node), without ``label_map``."""
    return any(key == POOL_LABEL for key, _ in node.labels)
