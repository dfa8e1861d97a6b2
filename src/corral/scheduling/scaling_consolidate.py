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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from corral.core.allocation import Allocation
from corral.core.node import Node, NodeState
from corral.core.pools import AutoscalingConfig, Pool, Unit
from corral.core.resources import MILLI
from corral.core.tpu import GPU
from corral.scheduling.scaling import Drain


@dataclass
class _Room:
    """What a node has free: whole GPUs by model, CPUs, memory."""

    gpus: dict[str, int]
    cpus: float
    memory: int


def consolidate(
    candidates: Sequence[tuple[Pool, Unit]],
    nodes: Mapping[str, Node],
    allocations: Sequence[Allocation],
    leaving: set[str],
    auto: AutoscalingConfig,
    now: float,
) -> tuple[list[Drain], list[tuple[int, str]]]:
    """Drains of units to consolidate and the preemptions that empty them (see the
    module). ``candidates``: ready units that idle scale-down could take (above the
    floor, kept by no policy); ``leaving``: nodes of units draining or deleted (no target).
    """
    if not auto.consolidate or not candidates:
        return [], []
    on_node: dict[str, list[Allocation]] = defaultdict(list)
    for alloc in allocations:
        for name in alloc.by_node:
            on_node[name].append(alloc)
    ranked = []
    for pool, unit in candidates:
        if now - unit.since < auto.scale_down_idle:
            continue
        total = sum(_gpus(nodes[n]) for n in unit.nodes if n in nodes)
        used = sum(
            len(t.gpus) * t.gpu_milli / MILLI
            for n in unit.nodes
            for alloc in on_node.get(n, ())
            for t in alloc.by_node.get(n, ())
        )
        if total and 0 < used < auto.consolidate_below * total:
            ranked.append((used / total, pool, unit))
    if not ranked:
        return [], []
    ranked.sort(key=lambda r: (r[0], r[2].name))
    rooms = _rooms(nodes, allocations, leaving)
    unit_of = {n: unit.name for _, _, unit in ranked for n in unit.nodes}
    drains: list[Drain] = []
    preemptions: list[tuple[int, str]] = []
    pools_done: set[str] = set()
    receiving: set[str] = set()  # units jobs move onto: they stay
    for share, pool, unit in ranked:
        if pool.name in pools_done or unit.name in receiving:
            continue
        own = {n: rooms.pop(n) for n in unit.nodes if n in rooms}  # not onto itself
        jobs = {a.job_id: a for n in unit.nodes for a in on_node.get(n, ())}
        moves = _moves(list(jobs.values()), nodes, rooms, auto, now)
        if moves is None:
            rooms.update(own)
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


def _rooms(
    nodes: Mapping[str, Node], allocations: Sequence[Allocation], excluded: set[str]
) -> dict[str, _Room]:
    """Free capacity of each ready node not in ``excluded``."""
    rooms: dict[str, _Room] = {}
    held: dict[str, set[int]] = defaultdict(set)
    cpus: dict[str, float] = defaultdict(float)
    memory: dict[str, int] = defaultdict(int)
    for alloc in allocations:
        for task in alloc.tasks:
            held[task.node].update(task.gpus)
            cpus[task.node] += task.cpus
            memory[task.node] += task.memory
    for name, node in nodes.items():
        if name in excluded or node.state is not NodeState.READY or node.tpu_chips:
            continue
        free: dict[str, int] = defaultdict(int)
        for device in node.devices:
            if device.kind == GPU and not device.mig and device.index not in held[name]:
                free[device.model] += 1
        rooms[name] = _Room(dict(free), node.cpus - cpus[name], node.memory - memory[name])
    return rooms


def _moves(
    jobs: list[Allocation],
    nodes: Mapping[str, Node],
    rooms: dict[str, _Room],
    auto: AutoscalingConfig,
    now: float,
) -> dict[int, str] | None:
    """Where each job would go (first fit, fullest node first), taking the room; None
    (and nothing taken) if one may not move or does not fit."""
    taken: list[tuple[str, str, int, float, int]] = []
    moves: dict[int, str] = {}
    for alloc in sorted(jobs, key=lambda a: -len(a.tasks[0].gpus)):
        need = _need(alloc, nodes, auto, now)
        target = None if need is None else _fit(rooms, *need)
        if need is None or target is None:
            for name, model, gpus, cpus, memory in taken:  # give back what was taken
                room = rooms[name]
                room.gpus[model] = room.gpus.get(model, 0) + gpus
                room.cpus += cpus
                room.memory += memory
            return None
        model, gpus, cpus, memory = need
        room = rooms[target]
        room.gpus[model] -= gpus
        room.cpus -= cpus
        room.memory -= memory
        taken.append((target, model, gpus, cpus, memory))
        moves[alloc.job_id] = target
    return moves


def _need(
    alloc: Allocation, nodes: Mapping[str, Node], auto: AutoscalingConfig, now: float
) -> tuple[str, int, float, int] | None:
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


def _fit(rooms: dict[str, _Room], model: str, gpus: int, cpus: float, memory: int) -> str | None:
    """The fullest node with room for it (fewest free GPUs of the model, then name)."""
    best = None
    for name, room in rooms.items():
        free = room.gpus.get(model, 0)
        if free >= gpus and room.cpus >= cpus and room.memory >= memory:
            key = (free, name)
            if best is None or key < best[0]:
                best = (key, name)
    return None if best is None else best[1]
