"""What the allocations hold on each node, for the autoscaler (``scaling_index`` keeps one
as allocations come and go; ``NodeUsage.of`` counts them at once). Pure data, no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from corral.core.allocation import Allocation
from corral.core.resources import MILLI


@dataclass
class NodeUsage:
    """What the allocations hold, per node: whole devices (``held``; every busy node has
    an entry), nodes with shared devices or MIG instances (``shared``), CPUs, and the
    allocations on each node (:meth:`on`, in their order). Kept with :meth:`add` and
    :meth:`remove`, or built at once with :meth:`of`."""

    held: dict[str, int] = field(default_factory=dict)
    shared: set[str] = field(default_factory=set)
    cpus: dict[str, float] = field(default_factory=dict)
    # each busy node's first allocation; the whole list where there are more
    first: dict[str, Allocation] = field(default_factory=dict)
    more: dict[str, list[Allocation]] = field(default_factory=dict)

    @classmethod
    def of(cls, allocations: Iterable[Allocation]) -> NodeUsage:
        usage = cls()
        held, shared, cpus = usage.held, usage.shared, usage.cpus
        first, more = usage.first, usage.more
        for alloc in allocations:
            for task in alloc.tasks:
                name = task.node
                if task.mig_slots or task.gpu_milli < MILLI:
                    shared.add(name)
                    held.setdefault(name, 0)
                else:
                    held[name] = held.get(name, 0) + len(task.gpus)
                if task.cpus:
                    cpus[name] = cpus.get(name, 0.0) + task.cpus
                found = first.setdefault(name, alloc)
                if found is not alloc or (more and name in more):  # several on the node
                    listed = more.setdefault(name, [found])
                    if listed[-1] is not alloc:
                        listed.append(alloc)
        return usage

    def on(self, node: str) -> list[Allocation]:
        """The allocations on ``node``, in their order."""
        listed = self.more.get(node)
        if listed is not None:
            return listed
        found = self.first.get(node)
        return [found] if found is not None else []

    def add(self, alloc: Allocation) -> None:
        """``alloc`` holds its devices now (after those already there)."""
        for name in alloc.by_node:
            listed = self.on(name)
            listed.append(alloc)
            self._count(name, listed)

    def remove(self, alloc: Allocation) -> None:
        """``alloc`` (the same job and attempt) holds nothing any more."""
        key = (alloc.job_id, alloc.attempt)
        for name in alloc.by_node:
            listed = [a for a in self.on(name) if (a.job_id, a.attempt) != key]
            self._count(name, listed)

    def _count(self, name: str, listed: list[Allocation]) -> None:
        """Count ``name``'s allocations again (as :meth:`of` counts them)."""
        for found in (self.held, self.cpus, self.first, self.more):
            found.pop(name, None)
        self.shared.discard(name)
        if not listed:
            return
        self.first[name] = listed[0]
        if len(listed) > 1:
            self.more[name] = listed
        held = 0
        for alloc in listed:
            for task in alloc.by_node[name]:
                if task.mig_slots or task.gpu_milli < MILLI:
                    self.shared.add(name)
                else:
                    held += len(task.gpus)
                if task.cpus:
                    self.cpus[name] = self.cpus.get(name, 0.0) + task.cpus
        self.held[name] = held
