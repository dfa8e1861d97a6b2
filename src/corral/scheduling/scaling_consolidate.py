"""Consolidating scale-down: empty a pool unit whose GPUs are mostly free by moving its
jobs onto the free GPUs of other nodes, so that the unit can leave.

Idle scale-down alone leaves a pool paying for whole nodes that one or two long small
jobs keep alive (on the Philly traces, a third more paid than used GPU-hours). As the
Kubernetes cluster autoscaler does below its utilization threshold (0.5 there; 0.75 by
default here, since only jobs that lose at most ``consolidate_max_loss`` of work move,
and only when nothing is pending: on the Philly traces 0.5 left paid GPU-hours 20% over
used where 0.75 leaves at most 13.6%), a ready unit is consolidated when, in a quiet
moment (no job pending), all of this holds:

- it has been ready for ``scale_down_idle``, is above its pool's floor, no policy keeps
  it, and less than ``consolidate_below`` of its GPUs are allocated;
- every job on it runs on one node, holds whole GPUs, may be preempted and requeued,
  and loses at most ``consolidate_max_loss`` seconds of work when stopped (it saves its
  state when signalled, as ``corral.train`` jobs do, or checkpointed that recently);
- every such job fits, first fit on the fullest node, into the free whole GPUs (of the
  model it holds), CPUs and memory of other ready nodes that are not leaving (a fixed
  node, or another unit, which then stays this pass).

The unit is then drained and its jobs preempted; the scheduler places them again (the
nodes they fit on are free: nothing is pending), and the drained unit is deleted once
empty. At most one unit per pool per pass, least used first.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sortedcontainers import SortedList

from corral.core.allocation import Allocation
from corral.core.node import Node, NodeState
from corral.core.pools import AutoscalingConfig, Pool, Unit
from corral.core.resources import MILLI
from corral.core.tpu import GPU
from corral.scheduling.scaling import Drain
from corral.scheduling.scaling_index import ScalingIndex
from corral.scheduling.scaling_usage import NodeUsage


@dataclass
class _Room:
    """What a node has free: whole GPUs by model, CPUs, memory."""

    gpus: dict[str, int]
    cpus: float
    memory: int


def consolidate(  # noqa: PLR0913
    candidates: Sequence[tuple[Pool, Unit, tuple[str, ...]]],
    nodes: Mapping[str, Node],
    usage: NodeUsage,
    rooms: Callable[[], Rooms],
    leaving: set[str],
    auto: AutoscalingConfig,
    now: float,
) -> tuple[list[Drain], list[tuple[int, str]]]:
    """Drains of units to consolidate and the preemptions that empty them (see the
    module). ``candidates``: ready units that idle scale-down could take (above the
    floor, kept by no policy), with their nodes' names; ``usage``: the allocations on
    each node; ``rooms``: what the nodes have free (asked for when a unit's jobs may all
    move); ``leaving``: nodes of units draining or deleted (no target).
    """
    if not auto.consolidate or not candidates:
        return [], []
    on_node = usage.on
    ranked = []
    for pool, unit, names in candidates:
        if now - unit.since < auto.scale_down_idle:
            continue
        total = sum(_gpus(nodes[n]) for n in names if n in nodes)
        used = sum(
            len(t.gpus) * t.gpu_milli / MILLI
            for n in names
            for alloc in on_node(n)
            for t in alloc.by_node.get(n, ())
        )
        if total and 0 < used < auto.consolidate_below * total:
            ranked.append((used / total, pool, unit, names))
    if not ranked:
        return [], []
    ranked.sort(key=lambda r: (r[0], r[2].name))
    trial: _Trial | None = None  # (made when a unit's jobs may all move)
    unit_of = {n: unit.name for _, _, unit, names in ranked for n in names}
    drains: list[Drain] = []
    preemptions: list[tuple[int, str]] = []
    pools_done: set[str] = set()
    receiving: set[str] = set()  # units jobs move onto: they stay
    for share, pool, unit, names in ranked:
        if pool.name in pools_done or unit.name in receiving:
            continue
        jobs = {a.job_id: a for n in names for a in on_node(n)}
        needs = _needs(list(jobs.values()), nodes, auto, now)
        if needs is None:
            continue
        if trial is None:
            trial = _Trial(rooms(), leaving)
        own = [n for n in names if n not in trial.out]  # not onto itself
        trial.out.update(own)
        moves = _moves(needs, trial)
        if moves is None:
            trial.out.difference_update(own)
            continue
        receiving |= {unit_of[t] for t in moves.values() if t in unit_of}
        pools_done.add(pool.name)
        why = (
            f"consolidating: {share:.0%} of its GPUs used; its {len(jobs)} job(s) fit on "
            "other nodes"
        )
        drains.append(Drain(pool.name, unit.name, why))
        for job_id, target in sorted(moves.items()):
            preemptions.append(
                (job_id, f"moved off {unit.name} (pool {pool.name}) to free it: fits {target}")
            )
    return drains, preemptions


def _gpus(node: Node) -> int:
    return sum(1 for d in node.devices if d.kind == GPU and not d.mig)


class Rooms:
    """What each ready node with GPUs (not a TPU host) has free, by the fullest first per
    GPU model; kept by the index (``ScalingIndex.watch``) as nodes and allocations
    change, from when a consolidation first needs it."""

    def __init__(self, index: ScalingIndex) -> None:
        self._index = index
        self.room: dict[str, _Room] = {}
        found: dict[str, list[tuple[int, str]]] = {}
        for name in index.nodes:
            room = self._count(name)
            if room is not None:
                for model, free in room.gpus.items():
                    found.setdefault(model, []).append((free, name))
        self.fullest = {model: SortedList(items) for model, items in found.items()}
        index.watch(self.changed)

    def changed(self, name: str) -> None:
        """Node ``name`` changed, or what it holds."""
        old = self.room.pop(name, None)
        for model, free in old.gpus.items() if old is not None else ():
            self.fullest[model].remove((free, name))
        room = self._count(name)
        for model, free in room.gpus.items() if room is not None else ():
            self.fullest.setdefault(model, SortedList()).add((free, name))

    def _count(self, name: str) -> _Room | None:
        node = self._index.nodes.get(name)
        if node is None or node.state is not NodeState.READY or node.tpu_chips:
            return None
        held: set[int] = set()
        cpus, memory = 0.0, 0
        for alloc in self._index.usage.on(name):
            for task in alloc.by_node[name]:
                held.update(task.gpus)
                cpus += task.cpus
                memory += task.memory
        free: dict[str, int] = defaultdict(int)
        for device in node.devices:
            if device.kind == GPU and not device.mig and device.index not in held:
                free[device.model] += 1
        room = self.room[name] = _Room(dict(free), node.cpus - cpus, node.memory - memory)
        return room


class _Trial:
    """The rooms as this pass's moves leave them: nodes ``leaving`` and ``out`` (of units
    being emptied) take nothing; the rooms moves took from are copied (``changed``), the
    kept ones are left as they are."""

    def __init__(self, rooms: Rooms, leaving: set[str]) -> None:
        self.rooms, self.leaving = rooms, leaving
        self.out: set[str] = set()
        self.changed: dict[str, _Room] = {}
        self.fullest: dict[str, SortedList] = {}  # the changed ones'

    def fit(self, model: str, gpus: int, cpus: float, memory: int) -> str | None:
        """The fullest node with room for it (fewest free GPUs of the model, then name)."""
        best: tuple[int, str] | None = None
        leaving, out, changed, room = self.leaving, self.out, self.changed, self.rooms.room
        for key in self.rooms.fullest.get(model, _NONE).irange((gpus, "")):
            name = key[1]
            if name in leaving or name in out or name in changed:
                continue
            if room[name].cpus >= cpus and room[name].memory >= memory:
                best = key
                break
        for key in self.fullest.get(model, _NONE).irange((gpus, "")):
            name = key[1]
            if name not in out and changed[name].cpus >= cpus and changed[name].memory >= memory:
                best = key if best is None or key < best else best
                break
        return None if best is None else best[1]

    def take(self, name: str, model: str, gpus: int, cpus: float, memory: int) -> None:
        room = self._changing(name)
        room.gpus[model] -= gpus
        room.cpus -= cpus
        room.memory -= memory
        self._list(name, room)

    def give(self, name: str, model: str, gpus: int, cpus: float, memory: int) -> None:
        room = self._changing(name)
        room.gpus[model] = room.gpus.get(model, 0) + gpus
        room.cpus += cpus
        room.memory += memory
        self._list(name, room)

    def _changing(self, name: str) -> _Room:
        room = self.changed.get(name)
        if room is None:
            kept = self.rooms.room[name]
            room = self.changed[name] = _Room(dict(kept.gpus), kept.cpus, kept.memory)
        else:
            for model, free in room.gpus.items():
                if free > 0:
                    self.fullest[model].remove((free, name))
        return room

    def _list(self, name: str, room: _Room) -> None:
        for model, free in room.gpus.items():
            if free > 0:
                self.fullest.setdefault(model, SortedList()).add((free, name))


_NONE: SortedList = SortedList()


Need = tuple[str, int, float, int]  # GPU model, whole GPUs, CPUs, memory


def _needs(
    jobs: list[Allocation], nodes: Mapping[str, Node], auto: AutoscalingConfig, now: float
) -> list[tuple[int, Need]] | None:
    """What each job needs, the most GPUs first; None if one may not move."""
    found = []
    for alloc in sorted(jobs, key=lambda a: -len(a.tasks[0].gpus)):
        need = _need(alloc, nodes, auto, now)
        if need is None:
            return None
        found.append((alloc.job_id, need))
    return found


def _moves(needs: list[tuple[int, Need]], trial: _Trial) -> dict[int, str] | None:
    """Where each job would go (first fit, fullest node first), taking the room; None
    (and nothing taken) if one does not fit."""
    taken: list[tuple[str, str, int, float, int]] = []
    moves: dict[int, str] = {}
    for job_id, need in needs:
        target = trial.fit(*need)
        if target is None:
            for name, model, gpus, cpus, memory in taken:  # give back what was taken
                trial.give(name, model, gpus, cpus, memory)
            return None
        trial.take(target, *need)
        taken.append((target, *need))
        moves[job_id] = target
    return moves


def _need(
    alloc: Allocation, nodes: Mapping[str, Node], auto: AutoscalingConfig, now: float
) -> Need | None:
    """(GPU model, whole GPUs, CPUs, memory) a movable job needs, None if it may not move."""
    if len(alloc.by_node) != 1 or not alloc.preemptible or not alloc.requeue:
        return None
    saved = alloc.last_checkpoint
    if saved is None or (not math.isinf(saved) and now - saved > auto.consolidate_max_loss):
        return None
    if any(t.gpu_milli != MILLI or t.mig_slots for t in alloc.tasks):
        return None
    (name,) = alloc.by_node
    node = nodes.get(name)
    devices = {d.index: d.model for d in node.devices} if node is not None else {}
    held = [i for t in alloc.tasks for i in t.gpus]
    models = {devices.get(i) for i in held}
    if not held or len(models) != 1 or None in models:
        return None
    cpus = sum(t.cpus for t in alloc.tasks)
    memory = sum(t.memory for t in alloc.tasks)
    return str(models.pop()), len(held), cpus, memory
