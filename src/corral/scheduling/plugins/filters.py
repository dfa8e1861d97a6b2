"""Built-in filters: node state, labels, GPU model, and resource fit.

Devices in MIG mode only host MIG requests, one free instance of the asked profile each;
whole and fractional requests only land on devices that are not in MIG mode. TPU hosts
(nodes with TPU chips) take only TPU slices of their generation, and then all their chips.

Each answers whether one node can host one node's share of a job (``NodeRequest``).
Pure helpers (``fits_capacity``, ``fits_free``) are tested on their own.
"""

from __future__ import annotations

from corral.core.resources import GpuKind, model_matches
from corral.core.tpu import TPU
from corral.scheduling.framework import NodeRequest, Status, Unresolvable, Unschedulable
from corral.scheduling.snapshot import NodeView


class NodeStateFilter:
    """Only ready nodes take new work. Draining and lost nodes are Unresolvable: no
    completion or preemption on them would make room."""

    name = "node-state"

    def filter(self, request: NodeRequest, node: NodeView) -> Status:
        if node.node.state.schedulable:
            return None
        return Unresolvable(f"node {node.node.state.value}")


class NodeSelectorFilter:
    """Every ``node_selector`` label must match the node's labels."""

    name = "node-selector"

    def filter(self, request: NodeRequest, node: NodeView) -> Status:
        labels = node.labels
        for key, value in request.selector:
            if labels.get(key) != value:
                return Unresolvable(f"label {key}={value} does not match")
        return None


def fits_capacity(request: NodeRequest, node: NodeView) -> str | None:
    """Why the node could never host the request, or None if it could when empty."""
    spec = node.node
    tpu = _tpu_mismatch(request, node)
    if tpu:
        return tpu
    if request.gpus.kind is GpuKind.WHOLE:
        have = node.matching(request.model)
        if have < request.gpus.count:
            model = f" {request.model}" if request.model else ""
            return f"has {have}{model} GPUs, needs {request.gpus.count}"
    elif request.gpus.kind is GpuKind.FRACTION:
        if node.matching(request.model) == 0:
            return "has no matching GPU to share"
        if request.gpu_memory and not any(
            d.memory >= request.gpu_memory
            for d in spec.devices
            if not d.mig and model_matches(d.model, request.model)
        ):
            return "has no GPU with enough memory for the share"
    elif request.gpus.kind is GpuKind.MIG and not _declares_mig(request, node):
        model = f" on {request.model} GPUs" if request.model else ""
        return f"declares no {request.gpus.mig_profile} MIG instance{model}"
    if request.cpus > spec.cpus:
        return f"has {spec.cpus:g} CPUs, needs {request.cpus:g}"
    if request.memory > spec.memory:
        return f"has {spec.memory / 1e9:g}GB memory, needs {request.memory / 1e9:g}GB"
    return None


def fits_free(request: NodeRequest, node: NodeView) -> str | None:
    """Why the node cannot host the request now, or None if it can."""
    if request.gpus.tpu or node.node.tpu_chips:
        busy = _tpu_busy(request, node)
        if busy:
            return busy
    elif request.gpus.kind is GpuKind.WHOLE:
        free = node.free_whole_count(request.model)
        if free < request.gpus.count:
            return f"{free} of {request.gpus.count} GPUs free"
    elif request.gpus.kind is GpuKind.FRACTION and not _fraction_slot(request, node):
        return f"no GPU with {request.gpus.milli / 1000:g} free"
    elif request.gpus.kind is GpuKind.MIG and not node.free_mig(
        request.gpus.mig_profile or "", request.model
    ):
        return f"no free {request.gpus.mig_profile} MIG instance"
    if request.cpus > node.free_cpus + 1e-9:
        return f"{node.free_cpus:g} of {request.cpus:g} CPUs free"
    if request.memory > node.free_memory:
        return f"{node.free_memory / 1e9:g}GB of {request.memory / 1e9:g}GB memory free"
    return None


def _tpu_mismatch(request: NodeRequest, node: NodeView) -> str | None:
    """A TPU slice needs a TPU host of its generation placed in a pod; a TPU host takes
    nothing else."""
    generation, chips = request.gpus.tpu, node.node.tpu_chips
    if not generation:
        return "is a TPU host (takes TPU slices only)" if chips else None
    if not chips:
        return f"is not a TPU host (needs {generation} chips)"
    models = sorted({d.model for d in node.node.devices if d.kind == TPU})
    if generation.lower() not in (m.lower() for m in models):
        return f"has {'/'.join(models)} TPU chips, needs {generation}"
    if node.node.tpu_host is None:
        return "is a TPU host outside any declared pod (no pod labels)"
    return None


def _tpu_busy(request: NodeRequest, node: NodeView) -> str | None:
    """A TPU slice takes every chip of the host: all must be free."""
    mismatch = _tpu_mismatch(request, node)
    if mismatch:
        return mismatch
    devices = node.node.devices
    free = sum(
        1 for d, used in zip(devices, node.used_milli, strict=True) if d.kind == TPU and used == 0
    )
    chips = node.node.tpu_chips
    return None if free == chips else f"{free} of {chips} TPU chips free"


def _declares_mig(request: NodeRequest, node: NodeView) -> bool:
    profile = (request.gpus.mig_profile or "").lower()
    return any(
        profile in (p.lower() for p in d.mig)
        for d in node.node.devices
        if d.mig and model_matches(d.model, request.model)
    )


def _fraction_slot(request: NodeRequest, node: NodeView) -> bool:
    return any(
        True
        for pos, device in enumerate(node.node.devices)
        if not device.mig
        and model_matches(device.model, request.model)
        and node.share_memory_fits(pos, request.gpu_memory)
        and node.used_milli[pos] + request.gpus.milli <= 1000
        and (node.used_milli[pos] == 0 or node.shared[pos])
    )


class ResourceFitFilter:
    """Enough GPUs of the right model, CPUs and memory: ever, and now."""

    name = "resource-fit"

    def filter(self, request: NodeRequest, node: NodeView) -> Status:
        never = fits_capacity(request, node)
        if never:
            return Unresolvable(never)
        busy = fits_free(request, node)
        return Unschedulable(busy) if busy else None
