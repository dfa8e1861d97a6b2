"""The FGD packing experiment (ATC'23) on an openb node list and pod list.

How much of a cluster's GPU capacity is allocated as pods keep arriving, none departing
(the experiment of ``traces/README.md``, "The FGD packing experiment"):

- :func:`read_pods` reads a pod list (``name,cpu_milli,memory_mib,num_gpu,gpu_milli``
  and optionally ``gpu_spec``); the cluster is the openb node list
  (:func:`corral.sim.traces.openb.read_nodes`).
- :func:`arrival_order`: pods sorted by name and shuffled with the seed, then inflated
  to 130% of the GPU capacity with copies drawn uniformly (or thinned to it at random).
- :func:`ranked_nodes`: the nodes renamed so that name order is a random ranking drawn
  once per seed; the scheduler breaks score ties by node name, so ties go to that
  ranking whatever the policy.
- :func:`expected_mix`: the target workload the fragmentation-aware policies measure
  against: the most frequent request classes of the un-inflated list.
- :func:`run`: submits the pods one at a time to the production scheduler
  (``corral.scheduling.cycle.schedule`` with a persistent snapshot); a pod that fits
  nowhere is dropped. The result is the curve of (arrived, allocated) GPU demand.
- :func:`column`: the mean allocation over the events whose arrived percentage rounds
  (half to even) to a column, or within one point of it where none does.

Everything here but :func:`run`'s scheduling is plain arithmetic on the pod list, tested
on small files; the benchmark (``bench/fgd.py``) runs it on the trace.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from corral.core.job import Job, JobSpec, JobState
from corral.core.node import Node
from corral.core.resources import MILLI, GpuKind, GpuRequest
from corral.errors import ValidationError
from corral.scheduling.config import PluginRef, Policy, SchedulerConfig
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.memo import SchedulingMemo
from corral.scheduling.mix import MixLearner, learns_mix
from corral.scheduling.mix import gpu_supply as _gpu_supply
from corral.scheduling.plugins.fgd import RequestClass, mix_of
from corral.scheduling.registry import build_profile, default_registry
from corral.scheduling.snapshot import Snapshot
from corral.sim.traces.common import MIB, fail, find_column, number, read_table
from corral.sim.traces.openb import read_nodes

POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
INFLATION = 1.3  # arrived GPU demand, as a multiple of the capacity
COVERAGE = 0.95  # the expected mix: the most frequent classes covering this share of pods
COLUMNS = (100, 130)  # arrived percentages reported

__all__ = [
    "COLUMNS",
    "Curve",
    "Pod",
    "arrival_order",
    "column",
    "expected_mix",
    "gpu_capacity",
    "gpu_supply",
    "pod_spec",
    "policy_config",
    "ranked_nodes",
    "read_cluster",
    "read_pods",
    "run",
]


@dataclass(frozen=True)
class Pod:
    """One pod of a pod list: CPU in milli-cores, memory in MiB, ``num_gpu`` GPUs of
    ``gpu_milli`` each (1000: whole GPUs; below: a share of one GPU; ``num_gpu = 0``:
    CPU-only), ``gpu_spec`` the allowed models (``A|B``; empty: any)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_spec: str = ""

    @property
    def demand(self) -> int:
        """GPU milli the pod takes: ``num_gpu * gpu_milli``."""
        return self.num_gpu * self.gpu_milli


def read_pods(path: Path) -> tuple[Pod, ...]:
    """The pod list at ``path``; a ``ValidationError`` naming file, line and field."""
    header, rows = read_table(path, "openb pod list")
    for name in POD_COLUMNS:
        find_column(header, (name,), path)
    pods: list[Pod] = []
    for row in rows:
        num_gpu = int(number(row, "num_gpu", whole=True))
        milli = int(number(row, "gpu_milli", whole=True, default=0))
        if num_gpu and not 1 <= milli <= MILLI:
            raise row.error("gpu_milli", "1..1000 (thousandths of a GPU) for a pod with GPUs")
        if num_gpu > 1 and milli != MILLI:
            raise row.error("gpu_milli", "1000 for a pod with several GPUs")
        pods.append(
            Pod(
                name=row.get("name") or f"pod-{row.line}",
                cpu_milli=int(number(row, "cpu_milli", whole=True)),
                memory_mib=int(number(row, "memory_mib", whole=True)),
                num_gpu=num_gpu,
                gpu_milli=milli if num_gpu else 0,
                gpu_spec=row.get("gpu_spec") if num_gpu else "",
            )
        )
    if not pods:
        raise fail(path, "the pod list has no pods")
    return tuple(pods)


def read_cluster(path: Path) -> tuple[Node, ...]:
    """The openb node list (``sn,cpu_milli,memory_mib,gpu,model``)."""
    return read_nodes(path)


def gpu_capacity(nodes: Iterable[Node]) -> int:
    """The cluster's GPU milli: 1000 per device."""
    return MILLI * sum(n.gpu_count for n in nodes)


def arrival_order(
    pods: Sequence[Pod], seed: int, capacity: int, ratio: float = INFLATION
) -> list[Pod]:
    """The pods in the order they arrive for ``seed``.

    Sorted by name, shuffled with ``random.Random(seed)``; then, with the same generator,
    inflated: copies drawn uniformly (with replacement) are appended until a draw's
    per-GPU share (``gpu_milli``) would take the total demand past ``ratio x
    capacity`` (each accepted copy adds its full demand, so a multi-GPU copy may overshoot
    a little); a list already above that loses pods drawn at random until it is not.
    """
    if not pods:
        return []
    rng = random.Random(seed)
    order = sorted(pods, key=lambda p: p.name)
    rng.shuffle(order)
    target = ratio * capacity
    total = sum(p.demand for p in order)
    if total > target:
        while total > target:
            dropped = order.pop(rng.randrange(len(order)))
            total -= dropped.demand
        return order
    while True:
        pod = pods[rng.randrange(len(pods))]
        if total + pod.gpu_milli > target:
            return order
        order.append(pod)
        total += pod.demand


def ranked_nodes(nodes: Sequence[Node], seed: int) -> tuple[Node, ...]:
    """The nodes renamed ``NNNN-<name>`` in a random ranking drawn once per seed (from
    ``random.Random("node-ranking:<seed>")``), so that name order is that ranking."""
    order = list(range(len(nodes)))
    random.Random(f"node-ranking:{seed}").shuffle(order)
    width = len(str(max(len(nodes) - 1, 0)))
    renamed = [None] * len(nodes)
    for rank, index in enumerate(order):
        node = nodes[index]
        renamed[index] = replace(node, name=f"{rank:0{width}d}-{node.name}")
    return tuple(renamed)  # type: ignore[arg-type]


def expected_mix(pods: Sequence[Pod], coverage: float = COVERAGE) -> tuple[RequestClass, ...]:
    """The most frequent request classes ``(cpu, gpu_milli, num_gpu, gpu_spec)`` that
    together cover at least ``coverage`` of the pods (ties: the smaller class first),
    CPU-only ones included, with shares renormalised over the kept classes (see
    :func:`corral.scheduling.plugins.fgd.mix_of`, which the control plane could use on the
    jobs it knows)."""
    if not pods:
        raise ValidationError("expected mix: no pods")
    return mix_of((pod_spec(p) for p in pods), coverage)


def pod_spec(pod: Pod) -> JobSpec:
    """The one-node job a pod becomes: no GPU, a share of one GPU, or whole GPUs;
    ``gpu_spec`` as the allowed models; CPUs and memory as asked."""
    if pod.num_gpu == 0:
        gpus = GpuRequest()
    elif pod.gpu_milli < MILLI:
        gpus = GpuRequest(kind=GpuKind.FRACTION, milli=pod.gpu_milli)
    else:
        gpus = GpuRequest(kind=GpuKind.WHOLE, count=pod.num_gpu)
    return JobSpec(
        command="openb-pod",
        gpus=gpus,
        gpu_model=(pod.gpu_spec or None) if pod.num_gpu else None,
        cpus=pod.cpu_milli / 1000,
        memory=pod.memory_mib * MIB,
    )


def gpu_supply(nodes: Iterable[Node]) -> dict[str, int]:
    """GPUs per model in the cluster (devices not in MIG mode)."""
    return _gpu_supply(nodes)


def policy_config(
    policy: str,
    mix: Sequence[RequestClass] | None = None,
    supply: Mapping[str, int] | None = None,
) -> SchedulerConfig:
    """The scheduler configuration for ``policy.sharing: <policy>``, as an operator would
    write it: with ``mix``, the fgd and corral scores get it as their target workload
    (``plugins: [{name: fgd, args: {mix: [...]}}]``); corral also gets ``supply`` (GPUs per
    model, :func:`gpu_supply`)."""
    args: list[tuple[str, object]] = []
    if mix is not None and policy in ("fgd", "corral"):
        args.append(("mix", tuple(mix)))
    if supply is not None and policy == "corral":
        args.append(("supply", dict(supply)))
    plugins = (PluginRef(policy, 1.0, tuple(args)),) if args else ()
    return SchedulerConfig(policy=Policy(sharing=policy), plugins=plugins)


@dataclass
class Curve:
    """GPU demand arrived and allocated after each pod, in percent of the capacity."""

    arrived: list[float]
    allocated: list[float]
    placed: int = 0
    dropped: int = 0


def run(
    nodes: Sequence[Node],
    order: Sequence[Pod],
    config: SchedulerConfig,
    progress: Callable[[int], None] | None = None,
) -> Curve:
    """Submit ``order`` one pod at a time to the scheduler on ``nodes`` (no departures);
    a pod that fits nowhere is dropped. ``progress(n)`` is called every 256 pods. The
    ``corral`` policy without a configured mix learns it from the pods seen, as the
    control plane does (placed ones, and the last dropped: ``scheduling/mix.py``)."""
    capacity = gpu_capacity(nodes)
    if capacity <= 0:
        raise ValidationError("packing experiment: the cluster has no GPUs")
    registry = default_registry()
    profile = build_profile(config, registry)
    mixes, supply = MixLearner() if learns_mix(config) else None, gpu_supply(nodes)
    snapshot = Snapshot(nodes)
    state = ClusterState(tuple(nodes), snapshot=snapshot, memo=SchedulingMemo())
    specs: dict[Pod, JobSpec] = {}
    curve = Curve([], [])
    arrived = allocated = 0
    scale = 100.0 / capacity
    for i, pod in enumerate(order, start=1):
        shape = replace(pod, name="")
        spec = specs.get(shape)
        if spec is None:
            spec = specs[shape] = pod_spec(pod)
        job = Job(i, spec, JobState.PENDING, 0, True, float(i))
        if mixes is not None:
            mixes.add(i, spec)
            learned = mixes.refresh(supply)
            if learned is not None:  # a new profile: the old one's caches go with it
                profile = build_profile(config, registry, learned)
                state = replace(state, memo=SchedulingMemo())
        decisions = schedule(state, [job], config, float(i), profile)
        arrived += pod.demand
        if decisions.placements:
            allocated += pod.demand
            curve.placed += 1
        else:
            curve.dropped += 1
            if mixes is not None:
                mixes.end(i)
        curve.arrived.append(arrived * scale)
        curve.allocated.append(allocated * scale)
        if progress is not None and i % 256 == 0:
            progress(256)
    if progress is not None and len(order) % 256:
        progress(len(order) % 256)
    return curve


def column(curve: Curve, percent: int) -> float | None:
    """Mean allocation (%) over the events whose arrived percentage rounds (half to
    even) to ``percent``; where none does, over those within one point of it; None if
    there are none either."""
    values = [u for a, u in zip(curve.arrived, curve.allocated, strict=True) if round(a) == percent]
    if not values:
        values = [
            u
            for a, u in zip(curve.arrived, curve.allocated, strict=True)
            if percent - 1 <= a <= percent + 1
        ]
    return sum(values) / len(values) if values else None
