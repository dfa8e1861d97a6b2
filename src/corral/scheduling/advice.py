"""What would let a pending job start sooner: relaxed variants of its request that fit now.

:func:`start_sooner` tries, with a trial placement on the current snapshot (nothing is
assumed), one relaxation at a time of what the job asks for, and says in a sentence each
one that would let it start now:

- a required topology as preferred ("fits now with topology preferred instead of required");
- the same GPUs over more nodes with fewer GPUs each ("fits now with 8 x 1 GPU"), the
  fewest nodes that fit, tasks per node adjusted so each task keeps its GPUs;
- without a node_selector label, without the GPU model (naming the model it would get);
- fewer CPUs or less memory per node, when those are what stands in the way;
- held back by a backfill reservation of a job ahead of it (``plan.wait_of``): it says so
  first (whose, on which nodes, until when) and hints a ``runtime_estimate`` short enough
  to end before that reservation starts; every trial keeps off the reserved nodes.

It never says a job "fits now as asked" unless the plan has it start now. When none fits
it says what the job waits for (its estimated start, when known). Pure, deterministic and
bounded: at most ``MAX_TRIALS`` trial placements.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import replace

from corral.core.allocation import Allocation
from corral.core.job import Job, JobSpec, Topology, TopologyLevel, TopologyMode
from corral.core.resources import GpuKind
from corral.core.units import format_duration, format_size
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.evaluation import NodeEvaluator
from corral.scheduling.framework import (
    NodeRequest,
    Profile,
    Reservation,
    Unresolvable,
    Unschedulable,
)
from corral.scheduling.placement import place_gang
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
    reservation: Reservation | None = None,
) -> list[str]:
    """Hints, best first, for a pending ``job``: changes to its request that would let it
    start now on ``snapshot`` (one per kind of change); else one sentence on what it waits
    for. ``estimated_start`` is the job's estimate from the plan, if any; ``reservation``
    the one of a job ahead of it whose nodes it may not use while it would run past its
    start (``plan.wait_of``)."""
    placement = config.queue_placement(job.queue)
    evaluator = NodeEvaluator(profile)  # filter and score results, shared by the trials

    def trial(spec: JobSpec, reserved: bool = True) -> Outcome:
        variant = replace(job, spec=spec)
        request = NodeRequest.of(spec, placement)
        held = _held(variant, reservation, now) if reserved else None
        return place_gang(variant, request, snapshot, profile, evaluator, held, now=now)

    as_asked = trial(job.spec)
    if isinstance(as_asked, Allocation):
        return [_turn(estimated_start, now)]
    trials = 1
    applies = reservation if reservation is not None and _held(job, reservation, now) else None
    held_back: Reservation | None = None
    if applies is not None:
        trials += 1
        if isinstance(trial(job.spec, reserved=False), Allocation):
            held_back = applies
    lead = [_held_back(job, held_back, estimated_start, now)] if held_back else []
    hints: dict[str, str] = {}  # by kind of change
    variants: Iterator[Variant] = _variants(job.spec, snapshot)
    if held_back is not None:
        variants = itertools.chain(_shorter(job.spec, held_back, now, config), variants)
    for kind, spec, hint in variants:
        if kind in hints:
            continue
        if trials >= MAX_TRIALS:
            break
        trials += 1
        outcome = trial(spec)
        if isinstance(outcome, Allocation):
            hints[kind] = hint(outcome)
    return lead + list(hints.values()) or [_waiting(as_asked, estimated_start, now, applies)]


def _held(job: Job, reservation: Reservation | None, now: float) -> dict[str, int]:
    """The reserved nodes ``job`` may not use: it would still run when the reservation
    starts (as the cycle's backfill holds them)."""
    if reservation is None or reservation.job_id == job.id:
        return {}
    ends = now + job.expected_runtime
    if ends > reservation.start or math.isinf(ends):
        return dict.fromkeys(reservation.nodes, reservation.job_id)
    return {}


def _turn(estimated_start: float | None, now: float) -> str:
    """A job that fits the resources free now (and not reserved for another)."""
    if estimated_start is not None and estimated_start <= now:
        return "it fits now as asked: it should start at the next scheduling cycle"
    text = "as asked it fits the resources free now, but jobs ahead of it come first"
    if estimated_start is None:
        return f"{text} (see the reason: the job it waits behind, or its queue's quota)"
    return f"{text}: expected to start in about {format_duration(estimated_start - now)}"


def _held_back(job: Job, held: Reservation, estimated_start: float | None, now: float) -> str:
    """``held back by job 1's reservation of n0, n1 (...); expected to start in ...``"""
    runtime = job.expected_runtime
    if math.isinf(held.start):
        when = "it starts when running jobs without estimates end"
    else:
        when = f"it starts in about {format_duration(held.start - now)}"
    if math.isinf(runtime):
        why = "with no runtime_estimate or time_limit it could still run then"
    else:
        why = f"with its runtime estimate of {format_duration(runtime)} it would still run then"
    text = f"held back by job {held.job_id}'s reservation of {', '.join(sorted(held.nodes))} "
    text += f"({when}; {why})"
    if estimated_start is not None:
        text += f"; expected to start in about {format_duration(estimated_start - now)}"
    return text


def _shorter(
    spec: JobSpec, held: Reservation, now: float, config: SchedulerConfig
) -> Iterator[Variant]:
    """A ``runtime_estimate`` that ends before the reservation starts, in whole minutes,
    with a scheduling interval to spare (none under a minute)."""
    room = held.start - now - config.policy.interval
    if math.isinf(room) or room < 60:
        return
    seconds = room // 60 * 60
    text = (
        f"fits now with runtime_estimate: {format_duration(seconds)} or less, if it can finish "
        f"by then (it would end before job {held.job_id}'s reservation starts)"
    )
    yield "runtime", replace(spec, runtime_estimate=seconds), lambda _alloc: text


def _waiting(
    outcome: Outcome, estimated_start: float | None, now: float, behind: Reservation | None
) -> str:
    prefix = "no single change to its request lets it start now"
    if isinstance(outcome, Unresolvable):
        return f"{prefix}, and as asked it cannot run on the ready nodes (see the reason)"
    if estimated_start is not None:
        after = ""
        if behind is not None:
            nodes = ", ".join(sorted(behind.nodes))
            after = f" and after job {behind.job_id}, which has {nodes} reserved"
        return (
            f"{prefix}; expected to start in about {format_duration(estimated_start - now)}"
            f", as running jobs end{after} (an estimate: it assumes they run for their "
            "estimates)"
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
    if spec.roles:
        return  # its shape is its roles': no one reshape or relaxation says it right
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
