"""What would let a pending job start sooner: relaxed variants of its request that fit now.

:func:`start_sooner` tries, with a trial placement on the current snapshot (nothing is
assumed), one relaxation at a time of what the job asks for, and says in a sentence each
one that would let it start now:

- a required topology as preferred ("fits now with topology preferred instead of required");
- the same GPUs over more nodes with fewer GPUs each ("fits now with 8 x 1 GPU"), the
  fewest nodes that fit, tasks per node adjusted so each task keeps its GPUs;
- without a node_selector label, without the GPU model (naming the model it would get);
- fewer CPUs or less memory per node, when those are what stands in the way.

When none fits it says what the job waits for (its estimated start, when known). Pure,
deterministic and bounded: at most ``MAX_TRIALS`` trial placements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace

from corral.core.allocation import Allocation
from corral.core.job import Job, JobSpec, Topology, TopologyLevel, TopologyMode
from corral.core.resources import GpuKind
from corral.core.units import format_duration, format_size
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.cycle import place_gang
from corral.scheduling.framework import NodeRequest, Profile, Unresolvable, Unschedulable
from corral.scheduling.plugins.topology import common_level
from corral.scheduling.snapshot import Snapshot

MAX_TRIALS = 24  # trial placements per job
MAX_RESHAPES = 6  # GPUs-per-node counts tried when spreading the GPUs over more nodes
MAX_LABELS = 4  # node_selector labels tried one by one

Outcome = Allocation | Unschedulable | Unresolvable


def start_sooner(
    job: Job,
    snapshot: Snapshot,
    profile: Profile,
    config: SchedulerConfig,
    now: float,
    estimated_start: float | None = None,
) -> list[str]:
    """Hints, best first, for a pending ``job``: changes to its request that would let it
    start now on ``snapshot`` (one per kind of change); else one sentence on what it waits
    for. ``estimated_start`` is the job's estimate from the plan, if any."""
    placement = config.queue_placement(job.queue)

    def trial(spec: JobSpec) -> Outcome:
        variant = replace(job, spec=spec)
        return place_gang(variant, NodeRequest.of(spec, placement), snapshot, profile, now=now)

    as_asked = trial(job.spec)
    if isinstance(as_asked, Allocation):
        return ["it fits now as asked: it waits for its turn (see the reason), not for resources"]
    hints: dict[str, str] = {}  # by kind of change
    trials = 1
    for kind, spec, hint in _variants(job.spec, snapshot):
        if kind in hints:
            continue
        if trials >= MAX_TRIALS:
            break
        trials += 1
        outcome = trial(spec)
        if isinstance(outcome, Allocation):
            hints[kind] = hint(outcome)
    return list(hints.values()) or [_waiting(as_asked, estimated_start, now)]


def _waiting(outcome: Outcome, estimated_start: float | None, now: float) -> str:
    prefix = "no single change to its request lets it start now"
    if isinstance(outcome, Unresolvable):
        return f"{prefix}, and as asked it cannot run on the ready nodes (see the reason)"
    if estimated_start is not None:
        return (
            f"{prefix}; expected to start in about {format_duration(estimated_start - now)}"
            ", as running jobs end (an estimate: it assumes they run for their estimates)"
        )
    return (
        f"{prefix}; it starts when running jobs free enough resources (no estimate: "
        "the work it waits for has no runtime_estimate or time_limit, or is too far ahead)"
    )


Variant = tuple[str, JobSpec, Callable[[Allocation], str]]  # (kind, spec, its hint)


def _variants(spec: JobSpec, snapshot: Snapshot) -> Iterator[Variant]:
    """Relaxed copies of ``spec``, one change each, in the order hints are given; of the
    variants of one kind only the first that fits is hinted."""
    yield from _topology_preferred(spec, snapshot)
    yield from _reshaped(spec, snapshot)
    yield from _without_selector(spec)
    yield from _any_model(spec, snapshot)
    yield from _fewer_cpus_or_memory(spec, snapshot)


def _topology_preferred(spec: JobSpec, snapshot: Snapshot) -> Iterator[Variant]:
    topology = spec.topology
    if topology is None or topology.mode is not TopologyMode.REQUIRED:
        return
    if topology.level is TopologyLevel.ANY:
        return

    def hint(alloc: Allocation) -> str:
        text = "fits now with topology preferred instead of required"
        if topology.level is TopologyLevel.NVLINK:
            return text + " (its GPUs would span NVLink domains)"
        if len(alloc.nodes) > 1:
            level, domain = common_level([snapshot.nodes[n].node for n in alloc.nodes])
            where = "across spines" if level is TopologyLevel.ANY else f"within {level} {domain}"
            return f"{text} (it would run {where})"
        return text

    relaxed = Topology(topology.level, TopologyMode.PREFERRED)
    yield "topology", replace(spec, topology=relaxed), hint


def _reshaped(spec: JobSpec, snapshot: Snapshot) -> Iterator[Variant]:
    """The same GPUs over more nodes with fewer on each (CPUs and memory scaled alike), the
    fewest nodes first: one task per node stays one (a launcher that uses the node's GPUs),
    several tasks per node keep their GPUs each (so the world size stays)."""
    per_node, tasks = spec.gpus.count, spec.tasks_per_node
    if spec.gpus.kind is not GpuKind.WHOLE or spec.tpu is not None or per_node % tasks:
        return
    topology = spec.topology
    if topology is not None and topology.level in (TopologyLevel.NODE, TopologyLevel.NVLINK):
        if topology.mode is TopologyMode.REQUIRED:
            return  # it asked for one node
        topology = None
    per_task = per_node // tasks
    total = per_node * spec.nodes
    ready = sum(1 for v in snapshot.views() if v.node.state.schedulable)
    shapes = [
        gpus
        for gpus in range(per_node - 1, 0, -1)
        if total % gpus == 0 and (tasks == 1 or gpus % per_task == 0) and total // gpus <= ready
    ]
    for gpus in shapes[:MAX_RESHAPES]:
        nodes, share = total // gpus, gpus / per_node
        reshaped = replace(
            spec,
            nodes=nodes,
            tasks_per_node=1 if tasks == 1 else gpus // per_task,
            gpus=replace(spec.gpus, count=gpus),
            cpus=spec.cpus * share if spec.cpus else spec.cpus,
            memory=int(spec.memory * share) if spec.memory else spec.memory,
            topology=topology,
        )
        fields = [f"nodes: {nodes}", f"gpus: {gpus}"]
        if reshaped.tasks_per_node != tasks:
            fields.append(f"tasks_per_node: {reshaped.tasks_per_node}")
        if reshaped.cpus:
            fields.append(f"cpus: {_trim(reshaped.cpus)}")
        if reshaped.memory:
            fields.append(f"memory: {format_size(reshaped.memory)}")
        text = f"fits now with {nodes} x {gpus} GPU{'s' if gpus > 1 else ''} ({', '.join(fields)})"
        yield "reshape", reshaped, lambda _alloc, text=text: text


def _without_selector(spec: JobSpec) -> Iterator[Variant]:
    """Without one label of the node_selector (each in turn), then without all of them."""
    labels = spec.node_selector
    for label in labels[:MAX_LABELS]:
        rest = tuple(x for x in labels if x != label)
        text = f"fits now without node_selector {label[0]}={label[1]}"
        yield "selector", replace(spec, node_selector=rest), lambda _alloc, text=text: text
    if len(labels) > 1:
        text = "fits now without node_selector " + ", ".join(f"{k}={v}" for k, v in labels)
        yield "selector", replace(spec, node_selector=()), lambda _alloc: text


def _any_model(spec: JobSpec, snapshot: Snapshot) -> Iterator[Variant]:
    """Any GPU model; the hint names the model(s) it would get."""
    pattern = spec.model_pattern
    if not pattern or spec.tpu is not None:
        return

    def hint(alloc: Allocation) -> str:
        models = sorted(
            {
                device.model
                for task in alloc.tasks
                for device in snapshot.nodes[task.node].node.devices
                if device.index in task.gpus
            }
        )
        return f"fits now on {', '.join(models) or 'other GPUs'} instead of {pattern}"

    yield "model", replace(spec, gpu_model=None, gpus=replace(spec.gpus, model=None)), hint


def _fewer_cpus_or_memory(spec: JobSpec, snapshot: Snapshot) -> Iterator[Variant]:
    """Without the CPU (memory) request; the hint names the most its nodes have free."""
    if spec.cpus:
        asked = _trim(spec.cpus)

        def cpus(alloc: Allocation) -> str:
            free = math.floor(min(snapshot.nodes[n].free_cpus for n in alloc.nodes))
            if free <= 0:
                return f"fits now without the cpus request ({asked} per node)"
            return f"fits now with {free} CPUs per node instead of {asked}"

        yield "cpus", replace(spec, cpus=None), cpus
    if spec.memory:
        wanted = format_size(spec.memory)

        def memory(alloc: Allocation) -> str:
            free = min(snapshot.nodes[n].free_memory for n in alloc.nodes) // 10**9 * 10**9
            if free <= 0:
                return f"fits now without the memory request ({wanted} per node)"
            return f"fits now with {format_size(free)} memory per node instead of {wanted}"

        yield "memory", replace(spec, memory=None), memory


def _trim(value: float) -> int | float:
    return int(value) if value == int(value) else round(value, 2)
