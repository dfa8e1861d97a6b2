"""Submission-time check: could this job ever run on these nodes?"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from corral.core.job import JobSpec, TopologyLevel, TopologyMode
from corral.core.node import Node
from corral.core.resources import GpuKind, model_matches
from corral.core.tpu import GPU, TpuHost, format_shape, misfit
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.filters import NodeSelectorFilter, fits_capacity
from corral.scheduling.plugins.topology import NETWORK_DEPTH, domain_of
from corral.scheduling.snapshot import NodeView

NodeShapes = list[tuple[Node, int]]


def node_shapes(nodes: Iterable[Node]) -> NodeShapes:
    """Nodes grouped by what feasibility looks at (devices, CPUs, memory, labels), with
    counts: clusters have few shapes, so checks run once per shape, not once per node."""
    shapes: dict[tuple, list] = {}
    for node in nodes:
        key = (node.devices, node.cpus, node.memory, node.labels, node.network)
        entry = shapes.setdefault(key, [node, 0])
        entry[1] += 1
    return [(node, count) for node, count in shapes.values()]


def never_fits(spec: JobSpec, shapes: NodeShapes, config: SchedulerConfig) -> str | None:
    """Why ``spec`` can never be placed on the nodes of ``shapes`` (all empty), or None.

    Node state is ignored (a draining or lost node may come back). With no nodes at all
    the answer is None: the job waits for agents to register.
    """
    config.queue(spec.queue)
    if spec.roles:  # each role must fit on its own (they may share machines)
        for role, part in zip(spec.roles, spec.parts, strict=True):
            why = never_fits(part, shapes, config)
            if why:
                return f"role {role.name}: {why}"
        return None
    if spec.tpu is not None and not spec.nodes and not _tpu_pods(shapes, spec.tpu.generation):
        return (
            f"cannot size the TPU slice {spec.tpu}: no {spec.tpu.generation} TPU pod is in "
            "the cluster (give nodes: its host count to queue it before the hosts register)"
        )
    if not shapes:
        return None
    request = NodeRequest.of(spec, config.policy.placement)
    selector = NodeSelectorFilter()
    if spec.tpu is not None:
        return _tpu_never_fits(spec, request, shapes, selector)
    reasons: Counter[str] = Counter()
    able = 0
    for node, count in shapes:
        view = NodeView(node)
        status = selector.filter(request, view)
        reason = status.reason if status else fits_capacity(request, view)
        if reason:
            reasons[reason] += count
        else:
            able += count
    if able >= spec.nodes:
        return _topology_never_fits(spec, request, shapes, selector) or _nvlink_never_fits(
            spec, request, shapes, selector
        )
    what = f"{spec.nodes} node{'s' if spec.nodes > 1 else ''} with {request.describe()}"
    if request.gpus.kind is GpuKind.WHOLE:
        most = max(len(n.devices) for n, _ in shapes)
        what += f" (the largest node has {most} GPUs)"
    why = "; ".join(f"{n} node{'s' if n > 1 else ''}: {r}" for r, n in reasons.most_common(3))
    return (
        f"can never fit this cluster: needs {what}, but only {able} of "
        f"{sum(c for _, c in shapes)} nodes "
        f"could ever host it" + (f" ({why})" if why else "")
    )


def _topology_never_fits(
    spec: JobSpec, request: NodeRequest, shapes: NodeShapes, selector: NodeSelectorFilter
) -> str | None:
    """A required network topology: some domain of that level must hold enough nodes."""
    topology = spec.topology
    if (
        topology is None
        or topology.mode is not TopologyMode.REQUIRED
        or topology.level not in NETWORK_DEPTH
        or spec.nodes == 1
    ):
        return None
    sizes: Counter[tuple[str, ...]] = Counter()
    for node, count in shapes:
        view = NodeView(node)
        if selector.filter(request, view) is None and fits_capacity(request, view) is None:
            key = domain_of(node, topology.level)
            if key is not None:
                sizes[key] += count
    best = max(sizes.values(), default=0)
    if best >= spec.nodes:
        return None
    level = topology.level.value
    return (
        f"can never fit this cluster: topology {level} (required) needs {spec.nodes} nodes with "
        f"{request.describe()} in one {level} domain, but the largest has {best}"
        + ("" if sizes else " (no node declares a network path that deep)")
    )


def _nvlink_never_fits(
    spec: JobSpec, request: NodeRequest, shapes: NodeShapes, selector: NodeSelectorFilter
) -> str | None:
    """``topology: {level: nvlink, mode: required}``: some node that could host the job
    must have an NVLink domain of at least its GPUs per node (of its model, not in MIG
    mode), as the ``nvlink-domain`` filter asks."""
    topology = spec.topology
    need = request.whole_gpus
    if (
        topology is None
        or topology.level is not TopologyLevel.NVLINK
        or topology.mode is not TopologyMode.REQUIRED
        or not need
    ):
        return None
    largest = 0
    for node, _ in shapes:
        view = NodeView(node)
        if selector.filter(request, view) is None and fits_capacity(request, view) is None:
            largest = max(largest, largest_nvlink_domain(node, request.model))
    if largest >= need:
        return None
    return (
        f"can never fit this cluster: topology: nvlink required: {need} GPUs per node in one "
        f"NVLink domain, but the largest NVLink domain of any node that could host it holds "
        f"{largest} (use mode: preferred to let its GPUs span domains)"
    )


def largest_nvlink_domain(node: Node, model: str | None = None) -> int:
    """The most GPUs (matching ``model``, not in MIG mode) of one NVLink domain of ``node``."""
    sizes: Counter[int] = Counter(
        device.nvlink_domain
        for device in node.devices
        if device.kind == GPU and not device.mig and model_matches(device.model, model)
    )
    return max(sizes.values(), default=0)


def _tpu_pods(shapes: NodeShapes, generation: str) -> dict[str, TpuHost]:
    """One host of each pod of ``generation`` among ``shapes``, by pod name."""
    pods: dict[str, TpuHost] = {}
    for node, _ in shapes:
        host = node.tpu_host
        if host is not None and host.generation.lower() == generation.lower():
            pods.setdefault(host.pod, host)
    return pods


def with_tpu_hosts(spec: JobSpec, shapes: NodeShapes) -> JobSpec:
    """A TPU job sized for this cluster: ``nodes`` set to the slice's host count on the
    pods of its generation where its shape is host-aligned (the fewest hosts if pods with
    different host blocks disagree: give ``nodes`` to choose). Other jobs, jobs already
    sized, and slices no pod can hold come back unchanged (``never_fits`` says why)."""
    if spec.tpu is None or spec.nodes:
        return spec
    counts = [
        count
        for host in _tpu_pods(shapes, spec.tpu.generation).values()
        if (count := host.host_count(spec.tpu)) is not None
    ]
    return replace(spec, nodes=min(counts)) if counts else spec


def _tpu_never_fits(
    spec: JobSpec, request: NodeRequest, shapes: NodeShapes, selector: NodeSelectorFilter
) -> str | None:
    """A TPU slice: some pod of its generation must hold the shape, host-aligned, in
    ``spec.nodes`` hosts that could all take it."""
    tpu = spec.tpu
    assert tpu is not None
    able: Counter[str] = Counter()
    for node, count in shapes:
        view = NodeView(node)
        host = node.tpu_host
        if host is None or selector.filter(request, view) or fits_capacity(request, view):
            continue
        able[host.pod] += count
    pods = _tpu_pods(shapes, tpu.generation)
    if not pods:
        return f"can never fit this cluster: no {tpu.generation} TPU pod is declared"
    described = []
    for name, host in sorted(pods.items()):
        count = host.host_count(tpu)
        if count == spec.nodes and able[name] >= count:
            return None
        pod = f"{name}: {format_shape(host.pod_shape)} chips in hosts of {format_shape(host.block)}"
        if count is None:
            pod += f", {misfit(tpu.shape, host.pod_shape, host.block)}"
        elif count != spec.nodes:
            pod += f", {count} hosts (the job asks for nodes: {spec.nodes})"
        else:
            pod += f", {able[name]} of {host.hosts} hosts could host it"
        described.append(pod)
    return f"can never fit this cluster: no {tpu.generation} pod holds a {tpu} slice (" + (
        "; ".join(described) + ")"
    )
