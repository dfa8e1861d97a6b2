"""The scheduler's working copy of the cluster: free resources per node.

Built from nodes and the allocations that hold resources (once per cycle, or kept by the
caller between cycles). ``assume`` and ``release`` apply a trial change and return a
function that undoes it, so preemption and backfill searches explore "what if" without
copying the cluster. Every change is logged by node name, so indexes built over the
snapshot (``evaluation.NodeEvaluator``) update only the nodes that changed; and the state
has an identifier (``Snapshot.state``) that an undo in reverse order gives back, so memos
of answers about one state (``scheduling.memo``) survive a search that puts back what it
tried.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from corral.core.allocation import Allocation
from corral.core.node import Node
from corral.core.resources import MILLI, model_matches


def node_likeness(node: Node) -> tuple:
    """Everything about ``node`` but its name, address and device UUIDs: nodes with equal
    likeness and equal free capacity look the same to the scheduler."""
    devices = tuple(d if d.uuid is None else replace(d, uuid=None) for d in node.devices)
    return (
        devices,
        node.cpus,
        node.memory,
        node.network,
        node.labels,
        node.state,
        node.attributes,
    )


class NodeView:
    """Free capacity of one node. ``used_milli[i]`` is the share of ``devices[i]`` in use.

    A device in MIG mode (``Device.mig`` not empty) is only ever handed out instance by
    instance: ``mig_used[i][slot]`` counts the holders of instance ``slot`` of
    ``devices[i]``, and its ``used_milli`` is the fraction of its instances in use (so
    ``used_gpus`` stays meaningful); whole and fractional requests never land on it.

    ``version`` changes whenever the free capacity does, so memos of filter and score
    results can tell which nodes to look at again.
    """

    __slots__ = (
        "node",
        "free_cpus",
        "free_memory",
        "used_milli",
        "mem_used",
        "shared",
        "mig_used",
        "version",
        "kind",
        "labels",
        "_position",
        "_likeness",
    )

    def __init__(self, node: Node) -> None:
        self.node = node
        self.free_cpus = node.cpus
        self.free_memory = node.memory
        self.used_milli = [0] * len(node.devices)
        self.mem_used = [0] * len(node.devices)  # device memory promised to shares
        self.shared = [False] * len(node.devices)  # holds fractional shares
        self.mig_used = [[0] * len(d.mig) for d in node.devices]
        self.version = 0
        self.kind = 0  # nodes of one kind are alike but for their names (see Snapshot)
        self.labels = node.label_map
        self._position = {d.index: i for i, d in enumerate(node.devices)}
        self._likeness: tuple[int, tuple] = (-1, ())  # (version, likeness) last computed

    @property
    def name(self) -> str:
        return self.node.name

    def position(self, device_index: int) -> int:
        return self._position[device_index]

    def free_whole(self, model: str | None = None) -> list[int]:
        """Indices of devices with nothing on them whose model matches."""
        return [
            d.index
            for d, used in zip(self.node.devices, self.used_milli, strict=True)
            if used == 0 and not d.mig and model_matches(d.model, model)
        ]

    def free_whole_count(self, model: str | None = None) -> int:
        """``len(free_whole(model))`` without building the list."""
        if model is None:
            return sum(
                1
                for d, used in zip(self.node.devices, self.used_milli, strict=True)
                if used == 0 and not d.mig
            )
        return sum(
            1
            for d, used in zip(self.node.devices, self.used_milli, strict=True)
            if used == 0 and not d.mig and model_matches(d.model, model)
        )

    def free_mig(self, profile: str, model: str | None = None) -> list[tuple[int, int]]:
        """Free MIG instances of ``profile`` on devices whose model matches, as
        ``(device index, slot)`` in device then slot order."""
        profile = profile.lower()
        return [
            (d.index, slot)
            for d, used in zip(self.node.devices, self.mig_used, strict=True)
            if d.mig and model_matches(d.model, model)
            for slot, declared in enumerate(d.mig)
            if used[slot] == 0 and declared.lower() == profile
        ]

    def share_memory_fits(self, pos: int, gpu_memory: int | None) -> bool:
        """Whether device ``pos`` has ``gpu_memory`` not yet promised to its shares."""
        if not gpu_memory:
            return True
        return self.node.devices[pos].memory - self.mem_used[pos] >= gpu_memory

    def matching(self, model: str | None = None) -> int:
        """Number of devices (busy or not) whose model matches: the node's capacity."""
        return self.node.capacity(model)

    def likeness(self) -> tuple:
        """Equal for two views of the same kind with the same free capacity (so every
        filter and score answers the same for them). Computed once per ``version``."""
        at, likeness = self._likeness
        if at == self.version:
            return likeness
        mig = tuple(map(tuple, self.mig_used)) if any(self.mig_used) else ()
        likeness = (
            self.kind,
            tuple(self.used_milli),
            tuple(self.mem_used) if any(self.mem_used) else (),
            tuple(self.shared),
            mig,
            self.free_cpus,
            self.free_memory,
        )
        self._likeness = (self.version, likeness)
        return likeness

    @property
    def used_gpus(self) -> float:
        return sum(self.used_milli) / MILLI

    def _apply(self, alloc: Allocation, sign: int) -> None:
        self.version += 1
        for task in alloc.by_node.get(self.node.name, ()):
            self.free_cpus -= sign * task.cpus
            self.free_memory -= sign * task.memory
            if task.mig_slots:
                self._apply_mig(task.gpus, task.mig_slots, sign)
                continue
            for index in task.gpus:
                pos = self._position.get(index)
                if pos is None:
                    continue
                self.used_milli[pos] += sign * task.gpu_milli
                self.mem_used[pos] += sign * task.gpu_memory
                if task.gpu_milli < MILLI:
                    self.shared[pos] = self.used_milli[pos] > 0

    def _apply_mig(self, gpus: tuple[int, ...], slots: tuple[int, ...], sign: int) -> None:
        for index, slot in zip(gpus, slots, strict=True):
            pos = self._position.get(index)
            if pos is None or not 0 <= slot < len(self.mig_used[pos]):
                continue  # not this node's device or instance (stale): nothing to count
            counts = self.mig_used[pos]
            counts[slot] += sign
            busy = sum(1 for c in counts if c > 0)
            self.used_milli[pos] = MILLI * busy // len(counts)


class Snapshot:
    """Nodes by name with their free capacity; allocations may be assumed and undone."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.nodes: dict[str, NodeView] = {n.name: NodeView(n) for n in nodes}
        self._views = list(self.nodes.values())
        self._kinds: dict[tuple, int] = {}
        for view in self._views:
            view.kind = self._kinds.setdefault(node_likeness(view.node), len(self._kinds))
        self._log: list[str] = []  # names of changed nodes, oldest first
        self._log_base = 0  # change position of self._log[0]
        self._states = itertools.count(1)
        self._state = 0

    @property
    def state(self) -> int:
        """An identifier of the free capacity now: equal identifiers, equal states. Every
        change makes a new one; its undo gives back the one before it when nothing else
        changed in between (trial changes undone in reverse order, as searches do)."""
        return self._state

    @property
    def change_position(self) -> int:
        """The number of node changes so far (a position in the change log)."""
        return self._log_base + len(self._log)

    def changes_since(self, position: int) -> list[str] | None:
        """Names of the nodes changed since ``position`` (with repeats), or None when the
        log no longer reaches back that far (the caller must look at every node)."""
        if position < self._log_base:
            return None
        return self._log[position - self._log_base :]

    def _changed(self, name: str) -> None:
        self._log.append(name)
        if len(self._log) > max(8192, 8 * len(self._views)):
            drop = len(self._log) // 2
            del self._log[:drop]
            self._log_base += drop

    @classmethod
    def build(cls, nodes: Iterable[Node], allocations: Iterable[Allocation]) -> Snapshot:
        snapshot = cls(nodes)
        for alloc in allocations:
            snapshot._apply(alloc, +1)  # (no undo to make)
        snapshot._state = next(snapshot._states)
        return snapshot

    def set_node(self, node: Node) -> None:
        """Replace a node's description (its state, say), keeping what is allocated on it.

        The devices must be the same ones; use a new snapshot when they change.
        """
        view = self.nodes[node.name]
        if view.node.devices != node.devices:
            raise ValueError(f"node {node.name}: devices changed; build a new snapshot")
        view.node = node
        view.kind = self._kinds.setdefault(node_likeness(node), len(self._kinds))
        view.labels = node.label_map
        view.version += 1
        self._changed(node.name)
        self._state = next(self._states)

    def views(self) -> Sequence[NodeView]:
        """Every node, in a stable order (do not mutate the sequence)."""
        return self._views

    def assume(self, alloc: Allocation) -> Callable[[], None]:
        """Take ``alloc``'s resources; returns the undo."""
        return self._change(alloc, +1)

    def release(self, alloc: Allocation) -> Callable[[], None]:
        """Give back ``alloc``'s resources (what if it were preempted); returns the undo."""
        return self._change(alloc, -1)

    def _change(self, alloc: Allocation, sign: int) -> Callable[[], None]:
        before = self._state
        self._apply(alloc, sign)
        after = self._state = next(self._states)

        def undo() -> None:
            self._apply(alloc, -sign)
            self._state = before if self._state == after else next(self._states)

        return undo

    def _apply(self, alloc: Allocation, sign: int) -> None:
        for name in alloc.nodes:
            view = self.nodes.get(name)
            if view is not None:
                view._apply(alloc, sign)
                self._changed(name)


class FreeWholeGpus:
    """Ready nodes that match a node selector, counted by their free whole GPUs of a
    model, kept up to date from the snapshot's change log: a job needing ``g`` of them on
    each of ``n`` nodes cannot fit while fewer than ``n`` nodes have ``g`` (a necessary
    condition, cheap to ask before a trial placement)."""

    def __init__(self, selector: tuple[tuple[str, str], ...], model: str | None) -> None:
        self.selector, self.model = selector, model
        self.by_free: list[int] = []  # member nodes by their number of free whole GPUs
        self.free_on: dict[str, int] = {}  # member node -> its count in by_free
        self.synced = -1  # snapshot change-log position; -1: never counted

    def has(self, snapshot: Snapshot, gpus: int, nodes: int) -> bool:
        """Whether at least ``nodes`` member nodes have ``gpus`` free whole GPUs now."""
        self.sync(snapshot)
        return gpus < len(self.by_free) and sum(self.by_free[gpus:]) >= nodes

    def sync(self, snapshot: Snapshot) -> None:
        changed = snapshot.changes_since(self.synced) if self.synced >= 0 else None
        if changed is None:
            views = snapshot.views()
            self.by_free = [0] * (max((len(v.node.devices) for v in views), default=0) + 1)
            self.free_on.clear()
            for view in views:
                self._recount(view)
        elif changed:
            nodes = snapshot.nodes
            for name in set(changed):
                self._recount(nodes[name])
        self.synced = snapshot.change_position

    def _recount(self, view: NodeView) -> None:
        name = view.name
        old = self.free_on.pop(name, None)
        if old is not None:
            self.by_free[old] -= 1
        if not view.node.state.schedulable or any(
            view.labels.get(k) != v for k, v in self.selector
        ):
            return
        if self.model is None and not any(view.mig_used):
            free = view.used_milli.count(0)  # free_whole_count(), faster without MIG
        else:
            free = view.free_whole_count(self.model)
        self.free_on[name] = free
        self.by_free[free] += 1
