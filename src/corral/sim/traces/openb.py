"""Alibaba GPU 2023 ("openb", cluster-trace-gpu-v2023): a pod list and its node list.

Pods: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time`` (the columns after ``gpu_milli`` are optional). Nodes:
``sn,cpu_milli,memory_mib,gpu,model``.

Each pod is a one-node job: ``num_gpu = 0`` asks for no GPU, ``num_gpu = 1`` with
``gpu_milli < 1000`` for a share of one GPU, ``num_gpu = k`` with ``gpu_milli = 1000`` for
k whole GPUs (a multi-GPU pod with a share below 1000 gets whole GPUs, counted in the
source text). ``gpu_spec`` (``A|B``) becomes a ``gpu_model`` glob: see
:func:`corral.sim.traces.common.model_glob`.

Options:

- ``nodes=PATH``: the node list (default ``openb_node_list_gpu_node.csv`` next to the pod
  list, when there); ``nodes=none`` for no cluster.
- ``arrival=trace``: submit at ``creation_time``, run ``deletion_time - scheduled_time``
  (``- creation_time`` for a pod never scheduled); pods without those times are skipped
  and counted. The default when the pod list has the time columns.
- ``arrival=shuffle``: the FGD paper's packing order (timestamps unused): pods sorted by
  name, shuffled with the seed, one submitted per second, none departing (each runs
  ``duration`` seconds, default 1e9, about 32 years). The default for a pod list
  without time columns (such as ``openb_pod_list_multigpu30.csv``). Its times are made
  up, so the workload is not ``timed``: ``corral sim`` says so and leaves JCT, wait and
  makespan out; placement, GPU utilization and fragmentation are what it measures.
- ``duration=SECONDS``: the run time of every pod with ``arrival=shuffle``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path

from corral.core.node import Node
from corral.errors import ValidationError
from corral.sim.traces.common import (
    MIB,
    JobMaker,
    Row,
    Shape,
    choice_option,
    cluster_summary,
    fail,
    find_column,
    float_option,
    make_node,
    model_glob,
    number,
    path_option,
    read_table,
    timestamp,
)
from corral.sim.workload import Workload

NAME = "openb"
OPTIONS = frozenset({"nodes", "arrival", "duration"})
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
NO_DEPARTURE = 1e9  # seconds: "never" on the scale of a simulation
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
TIME_COLUMNS = ("creation_time", "deletion_time")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


def read(path: Path, options: Mapping[str, str], seed: int = 0) -> Workload:
    header, rows = read_table(path, f"{NAME} trace")
    for column in POD_COLUMNS:
        find_column(header, (column,), path)
    timed = all(c in header for c in TIME_COLUMNS)
    arrival = choice_option(
        NAME, options, "arrival", ("trace", "shuffle"), "trace" if timed else "shuffle"
    )
    if arrival == "trace" and not timed:
        raise fail(path, "arrival=trace needs the columns creation_time and deletion_time", 1)
    duration = float_option(NAME, options, "duration", NO_DEPARTURE)
    nodes_path = path_option(options, "nodes", path, DEFAULT_NODES)
    nodes = read_nodes(nodes_path) if nodes_path else None

    pods = list(rows)
    specs = {p.get("gpu_spec") for p in pods if p.get("gpu_spec")}
    universe = {d.model for n in nodes or () for d in n.devices}
    universe |= {m.strip() for s in specs for m in s.split("|")}
    globs = {s: model_glob(s.split("|"), universe) for s in specs}

    maker = JobMaker(NAME, path)
    if arrival == "shuffle":
        pods.sort(key=lambda p: p.get("name"))
        random.Random(seed).shuffle(pods)
    for index, pod in enumerate(pods):
        if arrival == "shuffle":
            submit, run = float(index), duration
        else:
            times = _times(pod, maker)
            if times is None:
                continue
            submit, run = times
        shape = _shape(pod, maker)
        spec = pod.get("gpu_spec")
        model = None
        if spec and shape.gpus:
            model, exact = globs[spec]
            if not exact:
                maker.notes["gpu_spec lists narrowed to their first model"] += 1
        maker.add(
            pod,
            name=pod.get("name") or f"pod-{index}",
            submit=submit,
            duration=run,
            shape=shape,
            gpu_model=model,
            cpus=number(pod, "cpu_milli") / 1000,
            memory=number(pod, "memory_mib") * MIB,
        )
    extra = f"arrival={arrival}"
    if nodes is not None and nodes_path is not None:
        extra += f"; {cluster_summary(nodes_path, nodes)}"
    untimed = None
    if arrival == "shuffle":
        untimed = (
            f"{path.name} is replayed without timestamps (arrival=shuffle): pods arrive one "
            f"a second in a shuffled order and run {duration:,.0f} s each, so JCT, wait and "
            "makespan are not meaningful and are left out; placement, GPU utilization and "
            "fragmentation are"
        )
    return maker.workload(len(pods), "pods", nodes=nodes, extra=extra, untimed=untimed)


def _times(pod: Row, maker: JobMaker) -> tuple[float, float] | None:
    created = timestamp(pod, "creation_time")
    deleted = timestamp(pod, "deletion_time")
    started = timestamp(pod, "scheduled_time") if "scheduled_time" in pod.fields else None
    if created is None:
        maker.skip("no creation time")
        return None
    duration = maker.span(started if started is not None else created, deleted)
    return None if duration is None else (created, duration)


def _shape(pod: Row, maker: JobMaker) -> Shape:
    count = int(number(pod, "num_gpu", whole=True))
    if count == 0:
        return Shape(1, 0)
    milli = int(number(pod, "gpu_milli", whole=True))
    if not 1 <= milli <= 1000:
        raise pod.error("gpu_milli", "1..1000 (thousandths of a GPU) for a pod with GPUs")
    if milli == 1000:
        return Shape(1, count)
    if count == 1:
        return Shape(1, milli / 1000)
    maker.notes["multi-GPU shares given whole GPUs"] += 1
    return Shape(1, count)


def read_nodes(path: Path) -> tuple[Node, ...]:
    """The node list: ``sn`` names, ``gpu`` devices of ``model``, CPUs, memory in MiB."""
    header, rows = read_table(path, f"{NAME} node list")
    for column in NODE_COLUMNS:
        find_column(header, (column,), path)
    nodes: list[Node] = []
    seen: set[str] = set()
    for row in rows:
        name = row.get("sn")
        if not name:
            raise row.error("sn", "a node name")
        if name in seen:
            raise fail(path, f"sn: node {name!r} is listed twice", row.line)
        seen.add(name)
        gpus = int(number(row, "gpu", whole=True, default=0))
        model = row.get("model")
        if gpus and not model:
            raise row.error("model", f"the GPU model of a node with {gpus} GPUs")
        nodes.append(
            make_node(
                name,
                gpus,
                model,
                cpus=number(row, "cpu_milli") / 1000,
                memory=int(number(row, "memory_mib") * MIB),
            )
        )
    if not nodes:
        raise ValidationError(f"{path}: the node list has no nodes")
    return tuple(nodes)
